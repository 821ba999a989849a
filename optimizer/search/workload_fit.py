"""Fit the simulator's workload model to measurements: least squares on a measurement table.

The orchestrator makes the measurements, so the fit lives here: :func:`measurements_from_trials`
turns trial records into the table (one row per usable trial: allocation columns, throughput,
peak memory, utilisation) and :func:`fit_workload_model` calibrates
:class:`envs.workload.WorkloadParams` from any such table, recorded or not.

Step time is fitted on a log scale (relative errors count the same at every size, as in Pollux's
``fit_perf_params``) with bounded trust-region least squares. Parameters the trials say nothing
about are either fixed with the reason recorded (Pollux does the same for the network terms
without multi-GPU data) or, when the model would need them, the fit is refused. A final check
of the Jacobian's conditioning at the solution catches the remaining unidentifiable cases.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd
import scipy.optimize

from envs.workload import FitReport, WorkloadModel, WorkloadParams
from optimizer.foundation.errors import CloudoptError
from optimizer.search.fit_measurements import (
    MEASUREMENT_COLUMNS,
    Measurements,
    measurements_from_trials,
    noise_scale_from_trials,
    usable_measurements,
)
from optimizer.trials.records import TrialSummary

_HINTS = {
    "alpha_c": "trials at two or more batch sizes",
    "beta_c": "trials at two or more batch sizes",
    "parallel_fraction": "trials at two or more CPU counts",
    "delta": "trials at two or more CPU counts where data loading matters",
    "alpha_r": "trials on one and on two or more GPUs",
    "beta_r": "trials on three or more GPUs",
    "gamma": "multi-GPU trials at two or more batch sizes",
    "sync_c": "trials at two or more batch sizes on each of two CPU counts",
}
_BOUNDS = {
    "alpha_c": (0.0, np.inf),
    "beta_c": (1e-12, np.inf),
    "parallel_fraction": (0.0, 1.0),
    "delta": (0.0, np.inf),
    "alpha_r": (0.0, np.inf),
    "beta_r": (0.0, np.inf),
    "gamma": (1.0, 10.0),
    "sync_c": (0.0, np.inf),
}


def _refuse(what: str, data: Measurements) -> None:
    raise CloudoptError(
        f"cannot fit the workload model: {what} (trials: "
        + ", ".join(
            f"{i} g{g:g}/c{c:g}/b{b:g}"
            for i, g, c, b in zip(data.ids, data.g, data.c, data.b, strict=False)
        )
        + ")"
    )


SMALL_STEP_MS = 2.0
"""Steps shorter than this may truly run slower on more threads (fork/join overhead)."""


def _check_cpu_monotone(d: Measurements, slack: float = 0.5) -> None:
    """Refuse trials where more CPU threads ran over twice slower than fewer at the same batch.

    The model (Amdahl) cannot express that. It is the signature of an oversubscribed machine
    (threads waiting for descheduled peers), or of steps so small (under ``SMALL_STEP_MS``)
    that the threads' synchronisation costs more than their work: fitting it would mislead.
    """
    for g, b in {(g, b) for g, b in zip(d.g, d.b, strict=True)}:
        same = (d.g == g) & (d.b == b)
        if len(np.unique(d.c[same])) < 2:
            continue
        order = np.argsort(d.c[same])
        c, thr = d.c[same][order], d.thr[same][order]
        best_fewer = np.maximum.accumulate(thr)
        bad = np.flatnonzero(thr[1:] < slack * best_fewer[:-1])
        if bad.size:
            i = bad[0] + 1
            step_ms = 1000.0 * b / best_fewer[i - 1]
            cause = (f"its steps took {step_ms:.2g} ms on fewer CPUs, work so small that "
                     "threads can cost more in synchronisation than they add, or the machine "
                     "was oversubscribed (other processes on the same cores)"
                     if step_ms < SMALL_STEP_MS else
                     "the machine was probably oversubscribed (other processes on the same "
                     "cores). Measure again on a quiet machine")
            _refuse(
                f"at batch {b:g} the trial on {c[i]:g} CPUs ran at {thr[i]:.4g} samples/s, "
                f"slower than {best_fewer[i - 1]:.4g} on fewer CPUs, which the model (Amdahl) "
                f"cannot express: {cause}",
                d,
            )


def _choose_free(
    d: Measurements, device: str, given: dict[str, float]
) -> tuple[list[str], dict[str, str], dict[str, float]]:
    """Free parameters, fixed ones with reasons, and fixed values (``given`` ones held)."""
    for k, v in given.items():
        if k not in _BOUNDS:
            raise CloudoptError(
                f"cannot hold {k!r} fixed; fittable parameters: {', '.join(sorted(_BOUNDS))}"
            )
        lo, hi = _BOUNDS[k]
        if not lo <= v <= hi:
            raise CloudoptError(f"fixed {k} = {v!r} is outside [{lo}, {hi}]")
    free, fixed, values = _choose_free_from_data(d, device, given)
    for k, v in given.items():
        values[k] = float(v)
        fixed[k] = "given"
    return [k for k in free if k not in given], fixed, values


def _choose_free_from_data(
    d: Measurements, device: str, given: dict[str, float]
) -> tuple[list[str], dict[str, str], dict[str, float]]:
    local = d.b / np.maximum(d.g, 1)
    one_batch = len(np.unique(local)) < 2 and not ({"alpha_c", "beta_c"} & set(given))
    if len(np.unique(d.c)) < 2 and "parallel_fraction" not in given:
        _refuse(
            f"every trial uses {d.c[0]:g} CPU(s); {_HINTS['parallel_fraction']} are needed "
            "to learn how CPU threads speed the job up",
            d,
        )
    free = ["alpha_c", "beta_c", "parallel_fraction"]
    fixed: dict[str, str] = {}
    values: dict[str, float] = {"alpha_r": 0.0, "beta_r": 0.0, "gamma": 1.0, "delta": 0.0,
                                "sync_c": 0.0}
    if one_batch:
        # Without a second batch size fixed and per-sample time cannot be told apart; all of
        # it per sample predicts the measured batch exactly, and the caller keeps the batch.
        free.remove("alpha_c")
        values["alpha_c"] = 0.0
        fixed["alpha_c"] = (f"every trial uses the same per-device batch size {local[0]:g}: "
                            "time per sample only, the model does not change the batch")
    if device == "cpu":
        return free, fixed, values
    free.append("delta")
    multi = d.g > 1
    if not multi.any():
        fixed.update(
            alpha_r="no multi-GPU trial; the model is limited to the measured GPU count",
            beta_r="no multi-GPU trial",
            gamma="no multi-GPU trial",
        )
        return free, fixed, values
    free.append("alpha_r")
    if len(np.unique(d.g[multi])) >= 2 and (d.g > 2).any():
        free.append("beta_r")
    else:
        fixed["beta_r"] = "fewer than two multi-GPU counts: no retrogression (Pollux's default)"
    if len(np.unique(local[multi])) >= 2:
        free.append("gamma")
    else:
        fixed["gamma"] = "multi-GPU trials at one batch size: no overlap assumed (gamma = 1)"
    return free, fixed, values


def _params_from(x: np.ndarray, free: list[str], base: dict[str, float]) -> dict[str, float]:
    out = dict(base)
    out.update({k: float(v) for k, v in zip(free, x, strict=False)})
    return out


def _log_step(values: dict[str, float], proto, d: Measurements) -> np.ndarray:
    params = dataclasses.replace(proto, **values)
    pred = WorkloadModel(params=params).predict(d.g, d.c, np.full_like(d.b, np.inf), d.b)
    return np.log(pred["step_time"])


def _initial_guess(d: Measurements, free: list[str]) -> np.ndarray:
    t = d.b / d.thr
    local = d.b / np.maximum(d.g, 1)
    if len(np.unique(local)) < 2:
        slope, icpt = float(np.mean(t / local)), 0.0
    else:
        slope, icpt = np.polyfit(local, t, 1)
    guess = {
        "alpha_c": max(icpt, 1e-4 * t.mean()),
        "beta_c": max(slope, 1e-3 * t.mean() / local.mean()),
        "parallel_fraction": 0.5,
        "delta": 0.1 * t.mean() / d.b.mean(),
        "alpha_r": 0.05 * t.mean(),
        "beta_r": 0.01 * t.mean(),
        "gamma": 1.5,
        "sync_c": 0.05 * t.mean(),
    }
    return np.array([guess[k] for k in free])


def _check_identified(jac: np.ndarray, x: np.ndarray, free: list[str], d: Measurements) -> None:
    """Refuse when the Jacobian (relative sensitivities) is singular among interior params."""
    lo = np.array([_BOUNDS[k][0] for k in free])
    hi = np.array([_BOUNDS[k][1] for k in free])
    interior = (x > lo + 1e-9 * np.maximum(1, np.abs(lo))) & (x < hi - 1e-9)
    if interior.sum() == 0:
        return
    rel = jac[:, interior] * np.maximum(np.abs(x[interior]), 1e-12)
    norms = np.linalg.norm(rel, axis=0)
    names = [k for k, ok in zip(free, interior, strict=False) if ok]
    dead = [k for k, n in zip(names, norms, strict=False) if n < 1e-8]
    if dead:
        _refuse(f"the trials do not inform {dead[0]}; {_HINTS[dead[0]]} are needed", d)
    _, s, vt = np.linalg.svd(rel / norms, full_matrices=False)
    if len(s) > len(d.ids) or s[-1] < 1e-6 * s[0]:
        worst = names[int(np.argmax(np.abs(vt[-1])))]
        _refuse(
            f"{len(d.ids)} trial(s) cannot identify {len(names)} parameters "
            f"({', '.join(names)}); {worst} is not determined: {_HINTS[worst]} are needed",
            d,
        )


def _r2(y: np.ndarray, pred: np.ndarray) -> float:
    ss = float(np.sum((y - y.mean()) ** 2))
    return 1.0 - float(np.sum((y - pred) ** 2)) / ss if ss > 0 else float("nan")


def fit_workload_model(
    measurements: pd.DataFrame | Iterable[TrialSummary],
    *,
    name: str = "fitted",
    proto: WorkloadParams | None = None,
    noise_scale: float | None = None,
    ref_batch: int | None = None,
    gpu_mem_gb: float | None = None,
    fixed: Mapping[str, float] | None = None,
) -> WorkloadModel:
    """Calibrate a :class:`WorkloadModel` from measurements.

    Parameters
    ----------
    measurements : DataFrame with :data:`MEASUREMENT_COLUMNS`, or trial records
        Rows with a throughput and an explicit batch size are used. They must cover at least two
        batch sizes and two CPU counts (and, for GPU jobs, the GPU counts to be predicted).
        Trial records go through :func:`measurements_from_trials` (and give the noise scale).
    name : str
        The fitted model's label.
    proto : WorkloadParams, optional
        Starting parameters (the fields the fit does not set are kept).
    noise_scale, ref_batch : optional
        Gradient noise scale and reference batch for statistical efficiency; throughput
        measurements cannot show them. Defaults: 0 (off; for trial records, a reported
        ``grad_noise_scale``); the smallest measured batch.
    gpu_mem_gb : float, optional
        Memory of one GPU for the out-of-memory check.
    fixed : dict, optional
        Step-time parameters to hold at given values instead of fitting them (e.g.
        ``{"parallel_fraction": 0.9}`` when every trial used one CPU count); the requirement on
        the measurements that would identify them is dropped.

    Returns
    -------
    WorkloadModel
        With ``fit_report_`` (fit quality per measurement and the parameters not identified).

    Raises
    ------
    CloudoptError
        When too few usable measurements are given or they cannot identify a parameter.
    """
    if not isinstance(measurements, pd.DataFrame):
        trials = list(measurements)
        if noise_scale is None:
            noise_scale = noise_scale_from_trials(trials)
        measurements = measurements_from_trials(trials)
    params, report, d = _fit(
        measurements, proto or WorkloadParams(), noise_scale=noise_scale or 0.0,
        ref_batch=ref_batch, gpu_mem_gb=gpu_mem_gb, fixed=fixed,
    )
    model = WorkloadModel(params=params, name=name, fit_report_=report)
    _record_ranges(model, d)
    return model


def _record_ranges(model: WorkloadModel, d: Any) -> None:
    """Where each resource was measured: a plan outside these ranges is an extrapolation,
    measured before it is believed (optimizer.search.loop.rounds); and the GPU counts a GPU fit
    covers where it could not identify the GPU scaling."""
    model.meta["measured_range"] = {
        name: [float(v.min()), float(v.max())] for name, v in
        (("gpus", d.g), ("cpus", d.c), ("batch_size", d.b))}
    if model.params.device == "gpu" and "alpha_r" in model.fit_report_.fixed:
        model.meta["fitted_gpu_range"] = [int(d.g.min()), int(d.g.max())]


def _fit(table, proto, *, noise_scale, ref_batch, gpu_mem_gb, fixed):
    d = usable_measurements(table)
    device = "gpu" if (d.g > 0).any() else "cpu"
    if device == "gpu" and (d.g == 0).any():
        _refuse("trials mix CPU-only and GPU runs; fit them as separate workloads", d)
    _check_cpu_monotone(d)
    free, fixed, base = _choose_free(d, device, dict(fixed or {}))
    if device == "gpu" and len(free) - 2 < len(d.ids) < len(free) and _PIPELINE <= set(free):
        # A GPU script whose other trial crashed (CPU-only, say) leaves three: enough for the
        # GPU's step time, which decides, not for the input pipeline as well. The closed loop
        # measures whatever the simpler model plans, so a pipeline that matters shows there.
        free = _without_pipeline(free, base, fixed, f"{len(d.ids)} trials cannot identify "
                                 "the input pipeline beside the GPU's step time: CPU threads "
                                 "are taken not to matter until a trial shows they do")
    if len(d.ids) < len(free):
        _refuse(f"{len(d.ids)} trial(s) for {len(free)} parameters ({', '.join(free)})", d)
    proto = dataclasses.replace(
        proto, device=device, mem_base_gb=0.0, mem_per_sample_gb=0.0, gpu_mem_gb=0.0
    )
    y = np.log(d.b / d.thr)
    try:
        values = _solve(d, free, base, proto, y)
    except CloudoptError as exc:
        # A GPU job whose input pipeline never limited the trials says nothing about it; a
        # model without one explains the trials as well, so use that and say so.
        if device != "gpu" or not any(k in str(exc) for k in _PIPELINE):
            raise
        free = _without_pipeline(free, base, fixed, "the input pipeline never limited the "
                                 "measured trials (CPU threads do not matter in the measured "
                                 "range)")
        values = _solve(d, free, base, proto, y)
    if device == "cpu" and "sync_c" not in fixed:
        values, free = _with_sync(d, free, base, proto, y, values, fixed)
    if device == "gpu" and values["delta"] < 1e-12 and "parallel_fraction" in free:
        fixed["parallel_fraction"] = "the input pipeline never limited the measured trials"
    params = dataclasses.replace(proto, **values)
    params = _fit_secondary(params, d, fixed, gpu_mem_gb)
    params.ref_batch = int(ref_batch or d.b.min())
    params.noise_scale = float(noise_scale)
    if params.noise_scale == 0:
        fixed["noise_scale"] = "no gradient noise scale given: statistical efficiency is off"
    return params, _report(params, d, free, fixed), d


_PIPELINE = {"delta", "parallel_fraction"}
"""A GPU job's input pipeline: host work per sample and how CPU threads speed it up."""


