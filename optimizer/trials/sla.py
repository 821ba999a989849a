"""Checking measured training metrics against an SLA.

:func:`calculate_sla_violations` reads a table of run metrics (one row per trial or per
logged step; the columns of :func:`optimizer.trials.records.summaries_to_frame` or aliases) and returns,
for every SLA metric that the table can judge, whether it is met.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from optimizer.foundation.config import SLAConfig
from optimizer.foundation.errors import ConfigError

# SLA metric -> (columns that measure it, how the column is aggregated, bound kind)
_CHECKS: dict[str, tuple[tuple[str, ...], str, str]] = {
    "time": (("predicted_total_time_s", "wall_time_s", "time_s", "training_time"), "max", "max"),
    "cost": (("predicted_total_cost", "cost", "total_cost"), "max", "max"),
    "throughput": (("throughput", "samples_per_s"), "mean", "min"),
    "memory": (("mem_gb_peak", "mem_gb", "memory_gb_used"), "max", "max"),
    "gpu_util": (("gpu_util_mean", "gpu_util"), "mean", "min"),
    "cpu_util": (("cpu_util_mean", "cpu_util"), "mean", "min"),
}
_LIMITS = {"time": "time_max", "cost": "cost_max", "throughput": "throughput_min",
           "memory": "memory_max", "gpu_util": "gpu_util_min", "cpu_util": "cpu_util_min"}


def _thresholds(sla: SLAConfig | Mapping[str, float]) -> dict[str, float]:
    if isinstance(sla, SLAConfig):
        return {m: float(getattr(sla, f)) for m, f in _LIMITS.items()}
    out = {}
    for metric, key in _LIMITS.items():
        for k in (key, metric):
            if k in sla and sla[k] is not None:
                out[metric] = float(sla[k])
                break
    unknown = set(sla) - set(_LIMITS) - set(_LIMITS.values())
    if unknown:
        raise ConfigError(f"unknown SLA threshold(s) {sorted(unknown)}; "
                          f"known: {', '.join(_LIMITS.values())}")
    return out


def calculate_sla_violations(metrics_df: pd.DataFrame,
                             sla: SLAConfig | Mapping[str, float]) -> dict[str, bool]:
    """For each SLA metric the table measures, whether it is met.

    Parameters
    ----------
    metrics_df : DataFrame, shape (n_rows, n_columns)
        Measured metrics. Time, cost and memory are judged on their maximum, throughput and
        utilisations on their mean. The first column found among the aliases is used (a
        predicted whole-job time or cost before a trial's own).
    sla : SLAConfig or mapping
        Thresholds (``time_max``, ``cost_max``, ``throughput_min``, ``memory_max``,
        ``gpu_util_min``, ``cpu_util_min``). Minimums of 0 are always met. ``gpu_util`` is
        judged only on rows that had GPUs (a ``gpus`` column > 0) when that column exists.

    Returns
    -------
    dict
        ``{metric: True if met}``, for the metrics with both a threshold and data.
    """
    if not isinstance(metrics_df, pd.DataFrame):
        metrics_df = pd.DataFrame(metrics_df)
    limits = _thresholds(sla)
    out: dict[str, bool] = {}
    for metric, (columns, agg, kind) in _CHECKS.items():
        if metric not in limits:
            continue
        col = next((c for c in columns if c in metrics_df and metrics_df[c].notna().any()), None)
        if col is None:
            continue
        values = pd.to_numeric(metrics_df[col], errors="coerce")
        if metric == "gpu_util" and "gpus" in metrics_df:
            values = values[pd.to_numeric(metrics_df["gpus"], errors="coerce") > 0]
        values = values.dropna()
        if values.empty:
            continue
        value = float(values.max() if agg == "max" else values.mean())
        out[metric] = value <= limits[metric] if kind == "max" else value >= limits[metric]
    return out


def sla_report(metrics_df: pd.DataFrame, sla: SLAConfig | Mapping[str, float]) -> str:
    """One line: ``time ok, cost VIOLATED, ...`` (or a note that nothing could be judged)."""
    status = calculate_sla_violations(metrics_df, sla)
    if not status:
        return "no SLA metric could be judged"
    return ", ".join(f"{m} {'ok' if met else 'VIOLATED'}" for m, met in status.items())


def row_meets_sla(row: Mapping[str, Any], sla: SLAConfig | Mapping[str, float]) -> bool:
    """Whether one record (a summary dict / frame row) meets every SLA it can be judged on."""
    return all(calculate_sla_violations(pd.DataFrame([dict(row)]), sla).values())
