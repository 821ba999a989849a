"""Per-phase usage statistics learned on training executions, read by the phase policies.

Statistics are absolute (the paper's pooled ones) or relative to the execution's level in the
cycle before each sample (:func:`cycle_level`), so jobs of different sizes share them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from phases.policies.execution import Execution

LEVELS = ("mean", "max", "last")


def cycle_level(usage: np.ndarray, how: str = "mean") -> np.ndarray:
    """An execution's level from one cycle of usage ``(n, r)`` → ``(r,)``.

    ``"mean"``: the cycle's mean; ``"max"``: its maximum; ``"last"``: the mean of its last
    three samples (the most recent reading, lightly smoothed).
    """
    if how == "mean":
        return usage.mean(axis=0)
    if how == "max":
        return usage.max(axis=0)
    if how == "last":
        return usage[-3:].mean(axis=0)
    raise ValueError(f"level must be one of {LEVELS}, got {how!r}")


def _phase_samples(
    execution: Execution, *, relative: bool, level: str, conditioning: str
) -> tuple[np.ndarray, np.ndarray]:
    """Values and phase keys of one execution's samples for :class:`PhaseStatistics`.

    Relative values are ``usage / level of the previous cycle`` (samples of the first cycle,
    which has no previous one, and non-positive levels are left out). The key of a sample is
    its own phase (``conditioning="sample"``) or the phase detected at the last sample of the
    previous cycle, when its allocation was decided (``"decision"``).
    """
    if execution.phases is None:
        raise ValueError(f"execution {execution.exec_id!r} has no phases; detect them first")
    later = execution.cycle >= 1
    if conditioning == "sample":
        keys = execution.phases
    elif conditioning == "decision":
        last = np.searchsorted(execution.cycle, execution.cycle, side="left") - 1
        keys = np.where(later, execution.phases[np.maximum(last, 0)], execution.phases)
    else:
        raise ValueError(f"conditioning must be 'sample' or 'decision', got {conditioning!r}")
    if not relative:
        ok = later if conditioning == "decision" else np.ones(len(keys), dtype=bool)
        return execution.usage[ok], keys[ok]
    levels = np.full((execution.n_cycles, execution.usage.shape[1]), np.nan)
    for c in np.unique(execution.cycle):
        levels[c] = cycle_level(execution.usage[execution.cycle == c], level)
    ref = np.full_like(execution.usage, np.nan)
    ref[later] = levels[execution.cycle[later] - 1]
    with np.errstate(invalid="ignore", divide="ignore"):
        values = np.where(ref > 0, execution.usage / ref, np.nan)
    ok = ~np.isnan(values).any(axis=1)
    return values[ok], keys[ok]


@dataclass
class PhaseStatistics:
    """Mean and std of usage per phase, absolute or relative to the execution's level.

    Attributes
    ----------
    labels : ndarray of shape (n_phases,)
        Phase labels with statistics (at least ``min_samples`` training samples).
    mean, std : ndarray of shape (n_phases, n_resources)
    overall_mean, overall_std : ndarray of shape (n_resources,)
        Over all phases; used for a phase without statistics.
    relative : bool
        Whether values are ratios to the level of the previous cycle.
    """

    labels: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    overall_mean: np.ndarray
    overall_std: np.ndarray
    relative: bool

    @classmethod
    def fit(
        cls,
        train: Sequence[Execution],
        *,
        relative: bool,
        level: str = "mean",
        conditioning: str = "sample",
        min_samples: int = 2,
    ) -> PhaseStatistics:
        """Statistics of the training executions' samples, keyed as in :func:`_phase_samples`."""
        parts = [
            _phase_samples(e, relative=relative, level=level, conditioning=conditioning)
            for e in train
        ]
        v = np.concatenate([p[0] for p in parts])
        lab = np.concatenate([p[1] for p in parts])
        if len(v) < min_samples:
            raise ValueError(f"only {len(v)} training samples usable for phase statistics")
        keep = [p for p in np.unique(lab) if (lab == p).sum() >= min_samples]
        mean = np.array([v[lab == p].mean(axis=0) for p in keep]).reshape(len(keep), v.shape[1])
        std = np.array([v[lab == p].std(axis=0) for p in keep]).reshape(len(keep), v.shape[1])
        return cls(
            np.array(keep, dtype=np.int64), mean, std, v.mean(axis=0), v.std(axis=0), relative
        )

    def _moments(self, phase: int) -> tuple[np.ndarray, np.ndarray]:
        i = np.flatnonzero(self.labels == phase)
        if len(i) == 0:
            return self.overall_mean, self.overall_std
        return self.mean[i[0]], self.std[i[0]]

    def upper(self, phase: int, n_std: float = 2.0) -> np.ndarray:
        """``mean + n_std * std`` of ``phase`` (the overall values for an unknown phase)."""
        mean, std = self._moments(phase)
        return mean + n_std * std

    def spread(self, phase: int) -> np.ndarray:
        """Coefficient of variation ``std / mean`` of ``phase``, per resource (inf if mean ≤ 0)."""
        mean, std = self._moments(phase)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(mean > 0, std / mean, np.inf)
