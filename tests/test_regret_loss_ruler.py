"""The regret benchmark's loss ruler on synthetic loss curves (no runs, no timing)."""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from regret_loss import (  # noqa: E402
    LossCurve,
    add_loss_summary,
    end_loss,
    loss_fields,
    loss_truth,
    smooth,
    target_loss,
    time_to_target,
)
from regret_score import (  # noqa: E402
    Cell,
    CellTruth,
    GroundTruth,
    Pick,
    Prices,
    evaluate,
    format_summary,
    summarize,
)

JOB = 10_000  # training samples of the default job
TAU = 0.1 * JOB
STARTUP = 2.0  # seconds before the first step


def curve(loss, batch: int = 100, rate: float = 5000.0, samples: int = JOB) -> LossCurve:
    """A loss sampled every step of ``batch`` samples; ``loss`` maps samples seen to a loss."""
    x = np.arange(batch, samples + 1, batch, dtype=float)
    return LossCurve(x, STARTUP + x / rate, np.array([loss(v) for v in x]))


def decay(floor: float, scale: float = 2000.0):
    return lambda x: floor + 2.0 * math.exp(-x / scale)


def test_a_curve_that_reaches_the_target_crosses_after_its_raw_losses_do():
    c = curve(decay(1.0))
    target = 1.5  # the raw loss reaches it at x = 2000 ln 4
    raw_t = STARTUP + 2000 * math.log(4) / 5000
    t = time_to_target(c, target, TAU)
    # the moving average lags the falling curve, by less than two decay lengths
    assert raw_t < t < raw_t + 2 * TAU / 5000
    s = smooth(c, TAU)
    i = int(np.searchsorted(c.t, t))
    assert s[i - 1] > target >= s[i]


def test_a_curve_that_never_reaches_the_target_is_infinite():
    assert math.isinf(time_to_target(curve(decay(1.2)), 1.1, TAU))
    assert math.isinf(time_to_target(LossCurve([], [], []), 1.0, TAU))


@pytest.mark.parametrize("seed", range(5))
def test_noise_does_not_make_the_smoothed_curve_cross_early(seed):
    rng = np.random.default_rng(seed)
    clean = curve(decay(1.0))
    noisy = LossCurve(clean.samples, clean.t, clean.loss + rng.normal(0.0, 0.5, len(clean)))
    target = 1.5
    raw_first = noisy.t[np.argmax(noisy.loss <= target)]
    raw_clean = STARTUP + 2000 * math.log(4) / 5000
    t_clean, t_noisy = time_to_target(clean, target, TAU), time_to_target(noisy, target, TAU)
    # single noisy losses dip below the target well before the curve itself gets there
    assert raw_first < raw_clean - 0.1
    # the smoothed one crosses after the noiseless losses do, near the noiseless average
    assert raw_clean < t_noisy
    assert t_noisy == pytest.approx(t_clean, abs=0.2 * (t_clean - STARTUP))


def test_a_constant_loss_reaches_its_own_end_value_one_decay_length_in():
    flat = curve(lambda x: 0.7)
    target = target_loss([flat, flat], TAU)
    assert target == pytest.approx(0.7)
    # the first points average less than TAU samples and do not count, even at the target
    assert time_to_target(flat, target, TAU) == pytest.approx(STARTUP + (100 + TAU) / 5000)
    # a bigger batch on a faster cell gets there sooner: only start-up and TAU samples matter
    fast = curve(lambda x: 0.7, batch=1000, rate=20000.0)
    assert time_to_target(fast, target, TAU) == pytest.approx(STARTUP + 2000 / 20000)


def test_target_is_the_mean_smoothed_end_of_the_default_repetitions():
    a, b = curve(decay(1.0)), curve(decay(1.2))
    assert target_loss([a, b], TAU) == pytest.approx((end_loss(a, TAU) + end_loss(b, TAU)) / 2)
    # one outlying last loss moves the end value by a share of its size only
    spike = LossCurve(a.samples, a.t, np.r_[a.loss[:-1], a.loss[-1] + 1.0])
    assert end_loss(spike, TAU) - end_loss(a, TAU) == pytest.approx(1 - math.exp(-100 / TAU))


