"""``phase-window``: the phase-free peer's level, lowered when the job has left the phase of its peak.

Issue 40. The phase-free peers read the job's level from the whole cycle just observed: its
peak (``reactive-max``) or, for memory, its recent trend (``reactive-trend``). A peak that
belongs to a phase the job has already left -- an evaluation spike that came back down, a
loading burst, the working set of a stage that has finished -- is then held for a whole
further cycle. Here the detected phase is a switch on *which samples* the level is read from:

* **The peer's level** ``P_c`` before cycle ``c``: the peak of the last cycle; for memory,
  that peak or the last sample carried on by the recent slope
  (:func:`~phases.policies.phase_adaptive.job_levels` ``"recent-trend"``).
* **The window's level** ``W_c``: the same rule over only the samples of the last cycle that
  lie in the *current phase's run*, when that run began inside the cycle and has lasted at
  least ``min_run`` samples (else ``W_c = P_c``). A shorter run is not trusted: a phase
  change of a sample or two is as often noise as a new stage.
* **The allocation** is ``min(P_c, shrink · W_c) · headroom``. The window can only lower the
  peer's level, and never below the current phase's own level plus a safety margin
  (``shrink``, default 1.15: the VPA recommender's default safety margin, which the live
  controller's memory headroom also uses; not fitted here), because an old peak may come
  back (the next evaluation spike). ``headroom >= 1`` buys back what the lowering leaves
  short.
* **Calibration on the training executions only**: per resource, ``(min_run, headroom)`` is
  the pair with the least over-allocation among those under-provisioned on no more training
  samples than the peer itself (cycles after the first, which every practical policy starts
  alike). The peer (no window, no headroom) is always a candidate, so on the training
  executions the policy is never worse than its peer on either count; the held-out job is
  not part of this choice.

The first cycle gets the shared ``cold_start`` rule, as every practical policy
(:class:`~phases.policies.base.HistoryPolicy`). The allocation is never below the current
phase's own level (``shrink`` and ``headroom`` are at least 1): the 5% tolerance of the
metrics is not spent on purpose, since memory allocated under use is an out-of-memory kill.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from phases.policies.base import HistoryPolicy
from phases.policies.execution import Execution, History
from phases.policies.phase_adaptive import TREND_AHEAD, TREND_TAIL

WINDOW_LEVELS = ("last-max", "recent-trend")
MIN_RUNS = (3, 5, 8)
"""Candidate shortest runs (samples) that open a window: 1.5, 2.5, 4 s at 0.5 s sampling."""
HEADROOMS = tuple(float(h) for h in np.round(np.arange(1.0, 1.03001, 0.0025), 4))
"""Candidate headrooms: none up to 3%, in steps of a quarter of a percent."""
NO_WINDOW = 2**31 - 1
"""A shortest run no cycle reaches: the window is the whole last cycle, as the peer's."""


def window_level(usage: np.ndarray, phases: np.ndarray, how: str, min_run: int) -> np.ndarray:
    """The level of one cycle's samples ``(n, r)`` read from the current phase's run.

    ``phases`` ``(n,)`` are those samples' phases. The window is the trailing run of the last
    phase when it began after the cycle's first sample and holds at least ``min_run``
    samples, else the whole cycle. ``how``: ``"last-max"`` (the window's peak) or
    ``"recent-trend"`` (that peak, or the window's last sample plus the rise of its last
    :data:`TREND_TAIL` samples carried :data:`TREND_AHEAD` of a cycle on, if higher; the
    horizon counts the whole cycle's samples, so a short window does not shorten it).
    Returns ``(r,)``.
    """
    n = len(usage)
    changed = np.flatnonzero(phases[1:] != phases[:-1])
    start = int(changed[-1]) + 1 if len(changed) else 0
    w = usage[start:] if n - start >= min_run else usage
    if how == "last-max":
        return w.max(axis=0)
    if how != "recent-trend":
        raise ValueError(f"level must be one of {WINDOW_LEVELS}, got {how!r}")
    k = min(TREND_TAIL, len(w) - 1)
    slope = (w[-1] - w[-1 - k]) / k if k > 0 else np.zeros(usage.shape[1])
    return np.maximum(w.max(axis=0), w[-1] + np.maximum(slope, 0.0) * TREND_AHEAD * n)


def decided_cycles(execution: Execution) -> list[tuple[slice, slice]]:
    """``(last, this)`` sample slices of every cycle with samples after the first, each with
    the last earlier cycle with samples (what its allocation is decided from)."""
    starts = np.searchsorted(execution.cycle, np.arange(execution.n_cycles + 1), side="left")
    out, last = [], None
    for c in range(execution.n_cycles):
        this = slice(int(starts[c]), int(starts[c + 1]))
        if this.stop == this.start:
            continue
        if last is not None:
            out.append((last, this))
        last = this
    return out


