"""``phase-adaptive``: per-phase statistics scaled to the job, provisioned one phase ahead.

Issue 21: pooled phase statistics of jobs of different sizes fit none of them. Here every
phase is learned as a *ratio* to the job's own level, and an execution is allocated that
ratio times the level it has shown so far:

* **The job's level** ``L_c`` before cycle ``c`` (:func:`job_levels`): by default the
  maximum of the last cycle with samples (``"last-max"``) -- the job's size as it has shown
  it, such as the thread count its CPU reaches; for memory, that maximum or the job's recent
  growth carried on (``"recent-trend"``), since memory that is still growing keeps growing.
  It never looks ahead: only cycles ``< c`` count.
* **Phase ratios**, learned on the fitting executions: every sample ``t`` of a cycle
  ``c >= 1`` gives ``u_t / L_c`` under the phase of ``t``; a phase's upper ratio is the
  distribution of its ratios (per resource). A job twice the size has twice the level and
  the same ratios, so it gets twice the allocation; a winding-down phase (evaluation, exit)
  reads ratios below 1.
* **Proactive provisioning**: the allocation of cycle ``c`` is ``L_c`` times the
  ``quantile`` of the coming cycle's ratio distribution, the mixture of the phases' ratio
  distributions weighted by their expected share of the cycle's samples: the transition graph
  (:func:`~phases.policies.phase_proactive.transition_matrix`) stepped from the phase detected
  at the last sample before ``c``, with the chance of leaving that phase taken from its
  training visits that lasted at least as long as the current one (:meth:`occupancy`). A
  heavier phase that is due is thus provisioned before it arrives rather than after an
  under-provisioned cycle.

The first cycle has no level yet and gets the shared ``cold_start`` rule, as every practical
policy (:class:`~phases.policies.base.HistoryPolicy`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from phases.policies.base import HistoryPolicy
from phases.policies.execution import Execution, History
from phases.policies.phase_proactive import transition_matrix
from phases.sequences import run_lengths

JOB_LEVELS = ("running-max", "last", "last-max", "trend", "recent-trend", "mean")
TREND_TAIL = 8
"""Samples whose slope ``"recent-trend"`` extrapolates (4 s at dl-traces' 0.5 s sampling)."""
TREND_AHEAD = 0.5
"""How far, in cycles, ``"recent-trend"`` carries that slope: to the middle of the coming
cycle, so a steady leak is covered for half of it and a ramp that stops is not paid for a
whole cycle."""


def job_levels(usage: np.ndarray, cycle: np.ndarray, n_cycles: int, how: str) -> np.ndarray:
    """The job's level before each cycle, from the cycles before it only, ``(n_cycles, r)``.

    ``"running-max"``: the largest cycle mean so far; ``"last"`` / ``"last-max"``: the mean /
    the maximum of the last cycle with samples; ``"trend"``: that maximum plus its rise over
    the cycle's first sample, if it rose (a ramp carried on for one more cycle);
    ``"recent-trend"``: that maximum, or the last sample plus the rise of the last
    :data:`TREND_TAIL` samples carried :data:`TREND_AHEAD` of a cycle on, if higher (a job
    still growing, such as a memory leak or a filling cache, by its own recent slope; a ramp
    that has flattened adds nothing); ``"mean"``: the mean of all samples so far. Row 0 (no
    past) is NaN, as is any row before the first cycle with samples.
    """
    if how not in JOB_LEVELS:
        raise ValueError(f"level must be one of {JOB_LEVELS}, got {how!r}")
    if how == "recent-trend":
        return _recent_trend_levels(usage, cycle, n_cycles)
    r = usage.shape[1]
    counts = np.bincount(cycle, minlength=n_cycles).astype(np.float64)
    sums = np.stack([np.bincount(cycle, usage[:, i], n_cycles) for i in range(r)], axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = sums / counts[:, None]
        if how in ("last-max", "trend"):
            means = np.full((n_cycles, r), -np.inf)
            np.maximum.at(means, cycle, usage)
            means[counts == 0] = np.nan
        if how == "trend":
            first = np.full((n_cycles, r), np.nan)
            starts = np.searchsorted(cycle, np.arange(n_cycles), side="left")
            has = counts > 0
            first[has] = usage[starts[has]]
            means = means + np.maximum(means - first, 0.0)
        if how == "mean":
            seen = np.cumsum(sums, axis=0) / np.cumsum(counts)[:, None]
        elif how == "running-max":
            seen = np.fmax.accumulate(means, axis=0)
        else:  # the last cycle with samples: its mean, or its maximum
            filled = np.where(counts[:, None] > 0, means, np.nan)
            idx = np.maximum.accumulate(np.where(counts > 0, np.arange(n_cycles), 0))
            seen = np.where(np.cumsum(counts)[:, None] > 0, filled[idx], np.nan)
    out = np.full((n_cycles, r), np.nan)
    out[1:] = seen[:-1]
    return out


def _recent_trend_levels(usage: np.ndarray, cycle: np.ndarray, n_cycles: int) -> np.ndarray:
    out = np.full((n_cycles, usage.shape[1]), np.nan)
    starts = np.searchsorted(cycle, np.arange(n_cycles + 1), side="left")
    for c in range(n_cycles - 1):
        u = usage[starts[c] : starts[c + 1]]
        if len(u) == 0:
            out[c + 1] = out[c]
            continue
        k = min(TREND_TAIL, len(u) - 1)
        slope = (u[-1] - u[-1 - k]) / k if k > 0 else np.zeros(usage.shape[1])
        out[c + 1] = np.maximum(u.max(0), u[-1] + np.maximum(slope, 0.0) * TREND_AHEAD * len(u))
    return out


def mixture_quantile(grids: np.ndarray, weights: np.ndarray, q: float | np.ndarray) -> np.ndarray:
    """Quantile ``q`` of a mixture of distributions given by equal-mass quantile grids.

    ``grids`` ``(k, g, r)``: ``g`` quantiles of each of ``k`` distributions per resource;
    ``weights`` ``(k,)``: mixture weights (summing to 1); ``q``: one quantile, or one per
    resource ``(r,)``. Returns ``(r,)``.
    """
    k, g, r = grids.shape
    values = grids.reshape(k * g, r)
    mass = np.repeat(weights / g, g)
    order = np.argsort(values, axis=0, kind="stable")
    cum = np.cumsum(mass[order], axis=0)
    first = np.argmax(cum >= q * cum[-1] - 1e-12, axis=0)
    return values[order[first, np.arange(r)], np.arange(r)]


def leave_probability(dwells: np.ndarray, elapsed: int, horizon: int) -> float:
    """P(a visit that has lasted ``elapsed`` samples ends within ``horizon`` more samples).

    Empirical, from the training visits' lengths ``dwells``; 1 when no visit lasted as long.
    """
    alive = dwells >= elapsed
    if not alive.any():
        return 1.0
    return float(np.mean(dwells[alive] < elapsed + horizon))


class PhaseAdaptivePolicy(HistoryPolicy):
    """Phase ratios to the job's own level, times the level seen so far, one phase ahead.

    Parameters
    ----------
    level : str, default="last-max"
        The job's level before a cycle (see :func:`job_levels`), for every resource but
        memory.
    memory_level : str or None, default="recent-trend"
        The level of memory resources (those whose name contains ``mem``); None: ``level``.
        Memory grows and rarely shrinks within a run (caches fill, streams leak), so a job
        still growing is judged by its own recent slope; CPU reaches its thread count at once.
        Chosen by nested leave-one-workload-out per resource (``autoscale_eval.py --nested``).
    quantile : float, default=0.9
        Quantile of the coming cycle's ratio distribution that is allocated (per resource).
        ``level`` and ``quantile`` were picked by nested leave-one-workload-out on dl-traces
        (``benchmarks/autoscale_eval.py --nested``: each held-out workload's choice made on
        the other four only): ``last-max`` in 5 of 5 folds, 0.9 in 4 of 5 (0.95 in one).
    memory_quantile : float or None, default=None
        The quantile of memory resources; None: ``quantile``. Memory that runs short is an
        out-of-memory kill rather than a slower cycle, so a user may want it provisioned at a
        higher quantile than CPU. dl-traces, leave one workload out, previous-run cold start
        (over-allocation % / samples under-provisioned %): 0.9 gives 18.7 / 4.6, 0.925 gives
        19.8 / 4.0 (vpa: 31.7 / 4.1), 0.95 gives 22.2 / 3.3
        (``autoscale_eval.py --memory-quantiles``).
    lookahead : bool, default=True
        Whether the coming cycle's distribution is the mixture of the phases the transition
        graph expects over it (weighted by their expected share of its samples), or the
        current phase's alone.
    dwell_aware : bool, default=True
        Whether the chance of leaving the current phase accounts for the time already spent
        in it (from the training visits' lengths) instead of the memoryless graph alone.
    min_samples : int, default=20
        Phases with fewer training ratios use the ratios of all phases.
    phase_features : {"raw", "relative"} or None
        Inputs of the phase model whose labels it reads.
    cold_start : str
        First-cycle rule, see :class:`HistoryPolicy`.

    Attributes
    ----------
    levels_ : tuple of str
        The level rule of each resource, in the order of the executions' ``resources``.
    quantiles_ : ndarray of shape (n_resources,)
        The quantile allocated of each resource.
    labels_ : ndarray of shape (n_phases,)
        Phases of the transition graph (warm-up included).
    grids_ : ndarray of shape (n_phases, n_grid, n_resources)
        Quantiles of each phase's ratios (of all phases where it had too few samples).
    transitions_ : ndarray of shape (n_phases, n_phases)
        Per-sample transition probabilities.
    dwells_ : dict of int to ndarray
        Lengths in samples of each phase's training visits.
    steps_per_cycle_ : int
    """

    name = "phase-adaptive"
    needs_phases = True
    n_grid = 200

    def __init__(
        self,
        *,
        level: str = "last-max",
        memory_level: str | None = "recent-trend",
        quantile: float = 0.9,
        memory_quantile: float | None = None,
        lookahead: bool = True,
        dwell_aware: bool = True,
        min_samples: int = 20,
        phase_features: str | None = None,
        cold_start: str = "pooled",
    ) -> None:
        super().__init__(cold_start=cold_start)
        self.level = level
        self.memory_level = memory_level
        self.quantile = quantile
        self.memory_quantile = memory_quantile
        self.lookahead = lookahead
        self.dwell_aware = dwell_aware
        self.min_samples = min_samples
        self.phase_features = phase_features

    def _ratios(self, execution: Execution) -> tuple[np.ndarray, np.ndarray]:
        """Ratios ``u_t / L_c`` of the samples of cycles ``c >= 1`` and their phases."""
        if execution.phases is None:
            raise ValueError(f"execution {execution.exec_id!r} has no phases; detect them first")
        levels = self._levels(execution.usage, execution.cycle, execution.n_cycles)
        ref = levels[execution.cycle]
        with np.errstate(invalid="ignore", divide="ignore"):
            ratios = np.where(ref > 0, execution.usage / ref, np.nan)
        ok = ~np.isnan(ratios).any(axis=1)
        return ratios[ok], execution.phases[ok]

    def _levels(self, usage: np.ndarray, cycle: np.ndarray, n_cycles: int) -> np.ndarray:
        """:func:`job_levels` of each resource under its own rule (``levels_``)."""
        out = np.empty((n_cycles, usage.shape[1]))
        for how in set(self.levels_):
            cols = [i for i, h in enumerate(self.levels_) if h == how]
            out[:, cols] = job_levels(usage[:, cols], cycle, n_cycles, how)
        return out

    def fit(self, train: Sequence[Execution]) -> PhaseAdaptivePolicy:
        for q in (self.quantile, self.memory_quantile):
            if q is not None and not 0.0 < q <= 1.0:
                raise ValueError(f"quantile must be in (0, 1], got {q}")
        for how in (self.level, self.memory_level):
            if how is not None and how not in JOB_LEVELS:
                raise ValueError(f"level must be one of {JOB_LEVELS}, got {how!r}")
        super().fit(train)
        memory = self.memory_level or self.level
        is_mem = ["mem" in name.lower() for name in train[0].resources]
        self.levels_ = tuple(memory if m else self.level for m in is_mem)
        mem_q = self.quantile if self.memory_quantile is None else self.memory_quantile
        self.quantiles_ = np.array([mem_q if m else self.quantile for m in is_mem])
        parts = [self._ratios(e) for e in train]
        ratios = np.concatenate([p[0] for p in parts])
        keys = np.concatenate([p[1] for p in parts])
        if len(ratios) == 0:
            raise ValueError(f"{self.name}: no training cycle after the first to learn from")
        probs = np.linspace(0.0, 1.0, self.n_grid)
        overall = np.quantile(ratios, probs, axis=0)
        self.labels_, self.transitions_ = transition_matrix([e.phases for e in train])
        self.grids_ = np.stack(
            [
                np.quantile(ratios[keys == p], probs, axis=0)
                if (keys == p).sum() >= self.min_samples
                else overall
                for p in self.labels_
            ]
        )
        self.overall_grid_ = overall
        full = [np.bincount(e.cycle)[:-1] for e in train if e.n_cycles > 1]
        self.steps_per_cycle_ = int(np.median(np.concatenate(full))) if full else 1
        runs = [r for e in train for r in run_lengths(e.phases)]
        run_phase = np.array([r.phase for r in runs], dtype=np.int64)
        run_len = np.array([r.length for r in runs], dtype=np.int64)
        self.dwells_ = {int(p): run_len[run_phase == p] for p in self.labels_}
        return self

    def occupancy(self, phases: np.ndarray) -> np.ndarray:
        """Expected share of the coming cycle's samples in each phase of :attr:`labels_`.

        From the current phase (last of ``phases``), stepping the per-sample transition graph
        ``steps_per_cycle_`` times; with ``dwell_aware`` the current phase's chance of being
        left within the cycle is its training visits' given the time already spent in it.
        Shape ``(n_phases,)``; all zeros for a phase the graph has never seen.
        """
        phase = int(phases[-1])
        k, steps = len(self.labels_), self.steps_per_cycle_
        i = np.flatnonzero(self.labels_ == phase)
        if len(i) == 0:
            return np.zeros(k)
        i = int(i[0])
        chain = self.transitions_.copy()
        if self.dwell_aware:
            elapsed = run_lengths(phases)[-1].length
            leave = leave_probability(self.dwells_[phase], elapsed, steps)
            stay = (1.0 - leave) ** (1.0 / steps)
            off = chain[i] * (np.arange(k) != i)
            chain[i] = (1.0 - stay) * off / off.sum() if off.sum() > 0 else 0.0
            chain[i, i] += stay if off.sum() > 0 else 1.0
        state = np.eye(k)[i]
        share = np.zeros(k)
        for _ in range(steps):
            state = state @ chain
            share += state / steps
        return share

    def _grid_mixture(self, phases: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        phase = int(phases[-1])
        i = np.flatnonzero(self.labels_ == phase)
        if len(i) == 0:
            return self.overall_grid_[None], np.ones(1)
        if not self.lookahead:
            return self.grids_[i[0]][None], np.ones(1)
        return self.grids_, self.occupancy(phases)

    def allocate(self, history: History) -> np.ndarray:
        if history.phases is None:
            raise ValueError(f"{self.name} needs detected phases")
        c = history.cycle_index
        level = self._levels(history.usage, history.cycle, c + 1)[c]
        if np.isnan(level).any():
            return history.allocations[-1]
        grids, weights = self._grid_mixture(history.phases)
        return level * mixture_quantile(grids, weights, self.quantiles_)