def test_the_first_crossing_is_interpolated_between_sampled_points():
    c = LossCurve([0.0, 2000.0, 4000.0], [1.0, 2.0, 3.0], [2.0, 2.0, 0.0])
    s = smooth(c, TAU)
    assert s[2] == pytest.approx(2.0 * math.exp(-2))
    target = 1.0
    assert time_to_target(c, target, TAU) == pytest.approx(2.0 + (2.0 - target) / (2.0 - s[2]))


# A grid where the bigger batch runs the job faster but never trains as well as the default.
PRICES = Prices(gpu_hour=2.0, cpu_hour=0.036, gb_hour=0.0036, gpu_max=0, cpu_max=2,
                memory_max=10.0, balanced=(0.5, 0.25, 0.25))
JOB_S = {(1, 64): 100.0, (2, 64): 60.0, (2, 1024): 30.0}
TO_TARGET = {(1, 64): [90.0, 92.0], (2, 64): [55.0, 57.0], (2, 1024): [math.inf, math.inf]}


def grids() -> tuple[GroundTruth, GroundTruth]:
    cells = [CellTruth(Cell(0, c, b), [t, t], [1.0, 1.0]) for (c, b), t in JOB_S.items()]
    truth = GroundTruth(cells, PRICES, default=Cell(0, 2, 64))
    lt = loss_truth(truth, {Cell(0, c, b): ts for (c, b), ts in TO_TARGET.items()})
    assert lt is not None
    return truth, lt


def test_regret_under_the_loss_ruler_uses_time_and_cost_to_the_target():
    truth, lt = grids()
    big, default = Cell(0, 2, 1024), Cell(0, 2, 64)
    assert truth.optimum("time")[0] == big and lt.optimum("time")[0] == default
    row = loss_fields(lt, [Pick("m", Cell(0, 1, 64), 1.0)], "time")
    assert row["regret_loss"] == pytest.approx(91.0 / 56.0 - 1)
    assert row["time_to_target_s"] == pytest.approx(91.0) and row["loss_never"] == 0
    # cost: the 1-CPU cell is slower to the target but at about half the price
    cost = loss_fields(lt, [Pick("m", default, 1.0)], "cost")
    hourly = {c: c * PRICES.cpu_hour + PRICES.gb_hour for c in (1, 2)}
    assert cost["loss_optimum"]["cpus"] == 1
    assert cost["regret_loss"] == pytest.approx(56 * hourly[2] / (91 * hourly[1]) - 1)
    never = loss_fields(lt, [Pick("m", big, 1.0)], "time")
    assert never["regret_loss"] is None and never["loss_never"] == 1
    assert never["time_to_target_s"] is None
    # too little memory is a failure, not a miss of the target
    oom = loss_fields(lt, [Pick("m", default, 0.5)], "time")
    assert oom["regret_loss"] is None and oom["loss_never"] == 0
    json.dumps(never, allow_nan=False)


def test_a_randomised_peer_is_infinite_when_any_seed_never_reaches_the_target():
    _, lt = grids()
    picks = [Pick("r", Cell(0, 2, 64), 1.0)] * 3 + [Pick("r", Cell(0, 2, 1024), 1.0)]
    row = loss_fields(lt, picks, "time")
    assert row["regret_loss"] is None and row["loss_never"] == pytest.approx(0.25)
    assert row["seeds_loss"]["median_regret"] == pytest.approx(0.0)


def test_summary_counts_the_recommendations_that_never_reach_the_target():
    truth, lt = grids()
    rows = []
    for cell in (Cell(0, 2, 1024), Cell(0, 2, 64), Cell(0, 1, 64)):
        pick = Pick("m", cell, 1.0)
        rows.append({**evaluate(truth, pick, "time", "fake"), **loss_fields(lt, [pick], "time")})
    summary = summarize(rows)
    add_loss_summary(summary, rows)
    (s,) = summary
    # the samples/s ruler ranks the big batch first; the loss ruler never reaches with it
    assert s["median_regret"] == pytest.approx(1.0) and s["worst_regret"] == pytest.approx(100 / 30 - 1)
    assert s["median_regret_loss"] == pytest.approx(91 / 56 - 1)
    assert s["worst_regret_loss"] is None and s["never_reached"] == 1
    both = format_summary(summary, "both").splitlines()
    assert "median regret (loss)" in both[0] and "| inf | 1 |" in both[2]
    assert "loss" not in format_summary(summary).splitlines()[0]


