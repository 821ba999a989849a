"""The probe's rate set beside the one a script prints, over the same stretches of the run
(issue 38): a script's epoch rate that includes its data loading, or covers only its last
epoch, agrees with the probe's count over that stretch, while the probe's steady rate (what
cloudopt uses) may differ from it."""

from __future__ import annotations

import json
import textwrap

import pytest

from optimizer.trials.probe import read_probe
from optimizer.trials.probe.summary import disagreement, probe_figures, same_windows
from optimizer.trials.run.request import TrialRequest


def _record(tmp_path, events):
    path = tmp_path / "probe.jsonl"
    lines = [{"e": "header", "version": 1, "wall": 1000.0}, *events]
    path.write_text("\n".join(json.dumps(e) for e in lines) + "\n")
    return read_probe(path)


def _epoch(start, first_step, end, step0, samples0, steps=10, batch=100, loader=7):
    """One pass of a loader: its start, a slow first batch, then a step every 0.1 s (with
    the probe's anchor where a pass after the first starts)."""
    out = [{"e": "steps", "step": step0, "samples": samples0, "n": 0, "t": start}] if step0 else []
    out.append({"e": "epoch_start", "loader": loader, "dataset_len": steps * batch,
                "batches": steps, "step": step0, "steps_in_loader": 0, "t": start})
    for k in range(steps):
        out.append({"e": "steps", "step": step0 + k + 1, "samples": samples0 + (k + 1) * batch,
                    "n": 1, "t": round(first_step + 0.1 * k, 3)})
    out.append({"e": "epoch_end", "loader": loader, "dataset_len": steps * batch,
                "batches": steps, "step": step0 + steps, "steps_in_loader": step0 + steps,
                "t": end})
    return out


def test_an_epoch_rate_with_its_loading_agrees_over_the_same_stretch(tmp_path):
    # training starts at 1.0; the first batch takes 0.5 s to load; ten steps at 1000 samples/s
    # end at 2.4; the loader's pass ends at 2.45, the interpreter exits at 2.8
    rec = _record(tmp_path, [{"e": "first_step", "samples": 100, "t": 1.5},
                             *_epoch(1.0, 1.5, 2.45, 0, 0),
                             {"e": "exit", "step": 10, "samples": 1000, "t": 2.8}])
    printed = 1000 / (2.45 - 1.0)  # what the script measured from its loop's start
    # its one line was read only after the process ended (at 2.9 in probe time)
    fig = probe_figures(rec, None, [], "completed", printed, "stdout", None,
                        [(2.9, printed, True)])
    assert fig.info["printed_windows"] == 1
    assert abs(fig.info["printed_gap"]) < 0.01
    assert fig.info["probe_same_windows"] == pytest.approx(printed, rel=0.01)
    # the steady rate leaves the slow first batch out: the same script reads 30% slower
    assert fig.info["printed_gap_steady"] < -0.25
    assert disagreement(fig.info) is None


def test_a_last_epochs_rate_is_compared_with_that_epoch_alone(tmp_path):
    # epoch 1 at 1000 samples/s, epoch 2 at half that (the machine got busy)
    slow = _epoch(3.0, 3.2, 5.15, 10, 1000)
    for ev in slow:
        if ev["e"] == "steps":
            ev["t"] = round(3.2 + 0.2 * (ev["step"] - 11), 3)
    rec = _record(tmp_path, [{"e": "first_step", "samples": 100, "t": 1.1},
                             *_epoch(1.0, 1.1, 2.05, 0, 0), *slow,
                             {"e": "exit", "step": 20, "samples": 2000, "t": 5.3}])
    epoch2 = 1000 / (5.15 - 2.95)
    # lines seen during the run: epoch 1's at 2.95, epoch 2's after the exit
    windows = [(2.95, 1000 / 1.95, False), (5.4, epoch2, True)]
    said, seen, n = same_windows(rec, windows)
    assert n == 1 and said == pytest.approx(epoch2)
    assert seen == pytest.approx(epoch2, rel=0.03)


def test_a_gap_over_the_same_windows_is_said_with_them(tmp_path):
    rec = _record(tmp_path, [{"e": "first_step", "samples": 100, "t": 1.5},
                             *_epoch(1.0, 1.5, 2.45, 0, 0),
                             {"e": "exit", "step": 10, "samples": 1000, "t": 2.8}])
    # a script that counts every sample twice
    twice = 2 * 1000 / 1.45
    fig = probe_figures(rec, None, [], "completed", twice, "stdout", None, [(2.9, twice, True)])
    words = disagreement(fig.info)
    assert words is not None and "above the probe's over the same 1 window" in words
    assert fig.info["printed_gap"] == pytest.approx(1.0, abs=0.02)
    # without windows to align, the steady rate is compared, and the words say so
    alone = probe_figures(rec, None, [], "completed", twice, "stdout", None)
    assert "no printed window could be aligned" in disagreement(alone.info)


EPOCH_RATE = """
import time
import torch
from torch.utils.data import DataLoader, Dataset

class Slow(Dataset):  # every batch costs loading time, the first one more
    def __len__(self):
        return 768
    def __getitem__(self, i):
        time.sleep(0.02 if i < 16 else 0.001)
        return torch.randn(32), int(i % 2)

model = torch.nn.Linear(32, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(Slow(), batch_size=16, shuffle=False)
for epoch in range(2):
    t0, seen = time.time(), 0
    for x, y in loader:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        seen += len(x)
    print(f"epoch {epoch + 1} {seen / (time.time() - t0):.1f} samples/s", flush=True)
"""


def test_a_real_scripts_printed_epoch_rate_agrees_with_the_probe(tmp_path):
    from optimizer.foundation.allocation import Allocation
    from optimizer.foundation.config import ResourceConfig
    from optimizer.trials.training import TrainingModuleManager

    path = tmp_path / "epochs.py"
    path.write_text(textwrap.dedent(EPOCH_RATE))
    s = TrainingModuleManager(path, []).run_training(
        TrialRequest(Allocation(cpus=1, memory_gb=2.0), tmp_path / "t", timeout_s=120),
        ResourceConfig(cpu_count_max=2, memory_max=8.0, gpu_count_max=0))
    assert s.status == "completed" and s.throughput_source == "probe"
    p = s.probe
    assert p["printed_source"] == "stdout" and p["printed_windows"] == 1
    assert abs(p["printed_gap"]) <= 0.05, p
