"""The closed loop, the search's first stage: measure what the model proposes, refit, re-plan.

Round ``k`` (``[run].refine_rounds`` of them) of :class:`ClosedLoop`:

1. the workload model is fitted to every trial so far and the agents plan on it
   (:func:`optimizer.search.planning.plan_round`, cached per round for ``--resume``);
2. the proposers (:mod:`optimizer.search.loop.proposers`) are asked in turn for the allocation
   to measure: the next baseline probe when the model cannot be fitted at all; the unmeasured
   allocation with the largest expected improvement under the bootstrapped model
   (:mod:`optimizer.search.acquisition`) when the plan has been measured already, a measured
   trial beats its prediction or the fit is too poor to drive agents (largest throughput error
   over :data:`FIT_TOLERANCE`); else the agents' plan;
3. the stop rules (:mod:`optimizer.search.loop.stop_rules`) may end the loop: nothing to
   propose (the plan was measured already or beaten, and no allocation is expected to beat the
   best trial by 1%; agreement between prediction and measurement at the plan alone does not
   end it: the model can be right there and wrong elsewhere), a setting measured four times,
   the budget of runs, or a largest expected improvement that, saved over ``[run].job_runs``
   runs of the job, is less than one more run costs (a short job earns little search);
4. otherwise the proposal is run like any trial (``trials/refine-K-<key>``) and its prediction
   is set against the measurement.

The loop keeps runs in reserve for the stages after it (:func:`reserved_runs`), which
:func:`optimizer.search.stages.stages` lists: the workers sweeps, the run-off, the final
choice, the learning rate and the live round.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import OptimizerConfig
from optimizer.foundation.job import Job
from optimizer.search.budget import runoff_reserve
from optimizer.search.choice import same_setting
from optimizer.search.core.port import SearchPort
from optimizer.search.core.state import (
    Proposer,
    RoundView,
    SearchJob,
    SearchState,
    StopReason,
    first_stop,
    measure,
)
from optimizer.search.expected import (
    dominating_trial,
    probe_by_improvement,
    spread_of,
    with_default_batch,
)
from optimizer.search.loop.proposers import AgentsPlan, BaselineProbes, ExpectedImprovement
from optimizer.search.loop.stop_rules import BEFORE_RUN, ROUND_START
from optimizer.search.planning import RoundPlan, plan_round
from optimizer.trials.records import TrialSummary

FIT_TOLERANCE = 0.25
"""Largest throughput error of the fit (over the trials) at which the agents' plan is trusted
enough to be the next measurement; beyond it, the next probe is chosen for information."""

Planner = Callable[[SearchPort, SearchJob, list[TrialSummary], int], RoundPlan]
"""One round's planning on the usable trials (``plan_with_agents``; a test gives its own)."""


def plan_with_agents(port: SearchPort, job: SearchJob, usable: list[TrialSummary],
                     round_k: int) -> RoundPlan:
    """Stage 4 for one round (:func:`optimizer.search.planning.plan_round`), the agents trained
    for ``--agent-seconds`` (else ``[run].agent_seconds``)."""
    budget = job.spec.agent_seconds or port.config.run.agent_seconds
    return plan_round(port, usable, job.reference, job.total, job.profile, job.run_dir, budget,
                      round_k)


class ClosedLoop:
    """The closed loop (module doc) as a stage: it keeps the reserve of the stages after it,
    runs its rounds with ``planner`` (:func:`plan_with_agents`; a test gives its own) and leaves
    why it stopped in ``state.stop``."""

    name = "closed-loop"

    def __init__(self, planner: Planner | None = None) -> None:
        self.planner = planner or plan_with_agents

    def run(self, state: SearchState) -> None:
        job = state.job
        state.reserve = _reserve(state)
        proposers = (BaselineProbes(job.more_probes, job.batch_settable), ExpectedImprovement(),
                     AgentsPlan())
        state.stop = run_rounds(state, self.planner, proposers)


def run_rounds(state: SearchState, planner: Planner,
               proposers: Sequence[Proposer]) -> StopReason | None:
    """The loop itself: each round plans, asks the proposers, checks the stop rules and runs
    the proposal; returns the reason it stopped (None: it ran every round)."""
    for k in range(state.port.config.run.refine_rounds + 1):
        state.k, state.proposal = k, None
        stop = first_stop(ROUND_START, state)
        if stop is not None:
            return stop
        state.round = view_round(state, planner)
        state.proposal = next((p for p in (pr.propose(state) for pr in proposers)
                               if p is not None), None)
        stop = first_stop(BEFORE_RUN, state)
        if stop is not None:
            return stop
        run_round(state)
    return None


