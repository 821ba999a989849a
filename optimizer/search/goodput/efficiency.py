"""Statistical efficiency measured on the user's own script.

Pollux's ``E(B) = (phi + B0) / (phi + B)`` (:mod:`envs.workload`) needs the gradient noise
scale ``phi``. From the probe's squared gradient norms (:mod:`optimizer.trials.probe`) the simple
noise scale ``B_simple = tr(Sigma) / |G|^2`` follows by the unbiased estimators of McCandlish et
al. 2018, "An Empirical Model of Large-Batch Training", appendix A.1 (``E|G_B|^2 = |G|^2 +
tr(Sigma) / B``). The probe's loss samples check that prior: the samples each batch size needed
to reach a loss the script's own batch also reached (:mod:`optimizer.search.goodput.common_loss`) replace
it wherever the curves give a value; the form fills in the batch sizes they do not. The loss
progress per sample (a slope over the samples the runs share) is what the report shows beside
them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import t as student_t
from scipy.stats import theilslopes

from optimizer.search.goodput.common_loss import pooled_ratio, samples_ratio
from optimizer.search.goodput.job_length import JobLength
from optimizer.trials.probe import EVENTS_FILE, ProbeRecord, read_probe
from optimizer.trials.records import TrialSummary, trial_files

LEVEL = 0.90  # coverage of every interval here
BOOTSTRAP, SEED = 1000, 0  # resamples, and a seed: the same records give the same interval
MIN_STEPS = 3  # gradient norms a batch size needs to enter the across-trial estimate
MIN_WINDOWS = 2  # one window would give no interval
SKIP_STEPS = 5  # the first steps move fastest and pay for warm-up: they would tilt a slope
MIN_LOSSES = 8
MAX_POINTS = 400  # beyond, losses are averaged in bins: smoother, and fewer Theil-Sen pairs

_Estimate = tuple[float, float, np.ndarray, np.ndarray, int, int]
"""``|G|^2``, ``tr(Sigma)``, their bootstrap replicates, the fewest units and the degrees of
freedom."""


@dataclass(frozen=True)
class NoiseScaleEstimate:
    """The gradient noise scale ``B_simple`` in samples, or ``why`` there is none: ``low`` and
    ``high`` bound a 90% interval from a seeded bootstrap over the steps and windows (``inf``:
    some resamples had no positive ``|G|^2``), ``pairs`` counts windows and pairs of batch
    sizes, ``source`` is ``windows`` (``B`` against ``k*B`` within trials), ``batches`` (single
    steps across trials) or both, ``grad_sq`` and ``trace`` estimate ``|G|^2``, ``tr(Sigma)``."""

    value: float | None = None
    low: float | None = None
    high: float | None = None
    pairs: int = 0
    source: str = ""
    why: str = ""
    grad_sq: float | None = None
    trace: float | None = None

    @property
    def ok(self) -> bool:
        return self.value is not None


@dataclass(frozen=True)
class Measured:
    """A measured value with its 90% interval; ``value`` is None, with ``why``, when it could
    not be measured (an efficiency: progress per sample relative to the reference batch)."""

    value: float | None = None
    low: float | None = None
    high: float | None = None
    why: str = ""


@dataclass(frozen=True)
class LossProgress(Measured):
    """Loss decrease per training sample (``value``, positive when the loss falls) over the
    samples ``span``, with its 90% interval, from ``points`` loss samples."""

    points: int = 0
    span: tuple[float, float] | None = None


@dataclass(frozen=True)
class TrialEfficiency:
    """Statistical efficiency at each measured batch size: ``prior`` from the noise scale,
    ``efficiency`` the value to use (empty: off), ``decided_by`` (``noise scale``, ``measured
    progress`` or ``nothing measured``) and a one-sentence ``note`` for the report."""

    ref_batch: int
    noise: NoiseScaleEstimate
    progress: dict[int, LossProgress] = field(default_factory=dict)
    measured: dict[int, Measured] = field(default_factory=dict)
    prior: dict[int, float] = field(default_factory=dict)
    efficiency: dict[int, float] = field(default_factory=dict)
    decided_by: str = "nothing measured"
    note: str = ""
    untried_batches: bool = False
    """The job trains (the probe saw its steps) but nothing measured how another batch trains:
    only the script's own batch may be recommended."""
    job: JobLength | None = None
    """The job's length knob (:class:`optimizer.search.goodput.job_length.JobLength`): how a
    batch's time and cost are judged, by a shorter job or by its whole job."""

    @property
    def on(self) -> bool:
        return bool(self.efficiency)

    def phi(self) -> float:
        """The noise scale the model and the agents use: the measured one where it decided,
        else the one whose ``(phi + B0) / (phi + B)`` best fits the efficiencies in use (in log
        space, over a grid from 1 to 10^9 samples); 0 (off) when nothing was measured."""
        if not self.on:
            return 0.0
        if self.decided_by == "noise scale" and self.noise.value:
            return float(self.noise.value)
        b = np.array([k for k in self.efficiency if k != self.ref_batch], dtype=float)
        e = np.array([self.efficiency[int(k)] for k in b], dtype=float)
        keep = e > 0
        if not keep.any():
            return float(self.noise.value or 0.0)
        grid = np.logspace(0, 9, 721)
        model = np.log((grid[:, None] + self.ref_batch) / (grid[:, None] + b[keep]))
        return float(grid[np.argmin(((model - np.log(e[keep])) ** 2).sum(axis=1))])

    def __call__(self, batch: Any) -> float:
        """Statistical efficiency at ``batch`` relative to the script's own (1 when off or the
        batch is unknown): the value in use where measured, else the noise-scale form."""
        if not self.on or batch is None or (isinstance(batch, float) and math.isnan(batch)):
            return 1.0
        if int(batch) in self.efficiency:
            return float(self.efficiency[int(batch)])
        phi = self.phi()

        def form(b: float) -> float:
            return 1.0 if phi <= 0 else (phi + self.ref_batch) / (phi + float(b))

        # Past the measured sizes, the form is scaled from the nearest measurement where that
        # one was corrected: a smaller batch whose loss progress fell short is not assumed to
        # recover further down (charlm: 0.4x measured at batch 8 against 3.5x predicted).
        edge = min(self.efficiency) if batch < min(self.efficiency) else \
            max(self.efficiency) if batch > max(self.efficiency) else None
        if edge is not None and edge in self.prior and \
                self.efficiency[edge] < self.prior[edge]:
            return self.efficiency[edge] * min(1.0, form(batch) / form(edge))
        return form(batch)

    def summary(self) -> dict[str, Any]:
        """JSON-ready figures for ``recommendation.json`` and the report."""
        n = self.noise
        return {"ref_batch": self.ref_batch, "decided_by": self.decided_by, "note": self.note,
                "noise_scale": {"value": n.value, "low": n.low, "high": n.high,
                                "source": n.source, "why": n.why},
                "phi_used": self.phi(), "efficiency": {str(b): v for b, v in
                                                       self.efficiency.items()},
                "progress_per_sample": {str(b): {"value": p.value, "low": p.low,
                                                 "high": p.high, "why": p.why}
                                        for b, p in self.progress.items()}}


