"""``phase-rules`` / ``phase-rules-pooled``: the statistics of the phase detected last.

The phase detected at the last sample before the cycle; allocates that phase's mean + 2 std
learned on the training executions (the paper's ``phase.rule``). Relative statistics learn
each phase's usage as a ratio to the execution's own level in the cycle before the sample
and multiply by the level observed before the coming cycle, so jobs of different sizes
share phase statistics; absolute statistics are the paper's pooled ones (registered as
``phase-rules-pooled``); the default ``stats="auto"`` takes, per phase and resource, the
one with the smaller coefficient of variation on the training samples.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from phases.policies.base import HistoryPolicy
from phases.policies.execution import Execution, History
from phases.policies.phase_statistics import PhaseStatistics, cycle_level


class PhaseRulesPolicy(HistoryPolicy):
    """Allocate the statistics of the phase detected right before the cycle (paper's phase.rule).

    Parameters
    ----------
    stats : {"auto", "relative", "absolute"}, default="auto"
        ``"relative"``: per-phase mean + ``n_std`` std of usage divided by the execution's level
        in the previous cycle, times the level observed in the cycle just ended; jobs of
        different sizes share the phase's *shape*. ``"absolute"``: the paper's pooled per-phase
        statistics of raw usage (``phase-rules-pooled``). ``"auto"``: per phase and resource,
        whichever of the two has the smaller coefficient of variation on the training samples
        (steady phases of jobs of different sizes are tight relative to their level; start-up
        phases that jump from megabytes to gigabytes are tighter in absolute terms).
    level : {"mean", "max", "last"}, default="last"
        How the level of a cycle is read (see :func:`cycle_level`); relative statistics only.
        Defaults chosen on a validation split of the dl-traces training executions (never the
        test split): ``last``/``sample`` gave the least over-allocation at ≤3% under-provisioned;
        ``mean`` levels over-allocate memory by 2× while it ramps up.
    conditioning : {"sample", "decision"}, default="sample"
        Which samples make a phase's statistics: those labelled with it (``"sample"``, as the
        paper), or those of the cycles that followed a detection of it (``"decision"``: the
        phase's next-cycle statistics).
    n_std : float
        Number of standard deviations above the mean.
    phase_features : {"raw", "relative"} or None
        Inputs of the phase model whose labels it reads, when the evaluation ran several
        (``phase-rules-pooled`` reads the raw-feature model, as the paper).
    cold_start : str
        First-cycle rule, see :class:`HistoryPolicy`.

    Attributes
    ----------
    relative_stats_, absolute_stats_ : PhaseStatistics or None
        Learned on the training executions' detected phases (None when ``stats`` excludes
        them).
    """

    needs_phases = True

    def __init__(
        self,
        *,
        stats: str = "auto",
        level: str = "last",
        conditioning: str = "sample",
        n_std: float = 2.0,
        phase_features: str | None = None,
        cold_start: str = "pooled",
    ) -> None:
        super().__init__(cold_start=cold_start)
        self.phase_features = phase_features
        self.stats = stats
        self.level = level
        self.conditioning = conditioning
        self.n_std = n_std
        self.name = "phase-rules-pooled" if stats == "absolute" else "phase-rules"

    def fit(self, train: Sequence[Execution]) -> PhaseRulesPolicy:
        if self.stats not in ("auto", "relative", "absolute"):
            raise ValueError(f"stats must be 'auto', 'relative' or 'absolute', got {self.stats!r}")
        super().fit(train)
        kw = {"level": self.level, "conditioning": self.conditioning}
        self.relative_stats_ = (
            PhaseStatistics.fit(train, relative=True, **kw) if self.stats != "absolute" else None
        )
        self.absolute_stats_ = (
            PhaseStatistics.fit(train, relative=False, **kw) if self.stats != "relative" else None
        )
        return self

    def _phases_ahead(self, phase: int) -> list[int]:
        return [phase]

    def _phase_upper(self, phase: int, level: np.ndarray) -> np.ndarray:
        """Allocation ``(n_resources,)`` that ``phase`` calls for at the given level."""
        rel, ab = self.relative_stats_, self.absolute_stats_
        if ab is None:
            return level * rel.upper(phase, self.n_std)
        if rel is None:
            return ab.upper(phase, self.n_std)
        use_rel = rel.spread(phase) <= ab.spread(phase)
        return np.where(use_rel, level * rel.upper(phase, self.n_std), ab.upper(phase, self.n_std))

    def allocate(self, history: History) -> np.ndarray:
        if history.phases is None:
            raise ValueError(f"{self.name} needs detected phases")
        level = cycle_level(history.last_cycle(), self.level)
        ahead = self._phases_ahead(int(history.phases[-1]))
        return np.max([self._phase_upper(p, level) for p in ahead], axis=0)
