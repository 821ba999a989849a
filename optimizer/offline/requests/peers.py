"""What the tools teams use today would request from the same history: Robusta KRR's
``simple`` strategy and the Kubernetes VPA recommender, written from their documented rules.

KRR ``simple`` (robusta-dev/krr, ``strategies/simple.py``; defaults as of 2025)
    CPU request = the largest over pods of each pod's 95th percentile of CPU usage, no CPU
    limit; memory request = limit = the largest pod peak + 15 %; no recommendation with fewer
    than 100 data points; history: the last 336 hours. KRR reads Prometheus at a 1.25-minute
    step; here every sample of the series counts as a point.

VPA recommender (kubernetes/autoscaler, ``pkg/recommender``; flag defaults)
    Decaying histograms, half-life 24 h, exponential buckets growing 5 % (CPU from 0.01 cores,
    memory from 10 MB). CPU: every usage sample, weighted by the container's CPU request
    (at least 0.1 cores; here the run's ``cpus`` param, else 1). Memory: one sample per
    container and 24-hour interval, its peak. Target = the 90th percentile (the end of its
    bucket) + 15 % safety margin; at least 25 millicores and 250 MiB. Runs without start times
    are laid end to end in their order, so the decay sees them as consecutive.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from optimizer.history import HistoryRun
from optimizer.offline.requests.request import Request, run_use, undefined

DAY_S = 24 * 3600.0
MIB_GB = 1.0 / 1024.0


def _with_usage(runs: Sequence[HistoryRun]) -> list[HistoryRun]:
    return [r for r in runs if r.usage is not None and len(r.usage) > 0]


def _hours(runs: Sequence[HistoryRun]) -> float:
    return float(sum(u.hours for r in runs if (u := run_use(r)) is not None))


def _starts(runs: Sequence[HistoryRun]) -> list[float]:
    """Start of each run in seconds: its own where every run has one, else end to end."""
    if all(r.started_at is not None for r in runs):
        return [float(r.started_at) for r in runs]
    starts, clock = [], 0.0
    for r in runs:
        starts.append(clock)
        clock += float(r.usage.time_s[-1]) if r.usage is not None and len(r.usage) else 0.0
    return starts


def krr_simple(runs: Sequence[HistoryRun], *, cpu_percentile: float = 95.0,
               memory_buffer: float = 0.15, points_required: int = 100,
               history_hours: float = 336.0) -> Request:
    """KRR's ``simple`` strategy over the runs' usage series (see the module docstring)."""
    runs = _with_usage(runs)
    if runs and all(r.started_at is not None for r in runs):
        latest = max(r.started_at + float(r.usage.time_s[-1]) for r in runs)
        runs = [r for r in runs
                if r.started_at + float(r.usage.time_s[-1]) >= latest - history_hours * 3600]
    points = sum(len(r.usage) for r in runs)
    hours = _hours(runs)
    if not runs:
        return undefined("krr-simple", 0, 0.0, "no usage series")
    if points < max(points_required, 1):
        return undefined("krr-simple", len(runs), hours,
                         f"not enough data ({points} points < {points_required})")
    cpu = max(float(np.percentile(r.usage.cpu_cores, cpu_percentile)) for r in runs)
    mem = max(r.usage.peak_mem_gb() for r in runs) * (1 + memory_buffer)
    return Request("krr-simple", cpu, None, mem, mem, len(runs), hours)


class DecayingHistogram:
    """VPA's histogram: exponential buckets, sample weights that double every half-life.

    Bucket ``b`` starts at ``first * (ratio**b - 1) / (ratio - 1)``; a percentile is the end of
    the bucket where the cumulative weight reaches it. Weights are kept relative to the first
    sample's time (growing with later samples is the same as decaying the earlier ones).
    """

    def __init__(self, first_bucket: float, *, ratio: float = 1.05,
                 half_life_s: float = DAY_S) -> None:
        self.first_bucket = first_bucket
        self.ratio = ratio
        self.half_life_s = half_life_s
        self._weights: dict[int, float] = {}
        self._t0: float | None = None

    def _bucket(self, value: float) -> int:
        scaled = max(value, 0.0) * (self.ratio - 1) / self.first_bucket + 1
        return int(math.floor(math.log(scaled) / math.log(self.ratio)))

    def _start(self, bucket: int) -> float:
        return self.first_bucket * (self.ratio**bucket - 1) / (self.ratio - 1)

    def add(self, values: np.ndarray, weight: float, times_s: np.ndarray) -> None:
        if self._t0 is None and len(times_s):
            self._t0 = float(times_s[0])
        for v, t in zip(np.asarray(values, float), np.asarray(times_s, float), strict=True):
            b = self._bucket(v)
            w = weight * 2.0 ** ((t - self._t0) / self.half_life_s)
            self._weights[b] = self._weights.get(b, 0.0) + w

    def percentile(self, q: float) -> float:
        if not self._weights:
            return math.nan
        buckets = sorted(self._weights)
        cum = np.cumsum([self._weights[b] for b in buckets])
        i = int(np.searchsorted(cum, q * cum[-1]))
        return self._start(buckets[min(i, len(buckets) - 1)] + 1)


def _interval_peaks(run: HistoryRun, start: float, interval_s: float) -> tuple[list, list]:
    t = run.usage.time_s
    window = np.floor((t - t[0]) / interval_s).astype(int)
    peaks, times = [], []
    for w in np.unique(window):
        m = window == w
        peaks.append(float(run.usage.mem_gb[m].max()))
        times.append(start + float(t[m][-1]))
    return peaks, times


def vpa_style(runs: Sequence[HistoryRun], *, target_percentile: float = 0.9,
              margin: float = 0.15, half_life_s: float = DAY_S,
              memory_interval_s: float = DAY_S, min_cpu: float = 0.025,
              min_mem_gb: float = 250 * MIB_GB) -> Request:
    """The VPA recommender's target over the runs' usage series (see the module docstring)."""
    runs = _with_usage(runs)
    hours = _hours(runs)
    if not runs:
        return undefined("vpa-style", 0, 0.0, "no usage series")
    cpu_hist = DecayingHistogram(0.01, half_life_s=half_life_s)
    mem_hist = DecayingHistogram(1e7 / 2**30, half_life_s=half_life_s)
    for run, start in zip(runs, _starts(runs), strict=True):
        weight = max(float(run.params.get("cpus", 1.0)), 0.1)
        cpu_hist.add(run.usage.cpu_cores, weight, start + run.usage.time_s)
        peaks, times = _interval_peaks(run, start, memory_interval_s)
        mem_hist.add(np.array(peaks), 1.0, np.array(times))
    cpu = max(cpu_hist.percentile(target_percentile) * (1 + margin), min_cpu)
    mem = max(mem_hist.percentile(target_percentile) * (1 + margin), min_mem_gb)
    return Request("vpa-style", cpu, None, mem, None, len(runs), hours)
