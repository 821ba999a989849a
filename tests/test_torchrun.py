"""Data-parallel scripts launched by torchrun: ranks, samples summed over them, a killed rank,
and the pieces of the workers' choice (cores split, the communication term, the settings)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import psutil
import pytest
from main_command import run_main

from envs.workload import WorkloadModel, WorkloadParams
from optimizer.commands.optimize import choose_launcher
from optimizer.foundation.allocation import Allocation, describe_allocation
from optimizer.foundation.config import ResourceConfig
from optimizer.search.after_loop.scaling import (
    fit_sync,
    replica_levels,
    scaled_settings,
    sync_points,
)
from optimizer.trials.failures import cause_of
from optimizer.trials.launchers.torchrun import (
    launch_command,
    launch_environment,
    looks_distributed,
    rank_events_path,
    rank_failure,
    rank_files,
    split_cores,
)
from optimizer.trials.probe import read_probe
from optimizer.trials.records import TrialSummary
from optimizer.trials.training import TrainingModuleManager, TrialRequest

ROOT = Path(__file__).resolve().parents[1]
DDP = ROOT / "examples" / "train_ddp.py"
KILLED = ROOT / "tests" / "data" / "ddp_rank_killed.py"


def _left_running(name: str) -> list[str]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if name in cmd and "pytest" not in cmd:
            out.append(cmd)
    return out


def _manager(path: Path, args: str = "") -> TrainingModuleManager:
    m = TrainingModuleManager(path, args, "--batch-size" if path == DDP else None)
    m.launcher = "torchrun"
    return m


def test_two_ranks_count_the_samples_the_script_counts(tmp_path):
    m = _manager(DDP, "--samples 4096 --epochs 2 --hidden 128")
    s = m.run_training(TrialRequest(Allocation(cpus=2, memory_gb=4, batch_size=32, replicas=2),
                                    tmp_path / "t", timeout_s=120), ResourceConfig())
    out = (tmp_path / "t" / "stdout.log").read_text()
    printed = int(re.search(r"global samples trained: (\d+)", out).group(1))
    assert s.status == "completed", s.stderr_tail
    assert printed == 8192
    assert s.samples == pytest.approx(printed, rel=0.05)
    rec = read_probe(tmp_path / "t" / "probe.jsonl")
    assert rec.world == 2 and len(rec.rank_samples) == 2
    assert rec.rank_samples[0] == pytest.approx(printed / 2, rel=0.05)
    assert rec.global_batch == 64 and rec.samples_per_step == 32
    assert (tmp_path / "t" / "probe.rank1.jsonl").is_file()
    config = json.loads((tmp_path / "t" / "config.json").read_text())
    assert "--nproc-per-node=2" in config["command"]
    assert s.model_info.get("heldout_loss") is not None
    assert not _left_running(str(DDP))


def test_a_killed_rank_fails_one_trial_in_one_line_and_leaves_nothing(tmp_path):
    m = _manager(KILLED)
    s = m.run_training(TrialRequest(Allocation(cpus=2, memory_gb=4, replicas=2), tmp_path / "t",
                                    timeout_s=90), ResourceConfig())
    assert s.status == "failed"
    assert "rank 1 of 2 was killed by signal 9" in s.reason
    line = cause_of(s, 10, 90)
    assert "\n" not in line and line.startswith("crashed: rank 1 of 2 was killed by signal 9")
    assert "ChildFailedError" not in line
    assert not _left_running(str(KILLED))


def test_rank_failure_reads_torchrun_report():
    report = ("Root Cause (first observed failure):\n[0]:\n  time      : x\n  host      : h\n"
              "  rank      : 3 (local_rank: 1)\n  exitcode  : 2 (pid: 99)\n")
    assert rank_failure(report, 4) == "rank 3 of 4 exited with code 2"
    assert rank_failure("Traceback: ValueError", 2) is None


def test_cores_split_between_ranks_and_each_rank_threads():
    assert split_cores([0, 1, 2, 3], 2) == [[0, 1], [2, 3]]
    assert split_cores([0, 1, 2], 2) == [[0, 1], [2]]
    assert split_cores([5], 2) == [[5], [5]]
    env = launch_environment({"OMP_NUM_THREADS": "4"}, [0, 1, 2, 3], 2)
    assert env["CLOUDOPT_RANK_CPUS"] == "0,1;2,3" and env["OMP_NUM_THREADS"] == "2"
    assert env["CLOUDOPT_PROBE_RANKS"] == "1"
    cmd = launch_command(["python", "train.py", "--bs", "8"], 2)
    assert cmd[-4:] == ["python", "train.py", "--bs", "8"] and "--nproc-per-node=2" in cmd


def test_rank_files_are_named_and_found_in_rank_order(tmp_path):
    base = tmp_path / "probe.jsonl"
    assert rank_events_path(base, 0) == base
    for r in (10, 2, 1):
        rank_events_path(base, r).write_text("")
    assert [p.name for p in rank_files(base)] == [
        "probe.rank1.jsonl", "probe.rank2.jsonl", "probe.rank10.jsonl"]


@pytest.mark.parametrize(("source", "expected"), [
    ("import torch.distributed as dist\ndist.init_process_group('gloo')\n", True),
    ("local = int(os.environ['LOCAL_RANK'])\n", True),
    ("model = DistributedDataParallel(model)\n", True),
    ("import torch\nmodel = torch.nn.Linear(2, 2)\n", False),
])
def test_a_distributed_script_is_launched_by_torchrun(source, expected):
    assert looks_distributed(source) is expected
    assert choose_launcher("auto", source) == ("torchrun" if expected else "python")
    assert choose_launcher("python", source) == "python"


def test_allocation_names_its_workers():
    a = Allocation(cpus=4, memory_gb=8, batch_size=32, replicas=2)
    assert a.key().endswith("-r2") and Allocation(cpus=4).key().endswith("bdefault")
    assert a.global_batch == 64
    assert describe_allocation(a).startswith("2 DDP workers, 4 CPUs") and "per worker" in \
        describe_allocation(a)


def _cpu_model(**params) -> WorkloadModel:
    p = WorkloadParams(device="cpu", alpha_c=0.002, beta_c=1e-4, parallel_fraction=0.9,
                       sync_c=0.0, **params)
    return WorkloadModel(params=p)


def test_one_worker_predicts_as_before_and_workers_pay_the_sync_term():
    m = _cpu_model(alpha_r=0.003, beta_r=0.001)
    one = m.predict(0, 4, 8, 64)
    assert float(m.predict(0, 4, 8, 64, replicas=1)["step_time"]) == float(one["step_time"])
    two = m.predict(0, 4, 8, 64, replicas=2)
    quiet = _cpu_model().predict(0, 4, 8, 64, replicas=2)
    assert float(two["step_time"]) == pytest.approx(float(quiet["step_time"]) + 0.003)
    four = m.predict(0, 4, 8, 64, replicas=4)
    assert float(four["step_time"]) == pytest.approx(
        float(_cpu_model().predict(0, 4, 8, 64, replicas=4)["step_time"]) + 0.003 + 0.002)


def _trial(i: int, a: Allocation, thr: float) -> TrialSummary:
    return TrialSummary(trial_id=f"t{i}", status="completed", allocation=a, throughput=thr,
                        samples=1000.0, wall_time_s=1.0)


def test_the_communication_term_is_fitted_from_multi_worker_trials():
    truth = _cpu_model(alpha_r=0.004, beta_r=0.002)
    fresh = _cpu_model()
    trials = []
    for i, r in enumerate((2, 4, 8)):
        a = Allocation(cpus=8, memory_gb=8, batch_size=32, replicas=r)
        thr = float(truth.predict(0, 8, 8, a.global_batch, replicas=r)["throughput"])
        trials.append(_trial(i, a, thr))
    trials.append(_trial(9, Allocation(cpus=8, memory_gb=8, batch_size=32), 1e4))  # one worker
    fitted, points = fit_sync(fresh, trials)
    assert len(points) == 3
    assert fitted.params.alpha_r == pytest.approx(0.004, rel=1e-3)
    assert fitted.params.beta_r == pytest.approx(0.002, rel=1e-3)
    single, _ = fit_sync(fresh, trials[:1])  # one worker count: the mean, no slope
    assert single.params.alpha_r == pytest.approx(0.004, rel=1e-3) and single.params.beta_r == 0
    assert sync_points(fresh, trials[3:]) == []


def test_workers_are_tried_at_the_same_and_at_the_kept_global_batch():
    assert replica_levels(4, 2, 2) == [2]
    assert replica_levels(8, 2, 16) == [2, 4, 8]
    assert replica_levels(1, 8, 8) == []
    best = Allocation(cpus=2, memory_gb=4, batch_size=64)
    settings = scaled_settings(best, [2], cpu_max=2)
    got = {(a.replicas, a.cpus, a.batch_size) for a, _ in settings}
    assert got == {(2, 2, 64), (2, 2, 32)}
    more = {(a.replicas, a.cpus, a.batch_size) for a, _ in scaled_settings(best, [2], 4)}
    assert (2, 4, 64) in more and (2, 4, 32) in more


def test_the_main_job_chooses_the_workers_of_a_ddp_script(tmp_path, repo_root):
    out = tmp_path / "run"
    proc = run_main(
        "--train-file", str(DDP), "--train-args=--samples 2048 --hidden 64 --epochs 2",
        "--batch-size-arg=--batch-size", "--launcher", "auto", "--workers-max", "2",
        "--preference", "cost", "--budget", "6", "--baseline-samples", "3",
        "--probe-seconds", "0", "--agent-seconds", "0.5", "--refine-rounds", "1",
        "--runoff-rounds", "0", "--live-plan", "off", "--output", str(out), "--quiet",
        cwd=repo_root)
    assert proc.returncode == 0, proc.stderr[-2000:]
    two = [d for d in (out / "trials").iterdir() if d.name.endswith("-r2")]
    assert two and all((d / "probe.rank1.jsonl").is_file() for d in two)
    rec = json.loads((out / "recommendation.json").read_text())
    scaling = rec["scaling"]
    assert {m["replicas"] for m in scaling["measured"]} == {1, 2}
    if rec.get("workload_fit"):  # a busy machine can leave the model unfitted: points alone
        assert scaling["sync_points"] and len(scaling["modelled"]) == 2
    assert "## Data-parallel workers" in (out / "report.md").read_text()
    assert (out / "trainjob.yaml").is_file() == (rec["allocation"]["replicas"] > 1)
    assert not _left_running(str(DDP))