class PhaseWindowPolicy(HistoryPolicy):
    """The peer's level, lowered to the current phase's own when the job has left the phase
    of its peak, calibrated on the training executions (see the module docstring).

    Parameters
    ----------
    level : {"last-max", "recent-trend"}, default="last-max"
        The peer's level for every resource but memory (``reactive-max``).
    memory_level : {"last-max", "recent-trend"}, default="recent-trend"
        The level of memory resources (names containing ``mem``; ``reactive-trend``).
    shrink : float, default=1.15
        Margin over the current phase's level when the window lowers the peer's (>= 1).
    min_runs, headrooms : sequences, default=MIN_RUNS, HEADROOMS
        Candidates of the calibration; one value each fixes the choice (headrooms >= 1).
    tolerance : float, default=0.05
        Use above ``allocation × (1 + tolerance)`` counts as under-provisioned in the
        calibration (the evaluation's default).
    phase_features : {"raw", "relative"} or None
        Inputs of the phase model whose labels it reads.
    cold_start : str
        First-cycle rule, see :class:`HistoryPolicy`.

    Attributes
    ----------
    levels_ : tuple of str
        The level rule of each resource.
    min_run_ : ndarray of shape (n_resources,), int
    headroom_ : ndarray of shape (n_resources,)
        The calibrated choice of each resource (``min_run_`` :data:`NO_WINDOW` and headroom
        1: the peer itself, when nothing beat it on the training executions).
    calibration_ : dict of str to ndarray of shape (n_resources,)
        On the training executions' cycles after the first: the peer's over-allocation % and
        under-provisioned % (``peer_over_pct``, ``peer_under_pct``) and this policy's with
        the chosen pair (``over_pct``, ``under_pct``).
    """

    name = "phase-window"
    needs_phases = True

    def __init__(
        self,
        *,
        level: str = "last-max",
        memory_level: str = "recent-trend",
        shrink: float = 1.15,
        min_runs: Sequence[int] = MIN_RUNS,
        headrooms: Sequence[float] = HEADROOMS,
        tolerance: float = 0.05,
        phase_features: str | None = None,
        cold_start: str = "pooled",
    ) -> None:
        super().__init__(cold_start=cold_start)
        self.level = level
        self.memory_level = memory_level
        self.shrink = shrink
        self.min_runs = min_runs
        self.headrooms = headrooms
        self.tolerance = tolerance
        self.phase_features = phase_features

    def _check(self) -> None:
        for how in (self.level, self.memory_level):
            if how not in WINDOW_LEVELS:
                raise ValueError(f"level must be one of {WINDOW_LEVELS}, got {how!r}")
        if not len(self.min_runs) or min(self.min_runs) < 1:
            raise ValueError(f"min_runs must be positive integers, got {self.min_runs!r}")
        if not len(self.headrooms) or min(self.headrooms) < 1.0:
            raise ValueError(f"headrooms must be at least 1, got {self.headrooms!r}")
        if self.shrink < 1.0:
            raise ValueError(f"shrink must be at least 1, got {self.shrink!r}")

    def _levels(self, usage: np.ndarray, phases: np.ndarray, min_run: np.ndarray) -> np.ndarray:
        """Each resource's window level of one cycle's samples ``(n, r)`` → ``(r,)``."""
        return np.array(
            [
                window_level(usage[:, [j]], phases, how, int(min_run[j]))[0]
                for j, how in enumerate(self.levels_)
            ]
        )

    def _allocation(self, usage: np.ndarray, phases: np.ndarray, min_run: np.ndarray) -> np.ndarray:
        """``min(P, shrink · W)`` of one cycle's samples, before the headroom, ``(r,)``."""
        peer = self._levels(usage, phases, np.full(len(min_run), NO_WINDOW))
        return np.minimum(peer, self.shrink * self._levels(usage, phases, min_run))

    def fit(self, train: Sequence[Execution]) -> PhaseWindowPolicy:
        self._check()
        super().fit(train)
        if any(e.phases is None for e in train):
            raise ValueError(f"{self.name} needs detected phases on the training executions")
        is_mem = ["mem" in name.lower() for name in train[0].resources]
        self.levels_ = tuple(self.memory_level if m else self.level for m in is_mem)
        r = len(is_mem)
        decided = [(e, last, this) for e in train for last, this in decided_cycles(e)]
        if not decided:
            raise ValueError(f"{self.name}: no training cycle after the first to learn from")
        usage = np.concatenate([e.usage[this] for e, _, this in decided])
        counts = [this.stop - this.start for _, _, this in decided]
        total = np.maximum(usage.sum(axis=0), 1e-300)

        def in_force(min_run: int) -> np.ndarray:
            """The allocation before headroom at each training sample, ``(n_samples, r)``."""
            rows = [self._allocation(e.usage[last], e.phases[last], np.full(r, min_run))
                    for e, last, _ in decided]
            return np.repeat(np.stack(rows), counts, axis=0)

        def score(alloc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            """Over-allocation % and under-provisioned % of ``alloc`` ``(..., n, r)``."""
            over = 100.0 * np.clip(alloc - usage, 0, None).sum(axis=-2) / total
            under = 100.0 * (usage > alloc * (1.0 + self.tolerance)).mean(axis=-2)
            return over, under

        peer_over, peer_under = score(in_force(NO_WINDOW))
        # the peer is the fallback, so on these cycles the policy is never worse than it
        self.min_run_ = np.full(r, NO_WINDOW, dtype=np.int64)
        self.headroom_ = np.ones(r)
        best_over, best_under = peer_over.copy(), peer_under.copy()
        heads = np.asarray(self.headrooms, dtype=np.float64)
        for m in self.min_runs:
            over, under = score(in_force(int(m))[None] * heads[:, None, None])
            for j in range(r):
                # the least over-allocation among the pairs short no more often than the peer
                ok = np.flatnonzero(under[:, j] <= peer_under[j] + 1e-9)
                if len(ok) == 0:
                    continue
                i = ok[np.argmin(over[ok, j])]
                if over[i, j] < best_over[j] - 1e-9:
                    best_over[j], best_under[j] = over[i, j], under[i, j]
                    self.min_run_[j], self.headroom_[j] = int(m), float(heads[i])
        self.calibration_ = {
            "peer_over_pct": peer_over,
            "peer_under_pct": peer_under,
            "over_pct": best_over,
            "under_pct": best_under,
        }
        return self

    def allocate(self, history: History) -> np.ndarray:
        if history.phases is None:
            raise ValueError(f"{self.name} needs detected phases")
        last = history.cycle == history.cycle[-1]
        alloc = self._allocation(history.usage[last], history.phases[last], self.min_run_)
        return alloc * self.headroom_
