"""The closed loop never measures a setting a fifth time because nothing else can be proposed:
it stops and says why."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import load_config
from optimizer.foundation.job import Job
from optimizer.search.core.state import SearchJob
from optimizer.search.expected import Acquisition
from optimizer.search.loop import rounds as rounds_module
from optimizer.search.planning import RoundPlan
from optimizer.search.stages import refine
from optimizer.trials.records import TrialSummary


def _trial(i: int, alloc: Allocation) -> TrialSummary:
    return TrialSummary(trial_id=f"t{i}", status="completed", allocation=alloc,
                        wall_time_s=10.0, samples=1000.0, throughput=100.0, hourly_cost=1.0,
                        cost=10 / 3600, total_samples=1000.0, predicted_total_time_s=10.0,
                        mem_gb_peak=0.5)


FAKE_MODEL = SimpleNamespace(workload=SimpleNamespace(
    meta={}, predict_trial=lambda alloc: {"throughput": 100.0}))


class FakePort:
    """Plans the same setting every round, with a fit too poor to trust, and an acquisition
    that can only propose that setting again."""

    budget = None

    def __init__(self, config, setting):
        self.config, self.user_preference, self.setting = config, "cost", setting
        self.measured, self.said = [], []

    def plan(self, port, job, usable, k):
        return RoundPlan({"agent": "reinforce", "allocation": self.setting,
                          "fit": {"max_rel_error": 0.9}}, FAKE_MODEL, None)

    def measure(self, manager, alloc, prefix, run_dir, opts, total):
        self.measured.append(alloc)
        return _trial(100 + len(self.measured), alloc)

    def label_batch(self, trial, trial_dir, settable):
        return trial

    def say(self, text, always=False):
        self.said.append(text)


def test_the_loop_stops_instead_of_a_fifth_run_of_one_setting(tmp_path, monkeypatch):
    config = load_config(None)
    config.run.refine_rounds = 8
    config.run.runoff_rounds = 0
    setting = Allocation(0, 1, 4.0, 64)
    port = FakePort(config, setting)
    pick = SimpleNamespace(allocation=setting, expected_improvement=0.05)
    monkeypatch.setattr(rounds_module, "probe_by_improvement",
                        lambda *a, **k: Acquisition(pick, np.zeros((1, 1)), [setting], (0, 0)))
    trials = [_trial(0, setting), _trial(1, Allocation(0, 2, 4.0, 64))]
    spec = Job(Path("train.py"), batch_control="flag", default_batch=64, live_plan="off")
    job = SearchJob(None, tmp_path, spec, 1000.0, trials[0])
    outcome = refine(port, job, trials, planner=port.plan)
    assert len(port.measured) == 3  # 1 baseline run + 3 = 4 runs of the setting, never 5
    stop = outcome.recommendation.rounds[-1]
    assert stop["action"] == "stop" and "measured 4 times already" in stop["why"]
    assert outcome.stop.rule == "repeat-limit" and outcome.stop.why == stop["why"]
    assert any("closed loop stops" in s for s in port.said)
