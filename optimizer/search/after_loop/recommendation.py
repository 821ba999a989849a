"""What the search's stages add up to: the recommendation and everything the report says of it.

Once the stages have run (:func:`optimizer.search.stages.stages`: the closed loop, the sweeps,
the run-off, the final choice, the learning rate and the live round),
:func:`recommendation` gathers the final choice, the goodput and job-length comparisons, the
learning rate, the memory request's source, the measured figures, the search's cost, the
choice in words, the run-off's standings, the live plan and the scaling curve into the typed
:class:`~optimizer.foundation.result.Recommendation`. It measures nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from optimizer.foundation.allocation import Allocation, describe_allocation, job_words
from optimizer.foundation.result import Recommendation
from optimizer.search.after_loop.runoff import standings, tie_note
from optimizer.search.after_loop.scaling import scaling_curve
from optimizer.search.budget import search_cost
from optimizer.search.choice import (
    goodput_comparison,
    memory_entry,
    rejected_batches,
    rejected_words,
)
from optimizer.search.core.state import SearchState
from optimizer.search.goodput.job_length import (
    JobLength,
    figures_words,
    job_length_decision,
)
from optimizer.trials.records import TrialSummary, iter_trials


def recommendation(state: SearchState) -> Recommendation:
    """The final choice with everything the report says of it."""
    port, job, trials, eff = state.port, state.job, state.trials, state.efficiency
    final, best_row, block, allocation = (state.final, state.final_row, state.runoff,
                                          state.recommended)
    assert final is not None and best_row is not None and allocation is not None  # chosen
    cfg, preference = port.config, port.user_preference
    plan = dict(state.round.plan) if state.round is not None else {}
    notes = list(plan.get("notes", []))
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
        live=state.live, notes=notes, scaling=_scaling(state, final))


def _scaling(state: SearchState, final: TrialSummary) -> dict[str, Any] | None:
    """The scaling curve (:func:`optimizer.search.after_loop.scaling.scaling_curve`) of a job
    launched by torchrun whose workers were measured, on the last round's fitted model."""
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
    """The learning rate the stage measured (with ``--lr-arg``, or why not); its note also goes
    into ``goodput``, which otherwise says when the batch changes and the rate not."""
    out, eff = state.learning_rate, state.efficiency
    if out is None:
        if eff is not None and eff.on and final.allocation.batch_size not in (None,
                                                                              eff.ref_batch):
            goodput["learning_rate"] = ("the batch size changes, the learning rate does not "
                                        "(give --lr-arg FLAG to have it measured): the "
                                        "efficiency above was measured at the script's own "
                                        "learning rate")
        return None
    goodput["learning_rate"] = out["note"]
    return out


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


__all__ = ["choice_words", "recommendation"]
