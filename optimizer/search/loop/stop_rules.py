"""The rules that end the closed loop, one class each, all with ``check(state)``.

Before a round plans, :class:`BudgetAtRoundStart`; after its proposers, in order:
:class:`NoProbeLeft` and :class:`PlanMeasured` (nothing was proposed), :class:`RepeatLimit`
(the proposal's setting was measured :data:`MAX_MEASUREMENTS` times, or
:data:`MAX_EMPTY` times without a rate), :class:`BudgetLeft` (no
run left beside the reserve of the stages after the loop) and :class:`NotWorthARun` (the
largest expected saving over the job's runs is less than one more run costs). The first reason
ends the loop; its row goes into the decisions (and to the console where it ``said``).
"""

from __future__ import annotations

from typing import Any

from optimizer.search.choice import same_setting
from optimizer.search.core.state import RoundView, SearchState, StopReason
from optimizer.search.expected import not_worth_a_run, ruled_words, with_default_batch

MAX_MEASUREMENTS = 4
"""The closed loop never measures a setting a fifth time: when that is all it could do, it stops
and says why (a repeat teaches the model nothing the earlier runs did not)."""

MAX_EMPTY = 2
"""Nor a third time a setting whose runs measured no throughput: the model never sees them, so
its plan stays there, and compiled's own batch was measured four times for nothing."""


def budget_row(k: int, budget: Any, reserve: int) -> dict[str, Any]:
    """The decisions' row of a search whose budget of runs is spent."""
    return {"round": k, "action": "stop", "proposed_by": "budget",
            "why": f"the budget of {budget.total} real runs is spent ({budget.spent()} made"
                   + (f", {reserve} kept for the run-off and the learning rate)" if reserve
                      else ")")}


def _stop_row(view: RoundView, proposed_by: str, why: str) -> dict[str, Any]:
    return {"round": view.k, "planned": view.planned, "proposed_by": proposed_by,
            "action": "stop", "why": why}


class BudgetAtRoundStart:
    """After the first round: no run left beside the reserve, so no round is planned."""

    name = "budget"

    def check(self, state: SearchState) -> StopReason | None:
        budget = state.port.budget
        if not state.k or budget is None or budget.allows(1, state.reserve):
            return None
        row = budget_row(state.k, budget, state.reserve)
        return StopReason(self.name, row["why"], row, said=True)


class NoProbeLeft:
    """The model could not be fitted and every planned baseline allocation was measured."""

    name = "no-probe-left"

    def check(self, state: SearchState) -> StopReason | None:
        if state.proposal is not None or state.round is None or \
                state.round.env_config is not None:
            return None
        return StopReason(self.name, "the model could not be fitted and no probe is left")


class PlanMeasured:
    """The plan was measured already (or a measured trial beats its prediction) and no
    allocation is expected to beat the best trial."""

    name = "plan-measured"

    def check(self, state: SearchState) -> StopReason | None:
        view = state.round
        if state.proposal is not None or view is None or view.env_config is None:
            return None
        why = ("the plan was measured already or a measured trial beats its prediction, and no "
               "allocation is expected to beat the best trial" + ruled_words(view.acquisition))
        row = {**_stop_row(view, view.agent, why),
               "ruled_out": view.acquisition.ruled_out if view.acquisition else None}
        return StopReason(self.name, why, row)


class RepeatLimit:
    """The proposal's setting was measured :data:`MAX_MEASUREMENTS` times already."""

    name = "repeat-limit"

    def check(self, state: SearchState) -> StopReason | None:
        proposal, view = state.proposal, state.round
        if proposal is None or view is None:
            return None
        mine = with_default_batch(proposal.allocation, state.default_batch)
        runs = [t for t in state.trials if same_setting(t.allocation, mine)]
        empty = sum(not (t.ok and t.throughput) for t in runs)
        if len(runs) < MAX_MEASUREMENTS and empty < MAX_EMPTY:
            return None
        why = (f"nothing else can be proposed: {proposal.reason}, but that setting was "
               f"measured {len(runs)} times already"
               + (f", {empty} of them without a throughput" if empty else ""))
        return StopReason(self.name, why, _stop_row(view, view.agent, why), said=True)


class BudgetLeft:
    """No run left beside the reserve for the proposal."""

    name = "budget"

    def check(self, state: SearchState) -> StopReason | None:
        budget = state.port.budget
        if budget is None or budget.allows(1, state.reserve):
            return None
        row = budget_row(state.k, budget, state.reserve)
        return StopReason(self.name, row["why"], row)


class NotWorthARun:
    """The largest expected improvement, saved over ``[run].job_runs`` runs of the job, is less
    than one more run costs (:func:`~optimizer.search.expected.not_worth_a_run`)."""

    name = "job-runs"

    def check(self, state: SearchState) -> StopReason | None:
        view = state.round
        if view is None:
            return None
        pick = view.acquisition.pick if view.acquisition else None
        why = not_worth_a_run(state.port.config, state.port.user_preference, state.efficiency,
                              view.usable, pick, state.job.spec.probe_seconds)
        if not why:
            return None
        return StopReason(self.name, why, _stop_row(view, self.name, why), said=True)


ROUND_START = (BudgetAtRoundStart(),)
"""Checked before a round plans."""
BEFORE_RUN = (NoProbeLeft(), PlanMeasured(), RepeatLimit(), BudgetLeft(), NotWorthARun())
"""Checked after a round's proposers, before its trial runs, in this order."""

__all__ = ["BEFORE_RUN", "MAX_MEASUREMENTS", "ROUND_START", "BudgetAtRoundStart", "BudgetLeft",
           "NoProbeLeft", "NotWorthARun", "PlanMeasured", "RepeatLimit", "StopReason",
           "budget_row"]
