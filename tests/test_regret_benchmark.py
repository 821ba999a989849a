"""The regret benchmark's arithmetic on a tiny fake grid (no runs, no timing)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from regret_score import (  # noqa: E402
    Cell,
    CellTruth,
    GroundTruth,
    Pick,
    Prices,
    evaluate,
    mean_of_picks,
    random_search,
    right_size,
    summarize,
)

PRICES = Prices(gpu_hour=2.0, cpu_hour=0.036, gb_hour=0.0036, gpu_max=0, cpu_max=2,
                memory_max=10.0, balanced=(0.5, 0.25, 0.25))
# (cpus, batch) -> (wall seconds of two repetitions, peak GB)
GRID = {
    (1, 64): ([100.0, 100.0], 1.0),
    (1, 128): ([80.0, 80.0], 2.0),
    (2, 64): ([60.0, 60.0], 1.0),
    (2, 128): ([50.0, 54.0], 2.0),
}


def truth(grid=GRID) -> GroundTruth:
    cells = [CellTruth(Cell(0, c, b), list(w), [p, p]) for (c, b), (w, p) in grid.items()]
    return GroundTruth(cells, PRICES, default=Cell(0, 2, 64))


def test_cost_and_time_objectives_follow_the_prices():
    t = truth()
    # 1 CPU, batch 128, 2 GB: 80 s at 0.036 + 2 * 0.0036 = 0.0432 $/h
    assert t.objective(Cell(0, 1, 128), 2.0, "cost") == pytest.approx(80 * 0.0432 / 3600)
    # median of 50 and 54
    assert t.objective(Cell(0, 2, 128), None, "time") == pytest.approx(52.0)
    cost_opt, value = t.optimum("cost")
    # costs at peak memory: (1,64) 100*.0396, (1,128) 80*.0432=3.456, (2,64) 60*.0756, (2,128) 52*.0792
    assert cost_opt == Cell(0, 1, 128)
    assert value == pytest.approx(3.456 / 3600)
    assert t.optimum("time")[0] == Cell(0, 2, 128)


def test_regret_counts_requested_memory_and_out_of_memory_fails():
    t = truth()
    assert t.regret(Cell(0, 1, 128), 2.0, "cost") == pytest.approx(0.0)
    # 8 GB instead of 2: (0.036 + 8 * 0.0036) / 0.0432 - 1 = 0.5
    assert t.regret(Cell(0, 1, 128), 8.0, "cost") == pytest.approx(0.5)
    assert math.isinf(t.objective(Cell(0, 1, 128), 1.5, "cost"))
    row = evaluate(t, Pick("x", Cell(0, 1, 128), 1.5), "cost", "fake")
    assert row["regret"] is None and "out of memory" in row["failed"]
    assert t.memory_slack(Cell(0, 1, 128), 8.0) == pytest.approx(0.75)


def test_balanced_score_is_the_weighted_ratio_to_each_best():
    t = truth()
    cell = Cell(0, 2, 64)
    cost = 60 * (0.072 + 0.0036) / 3600
    best_cost, best_time = 80 * 0.0432 / 3600, 52.0
    best_share = (1 / 2 + 1 / 10) / 2
    share = (2 / 2 + 1 / 10) / 2
    expected = 0.5 * cost / best_cost + 0.25 * 60 / best_time + 0.25 * share / best_share
    assert t.objective(cell, 1.0, "balanced") == pytest.approx(expected)


def test_evaluate_puts_the_optimum_beside_the_recommendation_and_search_cost():
    t = truth()
    row = evaluate(t, Pick("m", Cell(0, 2, 64), 4.0, trials=3, search_s=120.0), "time", "fake")
    assert row["optimum"]["cpus"] == 2 and row["optimum"]["batch_size"] == 128
    assert row["recommended"]["memory_gb"] == 4.0
    assert row["regret"] == pytest.approx(60 / 52 - 1)
    assert row["search_cost"] == pytest.approx(2.0)  # 120 s over the default cell's 60 s
    assert row["memory_slack"] == pytest.approx(0.75)


def test_random_search_over_the_whole_grid_finds_the_optimum():
    t = truth()
    for seed in range(5):
        pick = random_search(t, len(GRID), "time", np.random.default_rng(seed))
        assert pick.cell == Cell(0, 2, 128)
        assert pick.memory_gb == right_size(2.0)
        assert pick.trials == 4


def test_random_search_mean_regret_of_one_trial_is_the_grid_average():
    t = truth()
    row = mean_of_picks(t, lambda s: random_search(t, 1, "time", np.random.default_rng(s)),
                        "time", 400, "fake")
    expected = np.mean([100 / 52, 80 / 52, 60 / 52, 1.0]) - 1
    assert row["regret"] == pytest.approx(expected, abs=0.05)
    assert row["seeds"]["worst_regret"] == pytest.approx(100 / 52 - 1)


def test_right_size_adds_the_margin_and_rounds_up():
    assert right_size(1.0) == pytest.approx(1.25)
    assert right_size(2.0) == pytest.approx(2.5)
    assert right_size(0.2) == pytest.approx(0.25)


def test_summary_counts_failures_as_the_worst():
    t = truth()
    rows = [evaluate(t, Pick("m", Cell(0, 2, 128), 2.0), "time", "fake"),
            evaluate(t, Pick("m", Cell(0, 1, 64), 0.5), "time", "fake"),
            evaluate(t, Pick("m", Cell(0, 2, 64), 2.0), "time", "fake")]
    (s,) = summarize(rows)
    assert s["failed"] == 1 and s["worst_regret"] is None
    assert s["median_regret"] == pytest.approx(60 / 52 - 1)


def test_effective_cell_keeps_a_batch_cloudopt_cannot_reach():
    import dataclasses

    from regret_peers import effective_cell
    from regret_truth import load_workloads

    from optimizer.foundation.allocation import Allocation

    ws = {w.name: w for w in load_workloads()}
    a = Allocation(0, 1, 2.0, 1024)
    # envbatch's own $BATCH_SIZE is reached through --batch-size-env; without it, it is not.
    assert effective_cell(ws["envbatch"], a).batch == 1024
    blind = dataclasses.replace(ws["envbatch"], cloudopt_args="--total-samples 180000")
    assert not blind.cloudopt_reaches_batch() and ws["envbatch"].cloudopt_reaches_batch()
    assert effective_cell(blind, a).batch == ws["envbatch"].default_batch
    assert effective_cell(ws["mlp"], a).batch == 1024
    assert effective_cell(ws["cnn"], a).workers == ws["cnn"].default_workers
    assert effective_cell(ws["mlp"], Allocation(0, 1, 2.0, None)).batch == 128


def test_optuna_peer_searches_the_grid():
    pytest.importorskip("optuna")
    from regret_peers import optuna_pick

    t = truth()
    pick = optuna_pick(t, 3, "cost", seed=0, sampler="tpe")
    assert pick.trials == 3 and pick.cell in t.cells
    assert pick.search_s >= 3 * 50.0


def test_memory_levels_make_requests_a_dimension_where_too_little_is_killed():
    t = GroundTruth(truth().cells.values(), PRICES, default=Cell(0, 2, 64),
                    memory_levels=[1.5, 1.0, 4.0], default_memory_gb=8.0)
    assert t.memory_levels == (1.0, 1.5, 4.0)
    assert len(t.points()) == 3 * len(GRID) and len(truth().points()) == len(GRID)
    # a run at 1.5 GB of a cell that peaks at 2 GB was killed; at 4 GB it is priced at 4 GB
    assert math.isinf(t.observed(Cell(0, 1, 128), 0, "cost", 1.5)[0])
    assert t.observed(Cell(0, 1, 128), 0, "cost", 4.0)[0] == pytest.approx(
        80 * (0.036 + 4 * 0.0036) / 3600)
    # every point once: the cheapest cell at its peak (1 CPU, batch 128, 2 GB) holds only at
    # 4 GB, where batch 64 at 1 GB is cheaper; the pick keeps the request it ran with (a peer
    # has no memory model to right-size with) and pays for the level grid against the optimum
    pick = random_search(t, len(t.points()), "cost", np.random.default_rng(0))
    assert (pick.cell, pick.memory_gb, pick.trials) == (Cell(0, 1, 64), 1.0, 12)
    assert t.optimum("cost")[0] == Cell(0, 1, 128)  # the optimum is still sized at its peak
    assert t.regret(pick.cell, pick.memory_gb, "cost") == pytest.approx(
        100 * 0.0396 / (80 * 0.0432) - 1)


def test_a_peer_whose_every_run_was_killed_leaves_the_default():
    from regret_score import best_observed

    t = GroundTruth(truth().cells.values(), PRICES, default=Cell(0, 2, 64),
                    memory_levels=[0.5], default_memory_gb=8.0)
    pick = best_observed(t, t.points()[:2], "time", np.random.default_rng(0), "random@2")
    assert (pick.cell, pick.memory_gb) == (Cell(0, 2, 64), 8.0)
    assert "killed for memory" in pick.note and pick.search_s == pytest.approx(180.0)


def test_optuna_peer_searches_memory_levels_too():
    pytest.importorskip("optuna")
    from regret_peers import optuna_pick

    t = GroundTruth(truth().cells.values(), PRICES, default=Cell(0, 2, 64),
                    memory_levels=[1.0, 2.0, 4.0], default_memory_gb=8.0)
    picks = [optuna_pick(t, 6, "cost", seed=s, sampler="tpe") for s in range(3)]
    assert all(p.memory_gb in t.memory_levels for p in picks)
    assert all(p.memory_gb >= t.cells[p.cell].peak for p in picks)


def test_paired_regret_judges_both_cells_by_their_runs_of_the_same_hour():
    from regret_rejudge import paired_regret

    t = truth()
    pick, best = Cell(0, 2, 64), Cell(0, 2, 128)  # the truth: 60 s against 52 s
    out = paired_regret(t, "time", pick, 1.25, best, [(50.0, 1.0), (49.0, 1.0), (51.0, 1.1)],
                        [(55.0, 2.0), (56.0, 2.0), (54.0, 2.1)])
    assert out["regret_paired"] == pytest.approx(50.0 / 55.0 - 1.0)  # medians, this hour
    assert out["time_ratio_per_round"] == [round(50 / 55, 3), round(49 / 56, 3), round(51 / 54, 3)]
    cost = paired_regret(t, "cost", pick, 1.25, best, [(50.0, 1.0)], [(50.0, 2.0)])
    hourly = {m: 2 * PRICES.cpu_hour + m * PRICES.gb_hour for m in (1.25, 2.0)}
    assert cost["regret_paired"] == pytest.approx(hourly[1.25] / hourly[2.0] - 1.0)
    # a request below the peak the paired runs reached is out of memory: no regret figure
    oom = paired_regret(t, "cost", pick, 1.0, best, [(50.0, 1.2)], [(50.0, 2.0)])
    assert oom["regret_paired"] is None


def test_the_loss_ruler_truth_is_rebuilt_from_the_suites_json():
    from regret_rejudge import loss_truth_of

    def cell(c, b, wall):
        return {"gpus": 0, "cpus": c, "batch_size": b, "workers": None, "on_grid": True,
                "time_s": wall, "peak_gb": 1.0, "wall_s": [wall, wall]}

    grid = {"default": "g0-c2-b64", "cells": [cell(1, 64, 100.0), cell(2, 64, 60.0),
                                                cell(2, 256, 30.0)],
            "loss": {"target_loss": 0.5, "ema_samples": 100.0,
                     "cells": {"g0-c1-b64": {"reps": [40.0, 44.0]},
                               "g0-c2-b64": {"reps": [35.0, 37.0]},
                               "g0-c2-b256": {"reps": [None, None]}}}}
    lt, target, tau = loss_truth_of(grid, PRICES)
    assert (target, tau) == (0.5, 100.0)
    # batch 256 is fastest through its job but never reaches the loss: 2 CPUs at 64 is best
    assert lt.optimum("time")[0] == Cell(0, 2, 64) and lt.optimum("time")[1] == 36.0
    assert math.isinf(lt.cells[Cell(0, 2, 256)].time_s)
    none, no_target, _ = loss_truth_of({**grid, "loss": {}}, PRICES)
    assert none is None and math.isnan(no_target)


def test_dominated_paired_judges_the_own_trial_on_the_same_hour():
    from regret_rejudge import dominated_paired
    from regret_score import right_size

    t = truth()
    pick, own = Cell(0, 2, 64), Cell(0, 2, 128)
    # this hour the own trial's cell runs 10% faster: still dominated
    out = dominated_paired(t, "time", pick, 1.25, own, [(50.0, 1.0)] * 3, [(45.0, 1.0)] * 3)
    assert out["dominated_paired"] and out["own_vs_recommended_paired"] == pytest.approx(-0.1)
    # 1% faster is within the 2% the suite allows: not dominated
    close = dominated_paired(t, "time", pick, 1.25, own, [(50.0, 1.0)], [(49.5, 1.0)])
    assert not close["dominated_paired"]
    # cost: the own cell at a request right-sized from its own paired peak
    cost = dominated_paired(t, "cost", pick, 4.0, own, [(50.0, 1.0)], [(50.0, 1.0)])
    hourly = {m: 2 * PRICES.cpu_hour + m * PRICES.gb_hour for m in (4.0, right_size(1.0))}
    assert cost["own_vs_recommended_paired"] == pytest.approx(
        hourly[right_size(1.0)] / hourly[4.0] - 1.0)
    assert cost["dominated_paired"]


def test_the_best_probe_peer_of_the_curves_takes_only_the_baseline_probes():
    from regret_curves import best_probe_pick
    from regret_truth import load_workloads

    from optimizer.foundation.allocation import Allocation
    from optimizer.trials.records import TrialSummary

    mlp = next(w for w in load_workloads() if w.name == "mlp")  # batch reachable, no workers

    def trial(tid, cpus, batch, wall):
        return TrialSummary(tid, "completed", Allocation(0, cpus, 8.0, batch), wall_time_s=wall,
                            throughput=1000.0 / wall, mem_gb_peak=1.0).to_dict()

    body = {"trials": [trial("00-g0-c2-m8-b64", 2, 64, 60.0),
                       trial("01-g0-c1-m8-b128", 1, 128, 80.0),
                       trial("refine-0-g0-c2-m8-b128", 2, 128, 50.0)]}
    pick = best_probe_pick(body, mlp, truth(), None, "time", 6)
    # the closed loop's faster trial is not a probe: the best probe is the 60-second one, at
    # the memory it asked for
    assert pick.cell == Cell(0, 2, 64) and pick.trials == 2 and pick.memory_gb == 8.0
    assert pick.method == "best-probe@6"


def test_the_curves_table_shows_what_every_cell_run_once_reaches():
    from regret_curves import table

    def row(method, budget, regret):
        return {"script": "s", "preference": "cost", "method": method, "budget": budget,
                "regret": regret, "trials": budget or 0}

    rows = [row("cloudopt@2", 2, 0.4), row("default", None, 1.2), row("every-cell", 64, 0.07),
            {**row("every-cell", 64, 0.21), "preference": "time"}]
    text = table(rows, [2])
    assert "| every cell once (64 runs) | 14.0% / 21.0% |" in text
    assert "| cloudopt (median / worst) | 40.0% / 40.0% |" in text


def test_every_enlarged_grid_has_48_points_on_two_cores():
    from regret_truth import load_workloads

    large = load_workloads(variant="large")
    # every CPU script of the regret suite has an enlarged grid (issue 41)
    suite = {w.name for w in load_workloads() if not w.needs_gpu}
    assert suite <= {w.name for w in large} and len(suite) >= 6
    for w in large:
        per_cpu_level = len(w.batch_sizes) * max(1, len(w.workers)) * max(1, len(w.memory_gb))
        assert len(w.batch_sizes) == 8 and 2 * per_cpu_level >= 48, w.name
        # a script without a worker count searches its memory request instead
        assert bool(w.workers) != bool(w.memory_gb), w.name


def test_unpacking_keeps_the_cache_and_says_where_it_differs_from_the_packed_grid(
        tmp_path, monkeypatch, capsys):
    import io
    import tarfile
    from types import SimpleNamespace

    import regret_curves

    monkeypatch.setattr(regret_curves, "PACK_DIR", tmp_path / "packs")
    monkeypatch.setattr(regret_curves, "ROOT", tmp_path)
    monkeypatch.setattr(regret_curves, "machine_key", lambda: "m")
    store = SimpleNamespace(dir=tmp_path / "cache" / "s-hash")
    (store.dir / "cells/c/rep0").mkdir(parents=True)
    (store.dir / "cells/c/rep0/summary.json").write_text('{"wall_time_s": 9}')
    (tmp_path / "packs/m").mkdir(parents=True)
    with tarfile.open(tmp_path / "packs/m/s-hash.tar.gz", "w:gz") as tar:
        for name, body in (("cells/c/rep0/summary.json", b'{"wall_time_s": 12}'),
                           ("cells/c/rep1/summary.json", b'{"wall_time_s": 13}')):
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    assert regret_curves.unpack(store) == 1
    assert (store.dir / "cells/c/rep0/summary.json").read_text() == '{"wall_time_s": 9}'
    assert (store.dir / "cells/c/rep1/summary.json").read_text() == '{"wall_time_s": 13}'
    assert "1 recorded run in" in capsys.readouterr().err
    assert regret_curves.unpack(store) == 0  # nothing left to add; the difference is said again
