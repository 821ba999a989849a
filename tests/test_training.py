"""The real runner: subprocess runs, failures recorded as trials, probes and their predictions."""

import json
import textwrap

import pandas as pd
import pytest

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import ResourceConfig
from optimizer.foundation.errors import TrainingScriptError
from optimizer.trials.records import TrialSummary
from optimizer.trials.run.request import TrialRequest
from optimizer.trials.training import (
    TrainingModuleManager,
    analyze_source,
    parse_rate,
    total_samples_from_args,
)

PRICES = ResourceConfig(cpu_count_max=2, memory_max=8.0, gpu_count_max=0)
TINY = "--epochs 1 --samples 1500 --hidden 64 --log-interval 0.1"


def script(tmp_path, body, name="s.py"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(body))
    return p


def run(path, tmp_path, alloc=None, args=None, **kw):
    kw.setdefault("timeout_s", 60)
    mgr = TrainingModuleManager(path, args)
    return mgr.run_training(TrialRequest(alloc or Allocation(cpus=1, memory_gb=2.0),
                                         tmp_path / "run" / "trials" / "00-t", **kw), PRICES)


@pytest.mark.slow
def test_example_runs_with_trace_metrics_and_records(tmp_path, repo_root):
    s = run(repo_root / "examples" / "train_mlp.py", tmp_path, args=TINY,
            alloc=Allocation(cpus=1, memory_gb=2.0, batch_size=50), monitor_interval=0.2)
    d = tmp_path / "run" / "trials" / "00-t"
    assert s.status == "completed" and s.exit_code == 0
    assert s.throughput_source == "metrics_csv" and s.throughput > 0
    assert s.samples == 1500 and s.total_samples == 1500
    trace = pd.read_csv(d / "trace.csv")
    assert list(trace.columns) == ["exec_id", "time_s", "cpu_cores", "mem_gb"]
    assert (trace["cpu_cores"] > 0).any() and (trace["mem_gb"] > 0.01).all()
    assert s.cpu_cores_mean > 0 and s.mem_gb_peak > 0.01
    assert s.cost == pytest.approx(s.hourly_cost * s.wall_time_s / 3600, rel=1e-3)
    assert s.hourly_cost == pytest.approx(1 * 0.0316 + 2.0 * 0.0042)
    assert s.model_info["model_family"] == "MLP" and s.model_info["params"] > 0
    assert s.model_info["batch_size"] == 50
    metrics = pd.read_csv(d / "metrics.csv")
    assert metrics["samples"].iloc[-1] == 1500
    config = json.loads((d / "config.json").read_text())
    assert config["env"]["OPTIMIZER_BATCH_SIZE"] == "50" and config["env"]["OMP_NUM_THREADS"] == "1"
    assert "batch_size=50" in (d / "stdout.log").read_text()
    assert TrialSummary.load(d) == s
    rows = pd.read_csv(tmp_path / "run" / "trials.csv")
    assert rows.loc[0, "trial_id"] == "00-t" and rows.loc[0, "batch_size"] == 50
    assert not (d / ".work").exists()


def test_script_that_raises_is_a_failed_trial(tmp_path):
    p = script(tmp_path, """
        import sys
        print("starting", flush=True)
        raise RuntimeError("boom: bad tensor shape")
    """)
    s = run(p, tmp_path)
    assert s.status == "failed" and s.reason == "crash" and s.exit_code == 1
    assert "boom: bad tensor shape" in s.stderr_tail
    assert (tmp_path / "run" / "trials" / "00-t" / "summary.json").exists()


def test_time_limit_is_a_failed_trial(tmp_path):
    p = script(tmp_path, "import time\ntime.sleep(60)\n")
    s = run(p, tmp_path, timeout_s=1.0)
    assert s.status == "failed" and s.reason == "timeout"
    assert 1.0 <= s.wall_time_s < 6


def test_memory_limit_kills_the_tree_as_oom(tmp_path):
    p = script(tmp_path, """
        import time
        chunks = []
        for _ in range(40):  # up to 2 GB, written so the pages are resident
            chunks.append(b"x" * 50_000_000)
            time.sleep(0.05)
    """)
    s = run(p, tmp_path, alloc=Allocation(cpus=1, memory_gb=0.25), monitor_interval=0.1)
    assert s.status == "failed" and s.reason == "oom"
    assert s.mem_gb_peak > 0.25


