"""Probes of other batch sizes train as far as the script's own batch did (issue 39): the loss
they train to, the watch that follows a running probe's loss, and a real probe that runs past
its steady rate until it gets there."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from optimizer.search.goodput.common_loss import end_reached
from optimizer.trials.probe.loss_target import GIVE_UP, LossTarget, LossWatch
from optimizer.trials.run.request import TrialRequest

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


def test_the_loss_a_run_ended_at_and_when_it_first_got_there():
    n = np.arange(0.0, 8000.0, 8.0)
    found = end_reached(n, _curve(n, noise=0.05))
    assert found is not None
    level, tau, need = found
    assert tau == pytest.approx(0.1 * np.ptp(n), rel=0.01)
    assert level == pytest.approx(float(_curve(np.array([8000.0]))[0]), abs=0.03)
    assert need > 0.8 * n[-1]
    assert end_reached(n, 1.0 + 0.05 * np.random.default_rng(1).standard_normal(len(n))) \
        is None  # a loss that does not fall gives no level
    assert end_reached(n[:5], _curve(n[:5])) is None


def test_the_target_is_where_the_run_ended_not_a_dip_before():
    """A run whose loss dips and comes back up ends above its lowest: the target is its end,
    which other batches can reach, first met before the dip."""
    n = np.arange(0.0, 8000.0, 8.0)
    loss = 1.0 - 0.5 * np.minimum(n, 4000.0) / 4000.0 + 0.1 * np.maximum(n - 4000.0, 0) / 4000.0
    found = end_reached(n, loss)
    assert found is not None
    level, tau, need = found
    assert level == pytest.approx(0.6, abs=0.03) and level > loss.min() + 0.05
    assert need < 4000.0  # on the way down, not at the end


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
    own = mgr.run_training(TrialRequest(Allocation(cpus=1, memory_gb=2.0),
                                        run / "trials" / "00-own", probe_seconds=4.0, timeout_s=60,
                                        until_box=True), res)
    assert own.status == "probe" and own.wall_time_s >= 4.0
    target = loss_target_from_trials([own], run, None)
    assert target is not None and target.ref_batch == 128
    small = mgr.run_training(TrialRequest(Allocation(cpus=1, memory_gb=2.0, batch_size=32),
                                          run / "trials" / "01-small", probe_seconds=2.0,
                                          timeout_s=60, loss_target=target), res)
    seen = read_json(run / "trials" / "01-small" / "loss_target.json")
    assert small.status == "probe" and seen["level"] == target.level
    assert seen["reached_at_samples"] is not None or seen["gave_up"]
    assert seen["samples_seen"] >= min(seen["reached_at_samples"] or math.inf,
                                       GIVE_UP * target.ref_samples)
    assert small.wall_time_s > 2.0  # past its own time box
    rec = read_probe(run / "trials" / "01-small" / "probe.jsonl")
    assert rec is not None and rec.samples_per_step == 32 and len(rec.losses) >= 8


class _Scripted:
    """An executor whose trials write a probe file of a known loss curve (no script runs):
    the loss falls with the optimizer steps, so a smaller batch falls further per sample."""

    name = "scripted"

    def __init__(self) -> None:
        self.requests: list = []

    def run(self, manager, requests, resource_config):
        import json

        from optimizer.trials.records import TrialSummary

        for i, req in enumerate(requests):
            self.requests.append(req)
            batch = req.allocation.batch_size or 64
            req.trial_dir.mkdir(parents=True, exist_ok=True)
            lines = [{"e": "header", "version": 1, "t": 0.0}]
            if req.allocation.batch_size:  # at its default, the script's batch is not seen,
                lines.append({"e": "first_step", "samples": batch, "t": 1.0})  # as mem_heavy's
            for step in range(1, 201):
                lines.append({"e": "steps", "step": step, "samples": step * batch,
                              "t": 1.0 + 0.01 * step})
                lines.append({"e": "loss", "step": step, "t": 1.0 + 0.01 * step,
                              "value": 0.2 + math.exp(-step / 60.0)})
            (req.trial_dir / "probe.jsonl").write_text(
                "".join(json.dumps(x) + "\n" for x in lines))
            (req.trial_dir / "stdout.log").write_text(f"batch_size={batch}\n")
            s = TrialSummary(req.trial_dir.name, "probe", req.allocation, wall_time_s=3.0,
                             samples=200.0 * batch, throughput=100.0 * batch)
            s.save(req.trial_dir)
            yield i, s

    def map(self, fns):
        return [f() for f in fns]

    def close(self) -> None:
        pass


def test_the_baseline_runs_the_scripts_batch_first_and_gives_the_others_its_loss(tmp_path):
    from optimizer.foundation.allocation import Allocation
    from optimizer.foundation.config import load_config
    from optimizer.search.baseline import run_baseline

    class Manager:
        launcher = "python"

        def recorded_trial(self, trial_dir):
            return None

    cfg = load_config(None)
    allocs = [Allocation(0, 2, 8.0), Allocation(0, 2, 8.0, 16), Allocation(0, 1, 4.0),
              Allocation(0, 1, 4.0, 256)]
    ex = _Scripted()
    run_baseline(Manager(), allocs, tmp_path, cfg, probe_seconds=20.0, quiet=True,
                 executor=ex, ref_batch=64)
    order = [r.allocation.batch_size for r in ex.requests]
    assert order == [None, None, 16, 256]  # the script's own batch first
    assert [r.until_box for r in ex.requests] == [True, False, False, False]
    own, small, big = ex.requests[0], ex.requests[2], ex.requests[3]
    assert own.loss_target is None and small.loss_target == big.loss_target
    target = small.loss_target
    assert target is not None and target.ref_batch == 64
    # The own batch's smoothed loss at its end, and the samples it took to get there.
    assert target.level == pytest.approx(0.2 + math.exp(-200 / 60.0), abs=0.05)
    assert 0.7 * 200 * 64 < target.ref_samples <= 200 * 64
    # The script's batch unknown from its source: the one its default trials printed.
    ex = _Scripted()
    run_baseline(Manager(), allocs, tmp_path / "printed", cfg, probe_seconds=20.0, quiet=True,
                 executor=ex, ref_batch=None)
    assert ex.requests[2].loss_target == target
    # Off without goodput: one wave, no targets, no whole box.
    cfg.run.goodput = False
    ex = _Scripted()
    run_baseline(Manager(), allocs, tmp_path / "off", cfg, probe_seconds=20.0, quiet=True,
                 executor=ex, ref_batch=64)
    assert [r.allocation.batch_size for r in ex.requests] == [None, 16, None, 256]
    assert not any(r.until_box or r.loss_target for r in ex.requests)


def test_the_report_says_which_probes_trained_to_the_scripts_loss(tmp_path):
    import json

    from optimizer.foundation.allocation import Allocation
    from optimizer.search.goodput.probe_target import depth_note, training_depth
    from optimizer.trials.records import TrialSummary

    trials = []
    for tid, batch, reached in (("a", 16, 5000.0), ("b", 256, None), ("c", 64, None)):
        (tmp_path / "trials" / tid).mkdir(parents=True)
        if tid != "c":  # the script's own batch has no target
            (tmp_path / "trials" / tid / "loss_target.json").write_text(json.dumps(
                {"level": 0.3456, "ref_samples": 8000.0, "samples_seen": 16000.0,
                 "decay_samples": 2000.0, "first_samples": 0.0,
                 "reached_at_samples": reached, "gave_up": reached is None}))
        trials.append(TrialSummary(tid, "probe", Allocation(0, 1, 4.0, batch)))
    note = depth_note(trials, tmp_path)
    assert "batch 16 trained on" in note and "(0.3456)" in note
    assert "the probes at batch 256 stopped short" in note and "64" not in note
    assert "at most 0.57 at batch 256" in note
    assert depth_note(trials[2:], tmp_path) == ""
    # The bound a probe that stopped short puts on its batch: the own batch's samples to the
    # loss over the samples it trained on without reaching it, less its average's lag.
    level, reached, short = training_depth(trials, tmp_path)
    assert (level, reached) == (0.3456, {16})
    assert short == {256: pytest.approx(8000.0 / (16000.0 - 2000.0 * (1 - math.exp(-8))))}


@pytest.mark.parametrize("efficiency", [0.80, 0.95])
def test_a_stopped_probes_bound_is_not_below_its_batchs_efficiency(tmp_path, efficiency):
    """A probe that ran as many samples as the script's own batch and ended short of its loss
    (the whole job, for mlp's batch 256) bounds its efficiency from above: a bound below the
    truth would rule out the batch on the smoothing's lag alone."""
    import json

    from optimizer.foundation.allocation import Allocation
    from optimizer.search.goodput.probe_target import training_depth
    from optimizer.trials.records import TrialSummary

    n = np.arange(64.0, 8000.0, 64.0)
    level, tau, need = end_reached(n, _curve(n))
    watch = LossWatch(LossTarget(level, tau, need, 64))
    for x in n:  # the other batch: the same curve, `efficiency` times as far per sample
        watch.add(float(x), float(_curve(np.array([efficiency * x]))[0]))
    assert watch.reached_at is None
    (tmp_path / "trials" / "b").mkdir(parents=True)
    (tmp_path / "trials" / "b" / "loss_target.json").write_text(json.dumps(watch.record()))
    trial = TrialSummary("b", "probe", Allocation(0, 1, 4.0, 128))
    bound = training_depth([trial], tmp_path)[2][128]
    # Stopped at the own batch's samples, all it shows is "no more efficient than it".
    assert efficiency <= bound <= 1.01
    if efficiency > 0.9:  # without the lag taken off, the bound read 0.90: below the truth
        assert need / watch.last < efficiency
