"""The job described once and the result rendered last (issue 74): a :class:`Job` read back
from the options ``run.json`` records is the job that recorded them, and a :class:`RunResult`
read back from ``recommendation.json`` is the result that wrote it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.atomic_files import to_json
from optimizer.foundation.errors import CloudoptError
from optimizer.foundation.job import RECORDED, Job, Launch
from optimizer.foundation.result import SCHEMA_VERSION, Recommendation, RunResult

CHOSEN = Allocation(0, 1, 0.40625, 128)
PLANNED = Allocation(0, 2, 1.0, 256)


def _result(preference=(0.5, 0.3, 0.2)) -> RunResult:
    """A result as the pipeline builds it: allocations inside the rounds, numpy numbers, a
    non-finite figure, the plan's outcomes."""
    rec = Recommendation.from_plan(
        {"agent": "reinforce", "allocation": PLANNED, "initial": CHOSEN,
         "outcomes": [{"name": "reinforce", "return": 6.5, "share_of_optimum": 0.98},
                      {"name": "optimal", "return": 6.6, "share_of_optimum": 1.0}],
         "predicted": {"time_s": 11.5, "cost": 1e-4, "throughput": 900.0, "mem_gb": 0.3},
         "sla_feasible": True, "fit": {"r2_throughput": np.float64(0.97), "n_trials": 5},
         "planned_adjustments": [], "notes": ["planned"], "inputs": {"trials": ["00"]}},
        allocation=CHOSEN, agent="reinforce", final_trial="refine-0-g0-c1-m4-b128",
        choice="the best measured setting", notes=["planned", "chosen"],
        rounds=[{"round": 0, "planned": PLANNED, "measured_allocation": CHOSEN,
                 "predicted_throughput": np.float32(901.5), "plan_spread": math.nan}],
        goodput={"note": "g", "comparison": [{"batch_size": 128, "efficiency": 1.0}]},
        memory={"request_gb": 0.40625, "peak_gb": 0.33, "source": "whole run"},
        measured={"trial": "refine-0", "job_time_s": 10.2, "job_cost": 9e-5,
                  "throughput": 980.0, "time_is": "measured"},
        search={"runs": 8, "dollars": 0.001}, runoff=["refine-0"],
        runoff_standings=[{"trial": "refine-0", "margin": 0.0}],
        history={"specs": ["runs/earlier"], "runs_used": 2, "hours_used": np.float64(0.5),
                 "used": [{"trial": "history-00", "run_id": "a"}], "ignored": []},
        learning_rate={"flag": "--lr", "note": "kept", "args": []},
        job_length={"unit": "epochs", "args": ["--epochs", "3"]}, sla_source="configuration")
    baseline = {"run": "baseline", "trial": "00", "status": "completed", "job_time_s": 12.0,
                "job_cost": 1.1e-4, "throughput": 800.0, "sla": {"time": True}}
    optimized = {**baseline, "run": "optimized", "trial": "refine-0", "job_time_s": 10.2,
                 "throughput": 980.0, "status": "probe"}
    return RunResult(preference, rec, baseline, optimized, {"monitor": {"warnings": []}})


@pytest.mark.parametrize("preference", ["cost", (0.5, 0.3, 0.2)])
def test_a_result_read_back_from_its_json_is_the_result(preference):
    result = _result(preference)
    back = RunResult.from_json(json.loads(to_json(result.to_json())))
    assert back == result
    assert back.recommendation.allocation == CHOSEN and back.preference == preference
    assert back.recommendation.planned_allocation == PLANNED
    assert back.recommendation.rounds[0]["planned"]["cpus"] == 2  # as the file holds it
    assert back.recommendation.rounds[0]["plan_spread"] is None  # NaN is no JSON number
    assert back.recommendation.history["used"][0]["trial"] == "history-00"


def test_recommendation_json_keeps_the_keys_users_read():
    body = _result().to_json()
    assert list(body) == [
        "schema_version", "preference", "agent", "share_of_optimum", "baseline", "optimized",
        "predicted_vs_measured", "allocation", "initial", "planned_adjustments", "policies",
        "sla_feasible", "sla_source", "comparison", "workload_fit", "choice", "final_trial",
        "runoff", "runoff_standings", "history", "memory", "search", "goodput", "learning_rate",
        "job_length", "measured", "live", "scaling", "planned_allocation", "rounds", "notes",
        "predicted"]
    assert body["schema_version"] == SCHEMA_VERSION and body["share_of_optimum"] == 0.98
    assert body["predicted_vs_measured"]["job_time_s"] == {
        "predicted": 11.5, "measured": 10.2, "measured_is": "predicted from measured throughput"}
    assert body["policies"][1]["name"] == "optimal" and "inputs" not in body


def test_a_result_of_another_version_is_refused_in_one_line():
    body = _result().to_json()
    with pytest.raises(CloudoptError, match=r"^run/recommendation.json: schema_version None"):
        RunResult.from_json({k: v for k, v in body.items() if k != "schema_version"},
                            "run/recommendation.json")
    with pytest.raises(CloudoptError, match="not a cloudopt result"):
        RunResult.from_json({"schema_version": SCHEMA_VERSION, "agent": "x"})


def test_a_job_read_back_from_its_recorded_options_is_the_job():
    job = Job(Path("train.py"), ("--epochs", "2", "--name", "a b"), preference=(0.2, 0.7, 0.1),
              batch_size_arg="--bs", lr_arg="--lr", time_max=600.0, budget="auto",
              workers_max=2, scripts=("train.py", "other.py"), launcher="torchrun",
              history=("runs/earlier", "mlflow:./mlruns"), history_job="trainer",
              live_plan="off")
    options = json.loads(json.dumps(job.options()))  # as run.json holds them
    assert options["live_plan"] == "off"  # a resume keeps it (it measured the plan before)
    assert list(options) == list(RECORDED) and options["train_args"] == "--epochs 2 --name 'a b'"
    assert Job.from_options(options, "train.py") == job
    assert options["history"] == ["runs/earlier", "mlflow:./mlruns"]  # --history, repeatable
    assert job.sla_given == {"time_max"} and job.overrides()["sla"]["time_max"] == 600.0
    record = job.record()
    assert record["train_args"] == ["--epochs", "2", "--name", "a b"]
    assert record["preference"] == (0.2, 0.7, 0.1) and record["options"] == job.options()


def test_the_time_box_is_the_jobs_else_the_configurations():
    assert Job(Path("t.py")).probe_box(20.0) == 20.0
    assert Job(Path("t.py"), probe_seconds=5.0).probe_box(20.0) == 5.0
    assert Job(Path("t.py"), probe_seconds=0).probe_box(20.0) is None  # every trial whole
    assert Job(Path("t.py")).launch == Launch() and not Job(Path("t.py")).batch_settable
