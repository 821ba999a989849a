"""The measurement table the workload model is fitted to: one row per usable trial.

:func:`measurements_from_trials` turns trial records into the table (allocation columns,
throughput, peak memory, utilisation); :func:`usable_measurements` reads any such table, recorded
or not, into the arrays :func:`optimizer.search.workload_fit.fit_workload_model` fits, refusing
with a message that names what is missing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import numpy as np
import pandas as pd

from optimizer.foundation.errors import CloudoptError
from optimizer.trials.records import TrialSummary

MEASUREMENT_COLUMNS = (
    "trial_id", "gpus", "cpus", "batch_size", "throughput", "mem_gb_peak", "cpu_util_mean",
    "gpu_util_mean",
)
"""The table :func:`fit_workload_model` takes; ``batch_size`` may be missing (NaN) on rows the
fit then cannot use, and the last three may be NaN or 0 where they were not measured."""


@dataclasses.dataclass
class Measurements:
    ids: list[str]
    g: np.ndarray
    c: np.ndarray
    b: np.ndarray
    thr: np.ndarray
    mem: np.ndarray
    cpu_util: np.ndarray
    gpu_util: np.ndarray


def measurements_from_trials(trials: Iterable[TrialSummary]) -> pd.DataFrame:
    """One row per completed or probe trial that measured a throughput (failed trials measured
    nothing the fit can use), columns :data:`MEASUREMENT_COLUMNS`. Trials that set the
    data-loader workers (:mod:`optimizer.search.after_loop.workers`) are left out: the model
    knows the script's default only; data-parallel trials of several workers fit the
    communication term instead (:mod:`optimizer.search.after_loop.scaling`)."""
    rows = [
        {
            "trial_id": t.trial_id,
            "gpus": t.allocation.gpus,
            "cpus": t.allocation.cpus,
            "batch_size": np.nan if t.allocation.batch_size is None else t.allocation.batch_size,
            "throughput": t.throughput,
            "mem_gb_peak": t.mem_gb_peak,
            "cpu_util_mean": t.cpu_util_mean,
            "gpu_util_mean": np.nan if t.gpu_util_mean is None else t.gpu_util_mean,
        }
        for t in trials
        if t.ok and t.throughput and t.throughput > 0 and t.allocation.workers is None
        and t.allocation.replicas == 1
    ]
    return pd.DataFrame(rows, columns=list(MEASUREMENT_COLUMNS))


def noise_scale_from_trials(trials: Iterable[TrialSummary]) -> float:
    """The gradient noise scale a script reported (``model_info["grad_noise_scale"]``), else 0."""
    for t in trials:
        v = (t.model_info or {}).get("grad_noise_scale")
        if isinstance(v, (int, float)) and v > 0:
            return float(v)
    return 0.0


def usable_measurements(table: pd.DataFrame) -> Measurements:
    missing = [c for c in MEASUREMENT_COLUMNS[:5] if c not in table.columns]
    if missing:
        raise CloudoptError(
            f"cannot fit the workload model: the measurement table has no column {missing[0]!r} "
            f"(columns needed: {', '.join(MEASUREMENT_COLUMNS[:5])})"
        )

    def col(name: str, default: float = np.nan) -> np.ndarray:
        if name not in table.columns:
            return np.full(len(table), default)
        return pd.to_numeric(table[name], errors="coerce").to_numpy(dtype=float)

    thr, b = col("throughput"), col("batch_size")
    keep = np.isfinite(thr) & (thr > 0) & np.isfinite(b) & (b > 0)
    if keep.sum() < 3:
        raise CloudoptError(
            f"cannot fit the workload model: {int(keep.sum())} usable trial(s) of {len(table)} "
            "(need at least 3 completed or probe trials with a throughput and a batch size)"
        )
    return Measurements(
        ids=[str(i) for i in table["trial_id"].to_numpy()[keep]],
        g=col("gpus")[keep],
        c=col("cpus")[keep],
        b=b[keep],
        thr=thr[keep],
        mem=np.nan_to_num(col("mem_gb_peak", 0.0)[keep]),
        cpu_util=np.nan_to_num(col("cpu_util_mean", 0.0)[keep]),
        gpu_util=col("gpu_util_mean")[keep],
    )


__all__ = ["MEASUREMENT_COLUMNS", "Measurements", "measurements_from_trials",
           "noise_scale_from_trials", "usable_measurements"]
