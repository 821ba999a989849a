"""The policy base classes and the per-cycle statistics every policy may use.

:class:`AutoscalingPolicy` is any rule that returns one allocation per cycle;
:class:`HistoryPolicy` is a practical one, shown only the samples before each cycle.

Cold start: a history policy has nothing to go on in an execution's first cycle. All of them
then allocate the same ``cold_start`` rule: ``"pooled"`` (default; mean + 2 std of all training
samples, the rule of the reference figures in ``../shared/data/README.md``), ``"first-cycle"``
(mean + 2 std of the training samples that fall in their execution's first cycle) or
``"previous-run"`` (the peak of each resource in the same job's previous run, from its records
(:attr:`Execution.prior_usage`), as a user who has run the job before would request; the
pooled rule for a job's first run). Pooled statistics of jobs of different sizes fit none of
them, and in short jobs the first cycle is a large share of the run.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from phases.policies.execution import Execution, History

COLD_STARTS = ("pooled", "first-cycle", "previous-run")


def mean_plus_std(x: np.ndarray, n_std: float = 2.0) -> np.ndarray:
    """Column-wise ``mean + n_std * std`` (population std) of ``x`` ``(n, r)`` → ``(r,)``."""
    return x.mean(axis=0) + n_std * x.std(axis=0)


def cycle_stats(usage: np.ndarray, cycle: np.ndarray, n_cycles: int) -> dict[str, np.ndarray]:
    """Per-cycle mean, std and max of ``usage`` ``(n, r)``; each ``(n_cycles, r)``.

    Cycles without samples get NaN.
    """
    counts = np.bincount(cycle, minlength=n_cycles).astype(np.float64)[:, None]
    sums = np.stack([np.bincount(cycle, u, n_cycles) for u in usage.T], axis=1)
    sq = np.stack([np.bincount(cycle, u * u, n_cycles) for u in usage.T], axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = sums / counts
        std = np.sqrt(np.maximum(sq / counts - mean**2, 0.0))
    peak = np.full((n_cycles, usage.shape[1]), -np.inf)
    np.maximum.at(peak, cycle, usage)
    peak[counts[:, 0] == 0] = np.nan
    return {"mean": mean, "std": std, "max": peak}


def fill_empty(alloc: np.ndarray) -> np.ndarray:
    """Carry the last allocation over cycles that had no samples (NaN rows)."""
    for c in range(1, len(alloc)):
        if np.isnan(alloc[c]).any():
            alloc[c] = alloc[c - 1]
    return alloc


class AutoscalingPolicy(ABC):
    """A rule that sets every resource's allocation once per cycle.

    Subclasses set ``name`` and implement :meth:`plan`; ``uses_future`` marks the
    reference policies that read the coming cycle (oracles, static peak).
    """

    name: str = ""
    uses_future: ClassVar[bool] = False
    needs_phases: ClassVar[bool] = False
    phase_features: str | None = None  # which phase model's labels it reads (None: any)

    def fit(self, train: Sequence[Execution]) -> AutoscalingPolicy:
        """Learn from training executions; the default learns nothing."""
        return self

    @abstractmethod
    def plan(self, execution: Execution) -> np.ndarray:
        """Allocation of each cycle, ``(execution.n_cycles, n_resources)``."""

    def allocate_samples(self, execution: Execution) -> np.ndarray:
        """The allocation in force at each sample, ``(n_samples, n_resources)``."""
        return self.plan(execution)[execution.cycle]


class HistoryPolicy(AutoscalingPolicy):
    """A practical policy: each cycle's allocation depends only on what came before it.

    Subclasses implement :meth:`allocate`; the first cycle gets :attr:`cold_start_`.

    Parameters
    ----------
    cold_start : {"pooled", "first-cycle", "previous-run"}
        Rule for the first cycle (see the module docstring).
    """

    def __init__(self, *, cold_start: str = "pooled") -> None:
        self.cold_start = cold_start

    def fit(self, train: Sequence[Execution]) -> HistoryPolicy:
        if not train:
            raise ValueError(f"{self.name}: no training executions to fit on")
        if self.cold_start in ("pooled", "previous-run"):
            pool = np.concatenate([e.usage for e in train])
        elif self.cold_start == "first-cycle":
            pool = np.concatenate([e.usage[e.cycle == 0] for e in train])
        else:
            raise ValueError(
                f"cold_start must be one of {COLD_STARTS}, got {self.cold_start!r}"
            )
        self.cold_start_ = mean_plus_std(pool)
        return self

    def first_allocation(self, execution: Execution) -> np.ndarray:
        """The cold start of ``execution`` (its first cycle's allocation)."""
        prior = execution.prior_usage
        if self.cold_start == "previous-run" and prior is not None and len(prior):
            return np.asarray(prior, dtype=np.float64).max(axis=0)
        return self.cold_start_

    @abstractmethod
    def allocate(self, history: History) -> np.ndarray:
        """Allocation for cycle ``history.cycle_index`` from the past only, ``(n_resources,)``."""

    def plan(self, execution: Execution) -> np.ndarray:
        alloc = np.empty((execution.n_cycles, execution.usage.shape[1]))
        alloc[0] = self.first_allocation(execution)
        for c in range(1, execution.n_cycles):
            alloc[c] = self.allocate(execution.history(c, alloc))
        return alloc