def noise_scale(b_small: Any, sq_small: Any, b_big: Any, sq_big: Any) -> float:
    """``B_simple`` from pairs of squared gradient norms at a small and a big batch size.

    Parameters
    ----------
    b_small, b_big : float or array_like
        Batch sizes of each pair (``b_big > b_small``).
    sq_small, sq_big : float or array_like
        ``|G_Bsmall|^2`` and ``|G_Bbig|^2`` of each pair.

    Returns
    -------
    float
        ``mean(tr(Sigma)_i) / mean(|G|^2_i)`` (nan if not positive): the ratio of averages, as
        the paper advises, for each pair's own ratio is biased.
    """
    bs, ss, bb, sb = np.broadcast_arrays(*(np.asarray(x, dtype=float)
                                           for x in (b_small, sq_small, b_big, sq_big)))
    if np.any(bb <= bs):
        raise ValueError("every b_big must exceed its b_small")
    g2, tr = _two_point(1.0 / bs, ss, 1.0 / bb, sb)
    grad_sq, trace = float(np.mean(g2)), float(np.mean(tr))
    return trace / grad_sq if grad_sq > 0 else math.nan


def _two_point(u_s: Any, m_s: Any, u_b: Any, m_b: Any) -> tuple[Any, Any]:
    """``(|G|^2, tr(Sigma))`` solving ``m = |G|^2 + tr(Sigma) * u`` at two inverse batch sizes."""
    trace = (m_s - m_b) / (u_s - u_b)
    return m_b - trace * u_b, trace


