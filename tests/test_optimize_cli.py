"""The main command: argument and input errors exit 2; a small real run prints its table."""

import json
import textwrap

import pandas as pd
import pytest
from main_command import run_main

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import OptimizerConfig, ResourceConfig
from optimizer.search.baseline import plan_baseline, rank_trials
from optimizer.trials.records import TrialSummary

QUICK = textwrap.dedent("""
    import os, time
    bs = int(os.environ.get("OPTIMIZER_BATCH_SIZE", "32"))
    print(f"total_samples={20 * bs}", flush=True)
    for i in range(4):
        time.sleep(0.05)
        print(f"step {i} {bs / 0.05:.1f} samples/s", flush=True)
""")


def cli(*args, cwd=None):
    return run_main(*args, cwd=cwd)


@pytest.mark.parametrize("args, needle", [
    (["--train-file", "nope.py"], "nope.py: training script not found"),
    (["--train-file", "examples/train_mlp.py", "--preference", "cheap"], "unknown preference 'cheap'"),
    (["--train-file", "examples/train_mlp.py", "--preference", "0.5,0.5,0.5"], "must sum to 1"),
    (["--train-file", "examples/train_mlp.py", "--resume", "/nonexistent/run"], "no such run folder"),
    (["--train-file", "examples/train_mlp.py", "--agent-seconds", "-1"],
     "--agent-seconds must be > 0 (got -1)"),
    (["--train-file", "examples/train_mlp.py", "--baseline-samples", "0"],
     "baseline_samples must be a positive integer (got 0)"),
])
def test_user_errors_exit_2_without_traceback(repo_root, args, needle):
    proc = cli(*args, cwd=repo_root)
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr and "Traceback" not in proc.stderr


def test_syntax_error_names_file_and_line(tmp_path, repo_root):
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nfor x in\n")
    proc = cli("--train-file", str(bad), cwd=repo_root)
    assert proc.returncode == 2 and f"{bad}:2: syntax error" in proc.stderr


def test_help_lists_options_and_commands(repo_root):
    proc = cli("--help", cwd=repo_root)
    assert proc.returncode == 0
    for opt in ("--train-file", "--probe-seconds", "--dataset-path", "--offline-logs",
                "--phase-model", "--batch-size-arg"):
        assert opt in proc.stdout


def test_small_real_run(tmp_path, repo_root):
    script = tmp_path / "quick.py"
    script.write_text(QUICK)
    out = tmp_path / "run"
    args = ["--train-file", str(script), "--preference", "time", "--baseline-samples", "3",
            "--probe-seconds", "0", "--agent-seconds", "0.5", "--live-plan", "off", "--train-args", "--foo 1",
            "--runoff-rounds", "1", "--budget", "5", "--output", str(out), "--quiet"]
    proc = cli(*args, cwd=repo_root)
    assert proc.returncode == 0, proc.stderr
    assert "samples/s" in proc.stdout and "best baseline setting for 'time': " in proc.stdout
    assert "SLA baseline: time met" in proc.stdout
    trials = pd.read_csv(out / "trials.csv")
    # three baseline trials, then the closed loop's own (none when nothing is expected to
    # beat the best baseline trial); the recommendation is one of them, never an unmeasured plan
    assert len(trials) >= 3 and set(trials["status"]) == {"completed"}
    assert trials["trial_id"].str.match(r"^(0\d|refine-\d|runoff-(\d|alone|again)-time)-").all()
    rec = json.loads((out / "recommendation.json").read_text())
    assert rec["final_trial"] in set(trials["trial_id"])
    assert "recommend " in proc.stdout and "right-sized memory request" in proc.stdout
    assert set(trials["throughput_source"]) == {"stdout"}
    assert (out / "config.json").exists()
    assert json.loads((out / "run.json").read_text())["train_args"] == ["--foo", "1"]
    # that a resumed run runs nothing again: tests/test_resume.py


