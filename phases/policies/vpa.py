"""``vpa``: the Kubernetes Vertical Pod Autoscaler recommender's scheme, replayed per cycle.

Holds the policy and its decaying exponential-bucket histogram (:func:`decaying_percentile`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from phases.policies.base import HistoryPolicy
from phases.policies.execution import Execution, History


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
