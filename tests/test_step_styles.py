"""Progress however a script writes its update, and trials that cloudopt stopped.

A training iteration is a backward pass where no ``torch.optim`` optimizer steps (a hand-written
update), gradient accumulation's micro-batches each count their samples, an LBFGS closure's
backward passes over one batch count it once, a ``GradScaler``'s loss is read unscaled; and a
trial that cloudopt stopped is never a whole job, whatever its exit code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from optimizer.trials.probe import SITE_DIR, probe_environment, read_probe
from optimizer.trials.run.request import TrialRequest

torch = pytest.importorskip("torch")

DATA = Path(__file__).parent / "data"


def _probe(tmp_path: Path, script: str, *args: str, batch: int | None = None):
    events = tmp_path / f"{Path(script).stem}-{'-'.join(args)}.jsonl"
    env = probe_environment(os.environ, events)
    if batch is not None:
        env["CLOUDOPT_PROBE_BATCH"] = str(batch)
    out = subprocess.run([sys.executable, str(DATA / script), *args], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return read_probe(events), out.stdout


@pytest.mark.parametrize("style, unit, steps, backward", [
    ("accum", "optimizer step", 16, 64),    # 4 micro-batches a step
    ("lbfgs", "optimizer step", 64, None),  # several backward passes a step
    ("scaler", "optimizer step", 64, 64),
    ("noloader", "backward pass", 64, 64),  # no torch.optim: a backward pass is the step
])
def test_each_update_style_counts_the_job_it_ran(tmp_path, style, unit, steps, backward):
    rec, _ = _probe(tmp_path, "update_styles_train.py", "--style", style, batch=16)
    assert rec.unit == unit and rec.steps == steps
    if backward is not None:
        assert rec.backward_passes == backward
    else:
        assert rec.backward_passes > 2 * rec.steps
    # 2 epochs of 512 samples, each sample counted once whatever the update
    assert rec.samples == 1024 and not rec.errors
    assert rec.steady_throughput() and rec.steady_throughput() > 0


def test_a_gradient_window_holds_the_samples_behind_each_step(tmp_path):
    rec, _ = _probe(tmp_path, "update_styles_train.py", "--style", "accum", batch=16)
    assert rec.windows and all(b == 64 for b in rec.windows[0]["samples"])


def test_a_scaled_loss_is_read_at_its_true_value(tmp_path):
    plain, _ = _probe(tmp_path, "update_styles_train.py", "--style", "noloader", batch=16)
    scaled, _ = _probe(tmp_path, "update_styles_train.py", "--style", "scaler", batch=16)
    # the scale is 1024: an unscaled loss of a linear model on this data stays below 50
    assert max(v for _, _, v in scaled.losses) < 50
    assert scaled.losses[0][2] == pytest.approx(plain.losses[0][2], rel=0.5)


def test_a_hand_written_loop_without_a_loader_gets_steps_samples_and_its_loss(tmp_path):
    rec, out = _probe(tmp_path, "handwritten_lm_train.py", "--epochs", "3", batch=20)
    assert "valid loss" in out
    assert rec.unit == "backward pass" and rec.steps == rec.backward_passes > 50
    assert rec.samples == rec.steps * 20
    assert len(rec.losses) >= 6 and rec.losses[-1][2] < rec.losses[0][2]
    # the losses sit on the backward passes: steps increase along the record
    steps = [s for s, _, _ in rec.losses]
    assert steps == sorted(steps) and steps[-1] <= rec.steps


HELD = """
import sys
import torch
import _cloudopt_probe_state as probe
w = torch.randn(64, 1, requires_grad=True)
x = torch.randn(256, 64)
for i in range(2000):
    loss = (x @ w).pow(2).mean()
    loss.backward()
    with torch.no_grad():
        w -= 1e-3 * w.grad
    w.grad = None
    if i in (100, 1999):
        print(len(probe.STATE.pending), flush=True)
