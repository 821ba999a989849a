"""Memory changes that never kill a job whose peak fits: Kubernetes VPA's habits, live.

A memory limit is enforced (the monitor kills the tree past it, as the kernel's OOM killer
would a container), and a pod's memory request decides who is evicted first under node
pressure. So the two directions are not symmetric, and the rules here say so:

* **Raise at once.** A stage that needs more gets it in the same decision; a resident memory
  that has eaten its headroom (:data:`RAISE_AT` of the limit) raises the limit before the probe
  reports a new stage, by at least VPA's out-of-memory bump (:data:`OOM_BUMP`), so a growing
  job is not chased one sample behind.
* **Lower late, and only to a measured peak.** VPA's recommender sizes memory from peaks, not
  from the last sample, and its updater holds a pod's size down for a while after a change. A
  lower value here is the stage's measured peak × (1 + :data:`MEMORY_MARGIN`), never below the
  largest resident sample of the last ``window_s`` (one sample can be a dip, and the rebound
  would be killed), and only after ``hold_s`` in the stage and since the last change.
* **No limit where there was none.** A job started without a memory limit never gets one from
  the controller: a limit it never had can only kill it.
* **Never above the largest allocation.** The job started with the plan's largest memory;
  what a static run would be killed at is the ceiling a live one is raised to.

Each rule is a small function of numbers (:func:`memory_target`, :func:`grow_to`,
:func:`resident_floor`), and :class:`MemoryGovernor` keeps the little state they need (when the
stage began, its peak so far, the last change) for the controller.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from optimizer.foundation.memory import (
    MEMORY_MARGIN,
    OOM_BUMP,
    right_size_memory,
    round_up_memory,
)

HEADROOM = 1.0 + MEMORY_MARGIN
"""What a lowered limit or request holds over the resident memory it covers (VPA's 15%)."""
RAISE_AT = 1.0 / HEADROOM
"""Resident memory at this share of the limit has eaten the headroom the limit was sized
with (a limit is peak × :data:`HEADROOM`, rounded up): the job is past the peak it was
sized for, and growing jobs are raised here, before the monitor's next sample can kill it."""
HOLD_S = 2.0
"""Seconds in a stage (and since the last change) before a limit may go down: four samples
of the trial monitor (every 0.5 s), so a dip at a stage's start is not taken for its size."""
MIN_SAMPLES = 3
"""Resident samples the window must hold before a lower value is trusted."""


@dataclass(frozen=True)
class MemoryPolicy:
    """The knobs of the rules (tests shorten the hold; the defaults are the product's)."""

    hold_s: float = HOLD_S
    window_s: float = HOLD_S
    """The recent window whose largest resident sample a lowered value must cover."""
    min_samples: int = MIN_SAMPLES
    raise_at: float = RAISE_AT


DEFAULT_POLICY = MemoryPolicy()


def window_samples(rows: Sequence[dict[str, Any]], now_s: float,
                   window_s: float) -> list[float]:
    """Resident memory (GB) of the monitor's samples in the last ``window_s`` before
    ``now_s``, oldest first (read from the end: the trace only grows)."""
    out: list[float] = []
    for row in reversed(rows):
        if float(row.get("time_s", 0.0)) < now_s - window_s:
            break
        out.append(float(row["mem_gb"]))
    out.reverse()
    return out


def resident_floor(*levels: float | None) -> float | None:
    """The least a limit or request may be lowered to over the given resident levels (GB):
    the largest of them right-sized like a request from a peak (:func:`right_size_memory`).
    None when nothing was measured."""
    known = [float(x) for x in levels if x is not None and math.isfinite(float(x))]
    if not known:
        return None
    return right_size_memory(max(known))


def grow_to(current: float, resident: float, want: float | None = None,
            ceiling: float | None = None) -> float:
    """Where a limit goes when the job grows into it: resident × headroom, and at least VPA's
    out-of-memory bump of the limit (×1.2) so that a job still growing is not raised one
    sample at a time; never above ``ceiling`` (the largest allocation), never below
    ``current``."""
    new = max(right_size_memory(resident), round_up_memory(current * OOM_BUMP), want or 0.0)
    if ceiling is not None:
        new = min(new, max(ceiling, current))
    return max(new, current)


def memory_target(current: float | None, want: float | None, stage_peak: float | None,
                  window: Sequence[float], had_limit: bool, held_s: float, *,
                  ceiling: float | None = None,
                  policy: MemoryPolicy = DEFAULT_POLICY) -> tuple[float | None, str]:
    """The memory to hold now, and why.

    ``current`` is what is held (the limit, or a pod's request), ``want`` what the decider
    asks for the stage (None: no opinion), ``stage_peak`` the largest resident sample since
    the stage began, ``window`` the resident samples of the last ``policy.window_s``,
    ``had_limit`` whether the job started with one, ``held_s`` the seconds since the stage
    began or the last change (the later), ``ceiling`` the largest allocation's memory.
    """
    if not had_limit or current is None:
        return None, "the job started without a memory limit: none is introduced"
    recent = max(window) if window else None
    if recent is not None and recent >= policy.raise_at * current:
        new = grow_to(current, recent, want, ceiling)
        if new > current:
            return new, (f"resident {recent:.3f} GB is {recent / current:.0%} of the limit: "
                         f"raised at once to {new:.3f} GB")
        return current, f"resident {recent:.3f} GB near the limit, already the largest"
    if want is not None and want > current:
        new = want if ceiling is None else min(want, max(ceiling, current))
        if new > current:
            return new, "the stage needs more: raised at once"
    if want is None or want >= current:
        return current, "kept"
    if held_s < policy.hold_s:
        return current, (f"held: {held_s:.1f} s in the stage, lowered only after "
                         f"{policy.hold_s:g} s")
    if len(window) < policy.min_samples:
        return current, f"held: {len(window)} resident samples, lowered after {policy.min_samples}"
    peak = max(stage_peak or 0.0, recent or 0.0)
    new = max(want, resident_floor(peak) or 0.0)
    if new >= current:
        return current, f"kept: the stage's peak {peak:.3f} GB with headroom is not below it"
    if new > want:
        return new, f"lowered to the stage's peak {peak:.3f} GB with headroom ({new:.3f} GB)"
    return new, f"lowered to the stage's {want:.3f} GB (its peak {peak:.3f} GB fits with headroom)"


class MemoryGovernor:
    """The state :func:`memory_target` needs, kept across the controller's decisions: the
    stage and when it began, its resident peak so far, and the last change made."""

    def __init__(self, had_limit: bool, ceiling: float | None,
                 policy: MemoryPolicy = DEFAULT_POLICY) -> None:
        self.had_limit = had_limit
        self.ceiling = ceiling
        self.policy = policy
        self.stage: str | None = None
        self.stage_start = 0.0
        self.stage_peak: float | None = None
        self.last_change: float | None = None
        self._seen = 0
        """Samples of the trace already folded into ``stage_peak``."""

    def _fold(self, rows: Sequence[dict[str, Any]]) -> None:
        if len(rows) < self._seen:  # another trace: read it again
            self._seen = 0
        for row in rows[self._seen:]:
            if float(row.get("time_s", 0.0)) >= self.stage_start:
                mem = float(row["mem_gb"])
                self.stage_peak = mem if self.stage_peak is None else max(self.stage_peak, mem)
        self._seen = len(rows)

    def target(self, phase: str | None, want: float | None, rows: Sequence[dict[str, Any]],
               now_s: float, current: float | None) -> tuple[float | None, str]:
        """The memory to hold at ``now_s`` in ``phase`` (see :func:`memory_target`)."""
        if phase != self.stage:
            self.stage = phase
            self.stage_start = now_s
            self.stage_peak = None
        self._fold(rows)
        window = window_samples(rows, now_s, self.policy.window_s)
        since = self.stage_start
        if self.last_change is not None:
            since = max(since, self.last_change)
        new, why = memory_target(current, want, self.stage_peak, window, self.had_limit,
                                 now_s - since, ceiling=self.ceiling, policy=self.policy)
        if new is not None and new != current:
            self.last_change = now_s
        return new, why

    def near_limit(self, rows: Sequence[dict[str, Any]], current: float | None) -> bool:
        """True when the latest sample has eaten the headroom of ``current`` and a raise is
        still possible (the controller decides at once instead of at its interval)."""
        if not self.had_limit or current is None or not rows:
            return False
        if self.ceiling is not None and current >= self.ceiling:
            return False
        return float(rows[-1]["mem_gb"]) >= self.policy.raise_at * current


__all__ = ["DEFAULT_POLICY", "HEADROOM", "HOLD_S", "MIN_SAMPLES", "RAISE_AT", "MemoryGovernor",
           "MemoryPolicy", "grow_to", "memory_target", "resident_floor", "window_samples"]
