"""The in-process probe (optimizer.trials.probe): it sees an unmodified PyTorch script's steps,
samples, epochs, loss, gradients and stages, and changes nothing the script can observe."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest
from main_command import run_main

from optimizer.foundation.allocation import Allocation
from optimizer.trials.probe import probe_environment, read_probe, write_stage_marks
from optimizer.trials.records import TrialSummary
from optimizer.trials.run.request import TrialRequest

LOOP = """
import os, sys, time
import torch
from torch.utils.data import DataLoader, TensorDataset

def main():
    torch.manual_seed(0)
    X = torch.randn(4096, 256); y = (X[:, :4].sum(1) > 0).long()
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = DataLoader(TensorDataset(X, y), batch_size=64, shuffle=True,
                        num_workers=int(os.environ.get("WORKERS", "0")))
    time.sleep(0.3)  # start-up: data preparation
    train_s, n = 0.0, 0
    for epoch in range(int(os.environ.get("EPOCHS", "3"))):
        model.train()
        t0 = time.perf_counter()
        for xb, yb in loader:
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            n += len(xb) if epoch else 0
        train_s += time.perf_counter() - t0 if epoch else 0.0  # the first epoch warms up
        model.eval()
        with torch.no_grad():
            for xb, _ in loader:
                model(xb)
    print(f"rate={n / max(train_s, 1e-9):.1f}")
    print(f"argv={sys.argv} name={__name__} file={__file__}")
    print(f"threads={torch.get_num_threads()}")
    sys.exit(int(os.environ.get("CODE", "0")))

if __name__ == "__main__":
    main()
"""


def _run(tmp_path, source, probe=True, extra_env=None, args=(), name="train.py"):
    script = tmp_path / name
    script.write_text(textwrap.dedent(source))
    events = tmp_path / f"events-{probe}.jsonl"
    env = dict(os.environ, **(extra_env or {}))
    if probe:
        env = probe_environment(env, events)
    done = subprocess.run([sys.executable, str(script), *args], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    return done, events


def _value(stdout, key):
    return next(line.split("=", 1)[1] for line in stdout.splitlines()
                if line.startswith(key + "="))


def test_a_training_loop_seen_from_inside(tmp_path):
    done, events = _run(tmp_path, LOOP, extra_env={"EPOCHS": "6"})
    assert done.returncode == 0, done.stderr
    rec = read_probe(events)
    assert rec.steps == 6 * 64 and rec.samples == 6 * 4096 and rec.samples_per_step == 64
    loader = rec.train_loader
    assert loader["dataset_len"] == 4096 and loader["batches"] == 64
    assert loader["train_epochs"] == 6 and loader["epochs_started"] == 12  # 6 train, 6 eval
    assert rec.job_samples(6) == 6 * 4096
    assert len(rec.losses) >= 5 and rec.losses[-1][2] < rec.losses[0][2]
    assert rec.grads and all(sq > 0 for _, _, sq in rec.grads)
    window = rec.windows[0]
    assert window["k"] == 4 and window["big"] < max(window["small"])
    stages = [s for _, _, s in rec.stages()]
    assert stages[0] == "startup" and stages[-1] == "teardown"
    assert "eval" in stages and "train" in stages
    assert rec.stages()[0][1] > 0.3  # the sleep before the first step is start-up
    printed = float(_value(done.stdout, "rate"))
    assert rec.steady_throughput() == pytest.approx(printed, rel=0.05)
    assert not rec.errors
    path = write_stage_marks(rec, tmp_path / "stages.csv")
    assert path.read_text().splitlines()[0] == "start_s,end_s,stage"


TWO_OPTIMIZERS = """
import torch
from torch.utils.data import DataLoader, TensorDataset
tables, head = torch.nn.Linear(8, 8), torch.nn.Linear(8, 1)
sparse = torch.optim.SGD(tables.parameters(), lr=0.01)
dense = torch.optim.Adam(head.parameters(), lr=0.01)
X, y = torch.randn(640, 8), torch.randn(640, 1)
for xb, yb in DataLoader(TensorDataset(X, y), batch_size=32):
    sparse.zero_grad(); dense.zero_grad()
    torch.nn.functional.mse_loss(head(tables(xb)), yb).backward()
    sparse.step(); dense.step()