SYNC_FLOOR = 0.03
"""Below this worst miss of the Amdahl fit, the trials give no sign of the threads' per-step
synchronisation (``sync_c``) that one run's noise could not give as well."""


def _with_sync(d: Measurements, free: list[str], base: dict[str, float], proto, y: np.ndarray,
               values: dict[str, float], fixed: dict[str, str]
               ) -> tuple[dict[str, float], list[str]]:
    """The CPU fit with the threads' per-step synchronisation (``sync_c``) freed where the
    trials show it, else ``fixed`` says why it stays 0. It is freed when two CPU counts each ran
    two or more batch sizes (only so is a thread's cost per step told from the step's own work),
    a trial is left over beyond the freed parameters (an exact fit tells nothing), and freeing
    it at least halves the worst miss. On the cnn script (2 cores) the Amdahl fit, missing
    by 7%, made a constant per step of the batch's slowness on 2 CPUs and predicted batch 16 on
    1 CPU at 731 samples/s; freed, the fit missed by 0.4% and said 990, and whole runs at batch
    16 took 13.4 s on 1 CPU, 15.7 s on 2. Gating on the miss alone (say beyond one run's 15%
    noise) would have kept that 7% fit."""
    worst = _worst_miss(values, proto, d, y)
    if worst <= SYNC_FLOOR:
        fixed["sync_c"] = f"the model without it fits every trial within {SYNC_FLOOR:.0%}"
        return values, free
    levels = [c for c in np.unique(d.c) if len(np.unique(d.b[d.c == c])) >= 2]
    if len(levels) < 2:
        fixed["sync_c"] = f"{_HINTS['sync_c']} are needed to tell it from the steps' work"
        return values, free
    if len(d.ids) < len(free) + 2:
        fixed["sync_c"] = (f"{len(d.ids)} trials would fit {len(free) + 1} parameters exactly, "
                           "which tells nothing; one more trial is needed")
        return values, free
    try:
        more = _solve(d, [*free, "sync_c"], base, proto, y)
    except CloudoptError as exc:
        fixed["sync_c"] = f"not identified ({exc})"
        return values, free
    better = _worst_miss(more, proto, d, y)
    if better > worst / 2:
        fixed["sync_c"] = (f"freeing it did not halve the worst miss ({worst:.1%} to "
                           f"{better:.1%})")
        return values, free
    return more, [*free, "sync_c"]


