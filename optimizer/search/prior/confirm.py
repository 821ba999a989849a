"""How a search that started from history ends: its leader confirmed by one real run.

A run-off (:mod:`optimizer.search.after_loop.runoff`) runs every close setting again, back to back; where
the close settings' runs came from history, that buys back every run the history saved. So a
search with prior measurements (:mod:`optimizer.search.prior.seed`) ends instead with:

1. the leader: the best setting by every trial, the priors' included (a setting's runs pooled,
   history's and this search's, :func:`optimizer.search.choice.objective_table`);
2. where this search has not run the leader, one real run of it (``trials/confirm-<key>``),
   if the budget has a run left;
3. the final choice among the settings this search ran for real (:func:`choosable`), so the
   recommendation is a setting measured now, its figures pooled over all its runs. Where this
   search ran none (no run was left), the best prior stands, and the recommendation says it
   rests on history (:meth:`~optimizer.search.prior.seed.HistorySeed.annotate`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from optimizer.foundation.allocation import describe_allocation
from optimizer.search.choice import objective_table
from optimizer.search.core.state import SearchState, measure
from optimizer.search.memory_need import same_setting
from optimizer.search.planning import measure_efficiency
from optimizer.trials.records import TrialSummary

PROPOSER = "history"
"""Who the decisions credit with the confirming run."""
PREFIX = "confirm"


def from_history(trials: Sequence[TrialSummary]) -> bool:
    """Whether any trial is a prior measurement read from history."""
    return any(t.history for t in trials)


def choosable(trials: Sequence[TrialSummary]) -> list[TrialSummary]:
    """The trials the final choice is made among: with history, every run (history's too) of
    the settings this search ran for real, or all trials where it ran none usable."""
    if not from_history(trials):
        return list(trials)
    real = [t.allocation for t in trials if t.ok and not t.history]
    return [t for t in trials if any(same_setting(t.allocation, a) for a in real)] or list(trials)


def confirm_leader(state: SearchState) -> list[str]:
    """Steps 1 and 2 of the module doc: the new trial joins ``state.trials`` and the decisions.
    Returns no run-off block (the final choice is made over :func:`choosable`)."""
    port = state.port
    table = objective_table(state.trials, port.config, port.user_preference, state.efficiency)
    if table.empty:
        return []
    lead_id = table.iloc[int(np.argmin(table["objective"].to_numpy()))]["trial_id"]
    leader = next(t for t in state.trials if t.trial_id == lead_id)
    if any(t.ok and not t.history and same_setting(t.allocation, leader.allocation)
           for t in state.trials):
        return []  # measured for real in this search already: nothing to confirm
    words = describe_allocation(leader.allocation, gpus=leader.allocation.gpus > 0)
    budget = port.budget
    if budget is not None and not budget.allows(1):
        state.rounds.append({"round": len(state.rounds), "action": "stop",
                             "proposed_by": "budget",
                             "why": f"the leader, {words}, measured only in history: no run "
                                    f"left in the budget of {budget.total} to confirm it"})
        return []
    why = f"the leader, {words}, was measured only in history ({leader.trial_id}): one real run"
    port.say(f"history: {why}")
    trial = measure(state, leader.allocation, PREFIX)
    state.trials.append(trial)
    state.proposer[trial.trial_id] = PROPOSER
    state.rounds.append(_row(len(state.rounds), leader, trial, why))
    eff = state.efficiency
    if eff is not None and eff.on:  # its curve joins the efficiency, as a run-off's would
        state.efficiency = measure_efficiency([t for t in state.trials if t.ok],
                                              state.job.reference, state.job.run_dir,
                                              port.config.run.goodput, eff.job)
    return []


def _row(index: int, leader: TrialSummary, trial: TrialSummary, why: str) -> dict[str, Any]:
    return {"round": index, "proposed_by": PROPOSER, "planned": leader.allocation,
            "measured_allocation": trial.allocation, "trial": trial.trial_id,
            "status": trial.status, "measured_throughput": trial.throughput, "why": why}


__all__ = ["PREFIX", "PROPOSER", "choosable", "confirm_leader", "from_history"]
