"""Statistical efficiency as samples to a common loss: what two batch sizes needed to train as far.

Pollux's statistical efficiency is a ratio of samples to the same training progress. Every trial
runs the user's script from its start, so two trials' loss curves can be compared where both
got: the lowest (smoothed) loss both reached. The samples the script's own batch needed to get
there, over the samples the other batch needed, is that batch's efficiency.

Comparing slopes over the same stretch of samples, as :func:`efficiency.loss_progress` does for
the report, under-rates the more efficient batch: at the same sample count it is further down a
flattening curve, where the loss falls more slowly. On cnn (benchmarks/README.md, issue 39) the
slopes read 0.80x at batch 32 where reaching the default's loss took 1.44x fewer samples.

The curves are exponential moving averages over training samples (decay ``SMOOTH_SHARE`` of the
shorter run), each crossing corrected for the average's lag on a straight descent; a curve that
bends within one decay length still reads nearer 1 than it is (1.39 for 1.5 in the tests), so
the estimate errs towards the script's own batch. The 90% interval resamples the losses' scatter
around a local straight-line trend: a seeded bootstrap over the single-batch noise, not over
what differs between runs of the same setting. ``benchmarks/efficiency_truth.py`` checks it
against whole runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

SMOOTH_SHARE = 0.1  # decay length of the smoothing, as a share of the shorter run's samples
MIN_POINTS = 8  # losses a curve needs
MAX_POINTS = 400  # beyond, losses are averaged in bins: the bootstrap loops over points
FALL_SIGMAS = 6.0  # a fall smaller than this many standard errors of the smoothed loss is noise
LEVEL, BOOTSTRAP, SEED = 0.90, 200, 0


def _binned(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if len(x) <= MAX_POINTS:
        return x, y
    return tuple(np.array([c.mean() for c in np.array_split(a, MAX_POINTS)]) for a in (x, y))


def _ema(x: np.ndarray, y: np.ndarray, tau: float) -> np.ndarray:
    """Moving average over samples along the last axis of ``y`` (rows: resamples); a loss
    ``tau`` samples back weighs ``1/e`` of the latest, whatever the points' spacing."""
    keep = np.exp(-np.maximum(np.diff(x), 0.0) / tau)
    out = np.empty_like(y)
    out[..., 0] = y[..., 0]
    for i, k in enumerate(keep, start=1):
        out[..., i] = k * out[..., i - 1] + (1.0 - k) * y[..., i]
    return out


def _trend(x: np.ndarray, y: np.ndarray, tau: float) -> np.ndarray:
    """Local straight-line fit over ``x ± tau``: the curve without lag, around which the noise
    scatters (a line, not a mean, so that the ends, where the window is one-sided, do not lag)."""
    xc = x - x.mean()
    sums = [np.r_[0.0, np.cumsum(v)] for v in (np.ones_like(xc), xc, xc * xc, y, xc * y)]
    lo, hi = np.searchsorted(x, x - tau, "left"), np.searchsorted(x, x + tau, "right")
    n, sx, sxx, sy, sxy = (c[hi] - c[lo] for c in sums)
    var = n * sxx - sx * sx
    slope = np.where(var > 1e-12 * np.maximum(n * sxx, 1e-300), (n * sxy - sx * sy) /
                     np.where(var > 0, var, 1.0), 0.0)
    return (sy - slope * sx) / n + slope * xc


