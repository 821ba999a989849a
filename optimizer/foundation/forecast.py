"""Forecasting the next run's time, cost and throughput from the records of earlier runs.

:meth:`~optimizer.foundation.config.SLAConfig.forecast_sla_values` sets SLA limits from them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

_HISTORY_ALIASES = {
    "time": ("wall_time_s", "time_s", "time", "training_time", "duration_s"),
    "cost": ("cost", "total_cost", "cost_usd"),
    "throughput": ("throughput", "samples_per_s", "samples_per_sec", "throughput_samples_s"),
}


def history_column(history: Any, name: str) -> np.ndarray:
    """Values of one metric from run records (a DataFrame, or a list of dicts), in run order."""
    rows: list[Mapping[str, Any]]
    if hasattr(history, "to_dict"):
        rows = history.to_dict("records")
    else:
        rows = list(history)
    for alias in _HISTORY_ALIASES[name]:
        values = [r.get(alias) for r in rows]
        if any(v is not None for v in values):
            return np.array(
                [float(v) if v is not None else np.nan for v in values], dtype=float
            )
    return np.full(len(rows), np.nan)


def forecast_trend(values: np.ndarray, half_life: float = 5.0) -> tuple[float, float]:
    """Forecast the next value of a run-ordered series and its standard error.

    A weighted least-squares line over the run index, recent runs weighing more (weights halve
    every ``half_life`` runs), extrapolated one run ahead. With one point the forecast is that
    point with an unknown (infinite) error; the slope is dropped when the trend is not
    significant, so noise does not get extrapolated.
    """
    y = np.asarray(values, dtype=float)
    x = np.arange(len(y), dtype=float)
    ok = np.isfinite(y)
    x, y = x[ok], y[ok]
    if len(y) == 0:
        raise ValueError("no finite values to forecast from")
    if len(y) == 1:
        return float(y[0]), math.inf
    w = 0.5 ** ((x.max() - x) / half_life)
    mean = float(np.average(y, weights=w))
    resid_mean = y - mean
    sd_mean = math.sqrt(float(np.average(resid_mean**2, weights=w)) * len(y) / max(len(y) - 1, 1))
    if len(y) < 3:
        return mean, sd_mean
    slope, intercept = np.polyfit(x, y, 1, w=np.sqrt(w))
    resid = y - (slope * x + intercept)
    dof = max(len(y) - 2, 1)
    sd = math.sqrt(float(np.sum(w * resid**2) / np.sum(w)) * len(y) / dof)
    sxx = float(np.sum(w * (x - np.average(x, weights=w)) ** 2))
    slope_se = sd / math.sqrt(sxx / (np.sum(w) / len(y))) if sxx > 0 else math.inf
    if not math.isfinite(slope_se) or abs(slope) < 2 * slope_se:
        return mean, sd_mean
    return float(slope * (x.max() + 1) + intercept), sd