def _gradients(records_by_batch: Mapping[int, Iterable[ProbeRecord]]
               ) -> tuple[np.ndarray, dict[int, np.ndarray]]:
    """Each window's own pair estimate ``(|G|^2, tr(Sigma))``, and per batch size the squared
    norms of single steps (a window's steps included: the reader lists them as such)."""
    pairs: list[tuple[float, float]] = []
    norms: dict[int, list[float]] = {}
    for key, records in records_by_batch.items():
        for rec in records:
            for ev in rec.windows:
                small, big = [float(v) for v in ev.get("small", [])], ev.get("big")
                sizes = {int(b or key) for b in ev.get("samples", [])[:len(small)]}
                # Steps of unequal sizes (an epoch's last batch) make the window's mean no
                # longer the gradient of k*B samples; its steps still count as single steps.
                if len(small) >= 2 and big is not None and len(sizes) == 1:
                    b, k = sizes.pop(), len(small)
                    pairs.append(_two_point(1 / b, float(np.mean(small)), 1 / (k * b), float(big)))
            for _, samples, value in rec.grads:
                norms.setdefault(int(samples or key), []).append(value)
    return np.array(pairs, dtype=float).reshape(-1, 2), {b: np.array(v) for b, v in norms.items()}


def _wls_line(u: np.ndarray, m: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Weighted fit of ``m = a + b*u`` (``m`` may lead with replicates): the paper's two points."""
    u_bar = (w * u).sum() / w.sum()
    m_bar = (m * w).sum(-1) / w.sum()
    slope = ((m - m_bar[..., None]) * (w * (u - u_bar))).sum(-1) / (w * (u - u_bar) ** 2).sum()
    return m_bar - slope * u_bar, slope


def estimate_noise_scale(records_by_batch: Mapping[int, Iterable[ProbeRecord]], *,
                         seed: int = SEED, n_boot: int = BOOTSTRAP) -> NoiseScaleEstimate:
    """The gradient noise scale from the probe records of one or more trials.

    Parameters
    ----------
    records_by_batch : mapping of int to iterable of ProbeRecord
        Records by their trial's batch size (for steps whose size the probe did not see).
    seed, n_boot : int
        Seed and number of resamples of the bootstrap.

    Returns
    -------
    NoiseScaleEstimate
        The ratio of ``tr(Sigma)`` to ``|G|^2``, each estimated (a) over the windows (``B`` to
        ``k*B``) and (b) by a weighted line through the mean single-step norm at each batch
        size, then mixed by inverse bootstrap variance.
    """
    windows, norms = _gradients(records_by_batch)
    if not norms:
        return NoiseScaleEstimate(why="no gradient norms recorded: no optimizer step seen")
    if not any(np.any(v > 0) for v in norms.values()):
        return NoiseScaleEstimate(why="gradients are all zero: nothing is being trained")
    rng = np.random.default_rng(seed)
    estimates: dict[str, _Estimate] = {}
    if len(windows) >= MIN_WINDOWS:
        reps = windows[rng.integers(0, len(windows), (n_boot, len(windows)))].mean(1)
        g_w, s_w = windows.mean(0)
        estimates["windows"] = (g_w, s_w, reps[:, 0], reps[:, 1], len(windows), len(windows) - 1)
    steady = sorted(b for b, v in norms.items() if len(v) >= MIN_STEPS)
    if len(steady) >= 2:
        n = np.array([len(norms[b]) for b in steady])
        mean, var = (np.array([f(norms[b]) for b in steady]) for f in (np.mean, np.var))
        # A mean's weight is its inverse variance; the floor keeps identical norms finite.
        w, inv_b = n / np.maximum(var, 1e-12 * mean**2 + 1e-300), 1.0 / np.array(steady, float)
        reps = np.stack([norms[b][rng.integers(0, len(norms[b]), (n_boot, len(norms[b])))].mean(1)
                         for b in steady], -1)
        (g0, s0), (g_r, s_r) = _wls_line(inv_b, mean, w), _wls_line(inv_b, reps, w)
        estimates["batches"] = (float(g0), float(s0), g_r, s_r, int(n.min()), int(n.sum()) - len(n))
    if not estimates:
        return NoiseScaleEstimate(why="nothing to pair: one batch size and under two windows")
    grad_sq, trace, g_r, s_r, n_min, df = _combine(list(estimates.values()))
    pairs = len(windows) * ("windows" in estimates) + math.comb(len(steady), 2) * (
        "batches" in estimates)
    est = NoiseScaleEstimate(pairs=pairs, source="+".join(estimates), grad_sq=grad_sq, trace=trace)
    if grad_sq <= 0:
        return replace(est, why="|G|^2 estimate not positive: gradient noise dominates")
    if trace <= 0:
        return replace(est, why="tr(Sigma) estimate not positive: no measurable gradient noise")
    # Percentiles of a few resampled windows stay within the range they span, far too narrow:
    # a t interval on log B from the bootstrap's standard error, with the n/(n-1) correction
    # of a bootstrap variance. A resample without a positive |G|^2 means noise dominates.
    spread = math.sqrt(n_min / (n_min - 1)) * float(student_t.ppf((1 + LEVEL) / 2, df))
    ratio = np.where(g_r > 0, s_r / np.where(g_r > 0, g_r, 1), np.inf)
    positive, value = ratio[np.isfinite(ratio) & (ratio > 0)], trace / grad_sq
    se = float(np.std(np.log(positive))) if len(positive) > 1 else math.inf
    unbounded = np.mean(np.isinf(ratio)) > (1 - LEVEL) / 2
    return replace(est, value=value, low=value * math.exp(-spread * se),
                   high=math.inf if unbounded else value * math.exp(spread * se))


def _combine(parts: Sequence[_Estimate]) -> _Estimate:
    """Both estimates of ``|G|^2`` (and of ``tr(Sigma)``) are unbiased, so any fixed mixture
    is too: inverse bootstrap variances favour the less noisy one, whose sample sizes then set
    the interval's t."""
    w = [1.0 / np.maximum([np.var(p[i + 2]) for p in parts], 1e-300) for i in (0, 1)]
    g, s = ([sum(wi / w[i].sum() * p[j] for wi, p in zip(w[i], parts, strict=True))
             for j in (i, i + 2)] for i in (0, 1))
    n_min, df = parts[int(np.argmax(w[0]))][4:]
    return float(g[0]), float(s[0]), g[1], s[1], n_min, df


def loss_points(record: ProbeRecord, batch: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(samples processed before the step, loss)`` after the first :data:`SKIP_STEPS` steps,
    from the probe's step counts (else ``batch`` per step); empty when they cannot be placed."""
    rows = [(s, v) for s, _, v in record.losses if s > SKIP_STEPS and math.isfinite(v)]
    per_step, p = batch or record.samples_per_step, record.step_points
    counted = len(p) > 0 and p[-1, 2] > 0
    if not rows or not (per_step or counted):
        return np.zeros(0), np.zeros(0)
    steps, values = (np.array(c, dtype=float) for c in zip(*rows, strict=True))
    if counted:
        return np.interp(steps - 1, np.r_[0.0, p[:, 1]], np.r_[0.0, p[:, 2]]), values
    return (steps - 1) * float(per_step or 0), values


def loss_progress(record: ProbeRecord, *, batch: int | None = None,
                  within: tuple[float, float] | None = None) -> LossProgress:
    """Loss decrease per training sample over the steady part of a run.

    Parameters
    ----------
    record : ProbeRecord
    batch : int, optional
        Samples per step when the probe saw none.
    within : (float, float), optional
        Only these samples: trials are compared over the same stretch of training, since
        progress slows as training goes on.

    Returns
    -------
    LossProgress
        Minus the Theil-Sen slope of the loss on samples processed (robust to the noise of
        single-batch losses and to outliers), with Sen's 90% interval.
    """
    if not record.losses:
        return LossProgress(why="no loss recorded: never a backward() on a scalar loss")
    x, y = loss_points(record, batch)
    keep = (x >= within[0]) & (x <= within[1]) if within else np.ones(len(x), dtype=bool)
    x, y = x[keep], y[keep]
    if len(x) < MIN_LOSSES or np.ptp(x) <= 0:
        return LossProgress(points=len(x), why=f"too few loss samples: {len(x)} of {MIN_LOSSES}")
    span = (float(x.min()), float(x.max()))
    if np.ptp(y) == 0:
        return LossProgress(0.0, 0.0, 0.0, points=len(x), span=span,
                            why="the loss did not change")
    if len(x) > MAX_POINTS:  # x is in step order
        x, y = (np.array([c.mean() for c in np.array_split(a, MAX_POINTS)]) for a in (x, y))
    slope, _, lo, hi = theilslopes(y, x, alpha=LEVEL)
    return LossProgress(-float(slope), -float(hi), -float(lo), points=len(x), span=span)


def common_loss_efficiency(records: Mapping[int, ProbeRecord], ref_batch: int
                           ) -> dict[int, Measured]:
    """Each batch size's samples to a common loss relative to ``ref_batch``'s
    (:func:`optimizer.search.goodput.common_loss.samples_ratio`), from one record per batch size.

    Returns
    -------
    dict of int to Measured
        The ratios with their 90% intervals; undefined (and why) where a curve is missing or
        too short, or the loss did not measurably fall at ``ref_batch``.
    """
    ref = records.get(ref_batch)
    out: dict[int, Measured] = {}
    for b, rec in sorted(records.items()):
        if ref is None:
            out[b] = Measured(why=f"the reference batch {ref_batch} was not measured")
        elif not ref.losses:
            out[b] = Measured(why=f"at the reference batch {ref_batch}, no loss recorded: "
                              "never a backward() on a scalar loss")
        elif b == ref_batch:
            out[b] = Measured(1.0, 1.0, 1.0)
        elif not rec.losses:
            out[b] = Measured(why="no loss recorded: never a backward() on a scalar loss")
        else:
            value, low, high, why = samples_ratio(loss_points(ref, ref_batch),
                                                  loss_points(rec, b))
            out[b] = Measured(value, low, high, why if value is None else "")
    return out


def probe_records(trials: Iterable[TrialSummary], run_dir: str | Path
                  ) -> dict[int, list[ProbeRecord]]:
    """The probe records of a run's usable trials by the batch size they ran at (the probe's
    samples per step, else the allocation's): ``run_dir/trials/<trial_id>/probe.jsonl``."""
    out: dict[int, list[ProbeRecord]] = {}
    for t in trials:
        rec = read_probe(trial_files(run_dir, t) / EVENTS_FILE) if t.ok else None
        batch = rec and (rec.global_batch or t.allocation.global_batch)
        if rec is not None and batch:
            out.setdefault(int(batch), []).append(rec)
    return out


def best_records(records: Mapping[int, list[ProbeRecord]]) -> dict[int, ProbeRecord]:
    """Each batch size's record with the most loss samples."""
    return {b: max(recs, key=lambda r: len(r.losses)) for b, recs in records.items()}


def progress_over_shared_samples(best: Mapping[int, ProbeRecord]) -> dict[int, LossProgress]:
    """Each batch's loss progress per sample (the report's figure), over the stretch of samples
    all runs with losses share when it holds enough of each."""
    xs = [x for x in (loss_points(r, b)[0] for b, r in best.items()) if len(x)]
    within = (max(x.min() for x in xs), min(x.max() for x in xs)) if xs else (0.0, 0.0)
    aligned = len(xs) > 1 and all(((x >= within[0]) & (x <= within[1])).sum() >= MIN_LOSSES
                                  for x in xs)
    return {b: loss_progress(r, batch=b, within=within if aligned else None)
            for b, r in best.items()}


def bounded_by_batch(b: int, ref_batch: int, m: Measured) -> Measured:
    """``m`` within what batch size alone can do at a fixed learning rate: a larger batch
    needs at most as many steps as the script's (efficiency at least ``B0/B``) and is not
    taken to need fewer samples (at most 1: a larger batch's edge at the script's rate is not
    assumed from one pair of noisy curves); a smaller batch needs at least as many steps (at
    most ``B0/B``) and may train worse at the script's rate (down to 0). A value just outside
    is clipped; one whose whole interval lies well outside is no batch-size effect (the
    curves compare something else, such as a warm-up against a steady stretch) and is set
    aside, saying so."""
    if m.value is None or b == ref_batch:
        return m
    lo, hi = (ref_batch / b, 1.0) if b > ref_batch else (0.0, ref_batch / b)
    low, high = (m.low if m.low is not None else m.value), (
        m.high if m.high is not None else m.value)
    if low > hi * 1.1 or high < lo * 0.9:
        span = f"{lo:.2f}x to {hi:.2f}x"
        return Measured(why=f"the samples to a common loss at batch {b} ({m.value:.2f}x the "
                        f"script's) are outside what batch size alone can do ({span})")
    value, low, high = (min(hi, max(lo, float(v))) for v in (m.value, low, high))
    return replace(m, value=value, low=low, high=high)


def efficiency_from_trials(trials: Iterable[TrialSummary], run_dir: str | Path,
                           ref_batch: int, trained: Mapping[int, Sequence[ProbeRecord]]
                           | None = None) -> TrialEfficiency:
    """Statistical efficiency of a run's script at the batch sizes its trials measured.

    Parameters
    ----------
    trials : iterable of TrialSummary
        The run's trials; failed ones and those without a probe file are skipped.
    run_dir : str or Path
    ref_batch : int
        ``B0``, the batch size at which the job's work is counted (the script's own).
    trained : mapping of int to ProbeRecord sequences, optional
        The records at each batch whose probe trained on to the own batch's loss; where a
        batch has two or more, its efficiency is pooled over them (:func:`pooled_ratio`).

    Returns
    -------
    TrialEfficiency
        The prior ``(phi + B0) / (phi + B)`` at each measured batch size, replaced by the
        measured samples to a common loss wherever the curves give one.
    """
    records = probe_records(trials, run_dir)
    noise = estimate_noise_scale(records) if records else NoiseScaleEstimate(why="no probe records")
    best = best_records(records)
    progress = progress_over_shared_samples(best)
    measured = common_loss_efficiency(best, ref_batch)
    ref = best.get(ref_batch)
    for b, recs in (trained or {}).items():
        if b != ref_batch and len(recs) > 1 and ref is not None and ref.losses:
            value, low, high = pooled_ratio([samples_ratio(loss_points(ref, ref_batch),
                                                           loss_points(r, b))[:3] for r in recs])
            if value is not None:
                measured[b] = Measured(value, low, high)
    measured = {b: bounded_by_batch(b, ref_batch, m) for b, m in measured.items()}
    phi = noise.value
    prior = {b: (phi + ref_batch) / (phi + b) for b in sorted(records)} if phi is not None else {}
    # Where the curves give a value, it decides, even inside an interval that holds the prior:
    # against whole runs the form's own error is the larger (benchmarks/efficiency_truth.py,
    # 30 batches of six scripts: median error 14% for the form alone, 11% when it decided
    # unless the curves' interval excluded it, 8.5% for the curves wherever they had a value).
    # The noise scale, measured early in training, misses what the script's learning rate
    # does later (mem_heavy.py's batch 2048: 0.76 by the form, 0.89 by whole runs).
    corrected = [b for b, m in measured.items() if b != ref_batch and m.value is not None]
    efficiency = {**prior, **{b: float(measured[b].value or 0) for b in corrected}}
    efficiency |= {ref_batch: 1.0} if efficiency else {}  # by definition: work counted at B0
    decided_by = ("measured progress" if corrected else "noise scale" if noise.ok
                  else "nothing measured")
    return TrialEfficiency(ref_batch, noise, progress, measured, prior,
                           dict(sorted(efficiency.items())), decided_by,
                           _note(decided_by, noise, measured, corrected, prior))


def _note(decided_by: str, noise: NoiseScaleEstimate, measured: Mapping[int, Measured],
          corrected: Sequence[int], prior: Mapping[int, float]) -> str:
    why_not = next((m.why for m in measured.values() if m.why), "one batch size measured")
    if decided_by == "nothing measured":
        return (f"Statistical efficiency is off (1 at every batch size): no noise scale "
                f"({noise.why}) and no loss curves to compare ({why_not}).")
    if decided_by == "noise scale":
        return (f"Statistical efficiency follows the gradient noise scale measured on the script,"
                f" about {noise.value:,.0f} samples (90% interval {noise.low:,.0f} to "
                f"{noise.high:,.0f}), unchecked by the loss curves ({why_not}).")
    shown = ", ".join(f"{measured[b].value:.2f} at batch {b}" + (
        f" (the noise scale predicts {prior[b]:.2f})" if prior else "") for b in corrected)
    return (f"Statistical efficiency comes from the samples each batch size needed to reach "
            f"the lowest loss both it and the script's own batch size reached: {shown}"
            + ("." if prior else f"; no noise scale ({noise.why})."))
