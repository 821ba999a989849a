"""Executions concatenated into one array for :class:`~phases.detector.PhaseDetector`.

The estimator works on all executions at once (one ``(sum(lengths), n_features)`` array plus
the length of each execution); these helpers build that batch, locate windows in it and cut
per-sample results back into one array per execution.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch

from phases.crbm import Windows


def generic_names(names: Sequence[str]) -> bool:
    """Whether ``names`` are the placeholders ``f0, f1, ...`` given to bare arrays."""
    return all(str(n) == f"f{i}" for i, n in enumerate(names))


class Batch(NamedTuple):
    """Executions concatenated: ``flat`` is ``(sum(lengths), n_features)`` float64."""

    flat: np.ndarray
    lengths: np.ndarray
    features: list[str]
    exec_id_col: str | None = None
    time_col: str | None = None


def batch_of_arrays(arrays: Sequence[np.ndarray], features: list[str] | None) -> Batch:
    if isinstance(arrays, (str, bytes)) or not hasattr(arrays, "__len__") or len(arrays) == 0:
        raise ValueError("traces must be a non-empty list of 2-D arrays, a TraceSet or a DataFrame")
    arrays = [a if isinstance(a, np.ndarray) else np.asarray(a, dtype=np.float64) for a in arrays]
    bad = next((i for i, a in enumerate(arrays) if a.ndim != 2 or a.shape[1] == 0), None)
    if bad is not None:
        raise ValueError(
            f"execution {bad}: expected a 2-D (time, features) array, got shape {arrays[bad].shape}"
        )
    try:
        flat = np.concatenate(arrays).astype(np.float64, copy=False)
    except ValueError:
        widths = sorted({a.shape[1] for a in arrays})
        raise ValueError(f"executions have different feature counts: {widths}") from None
    lengths = np.fromiter((len(a) for a in arrays), dtype=np.int64, count=len(arrays))
    finite = np.isfinite(flat).all(1)
    if not finite.all():
        first = int(np.searchsorted(np.cumsum(lengths), np.argmin(finite), side="right"))
        raise ValueError(
            f"execution {first}: contains NaN or infinite values; read files with "
            "phases.read_traces, which fills them"
        )
    names = features if features is not None else [f"f{i}" for i in range(flat.shape[1])]
    return Batch(flat, lengths, names)


def flat_positions(lengths: np.ndarray, win: Windows) -> np.ndarray:
    """Index of each window's current sample in the concatenated executions."""
    return (np.cumsum(lengths) - lengths)[win.owner] + win.position


def split_per_execution(values: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
    """Cut concatenated per-execution values back into one array per execution (slices are
    views; cheaper than ``np.split`` for many short executions)."""
    ends = np.cumsum(lengths).tolist()
    starts = [0, *ends[:-1]]
    return [values[a:b] for a, b in zip(starts, ends, strict=True)]


def window_rows(flat: torch.Tensor, delay: int) -> torch.Tensor:
    """Row ``w``: samples ``w .. w + delay`` of ``flat`` side by side (every window of
    consecutive rows, aligned with :func:`~phases.crbm.window_index`)."""
    n = len(flat) - delay
    if n <= 0:
        return flat.new_zeros((0, (delay + 1) * flat.shape[1]))
    return flat.unfold(0, delay + 1, 1).reshape(n, -1)


def unit_scale(x: torch.Tensor) -> float:
    """The multiplier that gives the columns of ``x`` unit total variance."""
    total = float(x.double().var(0, unbiased=False).sum()) if len(x) > 1 else 0.0
    return 1.0 / float(np.sqrt(total)) if total > 0 else 1.0
