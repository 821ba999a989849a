"""cloudopt's requests for a training job's next run: fitted to the run's configuration.

KRR and the VPA see a job as one series: the next run gets the past's peak (or a percentile),
whatever it is configured to do. A training job's memory grows with its data held in memory,
its batch and its model's width; its CPU with the threads it is given. So the peak memory and
the CPU at the p95 of every earlier run are fitted against the run's configuration (a
log-linear model per job, slopes shared across jobs: :class:`~optimizer.offline.loglinear.
GroupedLogLinear`; CPU starts from a slope of 1 in the threads, :data:`PRIORS`), and the next
run's request is the model's **upper prediction bound** at its own configuration, at 95 %:

- the bound adds the split-conformal quantile of the held-out residuals of every job's runs
  (each run predicted from the other runs; :func:`~optimizer.offline.loglinear.
  held_out_residuals`), each divided by its job's residual scale and the quantile multiplied
  by the next run's job's (:func:`~optimizer.offline.loglinear.group_scales`): as wide as the
  history's own misses, and as wide for a steady job as its steadiness allows (the pooled width
  at least, where the next run's configuration leaves the range of the job's past); with fewer
  residuals than the level needs (19 at 95 %), a Student-t bound on their spread; with fewer
  than three, or a job with one run, the largest peak + 15 % (KRR's rule; CPU: the p95 per
  thread times the next run's threads + 15 %), said in the note;
- memory limit: the bound with the largest (normalised) residual seen, at least the request
  (an OOM kill costs a training job its progress); no CPU limit (a throttled job is slower).
- per stage (``load``, ``train``, ``eval``... where the source labels them): the same fit on
  each stage's peak and p95, for a plan that resizes the pod between stages.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from scipy import stats

from optimizer.history import HistoryRun
from optimizer.offline.loglinear import (
    GroupedLogLinear,
    conformal_quantile,
    group_scales,
    held_out_residuals,
)
from optimizer.offline.requests.request import Request, RunUse, run_use, undefined

FEATURES = ("dataset_size", "batch_size", "width", "params", "cpus", "workers")
"""Configuration the requests are fitted on, as ``ln`` of the run's params."""
PRIORS = {"peak_mem_gb": {}, "cpu_p95": {"cpus": 1.0}}
"""Slopes a quantity's fit starts from before the history speaks: CPU in use grows as the
threads a run is given (a slope of 1 in ``ln cpus``); nothing is assumed of memory."""
POOLED_RIDGE = 0.1
"""Weak: ten runs spread over a doubling of a setting outweigh the prior."""
LEVEL = 0.95
MARGIN = 0.15
"""Margin of a request that rests on too few runs to fit: KRR's memory buffer, the VPA's
safety margin."""


def config_features(params: Sequence[Mapping[str, float]]) -> np.ndarray:
    """``ln`` of :data:`FEATURES` per run (n_runs, n_features); NaN where a run lacks one."""
    x = np.full((len(params), len(FEATURES)), np.nan)
    for i, p in enumerate(params):
        for j, name in enumerate(FEATURES):
            v = float(p.get(name, math.nan))
            if v > 0:
                x[i, j] = math.log(v)
    return x


def _bound(residuals: np.ndarray, groups: np.ndarray, job: str, level: float,
           inside: bool) -> tuple[float, float, str]:
    """(log bound at ``level``, log bound at the worst normalised residual, how) for ``job``;
    ``inside``: the next run's configuration lies within the job's past ones."""
    scales, pooled = group_scales(residuals, groups)
    scale = scales.get(job, pooled)
    if not inside:
        # Outside its past, a job's steadiness says nothing of the slope it is moved along.
        scale = max(scale, pooled)
    scale = max(scale, 1e-3)
    z = residuals / np.maximum(np.array([scales[g] for g in groups]), 1e-3)
    n = len(z)
    q = conformal_quantile(z, level)
    how = f"conformal {level:.0%} bound over {n} held-out runs"
    if not math.isfinite(q):
        q = float(stats.t.ppf(level, n - 1)) * math.sqrt(np.mean(z**2)) * math.sqrt(1 + 1 / n)
        how = f"Student-t {level:.0%} bound over {n} held-out runs"
    return q * scale, max(q, float(z.max())) * scale, how