def _worst_miss(values: dict[str, float], proto, d: Measurements, y: np.ndarray) -> float:
    """The largest relative throughput error of the trials under ``values``."""
    return float(np.max(np.abs(np.exp(y - _log_step(values, proto, d)) - 1.0)))


def _without_pipeline(free: list[str], base: dict[str, float], fixed: dict[str, str],
                      why: str) -> list[str]:
    """``free`` without the input pipeline's parameters, held at none (``fixed`` says why)."""
    base["delta"] = 0.0
    fixed["delta"] = fixed["parallel_fraction"] = why
    return [k for k in free if k not in _PIPELINE]


def _solve(d: Measurements, free: list[str], base: dict[str, float], proto, y: np.ndarray):
    """Bounded least squares on log step time; refuses unidentified parameters."""

    def resid(x: np.ndarray) -> np.ndarray:
        return _log_step(_params_from(x, free, base), proto, d) - y

    lo = [_BOUNDS[k][0] for k in free]
    hi = [_BOUNDS[k][1] for k in free]
    x0 = np.clip(_initial_guess(d, free), np.array(lo) + 1e-12, np.array(hi) - 1e-9)
    sol = scipy.optimize.least_squares(
        resid, x0, bounds=(lo, hi), x_scale="jac", xtol=1e-12, ftol=1e-12, max_nfev=5000
    )
    _check_identified(sol.jac, sol.x, free, d)
    return _params_from(sol.x, free, base)


