"""A whole run's wall time includes the process's exit after the script's last line; a probe
stopped short of the end never pays it, so its predicted job time is given what the whole runs
beside it measured. Without that, a whole run looked slower than a probe of the same speed
(mem_heavy.py: batch 1024, run to its end in the run-off, paid 0.55 s that batch 512, stopped
at its target, did not)."""

from __future__ import annotations

from pathlib import Path

import pytest

from optimizer.foundation.allocation import Allocation
from optimizer.trials.records import (
    TrialSummary,
    exit_seconds,
    job_time,
    predict_time,
    with_exit,
    with_job_size,
)
from optimizer.trials.run.request import TrialRequest

DATA = Path(__file__).parent / "data"


def _save(trials: Path, name: str, status: str, exit_s: float | None, cpus: int = 1) -> None:
    TrialSummary(name, status, Allocation(0, cpus, 2.0), wall_time_s=5.0,
                 exit_s=exit_s).save(trials / name)


def test_a_whole_run_measures_its_exit_and_a_probe_takes_the_median_beside_it(tmp_path):
    trials = tmp_path / "trials"
    assert exit_seconds("completed", 8.18, 7.64, trials) == pytest.approx(0.54)
    assert exit_seconds("completed", 7.0, 7.2, trials) == 0.0  # a clock ahead is no exit
    assert exit_seconds("completed", 8.0, None, trials) is None  # no probe: nothing to read
    assert exit_seconds("probe", 8.0, 7.9, trials) is None  # no whole run yet
    _save(trials, "00-a", "completed", 0.5)
    _save(trials, "01-b", "completed", 0.7)
    _save(trials, "02-c", "completed", 0.6)
    _save(trials, "03-d", "probe", 0.1)  # a probe's own is not counted
    _save(trials, "04-e", "failed", None)
    (trials / "05-broken").mkdir()
    (trials / "05-broken" / "summary.json").write_text("{not json")
    assert exit_seconds("probe", 8.0, 7.9, trials) == 0.6
    assert exit_seconds("failed", 8.0, 7.9, trials) is None
    assert predict_time("probe", 8.0, 700.0, 1000.0, 100.0, 2.0, 0.6) == 12.6
    assert predict_time("probe", 8.0, 700.0, 1000.0, 100.0, 2.0) == 12.0
    assert predict_time("completed", 8.0, 1000.0, 1000.0, 100.0, 2.0, 0.6) == 8.0


def test_a_probe_takes_the_exit_of_whole_runs_on_as_many_cpus(tmp_path):
    """A compiled model's final evaluation compiles its inference graph after the last step:
    5.0 s on 1 CPU, 3.6 s on 2. A probe on 1 CPU given the median of both was 10% short."""
    trials = tmp_path / "trials"
    _save(trials, "00-a", "completed", 3.6, cpus=2)
    _save(trials, "01-b", "completed", 5.0, cpus=1)
    _save(trials, "02-c", "completed", 3.8, cpus=2)
    assert exit_seconds("probe", 20.0, None, trials, cpus=1) == 5.0
    assert exit_seconds("probe", 20.0, None, trials, cpus=2) == 3.7
    assert exit_seconds("probe", 20.0, None, trials, cpus=4) == 3.8  # none on 4: all of them
    assert exit_seconds("probe", 20.0, None, trials) == 3.8
    probe = TrialSummary("03-p", "probe", Allocation(0, 1, 2.0, 32), wall_time_s=20.0,
                         samples=3600.0, throughput=200.0, hourly_cost=0.1, startup_s=1.0)
    wholes = [TrialSummary(f"w{c}", "completed", Allocation(0, c, 2.0, 32), wall_time_s=30.0,
                           total_samples=6000.0, exit_s=e) for c, e in ((1, 5.0), (2, 3.6))]
    done = with_job_size([probe, *wholes], 6000.0)[0]
    assert done.exit_s == 5.0 and done.predicted_total_time_s == 1.0 + 30.0 + 5.0


def test_probes_that_ran_before_the_first_whole_run_are_given_its_exit_once():
    probe = TrialSummary("00-x", "probe", Allocation(0, 2, 8.0, 32), wall_time_s=20.0,
                         samples=3600.0, throughput=200.0, hourly_cost=0.36, startup_s=1.5)
    whole = TrialSummary("whole-x", "completed", Allocation(0, 2, 8.0, 32), wall_time_s=32.0,
                         samples=6000.0, throughput=195.0, total_samples=6000.0, exit_s=0.5)
    done, same = with_job_size([probe, whole], 6000.0)
    assert done.exit_s == 0.5 and done.predicted_total_time_s == 1.5 + 30.0 + 0.5
    assert done.predicted_total_cost == pytest.approx(0.36 * 32.0 / 3600)
    assert same is whole and job_time(same) == 32.0
    assert with_exit(done, 0.9) is done  # given once: the exit is not added twice
    again, _ = with_job_size([done, whole], 6000.0)
    assert again.predicted_total_time_s == done.predicted_total_time_s
    # the probes of a run with no whole run are left even with each other
    assert with_job_size([probe], 6000.0)[0].exit_s is None


def test_a_real_whole_run_and_the_probe_after_it(tmp_path):
    pytest.importorskip("torch")
    from optimizer.foundation.config import ResourceConfig
    from optimizer.trials.training import TrainingModuleManager

    res = ResourceConfig(cpu_count_max=2, memory_max=8.0, gpu_count_max=0)
    mgr = TrainingModuleManager(DATA / "silent_torch_train.py", ["--epochs", "1"],
                                batch_size_arg="--bs")
    trials = tmp_path / "run" / "trials"
    whole = mgr.run_training(TrialRequest(Allocation(cpus=1, memory_gb=2.0), trials / "00-whole",
                                          timeout_s=120), res)
    assert whole.status == "completed" and whole.exit_s is not None
    assert 0.0 < whole.exit_s < whole.wall_time_s
    longer = TrainingModuleManager(DATA / "silent_torch_train.py", ["--epochs", "200"],
                                   batch_size_arg="--bs")
    probe = longer.run_training(TrialRequest(Allocation(cpus=1, memory_gb=2.0), trials / "01-probe",
                                             probe_seconds=5.0, timeout_s=60), res)
    assert probe.status == "probe" and probe.exit_s == whole.exit_s
    assert probe.predicted_total_time_s == pytest.approx(
        probe.startup_s + probe.total_samples / probe.throughput + whole.exit_s, abs=2e-3)


FINAL_EVAL = """
import time, torch
model = torch.nn.Linear(32, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 32), torch.randint(0, 4, (64,))
for _ in range(200):
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
model.eval()
end = time.time() + 1.5  # the final evaluation: after the last step, before the exit
while time.time() < end:
    with torch.no_grad():
        model(x)
print("test loss 1.0")
"""


def test_a_final_evaluation_counts_in_the_whole_runs_exit(tmp_path):
    pytest.importorskip("torch")
    from optimizer.foundation.config import ResourceConfig
    from optimizer.trials.training import TrainingModuleManager

    script = tmp_path / "final_eval.py"
    script.write_text(FINAL_EVAL)
    res = ResourceConfig(cpu_count_max=2, memory_max=8.0, gpu_count_max=0)
    whole = TrainingModuleManager(script, []).run_training(TrialRequest(
        Allocation(cpus=1, memory_gb=2.0), tmp_path / "trials" / "00-whole", timeout_s=120), res)
    assert whole.status == "completed"
    assert 1.5 <= whole.exit_s < whole.wall_time_s