def _reserve(state: SearchState) -> int:
    """Runs the loop leaves to the stages after it (none when the budget cannot afford both)."""
    budget, job = state.port.budget, state.job
    reserve = reserved_runs(state.port.config, job.spec, None if budget is None else budget.total,
                            bool(job.spec.workers_arg))
    if budget is not None and (budget.left() or 0) - reserve < 1:
        # Too small a budget for both: the loop's rounds come first, but for the workers of a
        # torchrun job, the dimension that matters most there (Pollux).
        scale = reserved_runs(state.port.config, job.spec, 0) - runoff_reserve(
            state.port.config.run, 0) - (2 if job.spec.lr_arg else 0)
        return scale if (budget.left() or 0) - scale >= 1 else 0
    return reserve


def view_round(state: SearchState, planner: Planner) -> RoundView:
    """Round ``state.k``'s plan on the usable trials and what the model expects elsewhere."""
    port, job = state.port, state.job
    usable = [t for t in state.trials if t.ok and t.throughput]
    planned_round = planner(port, job, usable, state.k)
    state.efficiency = planned_round.efficiency
    plan, env_config = planned_round.plan, planned_round.env_config
    planned = _alloc(plan["allocation"])
    fit = plan.get("fit") or {}
    view = RoundView(state.k, plan, env_config, planned, usable,
                     poor=env_config is not None and fit.get("max_rel_error", 0.0) > FIT_TOLERANCE)
    if env_config is not None:
        view.acquisition = probe_by_improvement(port.config, port.user_preference,
                                                state.efficiency, env_config, usable, job.total)
        if view.acquisition is not None:
            view.spread = spread_of(view.acquisition.samples, view.acquisition.candidates,
                                    planned)
    mine = with_default_batch(planned, state.default_batch)
    view.measured_before = any(same_setting(t.allocation, mine) for t in state.trials)
    if env_config is not None and not view.measured_before:
        view.dominated = dominating_trial(env_config, planned, usable, port.config, job.total,
                                          state.efficiency)
    return view


def run_round(state: SearchState) -> TrialSummary:
    """Measure the round's proposal; the trial joins the state, credited to its proposer, and
    the round's row says what was planned, predicted and measured."""
    proposal, view = state.proposal, state.round
    assert proposal is not None and view is not None  # the stop rules saw to it
    trial = measure(state, proposal.allocation, proposal.prefix)
    state.trials.append(trial)
    state.proposer[trial.trial_id] = proposal.proposer
    row = round_row(view, proposal.allocation, proposal.reason, trial,
                    state.port.config.run.refine_tolerance)
    row["ruled_out"] = view.acquisition.ruled_out if view.acquisition else None
    state.rounds.append(row)
    return trial


def _alloc(value: Any) -> Allocation:
    return Allocation(**value) if isinstance(value, dict) else value


def reserved_runs(cfg: OptimizerConfig, job: Job, total: int | None = None,
                  workers: bool = False) -> int:
    """Runs the closed loop leaves to later stages of a search of ``total`` runs: the run-off
    (:func:`optimizer.search.budget.runoff_reserve`), one for the data-loader sweep with
    ``workers`` (from 6 runs), the two learning-rate probes with ``--lr-arg``, and two
    data-parallel settings (the same and the kept global batch at two workers) for a torchrun
    job with ``--workers-max`` 2 or more."""
    sweep = 1 if workers and total is not None and total >= 6 else 0
    scale = 2 if job.launch.launcher == "torchrun" and job.launch.workers_max >= 2 else 0
    return runoff_reserve(cfg.run, total) + sweep + scale + (2 if job.lr_arg else 0)


def round_row(view: RoundView, choice: Allocation, why: str, trial: TrialSummary,
              tolerance: float) -> dict[str, Any]:
    """The decisions' row of a round that ran ``choice``: the plan, the measurement and, with
    a fitted model, where the plan leaves the measured range and the prediction's error."""
    planned, env_config = view.planned, view.env_config
    row: dict[str, Any] = {"round": view.k, "proposed_by": view.agent, "planned": planned,
                           "measured_allocation": choice, "why": why, "trial": trial.trial_id,
                           "status": trial.status, "measured_throughput": trial.throughput,
                           "plan_spread": view.spread}
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


__all__ = ["FIT_TOLERANCE", "ClosedLoop", "Planner", "plan_with_agents", "reserved_runs",
           "run_rounds"]