def test_no_grid_cell_reaching_the_target_leaves_no_loss_ruler():
    truth, _ = grids()
    assert loss_truth(truth, {c: [math.inf] for c in truth.cells}) is None
    assert loss_fields(None, [Pick("m", Cell(0, 2, 64), 1.0)], "time")["regret_loss"] is None


def test_longer_runs_scale_the_job_epochs():
    from regret_truth import load_workloads

    for quick in (False, True):
        for w in load_workloads(quick=quick):
            source = w.file.read_text()
            default = re.search(r'"--epochs", type=int, default=(\d+)', source)
            assert w.epochs_flag == "--epochs" and default is not None, w.name
            # the manifest's epoch count is the script's own default
            assert w.epochs == int(default.group(1)), w.name
            longer = w.longer_args(3)
            assert longer is not None and longer.count("--epochs") == 1
            assert longer[-2:] == ["--epochs", str(3 * w.job_epochs())]
    quick = {w.name: w for w in load_workloads(quick=True)}
    assert quick["mlp"].longer_args(3) == ["--samples", "6000", "--epochs", "3"]


def test_a_recorded_run_reads_as_a_curve_on_the_trial_clock(tmp_path):
    from regret_truth import read_loss_curve

    from optimizer.trials.records import TrialSummary

    TrialSummary("rep0", "completed", started_at="2026-01-01T00:00:00.000+00:00").save(tmp_path)
    start = 1767225600.0  # 2026-01-01T00:00:00Z
    events = [{"e": "header", "wall": start + 0.05, "t": 0.0},
              {"e": "first_step", "samples": 32, "t": 1.0},
              {"e": "loss", "step": 1, "t": 1.0, "value": 2.0},
              {"e": "loss", "step": 4, "t": 1.3, "value": 1.5}]
    (tmp_path / "probe.jsonl").write_text("\n".join(json.dumps(e) for e in events) + "\n")
    c = read_loss_curve(tmp_path, batch=64)
    assert c is not None
    assert list(c.samples) == [32.0, 128.0]  # the batch the probe saw, not the one asked for
    assert list(c.t) == pytest.approx([1.05, 1.35])
    assert list(c.loss) == [2.0, 1.5]
    assert read_loss_curve(tmp_path / "missing", batch=64) is None


def fake_run(trial_dir: Path, start: float, losses: list[tuple[int, float, float]]) -> None:
    """A recorded run: its summary (started at ``start``) and its probe's losses."""
    from datetime import datetime, timezone

    from optimizer.trials.records import TrialSummary

    trial_dir.mkdir(parents=True)
    started = datetime.fromtimestamp(start, timezone.utc).isoformat(timespec="milliseconds")
    TrialSummary(trial_dir.name, "completed", started_at=started).save(trial_dir)
    events = [{"e": "header", "wall": start, "t": 0.0}, {"e": "first_step", "samples": 100}]
    events += [{"e": "loss", "step": s, "t": t, "value": v} for s, t, v in losses]
    (trial_dir / "probe.jsonl").write_text("\n".join(json.dumps(e) for e in events) + "\n")


def test_a_repetition_that_misses_the_target_is_timed_on_its_long_run(tmp_path):
    from regret_truth import TruthStore, load_workloads

    store = TruthStore.__new__(TruthStore)  # no machine key: the runs below are recorded
    store.w = {w.name: w for w in load_workloads(quick=True)}["mlp"]
    store.dir, store.repeats = tmp_path, 1
    cell = Cell(0, 2, 100)
    # the job ends above the target; its long run, started 0.5 s quicker a session later,
    # gets there between its losses at 2.9 and 3.0 s, 1.35 s after its first
    fake_run(store.cell_dir(cell) / "rep0", 1e9, [(s, 2.0 + 0.1 * s, 2.0) for s in range(1, 11)])
    fake_run(store.long_dir(cell, 0), 2e9,
             [(s, 1.5 + 0.1 * s, 2.0 if s < 15 else 1.0) for s in range(1, 31)])
    (t,) = store.times_to_target(cell, target=1.5, tau=10.0)
    # the long run's time from its first loss, on the repetition's own start-up (2.1 s)
    assert t == pytest.approx(2.1 + 1.35, abs=0.01)
    assert math.isinf(store.times_to_target(cell, target=0.5, tau=10.0)[0])
