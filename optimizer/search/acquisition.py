"""What the fitted workload model does not know, and which allocation to measure next.

Uncertainty comes from a parametric bootstrap of the fit (:func:`bootstrap_models`): the
measured throughputs are perturbed by log-normal noise as large as the fit's own residuals
(never below ``NOISE_FLOOR``, the repeat-to-repeat spread of a trial on a shared machine) and
the model is refitted each time. It was chosen over resampling trials (with four to eight
trials a resample often drops the only trial at some CPU count and cannot be fitted) and over
a Gaussian process (it would forget the Pollux/Amdahl form that lets eight trials speak for a
whole grid). Each refit is a small least-squares problem, so 16 of them cost well under a
second.

:func:`expected_improvement` is Monte-Carlo expected improvement over the bootstrap models: for
each candidate allocation, the mean over models of how much it would beat the best measured
objective, each model's predictions taken relative to its own prediction for that best trial
(:func:`anchored`). The next probe is the unmeasured allocation with the largest expected improvement
(:func:`next_probe`); the agents still plan over the fitted model, this only picks what to
measure when their plan has been measured already or the model is too unsure to believe it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from envs import WorkloadModel
from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import OptimizerConfig
from optimizer.foundation.errors import CloudoptError
from optimizer.search.choice import (
    NOISE_FLOOR,
    hourly_cost,
    resource_share,
    right_size_memory,
    score,
)
from optimizer.search.workload_fit import fit_workload_model


def bootstrap_models(measurements: pd.DataFrame, model: WorkloadModel, *, n: int = 16,
                     seed: int = 0, **fit_kwargs: Any) -> list[WorkloadModel]:
    """``n`` refits of ``model`` to throughputs perturbed by the fit's residual noise.

    ``fit_kwargs`` are those the model was fitted with (``noise_scale``, ``ref_batch``,
    ``fixed``). Refits that fail (a perturbation made a parameter unidentifiable) are left
    out; the fitted model itself is always the first member.
    """
    rep = model.fit_report_
    rel = np.array([r["rel_error"] for r in rep.per_point]) if rep else np.zeros(1)
    dof = max(rep.dof if rep else 0, 0)
    resid = float(np.sqrt(np.mean(np.log1p(rel) ** 2) * len(rel) / dof)) if dof else 0.0
    sigma = max(resid, NOISE_FLOOR)
    rng = np.random.default_rng(seed)
    members = [model]
    for _ in range(n):
        table = measurements.copy()
        table["throughput"] = table["throughput"].astype(float) * np.exp(
            rng.normal(0.0, sigma, len(table)))
        try:
            members.append(fit_workload_model(table, **fit_kwargs))
        except CloudoptError:
            continue
    return members


def predicted_figures(models: Sequence[WorkloadModel], candidates: Sequence[Allocation],
                      config: OptimizerConfig, *, total_samples: float,
                      startup_s: float = 0.0) -> dict[str, np.ndarray]:
    """Job time, cost (at right-sized predicted memory) and resource share of each candidate
    under each model: arrays of shape (n_models, n_candidates)."""
    g = np.array([a.gpus for a in candidates], dtype=float)
    c = np.array([a.cpus for a in candidates], dtype=float)
    b = np.array([a.batch_size for a in candidates], dtype=float)
    shape = (len(models), len(candidates))
    time_s, cost, share = np.empty(shape), np.empty(shape), np.empty(shape)
    for i, m in enumerate(models):
        pred = m.predict(g, c, np.inf, b)
        # goodput: throughput × statistical efficiency (1 unless the model was fitted with a
        # noise scale), so a candidate's time is to the same training progress
        time_s[i] = startup_s + total_samples / np.maximum(pred["goodput"], 1e-12)
        for j, a in enumerate(candidates):
            memory = right_size_memory(float(pred["mem_gb"][j]))
            cost[i, j] = time_s[i, j] * hourly_cost(config, a.gpus, a.cpus, memory) / 3600
            share[i, j] = resource_share(config, a.gpus, a.cpus, memory)
    return {"job_time_s": time_s, "job_cost": cost, "resource_share": share}


def objective_samples(figures: dict[str, np.ndarray], config: OptimizerConfig,
                      preference: str | Sequence[float],
                      best: Sequence[float] | None) -> np.ndarray:
    """The preference's objective per model and candidate, normalised by the measured best."""
    n_models, n_cand = figures["job_time_s"].shape
    flat = pd.DataFrame({k: v.ravel() for k, v in figures.items()})
    return score(flat, config, preference, best=best).reshape(n_models, n_cand)


