"""What the fitted model expects of the settings not measured yet, and which settings were.

:func:`probe_by_improvement` bootstraps the fit and returns an :class:`Acquisition`: the
unmeasured allocation with the largest expected improvement over the best trial
(:mod:`optimizer.search.acquisition`), every candidate's sampled objective, and how many
unmeasured candidates the model rules out. :func:`dominating_trial` finds a measured trial that
beats the plan's prediction on both time and cost; :func:`not_worth_a_run` says when one more
run costs more than it is expected to save; :func:`measured_setting` whether a setting was run
already (a batch the script cannot be told, and a GPU count every trial crashed on, count as
measured).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from optimizer.foundation.allocation import Allocation, money_words, seconds_words
from optimizer.foundation.config import OptimizerConfig
from optimizer.search.acquisition import (
    ProbeChoice,
    anchored,
    bootstrap_models,
    candidate_grid,
    next_probe,
    objective_samples,
    predicted_figures,
    relative_spread,
    ruled_out,
)
from optimizer.search.choice import objective_table, same_setting
from optimizer.search.workload_fit import measurements_from_trials
from optimizer.trials.records import TrialSummary


@dataclass(frozen=True)
class Acquisition:
    """What the bootstrapped model expects of the candidates: ``pick``, the unmeasured one with
    the largest expected improvement (None when none is expected to beat the best trial), the
    ``samples`` of every candidate's objective (one row per bootstrap fit), the ``candidates``,
    and ``ruled_out``: how many unmeasured candidates no fit expects to beat the best trial, of
    how many."""

    pick: ProbeChoice | None
    samples: np.ndarray
    candidates: list[Allocation]
    ruled_out: tuple[int, int]


def ruled_words(acquisition: Acquisition | None) -> str:
    """``acquisition``'s count of settings the model rules out, in words ("" when none)."""
    n, m = acquisition.ruled_out if acquisition else (0, 0)
    return (f"; the model rules out {n} of the {m} unmeasured settings (no bootstrap fit "
            "expects them to beat the best trial)") if n else ""


def with_default_batch(a: Allocation, default_batch: int | None) -> Allocation:
    """``a`` with the script's default batch where it leaves the batch to the script: trials are
    labelled with the batch they ran with, so "default" and that batch are one setting."""
    if a.batch_size is not None or default_batch is None:
        return a
    return Allocation(a.gpus, a.cpus, a.memory_gb, default_batch, a.workers)


def measured_setting(a: Allocation, trials: Sequence[TrialSummary], default_batch: int | None,
                     batch_settable: bool) -> bool:
    """Whether ``a`` would run a setting measured already: a batch the script cannot be told
    is not a setting (the trial runs the script's own)."""
    if crashes_on(a.gpus, trials):
        return True
    if not batch_settable:
        return any((t.allocation.gpus, t.allocation.cpus) == (a.gpus, a.cpus) for t in trials)
    # A crashed trial keeps the batch it was asked for ("default"): it is the same setting.
    mine = with_default_batch(a, default_batch)
    return any(same_setting(with_default_batch(t.allocation, default_batch), mine)
               for t in trials)


def crashes_on(gpus: int, trials: Sequence[TrialSummary]) -> bool:
    """Whether every trial on ``gpus`` GPUs crashed while one on another count ran: a script
    that needs CUDA fails on none, whatever its CPUs or batch (seen on the H200: the closed
    loop measured the crashed CPU-only setting again)."""
    on = [t for t in trials if t.allocation.gpus == gpus]
    return bool(on) and all(t.status == "failed" and t.reason == "crash" for t in on) and any(
        t.ok for t in trials if t.allocation.gpus != gpus)


