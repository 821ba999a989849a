"""A probe whose script is still starting when its time box ends runs on until it measures a
rate (compiled's 17-21 s start-up against a 20 s box measured nothing, four times over)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import ResourceConfig
from optimizer.trials.output import RateTracker
from optimizer.trials.probe.stop import MEASURE_AFTER_STARTUP, STARTUP_BOXES, box_end
from optimizer.trials.training import TrainingModuleManager, TrialRequest

DATA = Path(__file__).parent / "data"


def _run(first_window_s: float | None = None, torch: bool = False,
         first_step_s: float | None = None):
    rates = RateTracker()
    if first_window_s is not None:
        rates.add(first_window_s, 100.0, 1000.0)
    return SimpleNamespace(rates_csv=RateTracker(), rates_probe=rates, rates_stdout=RateTracker(),
                           probe_torch=torch, probe_first_step_s=first_step_s)


def test_the_box_ends_later_only_for_a_script_still_starting():
    box, limit = 20.0, 600.0
    assert box_end(_run(3.0, True, 2.0), box, limit) == box  # an ordinary probe: unchanged
    # no torch seen: a script whose steps the probe cannot see (silent, asleep, hung)
    assert box_end(_run(None, False), box, limit) == box
    assert box_end(_run(None, True, 2.0), box, limit) == box  # it trains, unmeasurably
    assert box_end(_run(None, True), box, limit) == STARTUP_BOXES * box  # still starting
    assert box_end(_run(None, True), box, 45.0) == 45.0  # never past the hard limit
    # a first step late in the box: a share of a box more, to measure it
    assert box_end(_run(None, True, 18.0), box, limit) == 18.0 + MEASURE_AFTER_STARTUP * box
    assert box_end(_run(19.0, True, 18.0), box, limit) == 18.0 + MEASURE_AFTER_STARTUP * box
    assert box_end(_run(None, True, 58.0), box, limit) == STARTUP_BOXES * box


def test_a_probe_of_a_slow_start_measures_a_rate(tmp_path):
    manager = TrainingModuleManager(DATA / "slow_start_train.py", ["--startup", "4"],
                                    batch_size_arg="--batch-size")
    box = 3.0
    s = manager.run_training(
        TrialRequest(Allocation(cpus=1, memory_gb=2.0, batch_size=32),
                     tmp_path / "run" / "trials" / "00-slow", probe_seconds=box, timeout_s=60),
        ResourceConfig(cpu_count_max=2, memory_max=8.0, gpu_count_max=0))
    assert s.status == "probe", (s.status, s.reason)
    assert s.throughput and s.throughput > 0, s.reason  # stopped at 3 s it measured none
    assert 4.0 < s.wall_time_s <= STARTUP_BOXES * box + 2.0