def expected_improvement(samples: np.ndarray, best: float) -> np.ndarray:
    """Monte-Carlo expected improvement (minimisation) of each column over ``best``."""
    return np.maximum(best - samples, 0.0).mean(axis=0)


def anchored(samples: np.ndarray, incumbent: int, best: float) -> np.ndarray:
    """Each model's objectives as ratios to its own prediction for the best measured trial
    (column ``incumbent``), times that trial's measured objective ``best``.

    A model fitted to a few trials is often off by a common factor (a probe ran in a fast
    minute, a term is fixed); comparing its raw predictions with a measured best then says that
    nothing can beat the best trial, and the loop stops before measuring the model's own plan.
    Compared with the model's prediction for that same trial, only the model's *relative*
    judgement is used, the way noisy expected improvement compares draws at the incumbent.
    Models whose prediction there is not positive and finite are left as they are."""
    ref = samples[:, [incumbent]]
    ok = np.isfinite(ref) & (ref > 0)
    return np.where(ok, samples / np.where(ok, ref, 1.0) * best, samples)


def relative_spread(samples: np.ndarray) -> np.ndarray:
    """Bootstrap spread of each candidate's objective: (90th − 10th percentile) / median."""
    lo, mid, hi = np.percentile(samples, [10, 50, 90], axis=0)
    return (hi - lo) / np.maximum(np.abs(mid), 1e-12)


def candidate_grid(config: OptimizerConfig, batches: Sequence[int],
                   gpu_range: Sequence[int] | None = None) -> list[Allocation]:
    """Every GPU count (within the measured range when the model cannot extrapolate), CPU
    count and batch size the search may recommend (memory is sized afterwards)."""
    r = config.resources
    lo, hi = (gpu_range or (r.gpu_count_min, r.gpu_count_max))[:2]
    return [Allocation(g, c, 0.0, int(b)) for g in range(int(lo), int(hi) + 1)
            for c in range(r.cpu_count_min, r.cpu_count_max + 1) for b in batches]


def ruled_out(samples: np.ndarray, candidates: Sequence[Allocation], best: float,
              measured: Sequence[Allocation], *, min_gain: float = 0.01) -> tuple[int, int]:
    """How many unmeasured candidates the model rules out without running them (not one
    bootstrap fit expects them to beat the best measured objective by ``min_gain`` of it),
    and how many are unmeasured: Amdahl's CPU scaling, the batch's throughput curve and memory
    linear in batch speak for cells no trial ran."""
    cols = _unmeasured(candidates, measured)
    if not cols:
        return 0, 0
    gain = (best - samples[:, cols]) / max(abs(best), 1e-12)
    return int((gain < min_gain).all(axis=0).sum()), len(cols)


def _unmeasured(candidates: Sequence[Allocation], measured: Sequence[Allocation]) -> list[int]:
    """Indices of the candidates whose GPUs, CPUs and batch size no trial ran."""
    seen = {(a.gpus, a.cpus, a.batch_size) for a in measured}
    return [j for j, c in enumerate(candidates) if (c.gpus, c.cpus, c.batch_size) not in seen]


@dataclasses.dataclass
class ProbeChoice:
    allocation: Allocation
    expected_improvement: float
    """As a share of the best measured objective."""
    spread: float


def next_probe(samples: np.ndarray, candidates: Sequence[Allocation], best: float,
               measured: Sequence[Allocation], *, min_gain: float = 0.01) -> ProbeChoice | None:
    """The unmeasured candidate with the largest expected improvement, or None when no
    candidate is expected to beat the best measured objective by ``min_gain`` of it."""
    ei = expected_improvement(samples, best) / max(abs(best), 1e-12)
    spread = relative_spread(samples)
    open_ = set(_unmeasured(candidates, measured))
    order = [j for j in np.argsort(-ei) if j in open_]
    if not order or ei[order[0]] < min_gain:
        return None
    j = order[0]
    return ProbeChoice(candidates[j], float(ei[j]), float(spread[j]))