def _crossings(x: np.ndarray, s: np.ndarray, level: np.ndarray, tau: float) -> np.ndarray:
    """Samples at which each row of ``s`` first falls to its ``level`` (past one decay length,
    interpolated, less the average's lag on a straight descent); ``inf`` where it never does."""
    ready = x - x[0] >= tau
    below = ready & (s <= level[:, None])
    hit = below.any(axis=1)
    i = np.where(hit, below.argmax(axis=1), 0)
    rows = np.arange(len(s))
    prev = np.maximum(i - 1, 0)
    s_i, s_p = s[rows, i], s[rows, prev]
    between = hit & (i > 0) & ready[prev] & (s_p > level)
    share = np.where(between, (s_p - level) / np.where(s_p > s_i, s_p - s_i, 1.0), 0.0)
    n = np.where(between, x[prev] + share * (x[i] - x[prev]), x[i])
    # Below the level from the first counted point on, the crossing lies before it: that point
    # bounds it (no lag to take off a crossing not seen).
    n = np.where(between, n - tau * (1.0 - np.exp(-(n - x[0]) / tau)), n)
    return np.where(hit, n, np.inf)


def _noise(y: np.ndarray, trend: np.ndarray, x: np.ndarray, tau: float) -> float:
    """Standard error of the smoothed loss: the scatter shrunk by the points a decay spans."""
    spread = float(np.std(y - trend))
    per_point = float(np.mean(np.diff(x))) if len(x) > 1 else tau
    return spread * math.sqrt(min(1.0, per_point / (2.0 * tau)))


def end_reached(xs: Sequence[float], ys: Sequence[float]
                ) -> tuple[float, float, float] | None:
    """The smoothed loss at the end of one run (``(samples, loss)`` in step order), the decay
    length (``SMOOTH_SHARE`` of the run's samples), and the samples the run needed to first
    reach it: what a probe of another batch must train to
    (:class:`optimizer.trials.probe.loss_target.LossTarget`). None when the loss did not
    measurably fall or the run is too short.

    The end, not the lowest: the lowest of a noisy smoothed curve lies below where the run got
    by about the smoothing's noise, and other batches' probes, held to it, stop short of a
    level the script's own batch only touched (``benchmarks/efficiency_truth.py``: with the
    lowest, mem_heavy.py's batches 1024 and 2048 were capped at 0.63 where whole runs say 0.99
    and 0.89). It is also what the loss ruler judges by: the loss a job ends at."""
    x, y = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if len(x) < MIN_POINTS or np.ptp(x) <= 0:
        return None
    x, y = _binned(x, y)
    tau = SMOOTH_SHARE * float(np.ptp(x))
    s = _ema(x, y[None, :], tau)
    ready = x - x[0] >= tau
    if ready.sum() < 2:
        return None
    if s[0, ready][0] - float(s[0, ready].min()) <= FALL_SIGMAS * _noise(y, _trend(x, y, tau),
                                                                        x, tau):
        return None
    end = float(s[0, -1])
    need = float(_crossings(x, s, np.array([end]), tau)[0])
    return end, tau, need