def batches(trials: Sequence[TrialSummary], most: int | None = None) -> list[int]:
    """The batch sizes a probe may try: powers of two over the measured range and one step
    beyond it on each side (where the model extrapolates, so its spread is wide), and the
    measured sizes themselves; none above ``most`` (``[resources].batch_size_max``) that was
    not measured. A single measured size is the script's own: kept as is."""
    measured = sorted({int(t.allocation.batch_size) for t in trials
                       if t.ok and t.allocation.batch_size})
    if len(measured) < 2:
        return measured
    lo, hi = max(1, measured[0] // 2), measured[-1] * 2
    if most is not None:
        hi = min(hi, most)
    grid = {1 << k for k in range(31) if lo <= (1 << k) <= hi}
    return sorted(grid | set(measured))


def _fit_kwargs(model: Any) -> dict[str, Any]:
    """The fit's settings a bootstrap refit keeps: the goodput terms and the parameters the
    user gave (the others are refitted on each resample)."""
    fixed = model.fit_report_.fixed if model.fit_report_ else {}
    return {"noise_scale": model.params.noise_scale, "ref_batch": model.params.ref_batch,
            "fixed": {k: getattr(model.params, k) for k, why in fixed.items() if why == "given"}}


def probe_by_improvement(config: OptimizerConfig, preference: Any, efficiency: Any,
                         env_config: Any, trials: list[TrialSummary],
                         total: float | None) -> Acquisition | None:
    """What the model, bootstrapped over ``trials``, expects of every candidate (None when the
    bootstrap fails, nothing was measured or there is no candidate)."""
    model = env_config.workload
    table, kwargs = measurements_from_trials(trials), _fit_kwargs(model)
    try:
        models = bootstrap_models(table, model, **kwargs)
    except Exception:  # noqa: BLE001 - an acquisition failure must not stop the job
        return None
    measured = objective_table(trials, config, preference, efficiency)
    if measured.empty:
        return None
    top = measured.loc[measured["objective"].idxmin()]
    best = top["objective"]
    incumbent = next(t.allocation for t in trials if t.trial_id == top["trial_id"])
    norm = measured[["job_cost", "job_time_s", "resource_share"]].min().to_numpy()
    candidates = candidate_grid(config, batches(trials, config.resources.batch_size_max),
                                model.meta.get("fitted_gpu_range"))
    if not candidates:
        return None
    samples = objective_samples(
        predicted_figures(models, candidates, config,
                          total_samples=float(total or env_config.total_samples),
                          startup_s=float(model.meta.get("job", {}).get("restart_s", 0.0))),
        config, preference, norm)
    j = next((i for i, c in enumerate(candidates) if same_setting(c, incumbent)), None)
    judged = samples if j is None else anchored(samples, j, best)
    seen = [t.allocation for t in trials]
    return Acquisition(next_probe(judged, candidates, best, seen), samples, candidates,
                       ruled_out(judged, candidates, best, seen))


def spread_of(samples: Any, candidates: Sequence[Allocation], alloc: Allocation) -> float | None:
    """The relative spread of the bootstrap's objective at ``alloc`` (None: not a candidate)."""
    for j, c in enumerate(candidates):
        if same_setting(c, alloc):
            return float(relative_spread(samples[:, [j]])[0])
    return None


def dominating_trial(env_config: Any, plan: Allocation, trials: Sequence[TrialSummary],
                     config: Any, total: float | None,
                     efficiency: Any = None) -> TrialSummary | None:
    """A measured trial that is both faster and cheaper than the plan is predicted to be
    (cost at right-sized memory on both sides), or None. Such a plan is not worth a trial."""
    if plan.batch_size is None:
        return None
    model = env_config.workload
    total = float(total or env_config.total_samples)
    startup = float(model.meta.get("job", {}).get("restart_s", 0.0))
    figs = predicted_figures([model], [plan], config, total_samples=total, startup_s=startup)
    plan_time, plan_cost = figs["job_time_s"][0, 0], figs["job_cost"][0, 0]
    table = objective_table(trials, config, "cost", efficiency)
    if table.empty:
        return None
    better = table[(table["job_time_s"] < plan_time) & (table["job_cost"] < plan_cost)]
    if better.empty:
        return None
    tid = better.sort_values("job_cost").iloc[0]["trial_id"]
    return next(t for t in trials if t.trial_id == tid)


def not_worth_a_run(config: OptimizerConfig, preference: Any, efficiency: Any,
                    trials: Sequence[TrialSummary], best_probe: ProbeChoice | None,
                    probe_seconds: float | None) -> str | None:
    """Why one more run would cost more than it is expected to save (None: it pays).

    The most any unmeasured setting is expected to gain (the largest expected improvement, a
    share of the best trial's objective) over ``[run].job_runs`` runs of the job, against one
    run: a probe's time box (``probe_seconds`` from the command line, else the configuration's;
    the whole job when shorter) at that setting's price; seconds under the ``time``
    preference, dollars otherwise. A short job stops early, a long one searches on.
    """
    if best_probe is None or not config.run.job_runs:
        return None
    from optimizer.trials.cost import ResourceCostCalculator

    table = objective_table(trials, config, preference, efficiency)
    if table.empty:
        return None
    top = table.loc[table["objective"].idxmin()]
    box = probe_seconds if probe_seconds is not None else config.run.probe_seconds
    seconds = min(float(box) or math.inf, float(top["job_time_s"]))
    runs, gain = config.run.job_runs, float(best_probe.expected_improvement)
    if preference == "time":
        saved, spent = gain * float(top["job_time_s"]) * runs, seconds
        words = (seconds_words(saved / runs), seconds_words(saved), seconds_words(spent))
    else:
        hourly = ResourceCostCalculator.from_config(config.resources).calculate_hourly_cost(
            best_probe.allocation)
        saved, spent = gain * float(top["job_cost"]) * runs, hourly * seconds / 3600.0
        words = (money_words(saved / runs), money_words(saved), money_words(spent))
    if saved >= spent:
        return None
    return (f"the best unmeasured setting is expected to save {words[0]} a job ({gain:.1%}), "
            f"{words[1]} over {runs} runs of the job ([run].job_runs), less than the "
            f"{words[2]} one more run would cost")


__all__ = ["Acquisition", "batches", "crashes_on", "dominating_trial", "measured_setting",
           "not_worth_a_run", "probe_by_improvement", "ruled_words", "spread_of",
           "with_default_batch"]