"""


def test_values_are_never_held_without_bound(tmp_path):
    """2,000 backward passes and no optimizer: the probe reads its deferred losses as it goes
    (it used to read them only after an optimizer step, and held every one)."""
    env = probe_environment(os.environ, tmp_path / "held.jsonl")
    out = subprocess.run([sys.executable, "-c", HELD], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    early, late = (int(v) for v in out.stdout.split())
    assert early <= 8 and late <= 8


def _manager(script: str, args: list[str], flag: str):
    from optimizer.trials.training import TrainingModuleManager

    return TrainingModuleManager(DATA / script, args, batch_size_arg=flag)


def _resources():
    from optimizer.foundation.config import ResourceConfig

    return ResourceConfig(cpu_count_max=2, memory_max=8.0, gpu_count_max=0)


def test_a_script_that_traps_sigterm_and_exits_0_is_a_stopped_probe(tmp_path):
    from optimizer.foundation.allocation import Allocation

    mgr = _manager("trap_sigterm_train.py", [], "--batch-size")
    s = mgr.run_training(TrialRequest(Allocation(cpus=1, memory_gb=2.0, batch_size=32),
                                      tmp_path / "run" / "trials" / "00-trap", probe_seconds=4.0,
                                      timeout_s=60), _resources())
    assert s.exit_code == 0  # it said it was fine ...
    assert "Received SIGTERM" in (tmp_path / "run" / "trials" / "00-trap" /
                                  "stdout.log").read_text()
    assert s.status == "probe"  # ... but cloudopt stopped it: not a whole job
    assert s.job_size_source != "probe: completed run"
    assert s.predicted_total_time_s is None or s.predicted_total_time_s > s.wall_time_s


def test_the_same_script_left_to_end_is_a_whole_run(tmp_path):
    from optimizer.foundation.allocation import Allocation

    mgr = _manager("trap_sigterm_train.py", ["--steps", "40"], "--batch-size")
    s = mgr.run_training(TrialRequest(Allocation(cpus=1, memory_gb=2.0, batch_size=32),
                                      tmp_path / "run" / "trials" / "00-whole", probe_seconds=30,
                                      timeout_s=60), _resources())
    assert s.status == "completed" and s.total_samples == 40 * 32


def test_a_hand_written_loop_is_measured_and_its_whole_run_sized(tmp_path):
    from optimizer.foundation.allocation import Allocation

    mgr = _manager("handwritten_lm_train.py", ["--epochs", "2"], "--batch_size")
    s = mgr.run_training(TrialRequest(Allocation(cpus=1, memory_gb=2.0, batch_size=20),
                                      tmp_path / "run" / "trials" / "00-lm",
                                      timeout_s=120), _resources())
    assert s.status == "completed" and s.throughput_source == "probe" and s.throughput > 0
    assert s.probe["step_unit"] == "backward pass"
    assert s.total_samples == s.samples == s.probe["steps"] * 20


def test_a_whole_run_that_counts_nothing_is_one_job(tmp_path):
    """No torch, no rate printed: a whole run still has its time and cost a job."""
    from optimizer.foundation.allocation import Allocation
    from optimizer.trials.training import TrainingModuleManager

    path = tmp_path / "opaque.py"
    path.write_text("import time\ntime.sleep(0.5)\n")
    s = TrainingModuleManager(path, []).run_training(TrialRequest(
        Allocation(cpus=1, memory_gb=1.0), tmp_path / "run" / "trials" / "00-o", timeout_s=30),
        _resources())
    assert s.status == "completed" and s.total_samples == 1.0
    assert s.throughput == pytest.approx(1.0 / s.wall_time_s, rel=1e-3)
    assert s.predicted_total_time_s == pytest.approx(s.wall_time_s)
    assert "one whole run" in s.job_size_source


def test_the_probe_site_is_where_the_environment_points():
    assert (SITE_DIR / "_cloudopt_probe.py").exists()


def test_lightning_stopped_by_cloudopt_is_a_probe_of_the_whole_job(tmp_path):
    """Lightning's signal connector turns SIGTERM into a clean exit 0 after a fraction of the
    job: the trial is still a probe, sized to the job's 50 epochs, not a whole run."""
    pytest.importorskip("lightning")
    from optimizer.foundation.allocation import Allocation
    from optimizer.trials.training import TrainingModuleManager

    script = Path(__file__).parent.parent / "examples" / "wild" / "lightning_tabular.py"
    mgr = TrainingModuleManager(script, ["--max-epochs", "50", "--root-dir", str(tmp_path)],
                                batch_size_arg="--batch-size")
    trial = tmp_path / "run" / "trials" / "00-pl"
    s = mgr.run_training(TrialRequest(Allocation(cpus=1, memory_gb=4.0, batch_size=64), trial,
                                      probe_seconds=14.0, timeout_s=120), _resources())
    assert s.status == "probe", (s.status, s.exit_code, s.reason)
    assert s.probe["steps"] > 20 and s.probe["samples_per_step"] == 64
    assert s.total_samples == 16000 * 50 and s.job_size_source == "probe: dataset x epochs"
    # it saw a fraction of the job, and its prediction covers the rest
    assert s.samples < 0.5 * s.total_samples and s.predicted_total_time_s > s.wall_time_s