def samples_ratio(ref: tuple[Sequence[float], Sequence[float]],
                  other: tuple[Sequence[float], Sequence[float]], *,
                  n_boot: int = BOOTSTRAP, seed: int = SEED
                  ) -> tuple[float | None, float | None, float | None, str]:
    """Efficiency of ``other`` relative to ``ref``, each ``(samples processed, loss)`` of one run
    in step order: the samples ``ref`` needed to reach the lowest smoothed loss both reached
    over those ``other`` needed.

    Returns
    -------
    (value, low, high, why)
        The ratio with its 90% interval, or ``None`` values and why there is none. ``value``
        is 0 when the loss measurably fell at the reference batch but not at the other.
    """
    curves = []
    for xs, ys in (ref, other):
        x, y = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
        keep = np.isfinite(x) & np.isfinite(y)
        x, y = x[keep], y[keep]
        if len(x) < MIN_POINTS or np.ptp(x) <= 0:
            return None, None, None, f"too few loss samples: {len(x)} of {MIN_POINTS}"
        curves.append(_binned(x, y))
    tau = SMOOTH_SHARE * min(np.ptp(x) for x, _ in curves)
    trends = [_trend(x, y, tau) for x, y in curves]
    rng = np.random.default_rng(seed)
    rows = []
    for (x, y), t in zip(curves, trends, strict=True):
        resid = y - t
        boot = t + resid[rng.integers(0, len(y), (n_boot, len(y)))]
        rows.append(_ema(x, np.vstack([y, boot]), tau))
    ready = [x - x[0] >= tau for x, _ in curves]
    if not all(r.sum() >= 2 for r in ready):
        return None, None, None, "too few loss samples past the first decay length"
    lows = [s[:, r].min(axis=1) for s, r in zip(rows, ready, strict=True)]
    falls = [s[0, r][0] - lo[0] for s, r, lo in zip(rows, ready, lows, strict=True)]
    fell = [f > FALL_SIGMAS * _noise(y, t, x, tau)
            for f, (x, y), t in zip(falls, curves, trends, strict=True)]
    if not fell[0]:
        return None, None, None, "the loss did not measurably fall at the reference batch"
    if not fell[1]:
        return 0.0, 0.0, 0.0, "the loss did not measurably fall at this batch"
    level = np.maximum(lows[0], lows[1])
    if any(s[0, r][0] <= level[0] and x[0] > tau
           for s, r, (x, _) in zip(rows, ready, curves, strict=True)):
        # A curve whose losses begin later in training, already below the common loss: where
        # it crossed was not seen, and not near its start either.
        return None, None, None, "the runs covered different stretches of training"
    need = [_crossings(x, s, level, tau) for (x, _), s in zip(curves, rows, strict=True)]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = need[0] / need[1]
    value, boot = float(ratio[0]), ratio[1:]
    if not math.isfinite(value) or value <= 0:
        return None, None, None, "the runs' losses never met at a common level"
    boot = boot[np.isfinite(boot) & (boot > 0)]
    if not len(boot):
        return value, value, value, ""
    low, high = _basic_interval(value, boot)
    return value, low, high, ""


def _basic_interval(value: float, boot: np.ndarray) -> tuple[float, float]:
    """The basic bootstrap interval (the resamples' spread reflected about the estimate): the
    lowest loss of noisy curves is biased low, and the resamples carry that bias twice."""
    q = np.quantile(np.log(boot), [(1 - LEVEL) / 2, (1 + LEVEL) / 2])
    low, high = value * math.exp(math.log(value) - q[1]), value * math.exp(math.log(value) - q[0])
    return float(min(low, value)), float(max(high, value))


Z90 = 1.6449  # the normal quantile of a two-sided 90% interval
MIN_SPREAD = 0.05  # log-space standard error given to a ratio whose interval is a point


def pooled_ratio(parts: Sequence[tuple[float | None, float | None, float | None]]
                 ) -> tuple[float | None, float | None, float | None]:
    """One efficiency from several curves at the same batch size, each ``(value, low,
    high)`` of :func:`samples_ratio` against the same reference curve: the inverse-variance
    mean in log space, each standard error read off its 90% interval.

    One curve's ratio scatters more than its bootstrap says (tab's batch 16, three probes of
    one setting: 1.09, 1.53 and 1.80), since the interval resamples one run's noise around its
    own trend, not what differs between runs; pooling runs is what narrows it. The curves
    share the reference, so the pooled interval is narrower than it should be by that much.
    Undefined parts (None or 0) are left out; none left: ``(None, None, None)``."""
    logs, weights = [], []
    for value, low, high in parts:
        if not value or value <= 0:
            continue
        lo, hi = (low if low and low > 0 else value), (high if high and high > 0 else value)
        se = max((math.log(hi) - math.log(lo)) / (2 * Z90), MIN_SPREAD)
        logs.append(math.log(value))
        weights.append(1.0 / se ** 2)
    if not logs:
        return None, None, None
    if len(logs) == 1:
        return next(p for p in parts if p[0] and p[0] > 0)
    w = np.asarray(weights)
    mean = float(np.dot(w, logs) / w.sum())
    se = 1.0 / math.sqrt(float(w.sum()))
    return math.exp(mean), math.exp(mean - Z90 * se), math.exp(mean + Z90 * se)
