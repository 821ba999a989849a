"""The run-off decides batch sizes by goodput, not by one probe's efficiency (issue 39).

One probe's efficiency at a batch scatters more than its bootstrap interval says: tab's batch
16 read 1.09, 1.53 and 1.80 in three runs of one code, where whole runs say about 1.5, and the
run that read 1.09 never measured batch 16 again. So a batch whose interval reaches the leader
joins the run-off, its run-off runs train on to the own batch's loss, the efficiency is pooled
over those curves, and a contender left at the script's data-loader workers races at the
count the sweep chose for the leader."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import load_config
from optimizer.foundation.job import Job
from optimizer.search.after_loop.runoff import contenders, runoff, uncertain, with_workers
from optimizer.search.choice import objective_table
from optimizer.search.core.state import SearchJob, SearchState
from optimizer.search.goodput.common_loss import pooled_ratio, samples_ratio
from optimizer.search.goodput.efficiency import (
    Measured,
    NoiseScaleEstimate,
    TrialEfficiency,
    efficiency_from_trials,
    loss_points,
)
from optimizer.search.goodput.probe_target import target_for_batch, trained_records
from optimizer.trials.probe import EVENTS_FILE, ProbeRecord
from optimizer.trials.records import TrialSummary


def test_curves_of_one_batch_pool_to_an_efficiency_between_them_and_surer_than_each():
    parts = [(1.09, 0.45, 1.46), (1.53, 0.98, 2.95), (1.80, 0.98, 3.17)]
    value, low, high = pooled_ratio(parts)
    assert 1.09 < value < 1.80 and low < value < high
    assert all(high / low < h / lo for _, lo, h in parts)
    assert pooled_ratio(parts[:1]) == parts[0]
    assert pooled_ratio([(None, None, None), (0.0, 0.0, 0.0), parts[1]]) == parts[1]
    assert pooled_ratio([(None, None, None)]) == (None, None, None)
    # A narrower interval weighs more: the pooled value leans to it.
    assert pooled_ratio([(1.0, 0.95, 1.05), (2.0, 1.0, 4.0)])[0] < 1.1


def _curve(batch: int, efficiency: float, seed: int, samples: int = 40_000) -> list[dict]:
    """Probe events of a loss ``0.5 + 2 exp(-E s / 8000)`` at ``s`` samples, with noise."""
    rng = np.random.default_rng(seed)
    out = [{"e": "header", "version": 1}, {"e": "first_step", "t": 0.0, "samples": batch}]
    for step in range(1, samples // batch + 1):
        loss = 0.5 + 2.0 * math.exp(-efficiency * (step - 1) * batch / 8000)
        out += [{"e": "steps", "t": step * 1e-3, "step": step, "samples": step * batch, "n": 1},
                {"e": "loss", "t": step * 1e-3, "step": step,
                 "value": loss + 0.05 * rng.standard_normal()}]
    return out


def _trial(run: Path, tid: str, batch: int, events: list[dict], reached: bool | None = None,
           status: str = "probe") -> TrialSummary:
    folder = run / "trials" / tid
    folder.mkdir(parents=True)
    (folder / EVENTS_FILE).write_text("\n".join(json.dumps(e) for e in events) + "\n")
    if reached is not None:
        (folder / "loss_target.json").write_text(json.dumps(
            {"level": 0.6, "decay_samples": 2000.0, "ref_samples": 20000.0, "ref_batch": 64,
             "reached_at_samples": 15000.0 if reached else None, "samples_seen": 30000.0,
             "gave_up": not reached}))
    t = TrialSummary(tid, status, Allocation(0, 1, 4.0, batch), throughput=1000.0,
                     samples=40_000.0, wall_time_s=40.0)
    t.save(folder)
    return t


def test_a_runoff_run_trains_on_to_the_loss_again_unless_its_batch_stalled(tmp_path):
    run = tmp_path / "run"
    _trial(run, "00-own", 64, _curve(64, 1.0, seed=1))
    _trial(run, "01-b32", 32, _curve(32, 1.3, seed=2), reached=True)
    assert target_for_batch(32, run, 64) is None  # one curve that far is what a probe needs
    target = target_for_batch(32, run, 64, again=True)
    assert target is not None and target.ref_batch == 64
    assert target_for_batch(64, run, 64, again=True) is None  # the own batch: no target
    assert list(trained_records(list(_iter(run)), run)) == [32]
    (run / "trials" / "01-b32" / "loss_target.json").write_text(json.dumps(
        {"level": 0.6, "reached_at_samples": None, "gave_up": True}))
    assert target_for_batch(32, run, 64, again=True) is None  # it stalls: it would again
    assert trained_records(list(_iter(run)), run) == {}


def _iter(run: Path):
    from optimizer.trials.records import iter_trials

    return iter_trials(run)


def test_the_efficiency_is_pooled_over_the_curves_that_trained_as_far(tmp_path):
    run = tmp_path / "run"
    own = _trial(run, "00-own", 64, _curve(64, 1.0, seed=1))
    curves = [_trial(run, f"0{k}-b32", 32, _curve(32, 1.5, seed=k), reached=True)
              for k in (2, 3, 4)]
    single = efficiency_from_trials([own, curves[0]], run, 64)
    pooled = efficiency_from_trials([own, *curves], run, 64,
                                    trained_records([own, *curves], run))
    alone = [samples_ratio(loss_points(_record(run / "trials" / "00-own"), 64),
                           loss_points(_record(run / "trials" / t.trial_id), 32))
             for t in curves]
    m = pooled.measured[32]
    assert min(a[0] for a in alone) <= m.value <= max(a[0] for a in alone)
    assert m.value == pytest.approx(1.5, rel=0.15)
    assert m.high / m.low < single.measured[32].high / single.measured[32].low


def _record(folder: Path) -> ProbeRecord:
    from optimizer.trials.probe import read_probe

    return read_probe(folder / EVENTS_FILE)


def _probe(tid: str, batch: int, thr: float, workers: int | None = None) -> TrialSummary:
    return TrialSummary(tid, "probe", Allocation(0, 1, 4.0, batch, workers), throughput=thr,
                        samples=1000.0, total_samples=1000.0, wall_time_s=1000.0 / thr,
                        predicted_total_time_s=1000.0 / thr, mem_gb_peak=1.0,
                        started_at="2026-01-01T00:00:00.000+00:00",
                        finished_at="2026-01-01T00:00:01.000+00:00", node="n1")


def _efficiency(high: float) -> TrialEfficiency:
    return TrialEfficiency(64, NoiseScaleEstimate(why="none"),
                           measured={16: Measured(1.09, 0.45, high), 32: Measured(1.0, 0.99, 1.01)},
                           efficiency={16: 1.09, 32: 1.0, 64: 1.0},
                           decided_by="measured progress")


# tab's time run: the sweep put the leader at no workers; batch 16, at the script's workers,
# read 1.09 and trailed by 30%.
TAB = [_probe("workers-g0-c1-m4-b64-w0", 64, 100.0, 0), _probe("01-default", 64, 97.0),
       _probe("03-b32", 32, 90.0), _probe("refine-1-b16", 16, 70.0)]


def test_a_batch_whose_efficiency_interval_reaches_the_leader_joins_the_runoff():
    cfg = load_config()
    table = objective_table(TAB, cfg, "time", _efficiency(1.46))
    field = contenders(table, 3)
    assert list(field["trial_id"]) == [t.trial_id for t in TAB[:3]]
    assert uncertain(table, field, _efficiency(1.46)) == "refine-1-b16"  # 70 x 1.46 = 102
    assert uncertain(table, field, _efficiency(1.15)) is None  # 80.5: beyond the band
    assert uncertain(table, field, None) is None


def test_contenders_at_the_scripts_workers_race_at_the_count_the_sweep_chose():
    leader = TAB[0].allocation
    others = [TAB[1].allocation, TAB[3].allocation,
              Allocation(0, 2, 4.0, 32)]  # 2 CPUs: the sweep measured nothing there
    out = with_workers(leader, [leader, *others], swept=True)
    assert [(a.cpus, a.batch_size, a.workers) for a in out] == \
        [(1, 64, 0), (1, 16, 0), (2, 32, None)]  # the default at 64 became the leader: once
    assert with_workers(leader, [leader, *others], swept=False) == [leader, *others]


class _Machine:
    """A fake search port measuring each setting at a fixed samples/s (by batch and workers)."""

    budget = None

    def __init__(self, speed, efficiency):
        self.config, self.user_preference = load_config(), "time"
        self.speed, self.efficiency, self.recorded = speed, efficiency, {}

    def measure(self, manager, alloc, prefix, run_dir, opts, total):
        name = f"{prefix}-{alloc.key()}"
        if name not in self.recorded:
            self.recorded[name] = _probe(name, alloc.batch_size,
                                         self.speed[(alloc.batch_size, alloc.workers)],
                                         alloc.workers)
        return self.recorded[name]

    def label_batch(self, trial, path, settable):
        return trial


SPEC = Job(Path("train.py"), batch_control="flag")
"""The job the run-off works for: a script whose batch size trials can set."""


def _runoff(machine, trials, run_dir, rounds):
    """The run-off on ``machine`` (a fake port), adding to ``trials`` and ``rounds``."""
    state = SearchState(machine, SearchJob(None, run_dir, SPEC), trials, rounds,
                        efficiency=getattr(machine, "efficiency", None))
    return runoff(state)


def test_the_runoff_takes_the_uncertain_batch_at_the_sweeps_workers(tmp_path):
    machine = _Machine({(64, 0): 100.0, (16, 0): 95.0, (32, 0): 90.0}, _efficiency(1.46))
    trials, rounds = list(TAB), []
    block = _runoff(machine, trials, tmp_path, rounds)
    ran = {(t.allocation.batch_size, t.allocation.workers) for t in trials[len(TAB):]}
    # The default at 64 became the leader's setting, which left room for batch 32 as well.
    assert ran == {(64, 0), (32, 0), (16, 0)} and block
    assert "top of its efficiency's interval" in rounds[0]["why"]
    added = {r["trial"]: r["added_by"] for r in rounds}
    by = [v for k, v in added.items() if k.endswith("b16-w0")]
    assert len(by) >= 2 and set(by) == {"workers-sweep"}
    assert all(v is None for k, v in added.items() if k.endswith("b64-w0"))
