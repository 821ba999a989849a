"""The user's budget of real runs (issue 41): every stage draws on it, the closed loop keeps a
run-off round in reserve, ``auto`` sizes it from the job's price, and the search's cost and
break-even are reported."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from main_command import run_main

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import load_config
from optimizer.foundation.errors import ConfigError
from optimizer.foundation.job import Job
from optimizer.search.after_loop import runoff as runoff_module
from optimizer.search.budget import RunBudget, auto_budget, make_budget, search_cost
from optimizer.search.core.state import SearchJob
from optimizer.search.planning import RoundPlan
from optimizer.search.stages import refine
from optimizer.trials.records import TrialSummary


def _trial(tid: str, cpus: int = 1, cost: float = 0.01, wall: float = 10.0,
           job_cost: float = 0.1, job_time: float = 100.0) -> TrialSummary:
    return TrialSummary(tid, "probe", Allocation(0, cpus, 4.0, 64), wall_time_s=wall,
                        throughput=100.0, hourly_cost=cost * 3600 / wall, cost=cost,
                        total_samples=1e4, predicted_total_time_s=job_time,
                        predicted_total_cost=job_cost, mem_gb_peak=1.0)


def _record(folder, tid):
    (folder / tid).mkdir(parents=True)
    _trial(tid).save(folder / tid)


def test_every_recorded_trial_counts_and_the_reserve_is_kept(tmp_path):
    budget = make_budget(5, tmp_path)
    assert budget.left() == 5 and budget.allows(5)
    for tid in ("a", "b", "c"):
        _record(tmp_path, tid)
    (tmp_path / "unfinished").mkdir()  # no summary: not a run made
    assert budget.spent() == 3 and budget.left() == 2
    assert not budget.allows(1, reserve=2) and budget.limit(4) == 2
    unlimited = make_budget(0, tmp_path)
    assert unlimited.left() is None and unlimited.limit(9) == 9
    with pytest.raises(ConfigError, match=r"\[run\].budget"):
        load_config(None, {"run": {"budget": -1}})


def test_auto_buys_the_runs_a_share_of_the_job_pays_for(tmp_path):
    trials = [_trial(f"t{i}", cost=0.01) for i in range(4)]
    big = auto_budget(make_budget("auto", tmp_path), trials, whole=2.0, share=0.10, floor=5)
    assert big.total == 20 and "20 run(s)" in big.note  # $0.20 / $0.01
    small = auto_budget(make_budget("auto", tmp_path), trials, whole=0.05, share=0.10, floor=5)
    assert small.total == 5 and "costs more than 10% of a job this short" in small.note
    huge = auto_budget(make_budget("auto", tmp_path), trials, whole=1e6, share=0.10, floor=5)
    assert huge.total == 40


def test_the_search_cost_and_its_break_even():
    trials = [_trial(f"t{i}", cost=0.01, wall=10.0) for i in range(6)]
    reference = _trial("ref", job_cost=0.10)
    final = _trial("best", job_cost=0.04)
    out = search_cost(trials, reference, final, 0.04, 360.0)
    assert out["runs"] == 6 and out["dollars"] == pytest.approx(0.06)
    assert out["seconds"] == 60 and out["share_of_default_job"] == pytest.approx(0.6)
    assert out["break_even_jobs"] == pytest.approx(1.0)  # $0.06 search / $0.06 saved per job
    assert out["break_even_hours"] == pytest.approx(0.1) and "6.0 min" in out["note"]
    never = search_cost(trials, reference, final, 0.12, 360.0)
    assert never["break_even_jobs"] is None and "never pays back" in never["note"]


class _Port:
    def __init__(self, config, budget):
        self.config, self.user_preference, self.budget = config, "cost", budget
        self.measured, self.said = [], []

    def plan(self, port, job, usable, k):
        return RoundPlan({"agent": "reinforce", "allocation": Allocation(0, 2, 4.0, 64 * (k + 2)),
                          "fit": {"max_rel_error": 0.0}}, None, None)

    def measure(self, manager, alloc, prefix, run_dir, opts, total):
        self.measured.append(alloc)
        tid = f"{prefix}-{alloc.key()}"
        _record(run_dir / "trials", tid)
        return _trial(tid, cpus=alloc.cpus)

    def label_batch(self, trial, trial_dir, settable):
        return trial

    def say(self, text, always=False):
        self.said.append(text)


def test_the_closed_loop_stops_when_the_budget_leaves_only_the_run_off(tmp_path, monkeypatch):
    cfg = load_config(None, {"run": {"refine_rounds": 8, "runoff_rounds": 2, "runoff_size": 2}})
    for tid in ("00", "01", "02"):  # the baseline's three runs
        _record(tmp_path / "trials", tid)
    port = _Port(cfg, RunBudget(8, tmp_path / "trials"))
    monkeypatch.setattr(runoff_module, "runoff", lambda *a, **k: [])
    trials = [_trial(t) for t in ("00", "01", "02")]
    more = [Allocation(0, 2, 4.0, 64 * k) for k in range(2, 12)]
    spec = Job(Path("train.py"), batch_control="flag", default_batch=64, live_plan="off")
    job = SearchJob(None, tmp_path, spec, 1e4, trials[0], more_probes=more)
    outcome = refine(port, job, trials, planner=port.plan)
    rec = outcome.recommendation
    assert len(port.measured) == 3  # 8 runs - 3 made - 2 kept for one run-off round
    assert outcome.stop.rule == "budget"
    stop = rec.rounds[-1]
    assert stop["action"] == "stop" and stop["proposed_by"] == "budget"
    assert "budget of 8 real runs" in stop["why"] and "2 kept" in stop["why"]
    assert rec.search["runs"] == 6


def test_a_budget_that_is_not_a_count_is_named(repo_root):
    """The main job keeping to its budget is asserted on a main job that runs anyway:
    tests/test_main_job.py::test_infeasible_sla_is_reported_with_the_closest_recommendation_
    within_the_budget."""
    bad = run_main("--train-file", "tests/data/tiny_train.py", "--budget", "lots",
                   cwd=repo_root)
    assert bad.returncode == 2 and "--budget 'lots'" in bad.stderr


def test_a_run_that_costs_more_than_it_can_save_is_not_made():
    """The closed loop's stopping rule: the largest expected improvement, saved over
    [run].job_runs runs of the job, against one run's cost (a 20 s probe, or the whole job when
    shorter)."""
    from optimizer.foundation.allocation import Allocation
    from optimizer.foundation.config import OptimizerConfig
    from optimizer.search.acquisition import ProbeChoice
    from optimizer.search.expected import not_worth_a_run
    from optimizer.trials.records import TrialSummary

    def worth(job_runs, job_s, pick, preference="cost"):
        cfg = OptimizerConfig()
        cfg.run.job_runs = job_runs
        trials = [TrialSummary(trial_id="00", status="completed",
                               allocation=Allocation(0, 2, 4.0), wall_time_s=job_s,
                               samples=1000.0 * job_s, throughput=1000.0,
                               total_samples=1000.0 * job_s, mem_gb_peak=1.0)]
        return not_worth_a_run(cfg, preference, None, trials, pick, None)

    choice = ProbeChoice(Allocation(0, 1, 4.0), expected_improvement=0.05, spread=0.1)
    # A 10 s job: 5% of it saved 100 times is 50 s of job; one run is the whole 10 s job.
    assert worth(100, 10.0, choice) is None
    why = worth(10, 10.0, choice)
    assert why and "over 10 runs of the job" in why and "5.0%" in why
    # An hour-long job: a 20 s probe is worth it even for a single run of the job.
    assert worth(1, 3600.0, choice) is None
    assert worth(1, 3600.0, choice, "time") is None
    assert "s a job" in worth(1, 10.0, choice, "time")
    assert worth(0, 10.0, choice) is None  # 0: never
    assert worth(10, 10.0, None) is None


def test_a_small_budget_is_split_between_probes_the_loop_and_the_run_off():
    """Budgets of 2-16 runs with 4 planned probes: the probes leave the closed loop a run
    (or two) and the run-off is kept only where it is not most of what is left."""

    from optimizer.search.budget import probes_within, runoff_reserve, within_budget
    from optimizer.search.loop.rounds import reserved_runs

    assert [probes_within(n, 4) for n in (2, 3, 4, 5, 6, 12)] == [2, 2, 3, 4, 4, 4]
    assert probes_within(None, 4) == 4 and probes_within(3, 2) == 2
    run = SimpleNamespace(runoff_rounds=3, runoff_size=3)
    assert [runoff_reserve(run, n) for n in (4, 6, 8, 11, 12, None)] == [0, 0, 2, 2, 3, 3]
    assert runoff_reserve(SimpleNamespace(runoff_rounds=0, runoff_size=3), 16) == 0
    cfg = SimpleNamespace(run=run)
    assert reserved_runs(cfg, Job(Path("train.py")), 8, workers=True) == 3
    assert reserved_runs(cfg, Job(Path("train.py"), lr_arg="--lr"), 4, workers=True) == 2
    # A resumed run keeps the probes it recorded, even past what the budget now affords.
    budget = RunBudget(4, Path("/nonexistent"))
    assert within_budget(budget, list("abcd"), [False] * 4) == list("abc")
    assert within_budget(budget, list("abcd"), [True] * 4) == list("abcd")
