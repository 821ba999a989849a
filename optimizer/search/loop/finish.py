"""After the closed loop, down to the final choice.

:func:`finish` adds the trials an earlier run of the folder measured, runs the workers sweep
(:class:`~optimizer.search.loader_workers.WorkersSweep`) and the run-off
(:class:`~optimizer.search.runoff.RunoffContenders`), crediting each new trial to whoever
proposed its setting first, pools the efficiency over the run-off's curves, and chooses the
best *measured* trial (:func:`optimizer.search.choice.best_measured`, by the run-off's runs
where there was one). The :class:`~optimizer.foundation.result.Recommendation` then
gathers the choice, the learning rate (with ``--lr-arg``), the memory request's source, the
measured figures, the search's cost, the choice in words and the live plan.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from optimizer.foundation.allocation import Allocation, describe_allocation, job_words
from optimizer.foundation.result import Recommendation
from optimizer.search.budget import search_cost
from optimizer.search.choice import (
    best_measured,
    goodput_comparison,
    memory_entry,
    recommended_allocation,
    rejected_batches,
    rejected_words,
    same_setting,
)
from optimizer.search.goodput.job_length import (
    JobLength,
    figures_words,
    job_length_decision,
)
from optimizer.search.goodput.learning_rate import lr_args, tune_learning_rate
from optimizer.search.goodput.scaling import PROPOSER as SCALING
from optimizer.search.goodput.scaling import scaling_curve, sweep_replicas
from optimizer.search.loader_workers import PROPOSER, sweep_workers
from optimizer.search.loop.outcome import SearchOutcome
from optimizer.search.loop.state import SearchState, StopReason
from optimizer.search.planning import measure_efficiency
from optimizer.search.runoff import runoff, standings, tie_note
from optimizer.trials.records import TrialSummary, iter_trials


def finish(state: SearchState, stop: StopReason | None) -> SearchOutcome:
    """The stages after the loop and the final choice (module doc)."""
    _credit_earlier(state)
    for trial in sweep_workers(state):
        state.proposer[trial.trial_id] = PROPOSER
    scaled = sweep_replicas(state)
    for trial in scaled:
        state.proposer[trial.trial_id] = SCALING
    eff, job = state.efficiency, state.job
    if scaled and eff is not None and eff.on:  # their global batches' efficiency
        state.efficiency = measure_efficiency([t for t in state.trials if t.ok], job.reference,
                                              job.run_dir, state.port.config.run.goodput, eff.job)
    block = _run_off(state)
    eff = state.efficiency
    if block and eff is not None and eff.on:  # the run-off's curves: the efficiency pooled
        state.efficiency = measure_efficiency([t for t in state.trials if t.ok], job.reference,
                                              job.run_dir, state.port.config.run.goodput, eff.job)
    final, best_row = best_measured(state.trials, state.port.config, state.port.user_preference,
                                    runoff=block, efficiency=state.efficiency)
    rec = recommendation(state, final, best_row, block)
    return SearchOutcome(rec, final, state.trials, state.efficiency, stop)


def twin_of(trial: TrialSummary, trials: Sequence[TrialSummary]) -> str:
    """The first trial of the same setting (whose proposer a repeat inherits)."""
    return next(t.trial_id for t in trials if same_setting(t.allocation, trial.allocation))


def _credit_earlier(state: SearchState) -> None:
    """The trials an earlier run of the folder measured join the field; a repeat of a setting
    this run measured is credited alike."""
    ids = {t.trial_id for t in state.trials}
    for t in state.job.earlier:
        if t.trial_id not in ids:
            state.trials.append(t)
            twin = twin_of(t, state.trials)
            state.proposer[t.trial_id] = (state.proposer.get(twin, "") if twin != t.trial_id
                                          else "an-earlier-run")


def _run_off(state: SearchState) -> list[str]:
    """The run-off (:func:`optimizer.search.runoff.runoff`), its trials credited to who
    proposed their setting (a setting only the run-off ran: to who put it in)."""
    n_before = len(state.trials)
    block = runoff(state)
    added = {r["trial"]: r["added_by"] for r in state.rounds if r.get("added_by")}
    for trial in state.trials[n_before:]:
        twin = twin_of(trial, state.trials)  # itself: a setting only the run-off ran
        state.proposer[trial.trial_id] = (
            added.get(twin, "") if twin in block and twin not in state.proposer
            else state.proposer.get(twin, ""))
    return block


def recommendation(state: SearchState, final: TrialSummary, best_row: dict[str, Any],
                   block: list[str]) -> Recommendation:
    """The final choice with everything the report says of it."""
    port, job, trials, eff = state.port, state.job, state.trials, state.efficiency
    cfg, preference = port.config, port.user_preference
    plan = dict(state.round.plan) if state.round is not None else {}
    notes = list(plan.get("notes", []))
    allocation = recommended_allocation(final, trials, job.batch_settable)
    from_plan = state.proposer.get(final.trial_id) or None
    goodput = goodput_comparison(trials, cfg, preference, final, eff)
    length_knob = eff.job if eff is not None else None
    job_length = job_length_decision(length_knob, best_row, eff)
    if job_length:
        notes.append(job_length["note"])
        rejected = rejected_batches(trials, eff, float(best_row["job_cost"]))
        job_length["rejected"] = {str(b): why for b, why in rejected.items()}
        if rejected:
            notes.append(rejected_words(rejected))
    learning_rate = _learning_rate(state, final, goodput)
    if goodput.get("note"):
        notes.append(goodput["note"])
    memory = memory_entry(final, trials)  # what the whole job needs, and from which run
    measured = _measured_figures(final, best_row)
    search = search_cost(list(iter_trials(job.run_dir)), job.reference, final,
                         measured["job_cost"], measured["job_time_s"])
    if port.budget is not None and port.budget.note:
        search["budget_note"] = port.budget.note
    table = standings(trials, block, cfg, preference, eff)
    choice = choice_words(preference, allocation, best_row, measured["time_is"], from_plan,
                          block, table, trials, length_knob)
    notes += [choice, search["note"]]
    return Recommendation.from_plan(
        plan, allocation=allocation, agent=from_plan or "baseline-trial",
        final_trial=final.trial_id, rounds=state.rounds, goodput=goodput,
        job_length=job_length, memory=memory, measured=measured, search=search, choice=choice,
        runoff=block, runoff_standings=table, learning_rate=learning_rate,
        live=_live(state, allocation), notes=notes, scaling=_scaling(state, final))


def _scaling(state: SearchState, final: TrialSummary) -> dict[str, Any] | None:
    """The scaling curve (:func:`optimizer.search.goodput.scaling.scaling_curve`) of a job launched by
    torchrun whose workers were measured, on the last round's fitted model."""
    trials = state.trials
    if not any(t.ok and t.allocation.replicas > 1 for t in trials):
        return None
    env_config = state.round.env_config if state.round is not None else None
    model = env_config.workload if env_config is not None else None
    model = None if isinstance(model, str) else model  # a preset's name: nothing fitted
    return scaling_curve(model, final.allocation, trials, state.job.spec.launch.workers_max,
                         state.port.config, state.port.user_preference, state.efficiency)