def test_missing_file_and_syntax_error_are_clear_errors(tmp_path):
    with pytest.raises(TrainingScriptError, match="nope.py: training script not found"):
        TrainingModuleManager(tmp_path / "nope.py").load_module()
    p = script(tmp_path, "x = 1\ndef f(:\n    pass\n")
    with pytest.raises(TrainingScriptError, match=r"s\.py:2: syntax error"):
        TrainingModuleManager(p).load_module()


def test_cpu_affinity_enforces_the_cpu_count(tmp_path):
    p = script(tmp_path, """
        import os
        print("cpus", len(os.sched_getaffinity(0)), os.environ["OMP_NUM_THREADS"])
    """)
    if not hasattr(__import__("os"), "sched_setaffinity"):
        pytest.skip("no CPU affinity on this platform")
    s = run(p, tmp_path, alloc=Allocation(cpus=1, memory_gb=1.0))
    out = (tmp_path / "run" / "trials" / "00-t" / "stdout.log").read_text()
    assert s.status == "completed" and "cpus 1 1" in out


PACED = """
    # Constant throughput by construction: step i ends at t0 + i * dt, whatever the load.
    import csv, os, sys, time
    batch, dt, steps = 100, 0.02, 1000  # 5000 samples/s, 100000 samples, 20 s
    print(f"total_samples={batch * steps}", flush=True)
    path = None if "--no-csv" in sys.argv else os.environ.get("OPTIMIZER_METRICS_CSV")
    fh = open(path, "a", newline="") if path else None
    w = csv.writer(fh) if fh else None
    if w:
        w.writerow(["step", "samples", "samples_per_s"]); fh.flush()
    t0 = time.perf_counter()
    for i in range(1, steps + 1):
        time.sleep(max(t0 + i * dt - time.perf_counter(), 0))
        if i % 10 == 0:
            rate = batch * 10 / (10 * dt)
            if w:
                w.writerow([i, i * batch, rate]); fh.flush()
            else:
                print(f"step {i} {rate:.1f} samples/s", flush=True)
"""


@pytest.mark.parametrize("extra, source", [(None, "metrics_csv"), ("--no-csv", "stdout")])
def test_probe_stops_at_time_box_and_predicts_full_time(tmp_path, extra, source):
    p = script(tmp_path, PACED)
    s = run(p, tmp_path, args=extra, probe_seconds=2.5, monitor_interval=0.2,
            steady_windows=10_000)  # never "steady": the time box must stop it
    assert s.status == "probe" and s.reason == ""
    assert 2.5 <= s.wall_time_s < 4.5
    assert s.throughput_source == source
    assert s.throughput == pytest.approx(5000, rel=0.05)
    assert s.total_samples == 100_000
    truth = 20.0  # startup of a bare interpreter is a few tens of ms more
    assert s.predicted_total_time_s == pytest.approx(truth, rel=0.15)
    assert s.predicted_total_cost == pytest.approx(s.hourly_cost * s.predicted_total_time_s / 3600)


def test_probe_stops_early_when_steady(tmp_path):
    p = script(tmp_path, PACED)
    s = run(p, tmp_path, probe_seconds=15, monitor_interval=0.2)
    assert s.status == "probe" and s.wall_time_s < 8


def test_entry_function_without_main_block_and_batch_flag(tmp_path):
    p = script(tmp_path, """
        import sys
        def train():
            bs = int(sys.argv[sys.argv.index("--bs") + 1])
            print(f"batch {bs} 12.5it/s")
    """)
    mgr = TrainingModuleManager(p, "--bs 8 --other x", batch_size_arg="--bs")
    assert mgr.load_module().entry == "train"
    cmd = mgr.command(Allocation(batch_size=32))
    assert cmd[-4:] == ["--other", "x", "--bs", "32"]
    s = mgr.run_training(TrialRequest(Allocation(cpus=1, memory_gb=1.0, batch_size=32),
                                      tmp_path / "t"), PRICES)
    assert s.status == "completed"
    assert s.throughput_source == "stdout" and s.throughput == pytest.approx(12.5 * 32)