def _fit_secondary(params, d: Measurements, fixed: dict[str, str], gpu_mem_gb):
    """Memory line, host cores per GPU and the GPU utilisation ceiling."""
    has_mem = d.mem > 0
    if has_mem.sum() >= 2 and len(np.unique(d.b[has_mem])) >= 2:
        slope, icpt = np.polyfit(d.b[has_mem], d.mem[has_mem], 1)
        if slope < 0:  # noise around a flat line: keep it flat
            slope, icpt = 0.0, float(d.mem[has_mem].mean())
        params.mem_per_sample_gb, params.mem_base_gb = float(slope), float(max(icpt, 0.0))
    elif has_mem.any():
        params.mem_base_gb, params.mem_per_sample_gb = float(d.mem[has_mem].max()), 0.0
        fixed["mem_per_sample_gb"] = "memory measured at one batch size only"
    else:
        params.mem_base_gb, params.mem_per_sample_gb = 0.0, 0.0
        fixed["mem_base_gb"] = "no memory measurements (mem_gb_peak): out of memory never predicted"
    if gpu_mem_gb:
        params.gpu_mem_gb = float(gpu_mem_gb)
    if params.device == "gpu":
        pred = WorkloadModel(params=params).predict(d.g, d.c, np.inf, d.b)
        step, work = pred["step_time"], params.delta * d.b
        ok = d.cpu_util > 0
        if ok.any():
            h = (d.cpu_util[ok] / 100 * d.c[ok] * step[ok] - work[ok]) / (d.g[ok] * step[ok])
            params.host_cores_per_gpu = float(max(np.median(h), 0.0))
        ok = np.isfinite(d.gpu_util) & (d.gpu_util > 0)
        if ok.any():
            ratio = d.gpu_util[ok] / 100 / (pred["t_compute"][ok] / step[ok])
            params.gpu_util_max = float(np.clip(np.median(ratio), 0.05, 1.0))
    return params


