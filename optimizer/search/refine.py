"""The closed loop: measure what the model proposes, refit, re-plan, and keep the best measured.

Round ``k`` (``[run].refine_rounds`` of them) of :func:`refine`:

1. the workload model is fitted to every trial so far and the agents plan on it
   (:meth:`CloudResourceOptimizer._recommend`, cached per round for ``--resume``);
2. the allocation to measure is the agents' plan, unless it has been measured already or the
   fit is too poor to drive agents (largest throughput error over ``FIT_TOLERANCE``): then it
   is the unmeasured allocation with the largest expected improvement under the bootstrapped
   model (:mod:`optimizer.search.acquisition`); when the model cannot be fitted at all, the next
   baseline probe;
3. it is run like any trial (``trials/refine-K-<key>``) and its prediction is set against the
   measurement;
4. the loop ends early when the plan was measured already (or a measured trial beats its
   prediction) and no allocation is expected to beat the best trial by 1% under the refitted
   model. Agreement between prediction and measurement at the plan alone does not end it: the
   model can be right there and wrong elsewhere. It also ends when the largest expected
   improvement, saved over ``[run].job_runs`` runs of the job, is less than one more run costs
   (:func:`not_worth_a_run`): a short job earns little search.

With ``--workers-arg`` the best setting so far is then measured at other data-loader worker
counts (:mod:`optimizer.search.loader_workers`). The settings that measured within 15% of the best are
then decided in a run-off of
back-to-back runs (:mod:`optimizer.search.runoff`), and the recommendation is the best *measured*
trial (:func:`optimizer.search.choice.best_measured`), by the run-off's runs where there was one,
with its memory right-sized, so it is never worse than a trial already run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from optimizer.foundation.allocation import (
    Allocation,
    describe_allocation,
    job_words,
    money_words,
    seconds_words,
)
from optimizer.search.acquisition import (
    anchored,
    bootstrap_models,
    candidate_grid,
    next_probe,
    objective_samples,
    predicted_figures,
    relative_spread,
    ruled_out,
)
from optimizer.search.budget import runoff_reserve, search_cost
from optimizer.search.choice import (
    best_measured,
    goodput_comparison,
    memory_entry,
    objective_table,
    recommended_allocation,
    same_setting,
)
from optimizer.search.goodput.job_length import figures_words, job_length_decision
from optimizer.search.goodput.learning_rate import lr_args, tune_learning_rate
from optimizer.search.loader_workers import PROPOSER, sweep_workers
from optimizer.search.planning import measure_efficiency
from optimizer.search.runoff import runoff, standings, tie_note
from optimizer.search.workload_fit import measurements_from_trials
from optimizer.trials.records import TrialSummary, iter_trials

MAX_MEASUREMENTS = 4
"""The closed loop never measures a setting a fifth time: when that is all it could do, it stops
and says why (a repeat teaches the model nothing the earlier runs did not)."""
FIT_TOLERANCE = 0.25
"""Largest throughput error of the fit (over the trials) at which the agents' plan is trusted
enough to be the next measurement; beyond it, the next probe is chosen for information."""


def _alloc(value: Any) -> Allocation:
    return Allocation(**value) if isinstance(value, dict) else value


def _with_default_batch(a: Allocation, default_batch: int | None) -> Allocation:
    """``a`` with the script's default batch where it leaves the batch to the script: trials are
    labelled with the batch they ran with, so "default" and that batch are one setting."""
    if a.batch_size is not None or default_batch is None:
        return a
    return Allocation(a.gpus, a.cpus, a.memory_gb, default_batch, a.workers)


def _measured(a: Allocation, trials: Sequence[TrialSummary], default_batch: int | None,
              batch_settable: bool) -> bool:
    """Whether ``a`` would run a setting measured already: a batch the script cannot be told
    is not a setting (the trial runs the script's own)."""
    if _crashes_on(a.gpus, trials):
        return True
    if not batch_settable:
        return any((t.allocation.gpus, t.allocation.cpus) == (a.gpus, a.cpus) for t in trials)
    # A crashed trial keeps the batch it was asked for ("default"): it is the same setting.
    mine = _with_default_batch(a, default_batch)
    return any(same_setting(_with_default_batch(t.allocation, default_batch), mine)
               for t in trials)


def _crashes_on(gpus: int, trials: Sequence[TrialSummary]) -> bool:
    """Whether every trial on ``gpus`` GPUs crashed while one on another count ran: a script
    that needs CUDA fails on none, whatever its CPUs or batch (seen on the H200: the closed
    loop measured the crashed CPU-only setting again)."""
    on = [t for t in trials if t.allocation.gpus == gpus]
    return bool(on) and all(t.status == "failed" and t.reason == "crash" for t in on) and any(
        t.ok for t in trials if t.allocation.gpus != gpus)


def _batches(trials: Sequence[TrialSummary], most: int | None = None) -> list[int]:
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


def _probe_by_improvement(opt: Any, env_config: Any, trials: list[TrialSummary],
                          total: float | None, preference: Any):
    """The unmeasured allocation with the largest expected improvement (None when nothing is
    expected to improve on the best trial), the bootstrap samples of every candidate's
    objective, the candidates, and how many unmeasured ones the model rules out (of how many)."""
    model = env_config.workload
    table = measurements_from_trials(trials)
    kwargs = {"noise_scale": model.params.noise_scale, "ref_batch": model.params.ref_batch,
              "fixed": {k: getattr(model.params, k) for k, why in
                        (model.fit_report_.fixed if model.fit_report_ else {}).items()
                        if why == "given"}}
    try:
        models = bootstrap_models(table, model, **kwargs)
    except Exception:  # noqa: BLE001 - an acquisition failure must not stop the job
        return None
    measured = objective_table(trials, opt.config, preference, getattr(opt, "efficiency", None))
    if measured.empty:
        return None
    top = measured.loc[measured["objective"].idxmin()]
    best = top["objective"]
    incumbent = next(t.allocation for t in trials if t.trial_id == top["trial_id"])
    norm = measured[["job_cost", "job_time_s", "resource_share"]].min().to_numpy()
    gpu_range = model.meta.get("fitted_gpu_range")
    candidates = candidate_grid(opt.config, _batches(trials, opt.config.resources.batch_size_max),
                                gpu_range)
    if not candidates:
        return None
    samples = objective_samples(
        predicted_figures(models, candidates, opt.config,
                          total_samples=float(total or env_config.total_samples),
                          startup_s=float(model.meta.get("job", {}).get("restart_s", 0.0))),
        opt.config, preference, norm)
    j = next((i for i, c in enumerate(candidates) if same_setting(c, incumbent)), None)
    judged = samples if j is None else anchored(samples, j, best)
    seen = [t.allocation for t in trials]
    return next_probe(judged, candidates, best, seen), samples, candidates, \
        ruled_out(judged, candidates, best, seen)


def not_worth_a_run(opt: Any, trials: Sequence[TrialSummary], best_probe: Any,
                    opts: Any) -> str | None:
    """Why one more run would cost more than it is expected to save (None: it pays).

    The most any unmeasured setting is expected to gain (the largest expected improvement, a
    share of the best trial's objective) over ``[run].job_runs`` runs of the job, against one
    run: a probe's time box (the whole job when shorter) at that setting's price; seconds under
    the ``time`` preference, dollars otherwise. A short job stops early, a long one searches on.
    """
    cfg = opt.config
    if best_probe is None or not cfg.run.job_runs:
        return None
    from optimizer.trials.cost import ResourceCostCalculator

    table = objective_table(trials, cfg, opt.user_preference, getattr(opt, "efficiency", None))
    if table.empty:
        return None
    top = table.loc[table["objective"].idxmin()]
    box = opts.probe_seconds if getattr(opts, "probe_seconds", None) is not None \
        else cfg.run.probe_seconds
    seconds = min(float(box) or math.inf, float(top["job_time_s"]))
    runs, gain = cfg.run.job_runs, float(best_probe.expected_improvement)
    if opt.user_preference == "time":
        saved, spent = gain * float(top["job_time_s"]) * runs, seconds
        words = (seconds_words(saved / runs), seconds_words(saved), seconds_words(spent))
    else:
        hourly = ResourceCostCalculator.from_config(cfg.resources).calculate_hourly_cost(
            best_probe.allocation)
        saved, spent = gain * float(top["job_cost"]) * runs, hourly * seconds / 3600.0
        words = (money_words(saved / runs), money_words(saved), money_words(spent))
    if saved >= spent:
        return None
    return (f"the best unmeasured setting is expected to save {words[0]} a job ({gain:.1%}), "
            f"{words[1]} over {runs} runs of the job ([run].job_runs), less than the "
            f"{words[2]} one more run would cost")


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


def _spread_of(samples: Any, candidates: Sequence[Allocation], alloc: Allocation) -> float | None:
    for j, c in enumerate(candidates):
        if same_setting(c, alloc):
            return float(relative_spread(samples[:, [j]])[0])
    return None


def refine(opt: Any, manager: Any, trials: list[TrialSummary], reference: TrialSummary,
           total: float | None, profile: Any, run_dir: Path, opts: Any,
           more_probes: Sequence[Allocation], batch_settable: bool,
           earlier: Sequence[TrialSummary] = ()
           ) -> tuple[dict[str, Any], TrialSummary, list[TrialSummary]]:
    """Run the loop; returns the recommendation dict (``allocation`` is the final, measured
    choice; ``rounds`` says what each round planned, predicted and measured), the trial it
    comes from and every trial. ``earlier``: trials a previous run of the folder measured
    (under another preference, say); they compete for the final choice."""
    cfg = opt.config
    trials = list(trials)
    rounds: list[dict[str, Any]] = []
    rec: dict[str, Any] = {}
    proposer: dict[str, str] = {}
    default_batch = getattr(manager, "default_batch_size", lambda: None)()
    budget = getattr(opt, "budget", None)
    reserve = reserved_runs(cfg, opts, getattr(budget, "total", None),
                            bool(getattr(manager, "workers_arg", None)))
    if budget is not None and (budget.left() or 0) - reserve < 1:
        reserve = 0  # too small a budget for both: the loop's rounds come first
    for k in range(cfg.run.refine_rounds + 1):
        if k and budget is not None and not budget.allows(1, reserve):
            rounds.append(_budget_stop(k, budget, reserve))
            opt._say(f"closed loop stops: {rounds[-1]['why']}")
            break
        usable = [t for t in trials if t.ok and t.throughput]
        rec, env_config = opt._recommend(usable, reference, total, profile, run_dir, opts, k)
        planned = _alloc(rec["allocation"])
        fit = rec.get("fit") or {}
        poor = env_config is not None and fit.get("max_rel_error", 0.0) > FIT_TOLERANCE
        choice, why, spread = planned, f"the plan of {rec['agent']}", None
        probe = None
        if env_config is not None:
            probe = _probe_by_improvement(opt, env_config, usable, total, opt.user_preference)
            if probe is not None:
                spread = _spread_of(probe[1], probe[2], planned)
        measured_before = any(
            same_setting(t.allocation, _with_default_batch(planned, default_batch))
            for t in trials)
        dominated = None if env_config is None or measured_before else dominating_trial(
            env_config, planned, usable, cfg, total, getattr(opt, "efficiency", None))
        if env_config is None:
            left = [a for a in more_probes if not _measured(a, trials, default_batch,
                                                             batch_settable)]
            if not left:
                break
            choice, why = left[0], "the model could not be fitted: one more probe first"
        elif measured_before or poor or dominated is not None:
            pick = probe[0] if probe else None
            if pick is not None:
                reason = (f"the fit is poor (largest error {fit['max_rel_error']:.0%})" if poor
                          else f"the measured {describe_allocation(dominated.allocation)} is "
                          "faster and cheaper than the plan's prediction" if dominated is not None
                          else "the plan was measured already")
                choice = pick.allocation
                why = (f"{reason}; largest expected improvement ({pick.expected_improvement:.1%})"
                       + _ruled_words(probe))
            elif measured_before or dominated is not None:
                rounds.append({"round": k, "planned": planned, "proposed_by": rec["agent"],
                               "action": "stop", "why": "the plan was measured already or a "
                               "measured trial beats its prediction, and no allocation is "
                               "expected to beat the best trial" + _ruled_words(probe),
                               "ruled_out": probe[3] if probe else None})
                break
        times = sum(same_setting(t.allocation, _with_default_batch(choice, default_batch))
                    for t in trials)
        if times >= MAX_MEASUREMENTS:
            stop = (f"nothing else can be proposed: {why}, but that setting was measured "
                    f"{times} times already")
            opt._say(f"closed loop stops: {stop}")
            rounds.append({"round": k, "planned": planned, "proposed_by": rec["agent"],
                           "action": "stop", "why": stop})
            break
        if budget is not None and not budget.allows(1, reserve):
            rounds.append(_budget_stop(k, budget, reserve))
            break
        unpaid = not_worth_a_run(opt, usable, probe[0] if probe else None, opts)
        if unpaid:
            opt._say(f"closed loop stops: {unpaid}")
            rounds.append({"round": k, "planned": planned, "proposed_by": "job-runs",
                           "action": "stop", "why": unpaid})
            break
        trial = opt._measure(manager, choice, f"refine-{k}", run_dir, opts, total)
        trial = opt._label_batch(trial, run_dir / "trials" / trial.trial_id, batch_settable)
        trials.append(trial)
        proposer[trial.trial_id] = rec["agent"] if choice is planned else (
            "expected-improvement" if env_config is not None else "baseline-probe")
        row = _round_row(k, rec, planned, choice, why, trial, spread, env_config,
                         cfg.run.refine_tolerance)
        row["ruled_out"] = probe[3] if probe else None
        rounds.append(row)
    ids = {t.trial_id for t in trials}
    for t in earlier:
        if t.trial_id not in ids:
            trials.append(t)
            twin = _twin(t, trials)  # a repeat of a setting this run measured is credited alike
            proposer[t.trial_id] = (proposer.get(twin, "") if twin != t.trial_id
                                    else "an-earlier-run")
    for trial in sweep_workers(opt, manager, trials, total, run_dir, opts, batch_settable,
                               rounds):
        proposer[trial.trial_id] = PROPOSER
    n_before = len(trials)
    block = runoff(opt, manager, trials, total, run_dir, opts, batch_settable, rounds)
    added = {r["trial"]: r["added_by"] for r in rounds if r.get("added_by")}
    for trial in trials[n_before:]:
        twin = _twin(trial, trials)  # itself: a setting only the run-off ran (cpu-neighbour...)
        proposer[trial.trial_id] = (added.get(twin, "") if twin in block and twin not in proposer
                                    else proposer.get(twin, ""))
    eff = getattr(opt, "efficiency", None)
    if block and eff is not None and eff.on:  # the run-off's curves: the efficiency pooled
        eff = opt.efficiency = measure_efficiency([t for t in trials if t.ok], reference,
                                                  run_dir, cfg.run.goodput, eff.job)
    final, best_row = best_measured(trials, cfg, opt.user_preference, runoff=block,
                                    efficiency=eff)
    table = standings(trials, block, cfg, opt.user_preference, eff)
    from_plan = proposer.get(final.trial_id) or None
    rec = dict(rec)
    rec["planned_allocation"] = rec.get("allocation")
    rec["allocation"] = recommended_allocation(final, trials, batch_settable)
    rec["agent"] = from_plan or "baseline-trial"
    rec["final_trial"] = final.trial_id
    rec["rounds"] = rounds
    rec["goodput"] = goodput_comparison(trials, cfg, opt.user_preference, final, eff)
    rec["job_length"] = job_length_decision(getattr(eff, "job", None), best_row, eff)
    if rec["job_length"]:
        rec.setdefault("notes", []).append(rec["job_length"]["note"])
    if getattr(opts, "lr_arg", None) and budget is not None and not budget.allows(2):
        rec["learning_rate"] = {"flag": opts.lr_arg, "note": f"the budget of {budget.total} "
                                "runs left none to measure the learning rate: it is kept"}
        rec["goodput"]["learning_rate"] = rec["learning_rate"]["note"]
    elif getattr(opts, "lr_arg", None):
        rec["learning_rate"] = tune_learning_rate(
            opt, manager, final, getattr(eff, "ref_batch", None), opts.lr_arg, run_dir, opts,
            total, batch_settable)
        rec["learning_rate"]["args"] = lr_args(opts.lr_arg, rec["learning_rate"])
        rec["goodput"]["learning_rate"] = rec["learning_rate"]["note"]
    elif eff is not None and eff.on and final.allocation.batch_size not in (None, eff.ref_batch):
        rec["goodput"]["learning_rate"] = ("the batch size changes, the learning rate does not "
                                           "(give --lr-arg FLAG to have it measured): the "
                                           "efficiency above was measured at the script's own "
                                           "learning rate")
    if rec["goodput"].get("note"):
        rec.setdefault("notes", []).append(rec["goodput"]["note"])
    rec["memory"] = memory_entry(final, trials)  # what the whole job needs, and from which run
    # What the recommendation costs as requested: the final trial's measured time, priced at the
    # right-sized memory rather than at the limit the trial happened to run under.
    rec["measured"] = {"trial": final.trial_id, "job_time_s": float(best_row["job_time_s"]),
                       "job_cost": float(best_row["job_cost"]), "throughput": final.throughput,
                       "time_is": "measured" if final.status == "completed" else
                       "predicted from a probe",
                       "efficiency": float(best_row.get("efficiency", 1.0)),
                       "whole_job_s": float(best_row.get("raw_job_time_s",
                                                         best_row["job_time_s"]))}
    rec["search"] = search_cost(list(iter_trials(run_dir)), reference, final,
                                rec["measured"]["job_cost"], rec["measured"]["job_time_s"])
    if budget is not None and budget.note:
        rec["search"]["budget_note"] = budget.note
    rec["choice"] = choice_words(opt.user_preference, rec["allocation"], best_row,
                                 rec["measured"]["time_is"], from_plan, block, table, trials)
    rec["runoff"] = block
    rec["runoff_standings"] = table
    rec.setdefault("notes", []).append(rec["choice"])
    rec["notes"].append(rec["search"]["note"])
    mode = getattr(opts, "live_plan", "off")
    if mode != "off" and env_config is not None:  # the job's stages, planned per stage
        from optimizer.search.live.live_check import live_round

        rec["live"] = live_round(opt, manager, env_config, rec["allocation"], run_dir, opts,
                                 measure=mode == "measure")
    return rec, final, trials


def choice_words(preference: Any, allocation: Allocation, row: dict[str, Any], time_is: str,
                 from_plan: str | None, block: Sequence[str], table: list[dict[str, Any]],
                 trials: Sequence[TrialSummary]) -> str:
    """The final choice as a person reads it: the setting in words with the job's dollars and
    seconds there, and how it won (the run-off's rivals likewise); the trial ids and objectives
    stay in ``final_trial`` and ``runoff_standings``."""
    gpus = any(t.allocation.gpus for t in trials)
    runs = int(row.get("replicates", 1) or 1)
    how = time_is + (f", mean of {runs} runs" if runs > 1 else "")
    figures = figures_words(row, job_words(row["job_cost"], row["job_time_s"]),
                            job_words(row["job_cost"], row["job_time_s"], whole=False))
    head = (f"the best measured setting for {_preference_words(preference)} is "
            f"{describe_allocation(allocation, gpus=gpus)}: {figures} ({how}; "
            f"{'proposed by ' + from_plan if from_plan else 'a baseline setting'})")
    if not block:
        return head + f"; the best of {len(trials)} trials"
    ahead = [r for r in table[1:] if not r.get("tied")]
    return (head + f"; it won a run-off of {len(block)} back-to-back runs among {len(trials)} "
            "trials" + ("" if not ahead else ", ahead of " + ", ".join(
                f"{r['words']} ({job_words(r['job_cost'], r['job_time_s'], whole=False)}, "
                f"{r['margin']:+.1%})" for r in ahead)) + tie_note(table))


def _preference_words(preference: Any) -> str:
    if isinstance(preference, str):
        return f"'{preference}'"
    return "the weights " + ", ".join(f"{w:g}" for w in preference) + " (cost, time, resource)"


def reserved_runs(cfg: Any, opts: Any, total: int | None = None,
                  workers: bool = False) -> int:
    """Runs the closed loop leaves to later stages of a search of ``total`` runs: the run-off
    (:func:`optimizer.search.budget.runoff_reserve`), one for the data-loader sweep with
    ``workers`` (from 6 runs), and the two learning-rate probes with ``--lr-arg``."""
    sweep = 1 if workers and total is not None and total >= 6 else 0
    return runoff_reserve(cfg.run, total) + sweep + (2 if getattr(opts, "lr_arg", None) else 0)


def _ruled_words(probe: Any) -> str:
    """``probe``'s count of settings the model rules out, in words ("" when none)."""
    n, m = probe[3] if probe else (0, 0)
    return (f"; the model rules out {n} of the {m} unmeasured settings (no bootstrap fit "
            "expects them to beat the best trial)") if n else ""


def _budget_stop(k: int, budget: Any, reserve: int) -> dict[str, Any]:
    return {"round": k, "action": "stop", "proposed_by": "budget",
            "why": f"the budget of {budget.total} real runs is spent ({budget.spent()} made"
                   + (f", {reserve} kept for the run-off and the learning rate)" if reserve
                      else ")")}


def _twin(trial: TrialSummary, trials: Sequence[TrialSummary]) -> str:
    """The first trial of the same setting (whose proposer a repeat inherits)."""
    return next(t.trial_id for t in trials if same_setting(t.allocation, trial.allocation))


def _round_row(k: int, rec: dict[str, Any], planned: Allocation, choice: Allocation, why: str,
               trial: TrialSummary, spread: float | None, env_config: Any,
               tolerance: float) -> dict[str, Any]:
    row: dict[str, Any] = {"round": k, "proposed_by": rec["agent"], "planned": planned,
                           "measured_allocation": choice, "why": why, "trial": trial.trial_id,
                           "status": trial.status, "measured_throughput": trial.throughput,
                           "plan_spread": spread}
    if env_config is not None:
        ranges = env_config.workload.meta.get("measured_range", {})
        outside = [f"{k} {getattr(planned, k)}" for k, (lo, hi) in ranges.items()
                   if getattr(planned, k) is not None and not lo <= getattr(planned, k) <= hi]
        row["plan_outside_measured_range"] = outside
    if env_config is not None and choice.batch_size is not None:
        # an acquisition candidate carries no memory yet: predict it unconstrained
        unbounded = Allocation(choice.gpus, choice.cpus, choice.memory_gb or float("inf"),
                               choice.batch_size)
        pred = env_config.workload.predict_trial(unbounded)
        row["predicted_throughput"] = pred["throughput"]
        if trial.ok and trial.throughput:
            err = pred["throughput"] / trial.throughput - 1
            row["rel_error"] = err
            row["agree"] = abs(err) <= tolerance
    return row


__all__ = ["FIT_TOLERANCE", "dominating_trial", "refine"]