def test_a_flag_valued_option_takes_the_scripts_flag_as_users_write_it():
    from optimizer.cli import join_flag_values

    assert join_flag_values(["--train-file", "lm.py", "--batch-size-arg", "--batch_size",
                             "--epochs-arg", "--epochs", "--preference", "cost"]) == [
        "--train-file", "lm.py", "--batch-size-arg=--batch_size", "--epochs-arg=--epochs",
        "--preference", "cost"]
    assert join_flag_values(["--batch-size-arg=--bs={}"]) == ["--batch-size-arg=--bs={}"]


def test_a_script_whose_top_level_calls_its_train_function_runs_as_a_script(tmp_path):
    """The classic word-language-model example has no __main__ guard: its top level loops
    over epochs calling train(). Calling train() again after it ran one epoch too many."""
    from optimizer.trials.script_scan import load_script

    looped = tmp_path / "looped.py"
    looped.write_text("def train():\n    pass\n\nfor epoch in range(3):\n    train()\n")
    assert load_script(looped).entry == "__main__"
    library = tmp_path / "library.py"
    library.write_text("import torch\ntorch.manual_seed(0)\n\ndef train():\n    return 0\n")
    assert load_script(library).entry == "train"


def test_a_trial_keeps_the_users_openmp_wait_policy():
    """PASSIVE doubled a 2-thread LSTM's epochs: a trial runs the job as its user does."""
    from optimizer.foundation.allocation import Allocation
    from optimizer.trials.resources import ResourceManager

    env = ResourceManager.apply_configuration(Allocation(cpus=2, memory_gb=1.0), env={})
    assert "OMP_WAIT_POLICY" not in env and env["OMP_NUM_THREADS"] == "2"
    mine = ResourceManager.apply_configuration(Allocation(cpus=2, memory_gb=1.0),
                                               env={"OMP_WAIT_POLICY": "PASSIVE"})
    assert mine["OMP_WAIT_POLICY"] == "PASSIVE"


def test_every_loss_counts_once_in_the_probes_mean_losses(tmp_path):
    """A loss event is the mean of the losses since the last: a short job's curve is read
    from all of its steps, not one in forty (Lightning's 1,000 steps gave 23 losses)."""
    import json

    rec, _ = _probe(tmp_path, "update_styles_train.py", "--style", "noloader", batch=16)
    events = [json.loads(line) for line in
              (tmp_path / "update_styles_train---style-noloader.jsonl").read_text().splitlines()]
    losses = [e for e in events if e.get("e") == "loss"]
    assert sum(e.get("n", 1) for e in losses) == rec.backward_passes == 64
    steps = [s for s, _, _ in rec.losses]
    assert steps == sorted(steps) and steps[0] == 1


def test_each_trial_compiles_as_a_fresh_pod_does(tmp_path, monkeypatch):
    """A shared Inductor cache ranked a compiled script's settings by which ran first, and a
    torch.optim step in cloudopt's own process (the agents' training) puts torch's default
    cache into os.environ, where the trials after it found it."""
    import torch

    from optimizer.foundation.allocation import Allocation
    from optimizer.foundation.config import ResourceConfig
    from optimizer.trials import runner

    monkeypatch.setitem(runner.USER_COMPILE_CACHES, "TORCHINDUCTOR_CACHE_DIR", None)
    monkeypatch.setitem(runner.USER_COMPILE_CACHES, "TRITON_CACHE_DIR", None)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "restored-after-the-test")
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 3)).sum().backward()
    opt.step()  # torch 2.13 sets TORCHINDUCTOR_CACHE_DIR here; later torches may not
    metrics = tmp_path / ".work" / "metrics.csv"
    env = runner.trial_environment(Allocation(cpus=1, memory_gb=1.0), ResourceConfig(), None,
                                   metrics, "t0")
    assert Path(env["TORCHINDUCTOR_CACHE_DIR"]).is_relative_to(tmp_path / ".work")
    assert Path(env["TRITON_CACHE_DIR"]).is_relative_to(tmp_path / ".work")
    # a cache the user set before starting cloudopt is theirs to keep
    monkeypatch.setitem(runner.USER_COMPILE_CACHES, "TORCHINDUCTOR_CACHE_DIR", "/shared/inductor")
    env = runner.trial_environment(Allocation(cpus=1, memory_gb=1.0), ResourceConfig(), None,
                                   metrics, "t0")
    assert env["TORCHINDUCTOR_CACHE_DIR"] == "/shared/inductor"