def test_plan_varies_threads_and_batch_within_bounds():
    rc = ResourceConfig(gpu_count_max=0, cpu_count_max=4, memory_max=32.0)
    plan = plan_baseline(rc, 4)
    assert plan[0] == Allocation(gpus=0, cpus=4, memory_gb=16.0, batch_size=None)
    assert len({a.cpus for a in plan}) >= 2 and len({a.batch_size for a in plan}) >= 2
    assert len(plan) == len(set(map(Allocation.key, plan))) == 4
    gpu = plan_baseline(ResourceConfig(gpu_count_max=2, cpu_count_max=4, memory_max=32.0), 4,
                        uses_gpu=True)
    assert {a.gpus for a in gpu} == {0, 1, 2}
    one = plan_baseline(ResourceConfig(gpu_count_max=0, cpu_count_max=1, memory_max=2.0), 10)
    assert all(a.cpus == 1 and a.memory_gb <= 2.0 for a in one)
    # a big machine's second CPU count is the range's geometric middle, not its half
    big = plan_baseline(ResourceConfig(gpu_count_max=1, cpu_count_max=16, memory_max=128.0), 4,
                        uses_gpu=True)
    assert [(a.gpus, a.cpus) for a in big[:3]] == [(1, 16), (0, 16), (1, 4)]
    assert [a.cpus for a in plan_baseline(rc, 2)] == [4, 2]


def test_a_crashed_setting_and_a_gpu_count_that_only_crashes_are_not_probed_again():
    # On the H200 the closed loop re-measured the CPU-only setting of a script that needs CUDA.
    from optimizer.search.expected import measured_setting as _measured

    def trial(i, g, c, b, ok):
        return TrialSummary(trial_id=f"t{i}", status="completed" if ok else "failed",
                            reason=None if ok else "crash",
                            allocation=Allocation(g, c, 16.0, b), throughput=1.0 if ok else None)

    crashed = trial(1, 0, 16, None, False)
    trials = [trial(0, 1, 16, 128, True), crashed]
    assert _measured(Allocation(0, 16, 64.0), trials, 128, True)  # the crashed one itself
    assert _measured(Allocation(0, 4, 16.0, 64), trials, 128, True)  # no CPU-only run works
    assert _measured(Allocation(0, 4, 16.0), trials, 128, False)
    assert not _measured(Allocation(1, 4, 16.0, 64), trials, 128, True)
    # a crash beside a run that works on the same GPU count rules out that setting only
    mixed = [*trials, trial(2, 0, 4, 64, True)]
    assert not _measured(Allocation(0, 8, 16.0, 64), mixed, 128, True)
    assert _measured(Allocation(0, 16, 16.0), mixed, 128, True)


def test_the_time_order_applies_only_where_the_budget_affords_two_probes(tmp_path):
    from optimizer.pipeline import CloudResourceOptimizer
    from optimizer.search.budget import RunBudget

    opt = CloudResourceOptimizer(OptimizerConfig(resources=ResourceConfig(
        gpu_count_max=0, cpu_count_max=2, memory_max=8.0)), quiet=True)
    opt.set_user_preference("time")

    def second(total):
        opt.port.budget = RunBudget(total, tmp_path)
        return opt.plan_trials({}, reference_batch=64)[1]

    assert (second(2).cpus, second(2).batch_size) == (2, 128)
    assert (second(12).cpus, second(12).batch_size) == (1, None)
    assert (second(None).cpus, second(None).batch_size) == (1, None)
    opt.set_user_preference("cost")
    assert (second(2).cpus, second(2).batch_size) == (1, None)


