"""The allocation a trial or an environment step runs with: GPUs, CPU threads, memory, batch
and (for scripts that take them) data-loader workers.

Part of the foundation (with :mod:`optimizer.foundation.errors`, :mod:`optimizer.foundation.config`,
:mod:`optimizer.foundation.atomic_files` and :mod:`optimizer.foundation.gpu`): every part of the project may import
it, and it imports nothing of the project.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Allocation:
    """The resources one trial (or one environment step) runs with."""

    gpus: int = 0
    cpus: int = 1
    memory_gb: float = 4.0
    batch_size: int | None = None
    """None: the script's own default batch size."""
    workers: int | None = None
    """Data-loader workers; None: the script's own default (the only value the workload model
    and the agents know: only the closed loop's last sweep sets it)."""

    def key(self) -> str:
        bs = "default" if self.batch_size is None else str(self.batch_size)
        w = "" if self.workers is None else f"-w{self.workers}"
        return f"g{self.gpus}-c{self.cpus}-m{self.memory_gb:g}-b{bs}{w}"