def test_rate_parsing():
    assert parse_rate("epoch 1 1234.5 samples/s", None) == 1234.5
    assert parse_rate("speed: 99 images/sec", None) == 99
    assert parse_rate("samples_per_sec=42.0", None) == 42
    assert parse_rate(" 50%|#####| 50/100 [00:05<00:05, 10.00it/s]", 16) == 160
    assert parse_rate("2.00s/it", 8) == 4
    assert parse_rate("10.00it/s", None) is None
    assert parse_rate("loss 0.5", 8) is None


def test_total_samples_from_args():
    assert total_samples_from_args(["--samples", "100", "--epochs", "3"]) == 300
    assert total_samples_from_args(["--num-samples=50", "--epochs=2"]) == 100
    assert total_samples_from_args(["--epochs", "2"]) is None


def test_static_analysis_of_source():
    import ast

    src = textwrap.dedent("""
        import torch
        from torch import nn
        from torchvision.datasets import CIFAR10
        net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Flatten(), nn.Linear(10, 5)).cuda()
    """)
    info = analyze_source(ast.parse(src))
    assert info["uses_gpu"] is True
    assert info["model_family"] == "CNN"
    assert info["dataset"] == "CIFAR-10"
    assert info["params"] == (3 * 8 * 9 + 8) + (10 * 5 + 5)
    assert info["layers"] == 2
    assert analyze_source(ast.parse("import torchvision\nm = torchvision.models.resnet50()\n")
                          )["model_family"] == "ResNet"


def test_gpu_allocation_without_a_gpu_uses_fake_nvml(tmp_path, monkeypatch):
    # No GPU here: NVML is faked so the GPU path (device choice, trace columns) still runs.
    from optimizer.foundation import gpu

    monkeypatch.setattr(gpu, "gpu_utilization", lambda idx=None: [40.0 + i for i in idx])
    monkeypatch.setattr(gpu, "gpu_memory_used_gb", lambda idx=None: [1.5 for _ in idx])
    p = script(tmp_path, """
        import os, time
        print("visible", os.environ["CUDA_VISIBLE_DEVICES"], flush=True)
        time.sleep(0.6)
    """)
    s = run(p, tmp_path, alloc=Allocation(gpus=2, cpus=1, memory_gb=1.0), monitor_interval=0.1,
            visible_devices=[3, 5, 6])
    d = tmp_path / "run" / "trials" / "00-t"
    assert "visible 3,5" in (d / "stdout.log").read_text()
    trace = pd.read_csv(d / "trace.csv")
    assert list(trace.columns) == ["exec_id", "time_s", "cpu_cores", "mem_gb", "gpu_util",
                                   "gpu_mem_gb"]
    assert (trace["gpu_util"] == 44.0).all() and (trace["gpu_mem_gb"] == 3.0).all()
    assert s.gpu_util_mean == pytest.approx(44.0) and s.gpu_mem_gb_peak == pytest.approx(3.0)
    assert s.hourly_cost == pytest.approx(2 * PRICES.cost_per_gpu_hour + PRICES.cost_per_cpu_hour
                                          + 1.0 * PRICES.cost_per_gb_hour)


def test_wall_time_is_when_the_script_ended_not_the_next_poll(tmp_path, monkeypatch):
    import time

    import optimizer.trials.runner as trial_runner

    slow_poll = trial_runner.poll_outputs

    def sluggish(*args, **kwargs):  # a busy machine: each pass over the outputs takes 0.7 s
        time.sleep(0.7)
        return slow_poll(*args, **kwargs)

    monkeypatch.setattr(trial_runner, "poll_outputs", sluggish)
    p = script(tmp_path, "import time\ntime.sleep(1.1)\n")
    s = run(p, tmp_path, monitor_interval=0.2)
    # The poll loop alone would see the exit at its pass after 1.5 s (0, 0.8, 1.6, ...).
    assert s.status == "completed" and 1.1 <= s.wall_time_s < 1.45
