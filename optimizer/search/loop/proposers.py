"""The ways of choosing the next trial, one class each, all with ``propose(state)``.

In a round of the closed loop the controller asks, in order, :class:`BaselineProbes` (only
when the model could not be fitted), :class:`ExpectedImprovement` (only when the plan cannot be
trusted or is not worth a trial: the fit is poor, its setting was measured already, or a
measured trial beats its prediction) and :class:`AgentsPlan`; the first proposal is the
round's. The stages after the loop have proposers of their own, beside them in
:mod:`optimizer.search.after_loop` (the workers sweeps' and the run-off's).
"""

from __future__ import annotations

from collections.abc import Sequence

from optimizer.foundation.allocation import Allocation, describe_allocation
from optimizer.search.core.state import Proposal, RoundView, SearchState
from optimizer.search.expected import measured_setting, ruled_words


def _round(state: SearchState) -> RoundView:
    if state.round is None:
        raise RuntimeError("a closed-loop proposer was asked outside a round")
    return state.round


class BaselineProbes:
    """When the workload model cannot be fitted: the next baseline allocation (of those planned
    beyond the baseline) that no trial ran yet."""

    name = "baseline-probe"

    def __init__(self, probes: Sequence[Allocation], batch_settable: bool) -> None:
        self.probes, self.batch_settable = list(probes), batch_settable

    def propose(self, state: SearchState) -> Proposal | None:
        if _round(state).env_config is not None:
            return None
        left = [a for a in self.probes if not measured_setting(
            a, state.trials, state.default_batch, self.batch_settable)]
        if not left:
            return None
        return Proposal(left[0], self.name, "the model could not be fitted: one more probe first",
                        prefix=f"refine-{state.k}")


class ExpectedImprovement:
    """When the plan is not to be measured (a poor fit, measured already, or beaten by a
    measured trial): the unmeasured allocation with the largest expected improvement under the
    bootstrapped model, if any is expected to beat the best trial."""

    name = "expected-improvement"

    def propose(self, state: SearchState) -> Proposal | None:
        view = _round(state)
        if view.env_config is None or not (view.measured_before or view.poor
                                           or view.dominated is not None):
            return None
        pick = view.acquisition.pick if view.acquisition else None
        if pick is None:
            return None
        why = (f"{_distrust(view)}; largest expected improvement "
               f"({pick.expected_improvement:.1%})" + ruled_words(view.acquisition))
        return Proposal(pick.allocation, self.name, why, prefix=f"refine-{state.k}")


def _distrust(view: RoundView) -> str:
    """Why the round does not measure the agents' plan."""
    if view.poor:
        return f"the fit is poor (largest error {view.plan['fit']['max_rel_error']:.0%})"
    if view.dominated is not None:
        return (f"the measured {describe_allocation(view.dominated.allocation)} is faster and "
                "cheaper than the plan's prediction")
    return "the plan was measured already"


class AgentsPlan:
    """The agents' plan on the fitted model, unless its setting was measured already or a
    measured trial beats its prediction (a poor fit with nothing better to probe still
    measures it). The decisions credit the agent whose plan it is."""

    def propose(self, state: SearchState) -> Proposal | None:
        view = _round(state)
        if view.env_config is None or view.measured_before or view.dominated is not None:
            return None
        return Proposal(view.planned, view.agent, f"the plan of {view.agent}",
                        prefix=f"refine-{state.k}")


__all__ = ["AgentsPlan", "BaselineProbes", "ExpectedImprovement"]