def test_a_probe_recorded_under_another_index_is_found_by_its_setting(tmp_path):
    """Preferences probe in different orders: a run folder reused under another preference
    finds its probes by setting, not by their place in the order."""
    from optimizer.search.baseline import probe_folder

    few = Allocation(gpus=0, cpus=1, memory_gb=4.0)
    recorded = tmp_path / "trials" / "01-g0-c1-m4-bdefault"
    recorded.mkdir(parents=True)
    assert probe_folder(tmp_path, 2, few).name == "02-g0-c1-m4-bdefault"  # no summary yet
    (recorded / "summary.json").write_text("{}")
    assert probe_folder(tmp_path, 2, few) == recorded
    assert probe_folder(tmp_path, 1, few) == recorded
    other = Allocation(gpus=0, cpus=1, memory_gb=4.0, batch_size=16)
    assert probe_folder(tmp_path, 1, other).name == "01-g0-c1-m4-b16"


def test_a_time_preference_probes_the_larger_batch_before_fewer_cpus():
    rc = ResourceConfig(gpu_count_max=0, cpu_count_max=2, memory_max=8.0)
    plain = plan_baseline(rc, 4, reference_batch=64)
    timed = plan_baseline(rc, 4, reference_batch=64, favour_time=True)
    assert [(a.cpus, a.batch_size) for a in plain[:2]] == [(2, None), (1, None)]
    assert [(a.cpus, a.batch_size) for a in timed[:2]] == [(2, None), (2, 128)]
    assert sorted(map(Allocation.key, plain)) == sorted(map(Allocation.key, timed))
    # nothing to move where the batch cannot be varied
    assert plan_baseline(rc, 4, vary_batch=False, favour_time=True) == \
        plan_baseline(rc, 4, vary_batch=False)


def test_rank_prefers_sla_then_weighted_score():
    cfg = OptimizerConfig(resources=ResourceConfig(gpu_count_max=0, cpu_count_max=2,
                                                   memory_max=8.0))
    cfg.sla.time_max = 100.0

    def s(tid, cpus, t, c, status="probe"):
        return TrialSummary(tid, status, Allocation(cpus=cpus, memory_gb=4.0 * cpus),
                            predicted_total_time_s=t, predicted_total_cost=c, throughput=1.0)
    trials = [s("fast", 2, 50.0, 2.0), s("cheap", 1, 90.0, 1.0), s("slow", 1, 150.0, 0.5),
              s("bad", 1, None, None, "failed")]
    cost = rank_trials(trials, cfg, "cost")
    assert list(cost["trial_id"]) == ["cheap", "fast", "slow", "bad"]  # slow violates time
    assert list(rank_trials(trials, cfg, "time")["trial_id"][:2]) == ["fast", "cheap"]
    # Each objective over its best among usable trials: cost 1.0/0.5 (slow is cheapest), time
    # 90/50, resource share 0.5/0.5 -> 0.7*2 + 0.2*1.8 + 0.1*1 = 1.86.
    assert cost.loc[0, "score"] == pytest.approx(0.7 * 2 + 0.2 * 1.8 + 0.1 * 1)


def test_a_run_folder_from_another_machine_is_refused_and_kept(tmp_path):
    # A folder brought back from the H200 was resumed here: it planned 2-CPU trials beside
    # 16-CPU ones and overwrote the config it had recorded.
    from optimizer.commands.optimize import _same_machine

    here = OptimizerConfig(resources=ResourceConfig(gpu_count_max=0, cpu_count_max=2,
                                                    memory_max=8.0))
    (tmp_path / "config.json").write_text(json.dumps(
        {"resources": {"cpu_count_max": 16, "gpu_count_max": 1}}))
    with pytest.raises(Exception, match="16 CPU.*1 GPU.*here the bounds are 2 CPU.*0 GPU"):
        _same_machine(tmp_path, here)
    assert json.loads((tmp_path / "config.json").read_text())["resources"]["cpu_count_max"] == 16
    (tmp_path / "config.json").write_text(json.dumps(
        {"resources": {"cpu_count_max": 2, "gpu_count_max": 0}}))
    _same_machine(tmp_path, here)  # the same bounds: resumed
    _same_machine(tmp_path / "missing", here)  # nothing recorded: nothing to compare
