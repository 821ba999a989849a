"""The closed loop's parts: each proposer and each stop rule on its own, the controller over a
fake port, and the recommendation's dict in the order the report reads."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import load_config
from optimizer.foundation.job import Job
from optimizer.foundation.result import Recommendation
from optimizer.search.acquisition import ProbeChoice
from optimizer.search.core.state import (
    Proposal,
    RoundView,
    SearchJob,
    SearchState,
    drive,
)
from optimizer.search.expected import Acquisition
from optimizer.search.loop.proposers import AgentsPlan, BaselineProbes, ExpectedImprovement
from optimizer.search.loop.stop_rules import (
    MAX_MEASUREMENTS,
    BudgetAtRoundStart,
    BudgetLeft,
    NoProbeLeft,
    PlanMeasured,
    RepeatLimit,
)
from optimizer.search.planning import RoundPlan
from optimizer.search.stages import refine
from optimizer.trials.records import TrialSummary

PLAN = Allocation(0, 2, 4.0, 64)
OTHER = Allocation(0, 1, 4.0, 128)
SPEC = Job(Path("train.py"), batch_control="flag")
"""A script whose batch size trials can set."""
MODEL = SimpleNamespace(workload=SimpleNamespace(
    meta={}, predict_trial=lambda alloc: {"throughput": 100.0}))


def _trial(tid: str, alloc: Allocation) -> TrialSummary:
    return TrialSummary(trial_id=tid, status="completed", allocation=alloc, wall_time_s=10.0,
                        samples=1000.0, throughput=100.0, hourly_cost=1.0, cost=10 / 3600,
                        total_samples=1000.0, predicted_total_time_s=10.0, mem_gb_peak=0.5)


class _Port:
    """The pipeline as the search sees it, measuring every setting at 100 samples/s."""

    def __init__(self, budget=None):
        self.config, self.user_preference, self.budget = load_config(None), "cost", budget
        self.config.run.runoff_rounds = 0
        self.measured, self.said = [], []

    def measure(self, manager, alloc, prefix, run_dir, opts, total):
        self.measured.append((prefix, alloc))
        return _trial(f"{prefix}-{alloc.key()}", alloc)

    def label_batch(self, trial, trial_dir, settable):
        return trial

    def say(self, text, always=False):
        self.said.append(text)


def _state(trials=(), **view) -> SearchState:
    state = SearchState(_Port(), SearchJob(None, Path("run"), SPEC), list(trials),
                        default_batch=64, k=1)
    fields = {"plan": {"agent": "reinforce", "allocation": PLAN, "fit": {"max_rel_error": 0.0}},
              "env_config": MODEL, "planned": PLAN, "usable": list(trials), "poor": False}
    state.round = RoundView(1, **{**fields, **view})
    return state


def _acquisition(pick: Allocation | None) -> Acquisition:
    choice = None if pick is None else ProbeChoice(pick, 0.05, 0.1)
    return Acquisition(choice, np.zeros((4, 1)), [OTHER], (3, 7))


def _first(state: SearchState) -> Proposal | None:
    proposers = (BaselineProbes([PLAN, OTHER], True), ExpectedImprovement(), AgentsPlan())
    return next((p for p in (pr.propose(state) for pr in proposers) if p is not None), None)


def test_the_agents_plan_is_measured_when_nothing_speaks_against_it():
    state = _state()
    proposal = _first(state)
    assert proposal.allocation is PLAN and proposal.proposer == "reinforce"
    assert proposal.reason == "the plan of reinforce" and proposal.prefix == "refine-1"
    # A poor fit with nothing better to probe still measures the plan.
    assert _first(_state(poor=True)).allocation is PLAN


def test_expected_improvement_replaces_a_plan_measured_already_or_beaten():
    state = _state(measured_before=True, acquisition=_acquisition(OTHER))
    proposal = _first(state)
    assert proposal.allocation == OTHER and proposal.proposer == "expected-improvement"
    assert proposal.reason.startswith("the plan was measured already; largest expected "
                                      "improvement (5.0%); the model rules out 3 of the 7")
    poor = _first(_state(poor=True, plan={"agent": "morl", "allocation": PLAN,
                                           "fit": {"max_rel_error": 0.4}},
                         acquisition=_acquisition(OTHER)))
    assert poor.reason.startswith("the fit is poor (largest error 40%)")
    beaten = _first(_state(dominated=_trial("t0", OTHER), acquisition=_acquisition(OTHER)))
    assert "is faster and cheaper than the plan's prediction" in beaten.reason


def test_a_plan_measured_already_with_nothing_to_probe_stops_the_loop():
    state = _state(measured_before=True, acquisition=_acquisition(None))
    assert _first(state) is None
    stop = PlanMeasured().check(state)
    assert stop.rule == "plan-measured" and not stop.said
    assert stop.row["action"] == "stop" and stop.row["ruled_out"] == (3, 7)
    assert NoProbeLeft().check(state) is None  # the model was fitted


def test_without_a_model_the_next_unmeasured_baseline_probe_and_then_a_silent_stop():
    state = _state([_trial("00", PLAN)], env_config=None)
    proposal = _first(state)
    assert proposal.allocation == OTHER and proposal.proposer == "baseline-probe"
    state.trials.append(_trial("01", OTHER))
    assert _first(state) is None
    stop = NoProbeLeft().check(state)
    assert stop.row is None and not stop.said
    assert PlanMeasured().check(state) is None


def test_a_fifth_run_of_a_setting_is_never_proposed():
    state = _state([_trial(f"t{i}", PLAN) for i in range(MAX_MEASUREMENTS - 1)])
    state.proposal = Proposal(PLAN, "reinforce", "the plan of reinforce")
    assert RepeatLimit().check(state) is None
    state.trials.append(_trial("again", PLAN))
    stop = RepeatLimit().check(state)
    assert stop.said and "measured 4 times already" in stop.why and stop.row["round"] == 1


def test_a_setting_measured_twice_without_a_rate_is_not_measured_a_third_time():
    """compiled's own batch: its probes ended in start-up, the model never saw them, and the
    plan stayed there for four runs that measured nothing."""
    empty = dataclasses.replace(_trial("01", PLAN), status="probe", throughput=None,
                                reason="no throughput measured before the time box ended")
    state = _state([empty, _trial("02", OTHER)])
    state.proposal = Proposal(PLAN, "expected-improvement", "expected to improve")
    assert RepeatLimit().check(state) is None  # once: a longer look may measure it
    state.trials.append(dataclasses.replace(empty, trial_id="refine-0"))
    stop = RepeatLimit().check(state)
    assert stop.said and "2 of them without a throughput" in stop.why


def test_the_budget_rules_keep_the_reserve_and_the_first_round():
    budget = SimpleNamespace(total=5, spent=lambda: 4,
                             allows=lambda n=1, reserve=0: n + reserve <= 1)
    state = _state()
    state.port.budget, state.reserve = budget, 1
    stop = BudgetLeft().check(state)
    assert stop.rule == "budget" and "1 kept for the run-off" in stop.why and not stop.said
    state.k = 0
    assert BudgetAtRoundStart().check(state) is None  # the first round always plans
    state.k = 2
    assert BudgetAtRoundStart().check(state).said
    state.reserve = 0
    assert BudgetLeft().check(state) is None


def test_drive_measures_until_the_proposer_has_nothing():
    state = _state()
    queue = [Proposal(PLAN, "a", "first", prefix="x"), Proposal(OTHER, "b", "second", prefix="y")]

    class Queue:
        def propose(self, state):
            return queue.pop(0) if queue else None

    new = drive(state, Queue(),
                lambda p, t, i: {"round": i, "why": p.reason, "trial": t.trial_id})
    assert [t.trial_id for t in new] == [f"x-{PLAN.key()}", f"y-{OTHER.key()}"]
    assert state.trials == new and [r["round"] for r in state.rounds] == [0, 1]


def test_the_controller_credits_each_trial_and_says_why_it_stopped(tmp_path):
    port = _Port()
    port.config.run.refine_rounds = 2
    baseline = [_trial("00", OTHER)]

    def planner(port, job, usable, k):  # the agents plan the same setting every round
        return RoundPlan({"agent": "reinforce", "allocation": PLAN, "notes": ["planned"],
                          "fit": {"max_rel_error": 0.0}}, None, None)

    spec = Job(Path("train.py"), batch_control="flag", default_batch=64, live_plan="off")
    job = SearchJob(None, tmp_path, spec, 1000.0, baseline[0], more_probes=[PLAN])
    outcome = refine(port, job, baseline, planner=planner)
    # No model: the one probe left is measured, then the loop ends without a row.
    assert [p for p, _ in port.measured] == ["refine-0"] and outcome.stop.rule == "no-probe-left"
    rec = outcome.recommendation
    assert [r["proposed_by"] for r in rec.rounds] == ["reinforce"]
    assert rec.rounds[0]["why"] == "the model could not be fitted: one more probe first"
    assert rec.final_trial in {t.trial_id for t in outcome.trials}
    assert rec.notes[0] == "planned" and rec.planned_allocation == PLAN
    assert rec.learning_rate is None and rec.live is None


def test_the_recommendation_keeps_the_last_plan_beside_the_choice():
    plan = {"agent": "reinforce", "allocation": {"gpus": 0, "cpus": 2, "memory_gb": 4.0,
                                                 "batch_size": 64, "workers": None,
                                                 "replicas": 1},
            "notes": ["a"], "fit": None, "outcomes": [{"name": "reinforce", "return": 1.0}],
            "inputs": {"preference": "cost"}}
    rec = Recommendation.from_plan(
        plan, allocation=OTHER, agent="baseline-trial", final_trial="00", rounds=[],
        goodput={"note": "g"}, job_length=None, memory={}, measured={}, search={}, choice="c",
        runoff=[], runoff_standings=[], learning_rate={"note": "lr"}, notes=["a", "g", "c"])
    assert rec.allocation == OTHER and rec.planned_allocation == PLAN  # read back typed
    assert rec.agent == "baseline-trial" and rec.notes == ["a", "g", "c"]
    assert rec.outcome("reinforce") == {"name": "reinforce", "return": 1.0}
    assert rec.outcome("morl") is None and rec.fit is None and rec.initial is None
    bare = Recommendation.from_plan({}, allocation=OTHER, agent="x", final_trial="00",
                                    choice="c")
    assert bare.planned_allocation is None and bare.outcomes == [] and bare.predicted == {}


def test_the_main_jobs_port_answers_every_name_the_search_asks_for(tmp_path, capsys):
    """The port the main job hands the stages (``TrialPort``) has every name ``SearchPort``
    lists, and a quiet run's messages still reach ``main.log``."""
    from optimizer.search.core.port import SearchPort
    from optimizer.search.trial_port import TrialPort

    asked = {n for n in vars(SearchPort) if not n.startswith("_")}
    port = TrialPort(load_config(None), quiet=True)
    assert {"measure", "label_batch", "say", "trial_executor", "budget"} <= asked
    assert sorted(n for n in asked if not hasattr(port, n)) == []
    port.log_path = tmp_path / "main.log"
    port.say("measuring 0g-1c")
    assert port.log_path.read_text(encoding="utf-8").endswith(" measuring 0g-1c\n")
    assert capsys.readouterr().out == ""
