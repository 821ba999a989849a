"""Ranking configurations for a preference: hourly cost, resource footprint, weighted scores.

A preference is a (cost, time, resource) weight vector of
:class:`~optimizer.foundation.config.MultiObjectiveConfig`, or one of its names in :data:`PREFERENCES`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from optimizer.foundation.config import MultiObjectiveConfig

PREFERENCES = ("cost", "time", "balanced", "resource")


def preference_weights(preference: str | Sequence[float]) -> np.ndarray:
    """The (cost, time, resource) weights of a preference name or vector (validated)."""
    return MultiObjectiveConfig().vector(preference)


def hourly_cost(gpus: Any, cpus: Any, memory_gb: Any, prices: Mapping[str, float]) -> np.ndarray:
    """Price of an allocation per hour (unknown resources count as none)."""
    parts = [np.nan_to_num(np.asarray(v, dtype=float)) * prices[k]
             for v, k in ((gpus, "gpu"), (cpus, "cpu"), (memory_gb, "memory"))]
    return parts[0] + parts[1] + parts[2]


def preference_scores(cost: np.ndarray, time_s: np.ndarray, resource: np.ndarray,
                      preference: str | Sequence[float]) -> np.ndarray:
    """Weighted sum of each objective relative to its best value (lower is better).

    Each of ``cost``, ``time_s`` and ``resource`` (shape (n,)) is divided by its minimum over
    the candidates, so a weight trades relative, not absolute, differences.
    """
    w = preference_weights(preference)
    total = np.zeros(len(cost))
    for weight, values in zip(w, (cost, time_s, resource), strict=True):
        v = np.asarray(values, dtype=float)
        finite = np.isfinite(v) & (v > 0)
        if weight == 0 or not finite.any():
            continue
        rel = np.where(finite, v / v[finite].min(), np.inf)
        total = total + weight * rel
    return total


def resource_footprint(gpus: Any, cpus: Any, memory_gb: Any,
                       bounds: tuple[float, float, float]) -> np.ndarray:
    """Share of the available GPUs, CPUs and memory an allocation takes (mean of the shares)."""
    shares = []
    for v, b in zip((gpus, cpus, memory_gb), bounds, strict=True):
        if b > 0:
            shares.append(np.nan_to_num(np.asarray(v, dtype=float)) / b)
    return np.mean(shares, axis=0) if shares else np.zeros(len(np.atleast_1d(cpus)))


# ------------------------------------------------------------------------------------------
# The analyzer
# ------------------------------------------------------------------------------------------


def config_dict(row: Mapping[str, Any]) -> dict[str, Any]:
    """An allocation row as JSON-ready numbers, None where not logged."""
    def num(v: Any, cast: type) -> Any:
        return None if v is None or not np.isfinite(v) else cast(v)

    return {"gpus": num(row["gpus"], int), "cpus": num(row["cpus"], int),
            "memory_gb": num(row["memory_gb"], float), "batch_size": num(row["batch_size"], int)}

