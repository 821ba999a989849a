"""A predicted configuration for a new job and what it should give, from the history or, with
nothing similar in it, from sizing heuristics."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import ResourceConfig
from optimizer.offline.logs import characteristics_frame
from optimizer.offline.scoring import hourly_cost
from optimizer.offline.sizing import default_size, rough_throughput


@dataclass
class ResourcePrediction:
    """A predicted configuration for a job and what it should give.

    ``throughput_range``, ``time_range_s`` and ``peak_memory_range_gb`` hold the truth with
    probability ``interval_level`` (conformal intervals from the history's own held-out errors,
    :class:`~optimizer.offline.intervals.JobPredictor`; a factor of ten either way, level NaN,
    for the sizing heuristics). ``uncertainty`` is the scaling model's log-space standard
    deviation of the throughput.
    """

    allocation: Allocation
    preference: str
    expected_throughput: float
    expected_time_s: float
    expected_cost: float
    hourly_cost: float
    uncertainty: float
    throughput_range: tuple[float, float]
    time_range_s: tuple[float, float]
    source: str
    """``history`` (similar models were logged) or ``default`` (sizing heuristics)."""
    similar_models: list[str] = field(default_factory=list)
    candidates_considered: int = 0
    notes: list[str] = field(default_factory=list)
    interval_level: float = math.nan
    peak_memory_gb: float = math.nan
    peak_memory_range_gb: tuple[float, float] = (math.nan, math.nan)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def interval_label(level: float) -> str:
    """``80 %`` for a conformal interval's level; ``x/÷10`` for the heuristics' factor."""
    return f"{level:.0%}".replace("%", " %") if math.isfinite(level) else "x/÷10"


def _span(p: pd.Series, name: str) -> tuple[float, float]:
    return float(p[f"{name}_low"]), float(p[f"{name}_high"])


def history_prediction(row: pd.Series, p: pd.Series, hourly: float, *, preference: str,
                       level: float, similar: list[str], candidates: int,
                       notes: list[str]) -> ResourcePrediction:
    """The prediction for the chosen candidate ``row`` and its predictions ``p``
    (:meth:`~optimizer.offline.analyzer.OfflineDataAnalyzer.predict_runs`)."""
    alloc = Allocation(gpus=int(np.nan_to_num(row["gpus"])),
                       cpus=int(row["cpus"]) if np.isfinite(row["cpus"]) else 1,
                       memory_gb=float(row["memory_gb"]),
                       batch_size=int(row["batch_size"]) if np.isfinite(row["batch_size"])
                       else None)
    return ResourcePrediction(
        allocation=alloc, preference=preference,
        expected_throughput=float(p["throughput"]), expected_time_s=float(p["time_s"]),
        expected_cost=float(hourly * p["time_s"] / 3600.0), hourly_cost=float(hourly),
        uncertainty=float(p["sigma"]), throughput_range=_span(p, "throughput"),
        time_range_s=_span(p, "time_s"), source="history", similar_models=similar,
        candidates_considered=candidates, notes=notes, interval_level=level,
        peak_memory_gb=float(p["mem_gb_peak"]), peak_memory_range_gb=_span(p, "mem_gb_peak"))


def default_prediction(resources: ResourceConfig, model_characteristics: Mapping[str, Any],
                       preference: str, reason: str) -> ResourcePrediction:
    """Sizing heuristics for a job nothing in the history resembles (see
    :mod:`optimizer.offline.sizing`), with an uncertainty of a factor of ten."""
    query = characteristics_frame(model_characteristics)
    params = float(query["params"].iloc[0])
    work = float(query["work"].iloc[0])
    gpus, cores, mem = default_size(resources, params, preference)
    tp = rough_throughput(params, gpus, cores)
    time_s = work / tp if np.isfinite(work) and tp > 0 else math.nan
    hourly = float(hourly_cost(gpus, cores, mem, resources.prices()))
    return ResourcePrediction(
        allocation=Allocation(gpus=gpus, cpus=cores, memory_gb=mem, batch_size=None),
        preference=preference, expected_throughput=tp, expected_time_s=time_s,
        expected_cost=hourly * time_s / 3600.0, hourly_cost=hourly, uncertainty=math.log(10.0),
        throughput_range=(tp / 10, tp * 10), time_range_s=(time_s / 10, time_s * 10),
        source="default", notes=[reason])
