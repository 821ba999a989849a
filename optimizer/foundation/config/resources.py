"""Resource bounds and prices (``[resources]``): what a trial or a plan may ask for, and what
it costs by the hour."""

from __future__ import annotations

from dataclasses import dataclass

from optimizer.foundation.errors import check as _check
from optimizer.foundation.machine import detect_cpu_count, detect_gpu_count, detect_memory_gb


@dataclass
class ResourceConfig:
    """Resource bounds and prices. ``None`` bounds are detected from the machine.

    Default prices are on-demand list prices of a common cloud (per vCPU-hour, per GB-hour of
    memory and per V100-hour); set your own in TOML.
    """

    gpu_count_min: int = 0
    gpu_count_max: int | None = None
    cpu_count_min: int = 1
    cpu_count_max: int | None = None
    memory_min: float = 0.5
    memory_max: float | None = None
    cost_per_gpu_hour: float = 2.48
    cost_per_cpu_hour: float = 0.0316
    cost_per_gb_hour: float = 0.0042
    memory_step: float = 1.0
    """GB added or removed by one memory action."""
    batch_size_max: int | None = None
    """Largest batch size a trial or a plan may use (None: no bound). Probes and plans step
    past the measured batch sizes; a much larger batch also changes the optimisation, which
    cloudopt does not judge, so a user who knows where convergence suffers sets this."""

    def __post_init__(self) -> None:
        if self.gpu_count_max is None:
            self.gpu_count_max = detect_gpu_count()
        if self.cpu_count_max is None:
            self.cpu_count_max = detect_cpu_count()
        if self.memory_max is None:
            self.memory_max = detect_memory_gb()
        for name in ("gpu_count_min", "gpu_count_max", "cpu_count_min", "cpu_count_max"):
            v = getattr(self, name)
            _check(isinstance(v, int) and not isinstance(v, bool) and v >= 0,
                   f"[resources].{name}", "must be a non-negative integer", v)
        _check(self.cpu_count_min >= 1, "[resources].cpu_count_min", "must be >= 1",
               self.cpu_count_min)
        v = self.batch_size_max
        _check(v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 1),
               "[resources].batch_size_max", "must be a positive integer", v)
        for name in ("memory_min", "memory_max", "memory_step"):
            v = getattr(self, name)
            _check(isinstance(v, (int, float)) and v > 0, f"[resources].{name}", "must be > 0", v)
        for lo, hi in (("gpu_count_min", "gpu_count_max"), ("cpu_count_min", "cpu_count_max"),
                       ("memory_min", "memory_max")):
            _check(getattr(self, lo) <= getattr(self, hi), f"[resources].{lo}",
                   f"must be <= {hi} = {getattr(self, hi)!r}", getattr(self, lo))
        for name in ("cost_per_gpu_hour", "cost_per_cpu_hour", "cost_per_gb_hour"):
            v = getattr(self, name)
            _check(isinstance(v, (int, float)) and v >= 0, f"[resources].{name}",
                   "is a price and must be >= 0", v)

    def prices(self) -> dict[str, float]:
        return {"gpu": self.cost_per_gpu_hour, "cpu": self.cost_per_cpu_hour,
                "memory": self.cost_per_gb_hour}


__all__ = ["ResourceConfig"]