def _fit_bound(uses: list[tuple[HistoryRun, RunUse]], job: str, query: Mapping[str, float],
               attr: str, level: float) -> tuple[float, float, str] | None:
    """(request, limit, how) of one quantity, or None when the history cannot bound it."""
    rows = [(r, getattr(u, attr)) for r, u in uses
            if math.isfinite(getattr(u, attr)) and getattr(u, attr) > 0]
    if sum(r.job == job for r, _ in rows) < 2 or len(rows) < 3:
        return None
    x = config_features([r.params for r, _ in rows])
    keep = np.isfinite(x).any(axis=0)  # a feature no run gives never enters the fit
    x = x[:, keep]
    y = np.log([v for _, v in rows])
    groups = np.array([r.job for r, _ in rows])
    prior = tuple(PRIORS[attr].get(f, 0.0) for f, k in zip(FEATURES, keep, strict=True) if k)
    model = GroupedLogLinear(pooled_ridge=POOLED_RIDGE, prior=prior).fit(x, y, groups)
    held = held_out_residuals(model, x, y, groups)
    if len(held["within"]) < 3 or (groups == job).sum() < 2:
        return None
    xq = config_features([query])[:, keep]
    own = x[groups == job]
    inside = bool(np.all(~np.isfinite(xq[0]) | ((xq[0] >= np.nanmin(own, axis=0) - 1e-9) &
                                                (xq[0] <= np.nanmax(own, axis=0) + 1e-9))))
    q, worst, how = _bound(held["within"], held["within_group"], job, level, inside)
    pred, _ = model.predict(xq, np.array([job]))
    return math.exp(pred[0] + q), math.exp(pred[0] + worst), how


def _cpu_fallback(history: Sequence[HistoryRun], job: str, params: Mapping[str, float]) -> float:
    """The largest p95 of the job's runs, each scaled to the next run's CPUs where both are
    known (a run given twice the threads uses about twice the cores), + :data:`MARGIN`."""
    scaled = []
    for r in history:
        u = run_use(r)
        if r.job != job or u is None or not math.isfinite(u.cpu_p95):
            continue
        ratio = params.get("cpus", math.nan) / r.params.get("cpus", math.nan)
        scaled.append(u.cpu_p95 * (ratio if math.isfinite(ratio) and ratio > 0 else 1.0))
    return _largest(scaled) * (1 + MARGIN)


def _largest(values: Sequence[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return max(finite) if finite else math.nan


def cloudopt_request(history: Sequence[HistoryRun], job: str, params: Mapping[str, float], *,
                     stage: str = "", level: float = LEVEL) -> Request:
    """cloudopt's request for ``job``'s next run, configured as ``params``, from the runs in
    ``history`` (every job's: they share the slopes and the residuals).

    Parameters
    ----------
    history : runs known when the next run starts (any job; its own among them)
    job : the recurring job
    params : the next run's configuration (canonical param names)
    stage : a stage label, for that stage's request; empty for the whole run
    level : coverage the request aims at
    """
    uses = [(r, u) for r in history if (u := run_use(r, stage)) is not None]
    own = [u for r, u in uses if r.job == job]
    hours = float(sum(u.hours for u in own))
    if not own:
        return undefined("cloudopt", 0, 0.0, f"no run of {job} with usage")
    mem = _fit_bound(uses, job, params, "peak_mem_gb", level)
    cpu = _fit_bound(uses, job, params, "cpu_p95", level)
    notes = []
    if mem is None:
        peak = _largest([u.peak_mem_gb for u in own]) * (1 + MARGIN)
        mem = (peak, peak, "")
        notes.append("memory: " + ("too few runs to fit, the largest peak + 15 %"
                                   if math.isfinite(peak) else "no memory figure in the history"))
    if cpu is None:
        top = _cpu_fallback(history, job, params)
        cpu = (top, None, "")
        notes.append("CPU: " + ("too few runs to fit, the largest p95 per CPU x the CPUs + 15 %"
                                if math.isfinite(top) else "no CPU usage in the history"))
    how = mem[2] or cpu[2]
    note = "; ".join(notes + ([how] if how else []))
    limit = mem[1] if math.isfinite(mem[1]) and mem[1] > mem[0] else mem[0]
    return Request("cloudopt", cpu[0], None, mem[0], limit, len(own), hours, stage=stage,
                   note=note)


def stage_requests(history: Sequence[HistoryRun], job: str, params: Mapping[str, float], *,
                   whole: Request, level: float = LEVEL, differ: float = 0.10) -> list[Request]:
    """Per-stage requests of ``job`` where a stage's memory or CPU differs from the whole
    run's by more than ``differ`` (a stage that needs what the run needs adds nothing)."""
    labels = sorted({s for r in history if r.job == job and r.usage is not None
                     for s in r.usage.stage})
    out = []
    for label in labels:
        req = cloudopt_request(history, job, params, stage=label, level=level)
        if not (req.defined and whole.defined):
            continue
        if abs(req.mem_request_gb / whole.mem_request_gb - 1) > differ or \
                abs(req.cpu_request / whole.cpu_request - 1) > differ:
            out.append(req)
    return out
