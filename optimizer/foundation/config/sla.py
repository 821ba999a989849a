"""The service-level agreement of a training job (``[sla]``), and limits set from the history
of earlier runs (:meth:`SLAConfig.update_from_baseline_history`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from optimizer.foundation.errors import ConfigError
from optimizer.foundation.errors import check as _check
from optimizer.foundation.forecast import forecast_trend, history_column
from optimizer.foundation.machine import detect_memory_gb


@dataclass
class SLAConfig:
    """Service-level agreement of a training job. A limit of 0 for a minimum means 'none'."""

    time_max: float = 3600.0
    """Maximum wall time of the whole job, seconds."""
    cost_max: float = 10.0
    """Maximum cost of the whole job, dollars."""
    throughput_min: float = 0.0
    """Minimum training throughput, samples per second."""
    memory_max: float = 0.0
    """Maximum resident memory, GB; 0 means the machine's memory."""
    gpu_util_min: float = 0.0
    """Minimum mean GPU utilisation, percent (checked only when GPUs are allocated)."""
    cpu_util_min: float = 0.0
    """Minimum mean CPU utilisation of the allocated cores, percent."""

    def __post_init__(self) -> None:
        if self.memory_max == 0.0:
            self.memory_max = detect_memory_gb()
        for name in ("time_max", "cost_max", "memory_max"):
            v = getattr(self, name)
            _check(isinstance(v, (int, float)) and v > 0, f"[sla].{name}", "must be > 0", v)
        for name in ("throughput_min", "gpu_util_min", "cpu_util_min"):
            v = getattr(self, name)
            _check(isinstance(v, (int, float)) and v >= 0, f"[sla].{name}", "must be >= 0", v)
        for name in ("gpu_util_min", "cpu_util_min"):
            v = getattr(self, name)
            _check(v <= 100, f"[sla].{name}", "is a percentage and must be <= 100", v)

    @staticmethod
    def _get_current_gpu_utilization() -> float | None:
        """Mean utilisation (%) of the visible GPUs through NVML, or None without GPUs."""
        from optimizer.foundation.gpu import gpu_utilization

        utils = gpu_utilization()
        return float(np.mean(utils)) if utils else None

    def forecast_sla_values(self, history: Any) -> dict[str, float]:
        """Predict the next job's time (s), cost ($) and throughput (samples/s) from run records.

        ``history`` is a DataFrame or a list of run-record dicts in chronological order, with
        columns such as ``wall_time_s``, ``cost`` and ``throughput`` (aliases accepted). Each
        metric is forecast by :func:`forecast_trend`; the result also carries ``<metric>_se``,
        the standard error, and ``n_runs``.
        """
        out: dict[str, float] = {}
        n = 0
        for name in ("time", "cost", "throughput"):
            values = history_column(history, name)
            finite = values[np.isfinite(values)]
            n = max(n, len(finite))
            if len(finite) == 0:
                continue
            out[name], out[f"{name}_se"] = forecast_trend(values)
            if out[name] <= 0 and (finite > 0).all():
                # A falling line crossed zero; time, cost and throughput are positive, so
                # extrapolate the trend in log space instead (a steady relative decline).
                log_mean, log_se = forecast_trend(np.log(values))
                out[name] = float(np.exp(log_mean))
                out[f"{name}_se"] = out[name] * log_se if math.isfinite(log_se) else math.inf
        if not out:
            raise ConfigError(
                "cannot forecast SLA values: the history has no time, cost or throughput column"
            )
        out["n_runs"] = float(n)
        return out

    def update_from_baseline_history(self, history: Any, margin: float = 0.2) -> dict[str, float]:
        """Set time, cost and throughput limits from the forecast, with a relative ``margin``.

        Limits become forecast × (1 + margin) for time and cost and forecast × (1 - margin) for
        throughput. Returns the forecast used.
        """
        if not 0 <= margin < 1:
            raise ConfigError(f"margin must be in [0, 1) (got {margin!r})")
        fc = self.forecast_sla_values(history)
        if fc.get("time", 0) > 0:
            self.time_max = fc["time"] * (1 + margin)
        if fc.get("cost", 0) > 0:
            self.cost_max = fc["cost"] * (1 + margin)
        if fc.get("throughput", 0) > 0:
            self.throughput_min = fc["throughput"] * (1 - margin)
        return fc


__all__ = ["SLAConfig"]
