"""Pricing allocations and comparing two of them.

:class:`ResourceCostCalculator` prices an allocation per hour as

    hourly = gpus × p_gpu + cpus × p_cpu + memory_gb × p_gb

and a run as ``hourly × wall_time / 3600``. :meth:`~ResourceCostCalculator.compare_configurations`
weighs a cost-time trade-off under a user preference ``w = (w_cost, w_time, w_resource)``: with
relative changes ``Δc, Δt, Δr`` (optimized over baseline, minus one) the trade-off is acceptable
when it is no worse on every objective, or when ``w · (Δc, Δt, Δr) ≤ 0``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import MultiObjectiveConfig, ResourceConfig
from optimizer.foundation.errors import ConfigError
from optimizer.trials.records import TrialSummary, job_cost, job_time
from optimizer.trials.resources import as_allocation

RESOURCES = ("gpus", "cpus", "memory_gb")


def _alloc_and_time(item: Any, time_s: float | None) -> tuple[Allocation, float | None]:
    """An allocation and a job time from a TrialSummary, an Allocation or a mapping."""
    if isinstance(item, TrialSummary):
        if time_s is None:
            time_s = item.predicted_total_time_s or (item.wall_time_s or None)
        return item.allocation, time_s
    if isinstance(item, Mapping) and time_s is None:
        for key in ("predicted_total_time_s", "wall_time_s", "time_s", "time"):
            if item.get(key) is not None:
                time_s = float(item[key])
                break
    return as_allocation(item), time_s


def _rel(new: float, old: float) -> float:
    """Relative change ``new / old - 1`` (0 when both are 0, inf when only ``old`` is)."""
    if old == 0:
        return 0.0 if new == 0 else float("inf")
    return new / old - 1.0


class ResourceCostCalculator:
    """Prices per GPU-hour, CPU-hour and GB-hour of memory, and comparisons of allocations."""

    def __init__(self, cost_per_gpu_hour: float = 2.48, cost_per_cpu_hour: float = 0.0316,
                 cost_per_gb_hour: float = 0.0042):
        for name, v in (("cost_per_gpu_hour", cost_per_gpu_hour),
                        ("cost_per_cpu_hour", cost_per_cpu_hour),
                        ("cost_per_gb_hour", cost_per_gb_hour)):
            if v < 0:
                raise ConfigError(f"{name} is a price and must be >= 0 (got {v!r})")
        self.cost_per_gpu_hour = float(cost_per_gpu_hour)
        self.cost_per_cpu_hour = float(cost_per_cpu_hour)
        self.cost_per_gb_hour = float(cost_per_gb_hour)

    @classmethod
    def from_config(cls, resources: ResourceConfig) -> ResourceCostCalculator:
        return cls(resources.cost_per_gpu_hour, resources.cost_per_cpu_hour,
                   resources.cost_per_gb_hour)

    def calculate_hourly_cost(self, config: Allocation | Mapping[str, Any]) -> float:
        """Dollars per hour of an allocation."""
        a = as_allocation(config)
        return (a.gpus * self.cost_per_gpu_hour + a.cpus * self.cost_per_cpu_hour
                + a.memory_gb * self.cost_per_gb_hour)

    def calculate_cost(self, config: Allocation | Mapping[str, Any], time_s: float) -> float:
        """Dollars for ``time_s`` seconds of an allocation."""
        return self.calculate_hourly_cost(config) * time_s / 3600.0

    def compare_configurations(
        self,
        baseline: Any,
        optimized: Any,
        *,
        baseline_time_s: float | None = None,
        optimized_time_s: float | None = None,
        preference: str | Sequence[float] = "balanced",
        preferences: MultiObjectiveConfig | None = None,
    ) -> dict[str, Any]:
        """Compare two allocations (TrialSummary, Allocation or mapping) and their job times.

        Times default to the summaries' predicted total time, else their wall time.

        Returns
        -------
        dict
            ``hourly_cost_{baseline,optimized,change,change_pct}``, ``total_cost_*`` and
            ``time_*`` (when both times are known), ``resource_changes`` (per resource:
            baseline, optimized, change), ``tradeoff_acceptable`` and ``tradeoff_reason``.
        """
        a0, t0 = _alloc_and_time(baseline, baseline_time_s)
        a1, t1 = _alloc_and_time(optimized, optimized_time_s)
        h0, h1 = self.calculate_hourly_cost(a0), self.calculate_hourly_cost(a1)
        out: dict[str, Any] = {
            "hourly_cost_baseline": h0, "hourly_cost_optimized": h1,
            "hourly_cost_change": h1 - h0, "hourly_cost_change_pct": 100 * _rel(h1, h0),
            "resource_changes": {
                r: {"baseline": getattr(a0, r), "optimized": getattr(a1, r),
                    "change": getattr(a1, r) - getattr(a0, r)} for r in RESOURCES},
            "batch_size_change": (a0.batch_size, a1.batch_size),
        }
        if t0 is None or t1 is None:
            out["tradeoff_acceptable"] = None
            out["tradeoff_reason"] = "job times unknown: only hourly costs compared"
            return out
        c0, c1 = h0 * t0 / 3600, h1 * t1 / 3600
        out.update({
            "time_baseline_s": t0, "time_optimized_s": t1, "time_change_s": t1 - t0,
            "time_change_pct": 100 * _rel(t1, t0), "total_cost_baseline": c0,
            "total_cost_optimized": c1, "total_cost_change": c1 - c0,
            "total_cost_change_pct": 100 * _rel(c1, c0),
        })
        w = (preferences or MultiObjectiveConfig()).vector(preference)
        deltas = np.array([_rel(c1, c0), _rel(t1, t0), self._resource_change(a0, a1)])
        out["tradeoff_acceptable"], out["tradeoff_reason"] = self._judge(deltas, w)
        out["tradeoff_score"] = float(np.dot(w, np.nan_to_num(deltas, posinf=1e9)))
        return out

    @staticmethod
    def _resource_change(a0: Allocation, a1: Allocation) -> float:
        """Mean relative change of the resources held by the baseline."""
        changes = [_rel(getattr(a1, r), getattr(a0, r)) for r in RESOURCES if getattr(a0, r)]
        return float(np.mean(changes)) if changes else 0.0

    @staticmethod
    def _judge(deltas: np.ndarray, w: np.ndarray) -> tuple[bool, str]:
        names = ("cost", "time", "resource")
        if np.all(deltas <= 1e-12):
            return True, "no worse on cost, time and resources"
        if np.all(deltas >= -1e-12):
            return False, "worse or equal on every objective"
        score = float(np.dot(w, np.nan_to_num(deltas, posinf=1e9)))
        parts = ", ".join(f"{n} {100 * d:+.1f}%" for n, d in zip(names, deltas, strict=True))
        weights = "/".join(f"{x:g}" for x in w)
        verdict = score <= 0
        return verdict, (f"{parts}; weighted change {100 * score:+.1f}% under preference "
                         f"{weights} is {'acceptable' if verdict else 'not acceptable'}")

    @staticmethod
    def validate_gpu_batch_relationship(baseline: Allocation | Mapping[str, Any],
                                        new: Allocation | Mapping[str, Any],
                                        tolerance: float = 0.25) -> dict[str, Any]:
        """Check that the batch size scales with the GPU count (constant per-GPU batch).

        Moving between two multi-GPU counts should keep ``batch_size / gpus`` within
        ``tolerance`` (relative); otherwise the per-GPU batch shrinks (GPUs starve) or grows
        (memory risk). Moves to or from zero GPUs are not constrained.

        Returns
        -------
        dict
            ``valid``, ``message``, ``per_gpu_batch_baseline``, ``per_gpu_batch_new`` and
            ``suggested_batch_size`` (the batch size keeping the per-GPU batch).
        """
        a0, a1 = as_allocation(baseline), as_allocation(new)
        out: dict[str, Any] = {"valid": True, "per_gpu_batch_baseline": None,
                               "per_gpu_batch_new": None, "suggested_batch_size": a1.batch_size}
        if a0.gpus == 0 or a1.gpus == 0 or a0.gpus == a1.gpus:
            out["message"] = "no GPU-count change between GPU allocations: nothing to check"
            return out
        if a0.batch_size is None or a1.batch_size is None:
            out["message"] = "batch size left to the script: cannot check its scaling"
            return out
        p0, p1 = a0.batch_size / a0.gpus, a1.batch_size / a1.gpus
        suggested = int(round(p0 * a1.gpus))
        out.update(per_gpu_batch_baseline=p0, per_gpu_batch_new=p1,
                   suggested_batch_size=suggested)
        if abs(p1 / p0 - 1) > tolerance:
            out["valid"] = False
            out["message"] = (f"GPUs {a0.gpus}->{a1.gpus} with batch {a0.batch_size}->"
                              f"{a1.batch_size} changes the per-GPU batch {p0:g}->{p1:g}; "
                              f"use batch size {suggested} to keep it")
        else:
            out["message"] = f"per-GPU batch kept ({p0:g} -> {p1:g})"
        return out

    @staticmethod
    def diagnose_zero_gpu_utilization(summary: TrialSummary | Mapping[str, Any],
                                      threshold: float = 1.0,
                                      env: Mapping[str, str] | None = None) -> dict[str, Any]:
        """Explain why GPUs that were paid for did (almost) no work.

        Looks at the allocation, mean GPU utilisation, peak GPU memory, CPU use and the
        static analysis in ``model_info['uses_gpu']``.

        Returns
        -------
        dict
            ``zero_utilization`` (bool) and ``issues`` (list of readable findings).
        """
        s = summary.to_dict() if isinstance(summary, TrialSummary) else dict(summary)
        alloc = as_allocation(s.get("allocation") or s)
        util, mem = s.get("gpu_util_mean"), s.get("gpu_mem_gb_peak")
        out: dict[str, Any] = {"zero_utilization": False, "issues": []}
        if alloc.gpus == 0:
            return out
        issues = out["issues"]
        if util is None:
            issues.append(f"{alloc.gpus} GPU(s) allocated but no GPU was measured "
                          "(NVML unavailable or no device)")
            out["zero_utilization"] = True
            return out
        if util >= threshold:
            return out
        out["zero_utilization"] = True
        cvd = (env or {}).get("CUDA_VISIBLE_DEVICES")
        if cvd == "":
            issues.append("CUDA_VISIBLE_DEVICES is empty: the script could see no GPU")
        if (s.get("model_info") or {}).get("uses_gpu") is False:
            issues.append("the script's source never moves work to CUDA (.cuda(), .to('cuda'))")
        if not mem or mem < 0.05:
            issues.append(f"GPU memory stayed at {mem or 0:.2f} GB: nothing was put on the GPU")
        else:
            issues.append(f"GPU memory in use ({mem:.2f} GB) but the GPU is idle: the input "
                          "pipeline or synchronisation stalls it")
        cpu = s.get("cpu_util_mean") or 0.0
        if cpu > 90:
            issues.append(f"CPU use is {cpu:.0f}% of the allocated cores: the job is CPU-bound "
                          "(data loading or preprocessing)")
        return out


def cost_time_flags(baseline: dict[str, Any], current: dict[str, Any],
                    tolerance: float = 0.05) -> dict[str, Any]:
    """Flag a cost or time increase (beyond ``tolerance``) or an efficiency drop.

    Both arguments hold ``time_s``, ``cost`` and optionally ``throughput``/``cpu_util``.
    """
    flags: dict[str, Any] = {"warnings": []}
    for key, label in (("cost", "cost"), ("time_s", "time")):
        b, c = baseline.get(key), current.get(key)
        if b and c is not None and b > 0:
            change = (c - b) / b
            flags[f"{label}_change_pct"] = 100 * change
            flags[f"{label}_increase"] = change > tolerance
            if change > tolerance:
                flags["warnings"].append(f"{label} rose {100 * change:.1f}% over the "
                                         "baseline")
    b, c = baseline.get("throughput"), current.get("throughput")
    if b and c and b > 0:
        per_cost_b = b / max(baseline.get("hourly_cost") or 1e-12, 1e-12)
        per_cost_c = c / max(current.get("hourly_cost") or 1e-12, 1e-12)
        flags["samples_per_dollar_change_pct"] = 100 * (per_cost_c / per_cost_b - 1)
        flags["efficiency_drop"] = per_cost_c < per_cost_b * (1 - tolerance)
        if flags["efficiency_drop"]:
            flags["warnings"].append("fewer samples per dollar than the baseline")
    return flags


def trial_figures(t: TrialSummary | None) -> dict[str, Any]:
    """The job figures of a trial that :func:`cost_time_flags` compares."""
    if t is None:
        return {}
    return {"time_s": job_time(t), "cost": job_cost(t), "throughput": t.throughput,
            "hourly_cost": t.hourly_cost, "cpu_util": t.cpu_util_mean,
            "mem_gb_peak": t.mem_gb_peak, "measured_wall_s": t.wall_time_s,
            "time_is": "measured" if t.status == "completed" else "predicted"}