"""


def test_two_optimizers_on_one_batch_make_one_step(tmp_path):
    """A two-tower model's sparse and dense optimizers both step on each batch: one training
    step and one batch of samples, not two (the regret suite's memheavy counted double)."""
    done, events = _run(tmp_path, TWO_OPTIMIZERS)
    assert done.returncode == 0, done.stderr
    rec = read_probe(events)
    assert rec.steps == 20 and rec.samples == 640
    assert rec.windows and rec.grads  # gradient windows still taken, over one optimizer

def test_data_loader_workers_do_not_write_events(tmp_path):
    done, events = _run(tmp_path, LOOP, extra_env={"WORKERS": "2", "EPOCHS": "1"})
    assert done.returncode == 0, done.stderr
    rec = read_probe(events)
    assert rec.steps == 64 and rec.train_loader["workers"] == 2
    headers = [ln for ln in events.read_text().splitlines() if '"e":"header"' in ln]
    assert len(headers) == 1


def test_argv_name_file_exit_code_and_output_as_without_the_probe(tmp_path):
    env = {"EPOCHS": "1", "CODE": "3"}
    with_probe, _ = _run(tmp_path, LOOP, extra_env=env, args=("--x", "1"))
    without, _ = _run(tmp_path, LOOP, probe=False, extra_env=env, args=("--x", "1"))
    assert with_probe.returncode == without.returncode == 3
    assert _value(with_probe.stdout, "argv") == _value(without.stdout, "argv")
    assert "name=__main__" in _value(with_probe.stdout, "argv")
    assert with_probe.stderr == without.stderr == ""


def test_the_users_own_sitecustomize_still_runs(tmp_path):
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import os\nos.environ['USER_SITE_RAN'] = 'yes'\n")
    source = LOOP.replace('print(f"threads=', 'print("user_site=" + os.environ.get("USER_SITE_RAN", "no"))\n    print(f"threads=')
    done, events = _run(tmp_path, source, extra_env={"PYTHONPATH": str(own), "EPOCHS": "1"})
    assert done.returncode == 0, done.stderr
    assert _value(done.stdout, "user_site") == "yes"
    assert read_probe(events).steps == 64


def test_a_script_without_torch_runs_unchanged_and_torch_stays_unloaded(tmp_path):
    done, events = _run(tmp_path, "import sys\nprint('torch' in sys.modules)\n")
    assert done.returncode == 0 and done.stdout.strip() == "False"
    rec = read_probe(events)
    assert rec is not None and rec.steps == 0 and rec.stages()[0][2] == "startup"


def test_the_control_channel_changes_the_running_jobs_threads(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(LOOP))
    events, control = tmp_path / "ev.jsonl", tmp_path / "control.json"
    env = probe_environment(dict(os.environ, EPOCHS="40"), events, control)
    proc = subprocess.Popen([sys.executable, str(script)], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, text=True)
    time.sleep(2.0)
    control.write_text(json.dumps({"seq": 1, "num_threads": 1}))
    out, _ = proc.communicate(timeout=120)
    assert _value(out, "threads") == "1"
    assert read_probe(events).controls[0]["num_threads"] == 1


def test_a_cut_last_line_is_ignored(tmp_path):
    path = tmp_path / "ev.jsonl"
    path.write_text('{"e":"header","t":0}\n{"e":"steps","t":1.0,"step":5,"samples":50,"n":5}\n'
                    '{"e":"steps","t":2.0,"st')
    rec = read_probe(path)
    assert rec.steps == 5 and rec.samples == 50
    assert read_probe(tmp_path / "missing.jsonl") is None


QUIET_LOOP = """
import argparse, time
import torch
from torch.utils.data import DataLoader, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=5000)
p.add_argument("--bs", type=int, default=32)
a = p.parse_args()
X = torch.randn(2048, 128); y = (X[:, 0] > 0).long()
model = torch.nn.Sequential(torch.nn.Linear(128, 512), torch.nn.ReLU(), torch.nn.Linear(512, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for epoch in range(a.epochs):
    for xb, yb in DataLoader(TensorDataset(X, y), batch_size=a.bs, shuffle=True):
        opt.zero_grad(); torch.nn.functional.cross_entropy(model(xb), yb).backward(); opt.step()
"""


def test_a_trial_of_a_silent_script_knows_its_rate_and_its_jobs_size(tmp_path):
    """The script prints nothing and is stopped at the time box: samples/s from its steps and
    the job's size from its loader (2048 samples) times the --epochs default in its source."""
    from optimizer.foundation.allocation import Allocation
    from optimizer.foundation.config import ResourceConfig
    from optimizer.trials.training import TrainingModuleManager

    path = tmp_path / "silent.py"
    path.write_text(textwrap.dedent(QUIET_LOOP))
    mgr = TrainingModuleManager(path, [], batch_size_arg="--bs")
    trial = tmp_path / "run" / "trials" / "00-t"
    s = mgr.run_training(TrialRequest(Allocation(cpus=1, memory_gb=2.0, batch_size=64), trial,
                                      probe_seconds=4.0, timeout_s=60),
                         ResourceConfig(cpu_count_max=2, memory_max=8.0, gpu_count_max=0))
    assert s.status == "probe" and s.throughput_source == "probe" and s.throughput > 0
    assert s.total_samples == 2048 * 5000 and s.job_size_source == "probe: dataset x epochs"
    assert s.probe["epochs_source"] == "the default of --epochs in the script's source"
    assert s.probe["samples_per_step"] == 64 and s.predicted_total_time_s > s.wall_time_s
    assert (trial / "probe.jsonl").exists() and (trial / "stages.csv").exists()


def test_a_script_without_torch_falls_back_to_what_it_prints(tmp_path):
    from optimizer.foundation.allocation import Allocation
    from optimizer.foundation.config import ResourceConfig
    from optimizer.trials.training import TrainingModuleManager

    path = tmp_path / "plain.py"
    path.write_text("import time\nfor i in range(3):\n    time.sleep(0.2)\n"
                    "    print('100.0 samples/s', flush=True)\n")
    s = TrainingModuleManager(path, []).run_training(
        TrialRequest(Allocation(cpus=1, memory_gb=1.0), tmp_path / "t"),
        ResourceConfig(cpu_count_max=2, memory_max=8.0, gpu_count_max=0))
    assert s.status == "completed" and s.throughput_source == "stdout"
    assert s.probe == {"steps": 0, "samples_per_step": None, "step_unit": "optimizer step",
                       "backward_passes": 0}


def test_phases_are_scored_against_the_probes_stage_marks(tmp_path):
    import numpy as np
    import pandas as pd

    from optimizer.trials.phase_profile import stage_agreement

    trace = pd.DataFrame({"time_s": np.arange(0, 10, 0.5)})
    (tmp_path / "stages.csv").write_text("start_s,end_s,stage\n0,3,startup\n3,8,train\n"
                                         "8,10,teardown\n")
    stages = np.where(trace.time_s < 3, 0, np.where(trace.time_s < 8, 1, 2))
    labels = stages.copy()
    labels[:2] = -1  # warm-up samples carry no phase
    same = stage_agreement(trace, labels, tmp_path / "stages.csv")
    assert same["adjusted_rand"] == 1.0 and same["stages"] == ["startup", "teardown", "train"]
    flipped = stage_agreement(trace, np.arange(len(trace)) % 2, tmp_path / "stages.csv")
    assert flipped["adjusted_rand"] < 0.2
    assert stage_agreement(trace, labels, tmp_path / "missing.csv") is None


def _main_job(script, tmp_path, repo_root, *, budget, probe_seconds):
    """The main command on ``script`` (batch flag ``--bs``, cost preference, no live plan);
    the run folder, after asserting it succeeded."""
    out = tmp_path / "run"
    proc = run_main(
        "--train-file", script, "--batch-size-arg=--bs", "--preference", "cost", "--budget",
        str(budget), "--probe-seconds", str(probe_seconds), "--agent-seconds", "0.5",
        "--live-plan", "off", "--output", str(out), "--quiet", cwd=repo_root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def test_the_main_job_on_a_script_that_prints_nothing_fits_the_model_and_trains_the_agents(
        tmp_path, repo_root):
    """Issue 38's case: nothing printed, no --total-samples; the probe gives every trial its
    rate and the job's size, so the workload model is fitted and both agents trained."""
    out = _main_job("tests/data/silent_torch_train.py", tmp_path, repo_root, budget=5,
                    probe_seconds=0)
    log = (out / "main.log").read_text()
    assert "agents trained" in log and "model not fitted" not in log
    rec = json.loads((out / "recommendation.json").read_text())
    assert rec["workload_fit"]["n_trials"] >= 4
    trials = [json.loads(p.read_text()) for p in sorted(out.glob("trials/*/summary.json"))]
    assert trials and all(t["throughput_source"] == "probe" for t in trials)
    assert all(t["total_samples"] == 2048 * 2 for t in trials)
    # the first trial learns the size from the probe; later ones are given it
    assert trials[0]["job_size_source"] in ("probe: completed run", "probe: dataset x epochs")
    assert {t["job_size_source"] for t in trials[1:]} <= {
        "given", "probe: completed run", "probe: dataset x epochs"}


def test_probes_measured_before_the_job_size_was_known_compete_once_a_whole_run_finds_it(
        tmp_path, repo_root):
    """A script that prints nothing and slices its own batches: no trial knows the job's size
    until the whole run. The probes before it must then predict the job and take part in the
    final choice (they used to drop out of every comparison of whole jobs)."""
    out = _main_job("tests/data/sizeless_torch_train.py", tmp_path, repo_root, budget=3,
                    probe_seconds=4)
    rec = json.loads((out / "recommendation.json").read_text())
    # the size comes from a whole run, or from a probe that ran to the job's end
    assert rec["baseline"]["trial"].startswith("00-") and rec["baseline"]["job_time_s"] > 0
    assert rec["choice"].endswith("the best of 3 trials")


def test_with_job_size_predicts_a_probe_once_the_size_is_known():
    from optimizer.trials.records import probe_job, with_job_size

    probe = TrialSummary("00-x", "probe", Allocation(0, 2, 8.0, 32), wall_time_s=20.0,
                         samples=3600.0, throughput=200.0, hourly_cost=0.36, startup_s=1.5)
    whole = TrialSummary("whole-x", "completed", Allocation(0, 2, 8.0, 32), wall_time_s=31.0,
                         samples=6000.0, throughput=195.0, total_samples=6000.0)
    done, same = with_job_size([probe, whole], 6000.0)
    assert done.predicted_total_time_s == 31.5 and done.total_samples == 6000.0
    assert done.predicted_total_cost == 0.36 * 31.5 / 3600
    assert done.job_size_source == "learned from whole-x"
    assert same is whole  # a completed run is left as it is
    # an older record without its start-up: the wall time beyond the steady samples counts
    old = probe_job(dataclasses.replace(probe, startup_s=None), 6000.0, "w")
    assert old.predicted_total_time_s == 2.0 + 30.0
    # a probe that predicted already is left as it is, and so is everything without a size
    assert probe_job(done, 9000.0, "w") is done
    assert with_job_size([probe], None) == [probe]
