"""Probes of other batch sizes train as far as the script's own batch did (issue 39): the loss
they train to, the watch that follows a running probe's loss, and a real probe that runs past
its steady rate until it gets there."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from optimizer.search.goodput.common_loss import lowest_reached
from optimizer.trials.probe.loss_target import GIVE_UP, LossTarget, LossWatch

DATA = Path(__file__).parent / "data"


def _curve(n: np.ndarray, noise: float = 0.0, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return 0.2 + np.exp(-n / 2000.0) + noise * rng.standard_normal(len(n))


def test_the_watch_stops_one_decay_length_past_the_level():
    target = LossTarget(level=float(_curve(np.array([3000.0]))[0]), decay_samples=200.0,
                        ref_samples=3000.0, ref_batch=64)
    watch = LossWatch(target)
    stopped = None
    for n in np.arange(0.0, 20000.0, 10.0):
        watch.add(n, float(_curve(np.array([n]))[0]))
        if watch.done and stopped is None:
            stopped = n
    # The moving average lags a falling curve: it reaches the level a little after 3000.
    assert 3000 < watch.reached_at < 3600
    assert stopped == pytest.approx(watch.reached_at + 200.0, abs=10.0)
    assert not watch.gave_up and watch.record()["reached_at_samples"] == watch.reached_at


def test_the_watch_gives_up_past_twice_the_scripts_samples():
    target = LossTarget(level=0.0, decay_samples=100.0, ref_samples=1000.0, ref_batch=64)
    watch = LossWatch(target)
    for n in np.arange(0.0, 5000.0, 10.0):
        watch.add(n, 0.5)
        if watch.done:
            break
    assert watch.gave_up and watch.reached_at is None and n == pytest.approx(GIVE_UP * 1000.0)
    watch.add(math.nan, 1.0)  # a lost loss is skipped, not averaged in
    assert math.isfinite(watch.smoothed)


def test_the_time_box_of_a_watched_probe_stays_under_the_hard_limit():
    t = LossTarget(1.0, 1.0, 1.0, 8)
    assert t.time_box(20.0, 600.0) == 60.0
    assert t.time_box(20.0, 50.0) == 40.0
    assert t.time_box(20.0, 10.0) == 20.0


def test_the_lowest_loss_a_run_reached_and_when():
    n = np.arange(0.0, 8000.0, 8.0)
    found = lowest_reached(n, _curve(n, noise=0.05))
    assert found is not None
    level, tau, need = found
    assert tau == pytest.approx(0.1 * np.ptp(n), rel=0.01)
    assert level == pytest.approx(float(_curve(np.array([8000.0]))[0]), abs=0.03)
    assert need > 0.8 * n[-1]
    assert lowest_reached(n, 1.0 + 0.05 * np.random.default_rng(1).standard_normal(len(n))) \
        is None  # a loss that does not fall gives no level
    assert lowest_reached(n[:5], _curve(n[:5])) is None


def test_a_probe_of_another_batch_trains_on_to_the_scripts_loss(tmp_path):
    """The script's own batch runs its whole time box; a smaller batch, given its loss, runs
    past its own steady rate and time box until its smoothed loss gets there, and files what
    its watch saw."""
    pytest.importorskip("torch")
    from optimizer.foundation.allocation import Allocation
    from optimizer.foundation.atomic_files import read_json
    from optimizer.foundation.config import ResourceConfig
    from optimizer.search.goodput.probe_target import loss_target_from_trials
    from optimizer.trials.probe import read_probe
    from optimizer.trials.training import TrainingModuleManager

    res = ResourceConfig(cpu_count_max=2, memory_max=8.0, gpu_count_max=0)
    mgr = TrainingModuleManager(DATA / "silent_torch_train.py", ["--epochs", "50"],
                                batch_size_arg="--bs")
    run = tmp_path / "run"
    own = mgr.run_training(Allocation(cpus=1, memory_gb=2.0), run / "trials" / "00-own",
                           resource_config=res, probe_seconds=4.0, timeout_s=60,
                           until_box=True)
    assert own.status == "probe" and own.wall_time_s >= 4.0
    target = loss_target_from_trials([own], run, None)
    assert target is not None and target.ref_batch == 128
    small = mgr.run_training(Allocation(cpus=1, memory_gb=2.0, batch_size=32),
                             run / "trials" / "01-small", resource_config=res,
                             probe_seconds=2.0, timeout_s=60, loss_target=target)
    seen = read_json(run / "trials" / "01-small" / "loss_target.json")
    assert small.status == "probe" and seen["level"] == target.level
    assert seen["reached_at_samples"] is not None or seen["gave_up"]
    assert seen["samples_seen"] >= min(seen["reached_at_samples"] or math.inf,
                                       GIVE_UP * target.ref_samples)
    assert small.wall_time_s > 2.0  # past its own time box
    rec = read_probe(run / "trials" / "01-small" / "probe.jsonl")
    assert rec is not None and rec.samples_per_step == 32 and len(rec.losses) >= 8
