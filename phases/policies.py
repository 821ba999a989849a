"""Autoscaling policies that set each execution's CPU and memory allocation once per cycle.

The set-up follows the evaluation of AI4DL (Berral, Wang & Youssef, "AI4DL: Mining behaviors
of deep learning workloads for resource management", HotCloud'20, Figure 4; the proactive
policy follows the idea of Buchaca, Berral, Wang & Youssef, "Proactive container auto-scaling
for cloud native machine learning services", IEEE CLOUD 2020): every ``cycle`` seconds a
policy fixes the allocation of every resource for the coming cycle, and the allocation is held
until the next cycle starts.

Every policy is an :class:`AutoscalingPolicy`: ``fit(train)`` learns what it needs from the
training executions and ``plan(execution)`` returns one allocation per cycle,
``(n_cycles, n_resources)``. Practical policies derive from :class:`HistoryPolicy`, whose
``plan`` shows them only the samples *before* each cycle (a :class:`History`), so they cannot
look ahead by construction; they implement ``allocate(history) -> (n_resources,)``.

Policies (``name`` → class)
---------------------------
``oracle-max`` / ``oracle-rules``
    Know the coming cycle: its maximum, or its mean + 2 std (the paper's ``current.step``).
``reactive-max`` / ``reactive-rules``
    The cycle just observed: its maximum, or its mean + 2 std (the paper's ``prev.step``).
``phase-rules``
    The phase detected at the last sample before the cycle; allocates that phase's mean + 2 std
    learned on the training executions (the paper's ``phase.rule``). Relative statistics learn
    each phase's usage as a ratio to the execution's own level in the cycle before the sample
    and multiply by the level observed before the coming cycle, so jobs of different sizes
    share phase statistics; absolute statistics are the paper's pooled ones (registered as
    ``phase-rules-pooled``); the default ``stats="auto"`` takes, per phase and resource, the
    one with the smaller coefficient of variation on the training samples.
``phase-proactive``
    As ``phase-rules``, but allocates the upper envelope over the current phase and every phase
    the transition graph reaches within the coming cycle with probability ≥ ``threshold``.
``vpa``
    The Kubernetes Vertical Pod Autoscaler recommender's scheme (see :class:`VPAPolicy`).
``static-peak``
    The peak of the whole execution, as if requested up front (knows the future).

Cold start: a history policy has nothing to go on in an execution's first cycle. All of them
then allocate the same ``cold_start`` rule learned on the training executions: ``"pooled"``
(default; mean + 2 std of all training samples, the rule of the reference figures in
``../shared/data/README.md``) or ``"first-cycle"`` (mean + 2 std of the training samples that
fall in their execution's first cycle).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar, NamedTuple

import numpy as np

__all__ = [
    "Execution",
    "History",
    "AutoscalingPolicy",
    "HistoryPolicy",
    "OracleMaxPolicy",
    "OracleRulesPolicy",
    "ReactiveMaxPolicy",
    "ReactiveRulesPolicy",
    "StaticPeakPolicy",
    "PhaseRulesPolicy",
    "PhaseProactivePolicy",
    "VPAPolicy",
    "PhaseStatistics",
    "POLICIES",
    "make_policy",
    "cycle_stats",
    "cycle_level",
    "decaying_percentile",
    "transition_matrix",
    "visit_probabilities",
]

WARM_UP = -1  # phase label of samples without a full CRBM history (issue 4)


@dataclass
class Execution:
    """One execution's samples, split into autoscaling cycles.

    Attributes
    ----------
    exec_id : str
    time : ndarray of shape (n_samples,)
        Seconds, increasing.
    usage : ndarray of shape (n_samples, n_resources)
        The resources that are allocated (e.g. CPU cores, memory GiB).
    cycle : ndarray of shape (n_samples,), int
        Cycle of each sample: ``floor((time - time[0]) / cycle_s)``.
    resources : tuple of str
        Name of each usage column.
    features : ndarray of shape (n_samples, n_features), optional
        Phase-model input (may hold more columns than ``usage``).
    phases : ndarray of shape (n_samples,), int, optional
        Detected phase of each sample (-1: warm-up), filled in by the evaluation.
    phase_sets : dict of str to ndarray of shape (n_samples,)
        Phases from models fitted on different inputs (``"raw"``, ``"relative"`` features);
        the evaluation copies the one a policy asks for (``phase_features``) into ``phases``.
    """

    exec_id: str
    time: np.ndarray
    usage: np.ndarray
    cycle: np.ndarray
    resources: tuple[str, ...]
    features: np.ndarray | None = None
    phases: np.ndarray | None = None
    phase_sets: dict[str, np.ndarray] = field(default_factory=dict)

    @classmethod
    def from_arrays(
        cls,
        exec_id: str,
        time: np.ndarray,
        usage: np.ndarray,
        cycle_s: float,
        resources: Sequence[str] | None = None,
        **kw,
    ) -> Execution:
        """Build an execution and assign its samples to cycles of ``cycle_s`` seconds."""
        if cycle_s <= 0:
            raise ValueError(f"cycle must be positive, got {cycle_s}")
        time = np.asarray(time, dtype=np.float64)
        usage = np.asarray(usage, dtype=np.float64)
        usage = usage.reshape(len(usage), -1)
        cycle = np.floor((time - time[0]) / cycle_s + 1e-9).astype(np.int64)
        names = tuple(resources) if resources else tuple(f"r{i}" for i in range(usage.shape[1]))
        return cls(str(exec_id), time, usage, cycle, names, **kw)

    @property
    def n_cycles(self) -> int:
        return int(self.cycle[-1]) + 1

    def history(self, c: int, allocations: np.ndarray) -> History:
        """What an autoscaler knows when cycle ``c`` starts: samples and allocations before it."""
        end = int(np.searchsorted(self.cycle, c, side="left"))
        return History(
            c,
            self.time[:end],
            self.usage[:end],
            self.cycle[:end],
            None if self.phases is None else self.phases[:end],
            allocations[:c],
        )


class History(NamedTuple):
    """The past of an execution at the start of cycle ``cycle_index`` (nothing from the future)."""

    cycle_index: int
    time: np.ndarray  # (n_past,)
    usage: np.ndarray  # (n_past, n_resources)
    cycle: np.ndarray  # (n_past,)
    phases: np.ndarray | None  # (n_past,)
    allocations: np.ndarray  # (cycle_index, n_resources): what was allocated so far

    def last_cycle(self) -> np.ndarray:
        """Usage of the most recent cycle that has samples, ``(n, n_resources)``."""
        return self.usage[self.cycle == self.cycle[-1]]


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


def _fill_empty(alloc: np.ndarray) -> np.ndarray:
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


class OracleMaxPolicy(AutoscalingPolicy):
    """Knows the coming cycle and allocates its maximum (impractical; a lower bound)."""

    name = "oracle-max"
    uses_future = True

    def plan(self, execution: Execution) -> np.ndarray:
        stats = cycle_stats(execution.usage, execution.cycle, execution.n_cycles)
        return _fill_empty(stats["max"])


class OracleRulesPolicy(AutoscalingPolicy):
    """Knows the coming cycle and allocates its mean + ``n_std`` std (the paper's best case)."""

    name = "oracle-rules"
    uses_future = True

    def __init__(self, *, n_std: float = 2.0) -> None:
        self.n_std = n_std

    def plan(self, execution: Execution) -> np.ndarray:
        stats = cycle_stats(execution.usage, execution.cycle, execution.n_cycles)
        return _fill_empty(stats["mean"] + self.n_std * stats["std"])


class StaticPeakPolicy(AutoscalingPolicy):
    """The peak of the whole execution for every cycle, as if requested up front."""

    name = "static-peak"
    uses_future = True

    def plan(self, execution: Execution) -> np.ndarray:
        return np.tile(execution.usage.max(axis=0), (execution.n_cycles, 1))


class HistoryPolicy(AutoscalingPolicy):
    """A practical policy: each cycle's allocation depends only on what came before it.

    Subclasses implement :meth:`allocate`; the first cycle gets :attr:`cold_start_`.

    Parameters
    ----------
    cold_start : {"pooled", "first-cycle"}
        Rule for the first cycle (see the module docstring).
    """

    def __init__(self, *, cold_start: str = "pooled") -> None:
        self.cold_start = cold_start

    def fit(self, train: Sequence[Execution]) -> HistoryPolicy:
        if not train:
            raise ValueError(f"{self.name}: no training executions to fit on")
        if self.cold_start == "pooled":
            pool = np.concatenate([e.usage for e in train])
        elif self.cold_start == "first-cycle":
            pool = np.concatenate([e.usage[e.cycle == 0] for e in train])
        else:
            raise ValueError(
                f"cold_start must be 'pooled' or 'first-cycle', got {self.cold_start!r}"
            )
        self.cold_start_ = mean_plus_std(pool)
        return self

    @abstractmethod
    def allocate(self, history: History) -> np.ndarray:
        """Allocation for cycle ``history.cycle_index`` from the past only, ``(n_resources,)``."""

    def plan(self, execution: Execution) -> np.ndarray:
        alloc = np.empty((execution.n_cycles, execution.usage.shape[1]))
        alloc[0] = self.cold_start_
        for c in range(1, execution.n_cycles):
            alloc[c] = self.allocate(execution.history(c, alloc))
        return alloc


class ReactiveMaxPolicy(HistoryPolicy):
    """The maximum of the cycle just observed (the paper's ``prev.step.max``)."""

    name = "reactive-max"

    def allocate(self, history: History) -> np.ndarray:
        return history.last_cycle().max(axis=0)


class ReactiveRulesPolicy(HistoryPolicy):
    """Mean + ``n_std`` std of the cycle just observed (the paper's ``prev.step.rules``)."""

    name = "reactive-rules"

    def __init__(self, *, n_std: float = 2.0, cold_start: str = "pooled") -> None:
        super().__init__(cold_start=cold_start)
        self.n_std = n_std

    def allocate(self, history: History) -> np.ndarray:
        return mean_plus_std(history.last_cycle(), self.n_std)


# --------------------------------------------------------------------------- phase statistics


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


def transition_matrix(sequences: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per-sample phase transition probabilities from the transition graph.

    Built with :class:`phases.sequences.TransitionGraph` (warm-up included): ``P[i, j]`` is
    the share of samples in phase ``labels[i]`` followed by ``labels[j]``, self-transitions
    included so dwell times are kept. A phase never left is made absorbing.

    Returns
    -------
    labels : ndarray of shape (k,)
    P : ndarray of shape (k, k)
    """
    from phases.sequences import TransitionGraph

    graph = TransitionGraph.from_sequences(sequences, include_warmup=True)
    matrix = graph.matrix.copy()
    never_left = matrix.sum(axis=1) == 0
    matrix[never_left, never_left] = 1.0
    return np.asarray(graph.phases, dtype=np.int64), matrix


def visit_probabilities(transitions: np.ndarray, n_steps: int) -> np.ndarray:
    """Probability of being in phase ``j`` at least once within ``n_steps`` steps from ``i``.

    For each target ``j`` the chain is made absorbing in ``j``; the mass absorbed after
    ``n_steps`` steps is the visit probability. ``V[i, i] = 1``. Shape ``(k, k)``.
    """
    k = len(transitions)
    visits = np.eye(k)
    for j in range(k):
        absorbing = transitions.copy()
        absorbing[j] = 0.0
        absorbing[j, j] = 1.0
        reach = np.linalg.matrix_power(absorbing, max(int(n_steps), 1))[:, j]
        visits[:, j] = np.maximum(visits[:, j], reach)
    return visits


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


class PhaseProactivePolicy(PhaseRulesPolicy):
    """Phase rules plus the phases the transition graph expects within the coming cycle.

    The allocation is the upper envelope (per resource maximum) of the statistics of the
    current phase and of every phase ``j`` with ``P(visit j within one cycle | current) >=
    threshold``, computed from the per-sample transition matrix of the training sequences by
    :func:`visit_probabilities` with the training executions' median number of samples per
    cycle as the number of steps. A burst that usually follows the current phase is thus
    provisioned before it arrives.

    Parameters
    ----------
    threshold : float, default=0.5
        Minimum probability of visiting a phase in the coming cycle for it to count. Chosen
        among 0.1-0.9 on a validation split of the dl-traces *training* executions (0.1 and
        0.25 let the memory-growth phases into nearly every envelope).
    **kwargs
        ``stats``, ``level``, ``conditioning``, ``n_std``, ``cold_start`` as
        :class:`PhaseRulesPolicy`.

    Attributes
    ----------
    transitions_ : ndarray of shape (n_phases, n_phases)
    visits_ : ndarray of shape (n_phases, n_phases)
    steps_per_cycle_ : int
    """

    def __init__(self, *, threshold: float = 0.5, **kwargs) -> None:
        super().__init__(**kwargs)
        self.threshold = threshold
        self.name = self.name.replace("phase-rules", "phase-proactive")

    def fit(self, train: Sequence[Execution]) -> PhaseProactivePolicy:
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {self.threshold}")
        super().fit(train)
        self.labels_, self.transitions_ = transition_matrix([e.phases for e in train])
        full = [np.bincount(e.cycle)[:-1] for e in train if e.n_cycles > 1]
        self.steps_per_cycle_ = int(np.median(np.concatenate(full))) if full else 1
        self.visits_ = visit_probabilities(self.transitions_, self.steps_per_cycle_)
        return self

    def _phases_ahead(self, phase: int) -> list[int]:
        i = np.flatnonzero(self.labels_ == phase)
        if len(i) == 0:
            return [phase]
        likely = self.labels_[self.visits_[i[0]] >= self.threshold]
        return sorted({phase, *map(int, likely)})


# --------------------------------------------------------------------------- VPA recommender


def _bucket_index(values: np.ndarray, first: float, ratio: float) -> np.ndarray:
    """Exponential histogram buckets: bucket ``b`` starts at ``first * (ratio**b - 1)/(ratio-1)``."""
    v = np.maximum(values, 0.0)
    return np.floor(np.log1p(v * (ratio - 1.0) / first) / np.log(ratio) + 1e-12).astype(np.int64)


def _bucket_start(b: np.ndarray | int, first: float, ratio: float) -> np.ndarray:
    return first * (np.power(ratio, b) - 1.0) / (ratio - 1.0)


def decaying_percentile(
    values: np.ndarray,
    times: np.ndarray,
    now: float,
    q: float,
    *,
    half_life: float,
    first: float,
    ratio: float = 1.05,
) -> float:
    """Percentile ``q`` of an exponentially decaying histogram with exponential buckets.

    Each sample weighs ``2 ** ((t - now) / half_life)`` (half the weight per half-life of
    age); the value returned is the *end* of the bucket where the cumulative weight first
    reaches ``q`` of the total, as the VPA recommender does (so it errs upwards by at most one
    bucket, i.e. ``ratio - 1`` relative).
    """
    if len(values) == 0:
        return float("nan")
    weights = np.exp2((np.asarray(times) - now) / half_life)
    buckets = _bucket_index(np.asarray(values), first, ratio)
    mass = np.cumsum(np.bincount(buckets, weights))
    b = int(np.searchsorted(mass, q * mass[-1], side="left"))
    return float(_bucket_start(b + 1, first, ratio))


class VPAPolicy(HistoryPolicy):
    """The Kubernetes Vertical Pod Autoscaler recommender's target, replayed per cycle.

    Learned from the design of ``kubernetes/autoscaler`` (``vertical-pod-autoscaler/pkg/
    recommender``: decaying histograms, percentile estimators, safety margin, OOM handling) and
    Google's Autopilot paper; re-written here, nothing copied. At each cycle the target of every
    resource is computed from the execution's own history only, as a VPA object that starts
    with the job:

    * CPU-like resources: all usage samples go into a histogram whose weights decay
      exponentially with age (``half_life``); target = ``cpu_percentile`` (0.9) of it.
    * Memory-like resources (name contains ``"mem"``, or ``memory_resources``): one *peak* per
      aggregation interval (``memory_interval``) goes into the decaying histogram, stamped with
      the interval's end; target = ``memory_percentile`` (0.9) of the peaks.
    * Safety margin: target × (1 + ``safety_margin``), 0.15 as the recommender's default.
    * OOM bump-up: a cycle in which memory use exceeded its allocation counts as an
      out-of-memory event at the first such sample; it adds the memory sample
      ``max(used + oom_min_bump, used × oom_bump_ratio)`` with ``used`` the usage at the event
      (VPA: ratio 1.2, minimum bump 100 MiB; the minimum is in the resource's unit here, so it
      defaults to 0; pass 0.1 for GiB). A replay cannot restart the killed job; the trace
      simply goes on.
    * Histogram: exponential buckets, first bucket ``first_bucket`` (default 1/1000 of the
      training mean usage of the resource, unit-free) growing by ``bucket_ratio`` (1.05).
    * Half-life: VPA uses 24 h with an 8-day history window. Training jobs here last seconds
      to hours, so ``half_life_s=None`` scales it to the traces: ``half_life_fraction``
      (1/8, VPA's 24 h / 8 d) × the median training execution duration. ``memory_interval_s``
      defaults to the half-life (VPA: both 24 h).
    * Left out: the load-adjusted CPU weights (weights by the container's CPU request, which
      would feed our own allocations back into the histogram), confidence-based lower/upper
      bounds (the updater's eviction band; the target is applied every cycle) and minimum
      recommendations.
    """

    name = "vpa"

    def __init__(
        self,
        *,
        half_life_s: float | None = None,
        half_life_fraction: float = 0.125,
        memory_interval_s: float | None = None,
        cpu_percentile: float = 0.9,
        memory_percentile: float = 0.9,
        safety_margin: float = 0.15,
        oom_bump_ratio: float = 1.2,
        oom_min_bump: float = 0.0,
        bucket_ratio: float = 1.05,
        first_bucket: Sequence[float] | None = None,
        memory_resources: Sequence[str] | None = None,
        cold_start: str = "pooled",
    ) -> None:
        super().__init__(cold_start=cold_start)
        self.half_life_s = half_life_s
        self.half_life_fraction = half_life_fraction
        self.memory_interval_s = memory_interval_s
        self.cpu_percentile = cpu_percentile
        self.memory_percentile = memory_percentile
        self.safety_margin = safety_margin
        self.oom_bump_ratio = oom_bump_ratio
        self.oom_min_bump = oom_min_bump
        self.bucket_ratio = bucket_ratio
        self.first_bucket = first_bucket
        self.memory_resources = memory_resources

    def fit(self, train: Sequence[Execution]) -> VPAPolicy:
        super().fit(train)
        durations = [e.time[-1] - e.time[0] for e in train]
        self.half_life_ = float(self.half_life_s or self.half_life_fraction * np.median(durations))
        if self.half_life_ <= 0:
            raise ValueError(f"vpa: half-life must be positive, got {self.half_life_}")
        self.memory_interval_ = float(self.memory_interval_s or self.half_life_)
        names = train[0].resources
        mem = self.memory_resources
        self.is_memory_ = np.array(
            [(n in mem) if mem is not None else "mem" in n.lower() for n in names]
        )
        if self.first_bucket is not None:
            self.first_bucket_ = np.asarray(self.first_bucket, dtype=np.float64)
        else:
            scale = np.concatenate([e.usage for e in train]).mean(axis=0)
            self.first_bucket_ = np.maximum(1e-3 * scale, 1e-12)
        return self

    def _memory_samples(self, history: History, r: int) -> tuple[np.ndarray, np.ndarray]:
        """Interval peaks (with OOM bump-ups folded in) and their timestamps."""
        t, u = history.time, history.usage[:, r]
        interval = np.floor((t - t[0]) / self.memory_interval_).astype(np.int64)
        peaks = np.full(interval[-1] + 1, -np.inf)
        np.maximum.at(peaks, interval, u)
        alloc = history.allocations[history.cycle, r]
        over = np.flatnonzero(u > alloc)
        if len(over):
            first = over[np.unique(history.cycle[over], return_index=True)[1]]
            used = u[first]
            bump = np.maximum(used + self.oom_min_bump, used * self.oom_bump_ratio)
            np.maximum.at(peaks, interval[first], bump)
        seen = np.isfinite(peaks)
        ends = t[0] + (np.arange(len(peaks)) + 1) * self.memory_interval_
        return peaks[seen], ends[seen]

    def allocate(self, history: History) -> np.ndarray:
        now = float(history.time[-1])
        target = np.empty(history.usage.shape[1])
        for r in range(len(target)):
            if self.is_memory_[r]:
                values, times = self._memory_samples(history, r)
                q = self.memory_percentile
            else:
                values, times, q = history.usage[:, r], history.time, self.cpu_percentile
            target[r] = decaying_percentile(
                values,
                np.minimum(times, now),
                now,
                q,
                half_life=self.half_life_,
                first=float(self.first_bucket_[r]),
                ratio=self.bucket_ratio,
            )
        return target * (1.0 + self.safety_margin)


# --------------------------------------------------------------------------- registry

POLICIES: dict[str, type[AutoscalingPolicy] | tuple[type[AutoscalingPolicy], dict]] = {
    "oracle-max": OracleMaxPolicy,
    "oracle-rules": OracleRulesPolicy,
    "reactive-max": ReactiveMaxPolicy,
    "reactive-rules": ReactiveRulesPolicy,
    "phase-rules": PhaseRulesPolicy,
    "phase-proactive": PhaseProactivePolicy,
    "phase-rules-pooled": (
        PhaseRulesPolicy,
        {"stats": "absolute", "conditioning": "sample", "phase_features": "raw"},
    ),
    "vpa": VPAPolicy,
    "static-peak": StaticPeakPolicy,
}
"""Policy name → class, or (class, fixed keyword arguments)."""


def make_policy(name: str, **kwargs) -> AutoscalingPolicy:
    """A fresh policy by its registered name, e.g. ``make_policy("vpa", half_life_s=5)``."""
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}")
    entry = POLICIES[name]
    cls, fixed = entry if isinstance(entry, tuple) else (entry, {})
    return cls(**{**fixed, **kwargs})
