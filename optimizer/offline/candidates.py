"""The configurations a job may start with: the measured grid of similar models' runs.

Candidates never go beyond what was measured (the scaling is only trusted inside the history)
nor beyond the resource bounds; memory comes from the peaks the similar runs reached.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from optimizer.foundation.config import ResourceConfig
from optimizer.offline.features import CONFIG_FEATURES
from optimizer.offline.sizing import heuristic_memory_gb


def candidate_runs(history: pd.DataFrame, query: pd.DataFrame, similar: pd.DataFrame,
                   resources: ResourceConfig) -> pd.DataFrame:
    """The job ``query`` (one canonical row) at every configuration seen for similar models.

    ``similar`` are the logged runs judged similar; every run of their model names in
    ``history`` contributes its configuration. Returns one canonical row per candidate.
    """
    r = resources
    names = set(similar["model_name"].dropna())
    pool = history[history["model_name"].isin(names)] if names else similar
    values = {}
    for c in CONFIG_FEATURES:
        v = sorted({float(x) for x in pool[c].dropna()})
        values[c] = v or [np.nan]
    values["gpus"] = [g for g in values["gpus"] if not g > (r.gpu_count_max or 0)] or \
        [float(min(r.gpu_count_max or 0, min(values["gpus"])))]
    values["cpus"] = [c for c in values["cpus"] if not c > (r.cpu_count_max or 1)] or \
        [float(r.cpu_count_max or 1)]
    grid = pd.MultiIndex.from_product([values[c] for c in CONFIG_FEATURES],
                                      names=list(CONFIG_FEATURES)).to_frame(index=False)
    rows = pd.concat([query] * len(grid), ignore_index=True)
    for c in CONFIG_FEATURES:
        rows[c] = grid[c].to_numpy(dtype=float)
    if not np.isfinite(rows["work"]).any():
        # The job's size is unknown: assume the work of the most similar model's runs.
        rows["work"] = float(pool["work"].median()) if pool["work"].notna().any() \
            else np.nan
    rows["memory_gb"] = [memory_for(pool, b, r) for b in rows["batch_size"]]
    return rows


def memory_for(pool: pd.DataFrame, batch: float, resources: ResourceConfig) -> float:
    """Memory (GB) to give a run of batch size ``batch``, from the pool's measured peaks."""
    r = resources
    same = pool[pool["batch_size"] == batch] if np.isfinite(batch) else pool
    peaks = (same if same["mem_gb_peak"].notna().any() else pool)["mem_gb_peak"].dropna()
    if peaks.empty:
        limits = pool["memory_gb"].dropna()
        params = pool["params"].dropna()
        gb = float(limits.median()) if not limits.empty else heuristic_memory_gb(
            float(params.max()) if not params.empty else math.nan)
    else:
        # The new job's data may be larger than the logged runs': 50 % (at least 0.5 GB)
        # over the largest peak measured, since a limit hit is an OOM-killed trial.
        gb = max(1.5 * float(peaks.max()), float(peaks.max()) + 0.5)
    step = float(r.memory_step)
    gb = max(math.ceil(gb / step - 1e-9) * step, float(r.memory_min))
    return min(gb, float(r.memory_max or gb))