def _report(params, d: Measurements, free: list[str], fixed: dict[str, str]) -> FitReport:
    pred = WorkloadModel(params=params).predict(d.g, d.c, np.inf, d.b)
    rel = pred["throughput"] / d.thr - 1.0
    has_mem = d.mem > 0
    r2_mem = _r2(d.mem[has_mem], pred["mem_gb"][has_mem]) if has_mem.sum() >= 2 else float("nan")
    rows = [
        {
            "trial_id": i,
            "gpus": float(g),
            "cpus": float(c),
            "batch_size": float(b),
            "measured": float(m),
            "predicted": float(p),
            "rel_error": float(r),
        }
        for i, g, c, b, m, p, r in zip(
            d.ids, d.g, d.c, d.b, d.thr, pred["throughput"], rel, strict=False
        )
    ]
    return FitReport(
        n_trials=len(d.ids),
        free=list(free),
        fixed=dict(fixed),
        r2_throughput=_r2(d.thr, pred["throughput"]),
        r2_memory=r2_mem,
        per_point=rows,
        max_rel_error=float(np.max(np.abs(rel))),
        dof=len(d.ids) - len(free),
    )


__all__ = ["MEASUREMENT_COLUMNS", "Measurements", "fit_workload_model",
           "measurements_from_trials", "noise_scale_from_trials"]
