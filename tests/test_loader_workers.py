"""Data-loader workers (``--workers-arg``): read from the script, passed to trials, swept at the
end of the closed loop, kept out of the workload fit, and carried into the recommendation."""

import ast
import json

import pytest
from main_command import run_main

from optimizer.foundation.allocation import Allocation
from optimizer.search.after_loop.workers import worker_levels
from optimizer.search.choice import same_setting
from optimizer.search.workload_fit import measurements_from_trials
from optimizer.trials.records import TrialSummary
from optimizer.trials.runner import with_flag
from optimizer.trials.script_scan import flag_default
from optimizer.trials.training import TrainingModuleManager, describe_allocation


@pytest.mark.parametrize("cpus, current, expected", [
    (1, 2, [0, 1]), (2, 2, [0, 1, 4]), (2, 0, [1, 2, 4]), (16, 2, [0, 8, 16, 32]),
    (2, None, [0, 1, 2, 4]),
])
def test_worker_levels_are_none_half_all_and_twice_the_threads_without_the_current(
        cpus, current, expected):
    assert worker_levels(cpus, current) == expected
    assert worker_levels(cpus, current, more_first=True) == expected[::-1]


def test_a_worker_count_is_part_of_the_setting_and_its_key():
    plain = Allocation(0, 2, 4.0, 64)
    zero = Allocation(0, 2, 8.0, 64, workers=0)
    assert plain.key() == "g0-c2-m4-b64"  # recorded run folders keep their names
    assert zero.key() == "g0-c2-m8-b64-w0"
    assert not same_setting(plain, zero)
    assert same_setting(zero, Allocation(0, 2, 4.0, 64, workers=0))
    assert describe_allocation(zero).endswith("batch 64, no data-loader workers")
    assert TrialSummary.from_dict(TrialSummary("t", "completed", zero).to_dict()).allocation == zero


def test_with_flag_sets_a_plain_or_templated_flag_and_replaces_a_given_value():
    assert with_flag(["--workers", "4", "--x"], "--workers", 0) == ["--x", "--workers", "0"]
    assert with_flag(["--nw=4"], "--nw={}", 1) == ["--nw=1"]


def test_a_default_of_zero_workers_is_read_from_the_source():
    src = "import argparse\np=argparse.ArgumentParser()\np.add_argument('--workers', default=0)"
    assert flag_default(ast.parse(src), "--workers", minimum=0) == 0
    assert flag_default(ast.parse(src), "--workers") is None  # a batch size must be positive


def test_the_manager_passes_the_workers_flag_and_knows_the_default(repo_root):
    script = repo_root / "tests" / "data" / "tiny_train.py"
    m = TrainingModuleManager(script, "--samples 100", workers_arg="--workers")
    assert m.default_workers() == 2
    assert m.command(Allocation(0, 1, 4.0))[-2:] == ["--samples", "100"]
    assert m.command(Allocation(0, 1, 4.0, workers=0))[-2:] == ["--workers", "0"]
    assert TrainingModuleManager(script, "--workers 3", workers_arg="--workers"
                                 ).default_workers() == 3
    assert TrainingModuleManager(script).default_workers() is None


def test_trials_that_set_workers_stay_out_of_the_workload_fit():
    def trial(tid, workers):
        return TrialSummary(tid, "completed", Allocation(0, 1, 4.0, 64, workers=workers),
                            throughput=100.0, wall_time_s=1.0)

    table = measurements_from_trials([trial("a", None), trial("b", 0)])
    assert list(table["trial_id"]) == ["a"]


def test_main_job_sweeps_the_workers_and_recommends_the_measured_best(tmp_path, repo_root):
    """Each worker adds 10 ms to a step of the tiny job, so none is fastest and cheapest; the
    model never sees workers, so only the sweep can find it."""
    out = tmp_path / "run"
    proc = run_main(
        "--train-file", "tests/data/tiny_train.py", "--preference", "cost", "--train-args",
        "--samples 4000 --worker-cost 0.01", "--workers-arg=--workers", "--baseline-samples",
        "4", "--probe-seconds", "0", "--agent-seconds", "0.5", "--live-plan", "off",
        "--refine-rounds", "1", "--runoff-rounds", "1", "--output", str(out), "--quiet",
        cwd=repo_root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    swept = sorted(d.name for d in (out / "trials").glob("workers-*"))
    assert swept and all("-w" in name for name in swept), swept
    rec = json.loads((out / "recommendation.json").read_text())
    assert rec["allocation"]["workers"] == 0, rec["allocation"]
    assert "--workers" in (out / "k8s-resources.yaml").read_text()
    assert "workers-sweep" in (out / "report.md").read_text()
    run = json.loads((out / "run.json").read_text())
    assert run["options"]["workers_arg"] == "--workers"