def _measured_figures(final: TrialSummary, best_row: dict[str, Any]) -> dict[str, Any]:
    """What the recommendation costs as requested: the final trial's measured time, priced at
    the right-sized memory rather than at the limit the trial happened to run under."""
    return {"trial": final.trial_id, "job_time_s": float(best_row["job_time_s"]),
            "job_cost": float(best_row["job_cost"]), "throughput": final.throughput,
            "time_is": "measured" if final.status == "completed" else
            "predicted from a probe",
            "efficiency": float(best_row.get("efficiency", 1.0)),
            "progress": float(best_row.get("progress", 1.0)),
            "judged_by": str(best_row.get("judged_by") or ""),
            "whole_job_s": float(best_row.get("raw_job_time_s", best_row["job_time_s"]))}


def _learning_rate(state: SearchState, final: TrialSummary,
                   goodput: dict[str, Any]) -> dict[str, Any] | None:
    """With ``--lr-arg``, the learning rate measured at the final setting (or why not); its note
    also goes into ``goodput``, which otherwise says when the batch changes and the rate not."""
    port, job, eff, budget = state.port, state.job, state.efficiency, state.port.budget
    flag = job.spec.lr_arg
    if flag and budget is not None and not budget.allows(2):
        out = {"flag": flag, "note": f"the budget of {budget.total} runs left none to "
               "measure the learning rate: it is kept"}
    elif flag:
        ref = None if eff is None else eff.ref_batch
        out = tune_learning_rate(port, job.manager, final, ref, flag, job.run_dir, job.spec,
                                 job.total, job.batch_settable)
        out["args"] = lr_args(flag, out)
    else:
        if eff is not None and eff.on and final.allocation.batch_size not in (None,
                                                                              eff.ref_batch):
            goodput["learning_rate"] = ("the batch size changes, the learning rate does not "
                                        "(give --lr-arg FLAG to have it measured): the "
                                        "efficiency above was measured at the script's own "
                                        "learning rate")
        return None
    goodput["learning_rate"] = out["note"]
    return out


def _live(state: SearchState, allocation: Allocation) -> dict[str, Any] | None:
    """For ``--live-plan measure`` or ``write``: the job's stages, planned per stage (None
    when off, or when no model was fitted)."""
    job = state.job
    mode = job.spec.live_plan
    if mode == "off" or state.round is None or state.round.env_config is None:
        return None
    from optimizer.search.live.live_check import live_round

    return live_round(state.port, job.manager, state.round.env_config, allocation, job.run_dir,
                      job.spec, measure=mode == "measure")


def choice_words(preference: Any, allocation: Allocation, row: dict[str, Any], time_is: str,
                 from_plan: str | None, block: Sequence[str], table: list[dict[str, Any]],
                 trials: Sequence[TrialSummary], job: JobLength | None = None) -> str:
    """The final choice as a person reads it: the setting in words with the job's dollars and
    seconds there, and how it won (the run-off's rivals likewise); the trial ids and objectives
    stay in ``final_trial`` and ``runoff_standings``."""
    gpus = any(t.allocation.gpus for t in trials)
    runs = int(row.get("replicates", 1) or 1)
    spread = row.get("time_rel_sd")
    shown = runs > 1 and spread is not None and math.isfinite(spread)
    how = (time_is + (f", mean of {runs} runs" if runs > 1 else "")
           + (f", standard deviation {spread:.1%}" if shown else ""))
    figures = figures_words(row, job_words(row["job_cost"], row["job_time_s"]),
                            job_words(row["job_cost"], row["job_time_s"], whole=False), job)
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


__all__ = ["choice_words", "finish", "recommendation", "twin_of"]
