"""cloudopt's recommendation against the grid's optimum, both measured again in the same hour.

The ground truth of ``recommendation_regret.py`` is the median of full runs taken hours apart,
and on a shared machine the ranking of two settings can change with the hour: the example CNN
at 2 CPUs ran batch 128 15% faster than batch 256 in the ground truth, and batch 256 13% faster
than batch 128 in cloudopt's run-off an hour later (both measured back to back there). A regret
read from the ground truth then says as much about the hour as about the recommendation.

So this script takes the suite's JSON and, for each cloudopt row whose recommended cell is not
the optimum's, runs the two cells back to back ``--rounds`` times (alternating which goes
first), full runs as in the ground truth, and prints the regret judged on these paired runs
(each cell's median there, at the memory the row requested, against the optimum at its peak)
beside the ground-truth regret. Runs are cached under
``runs/regret/<machine>/<script>-<hash>/rejudge/<recommended>__<optimum>/r<k>-<cell>``, so a
second call reruns nothing; a row whose cell is the optimum keeps its ground-truth regret (it
differs only in memory).

The suite also flags a recommendation "dominated by one of its own measured trials" from the
ground truth. For each such row this script finds that trial's cell in the cached cloudopt run
(``cloudopt-<code>-*/b<budget>-<preference>/bench.json``), runs it and the recommended cell
back to back the same way, and says whether the trial still beats the recommendation by more
than 2% there (the trial at a request right-sized from its paired peak).

With ``--ruler loss`` the rows are judged under the loss ruler instead: each cloudopt row's
recommended cell against the grid's best cell under that ruler for the row's preference (its
``loss_optimum``), each paired run read as the time its smoothed loss took to reach the suite's
target as the suite reads it (a run that misses it within its job runs again for 3x the
epochs, and the row is left unjudged only where that misses too).

    python benchmarks/regret_rejudge.py runs/regret/i18g-all.json --rounds 3
    python benchmarks/regret_rejudge.py runs/regret/cnn-42b.json --ruler loss --preferences time
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

from regret_loss import LONG_FACTOR, loss_truth
from regret_peers import dominating_cell
from regret_score import Cell, CellTruth, GroundTruth, pct, right_size
from regret_truth import TruthStore, load_workloads

from optimizer.foundation.config import load_config
from optimizer.trials.records import TrialSummary


def _cell(d: dict[str, Any]) -> Cell:
    return Cell(int(d["gpus"]), int(d["cpus"]), int(d["batch_size"]), d.get("workers"))


def truth_of(grid: dict[str, Any], prices: Any) -> GroundTruth:
    """The suite's ground truth of one script, rebuilt from its JSON grid."""
    cells = [CellTruth(_cell(c), list(c["wall_s"]), [c["peak_gb"]] * len(c["wall_s"]),
                       on_grid=c["on_grid"]) for c in grid["cells"]]
    default = next(t.cell for t in cells if t.cell.key() == grid["default"])
    return GroundTruth(cells, prices, default)


def loss_truth_of(grid: dict[str, Any], prices: Any) -> tuple[GroundTruth | None, float, float]:
    """The suite's ground truth of one script under the loss ruler, rebuilt from its JSON grid,
    with the target loss and the smoothing length (None, nan, nan without a loss ruler)."""
    loss = grid.get("loss") or {}
    if not loss.get("cells"):
        return None, math.nan, math.nan
    truth = truth_of(grid, prices)
    times = {c: [math.inf if x is None else float(x) for x in loss["cells"][c.key()]["reps"]]
             for c in truth.cells if c.key() in loss["cells"]}
    return loss_truth(truth, times), float(loss["target_loss"]), float(loss["ema_samples"])


def paired_runs(store: TruthStore, pick: Cell, best: Cell, rounds: int,
                quiet: bool) -> dict[Cell, list[tuple[Any, Path]]]:
    """``rounds`` full runs of each cell, back to back, alternating which goes first; each run
    with its folder."""
    folder = store.dir / "rejudge" / f"{pick.key()}__{best.key()}"
    runs: dict[Cell, list[tuple[Any, Path]]] = {pick: [], best: []}
    for r in range(rounds):
        for cell in ((pick, best) if r % 2 == 0 else (best, pick)):
            path = folder / f"r{r}-{cell.key()}"
            t = store.run_in(cell, path)
            if not quiet:
                print(f"  {store.w.name} {cell.key()} round {r + 1}: {t.wall_time_s:.2f} s "
                      f"({t.status})", flush=True)
            runs[cell].append((t, path))
    return runs


def _failed(runs: dict[Cell, list[tuple[Any, Path]]]) -> bool:
    return any(t.status != "completed" for ts in runs.values() for t, _ in ts)


def _setting() -> tuple[Any, Any, dict[str, Any]]:
    """The configuration, its prices and the suite's workloads by name."""
    from recommendation_regret import prices_of

    config = load_config()
    return config, prices_of(config), {w.name: w for w in load_workloads()}


def _median_and_peak(runs: list[tuple[float, float]]) -> tuple[float, float]:
    """The median seconds and the largest peak GB of paired runs ``(seconds, GB)``."""
    return statistics.median(s for s, _ in runs), max(p for _, p in runs)


def rejudge(rows: list[dict[str, Any]], grids: dict[str, Any], root: Path, rounds: int,
            quiet: bool, ruler: str = "samples") -> list[dict[str, Any]]:
    """The cloudopt rows re-judged on paired same-hour runs, under the samples ruler (the whole
    job's seconds) or the loss ruler (the seconds to the suite's target loss)."""
    config, prices, workloads = _setting()
    by_loss = ruler == "loss"
    out = []
    for row in rows:
        if not row["method"].startswith("cloudopt@") or not row.get("recommended"):
            continue
        script, pref = row["script"], row["preference"]
        if by_loss:
            truth, target, tau = loss_truth_of(grids[script], prices)
            if truth is None or not row.get("loss_optimum"):
                continue
            best, regret = _cell(row["loss_optimum"]), row.get("regret_loss")
        else:
            truth, best, regret = truth_of(grids[script], prices), _cell(row["optimum"]), \
                row["regret"]
        pick = _cell(row["recommended"])
        memory = float(row["recommended"]["memory_gb"])
        entry = {"script": script, "preference": pref, "recommended": pick.key(),
                 "optimum": best.key(), "regret_truth": regret, "ruler": ruler}
        if pick == best or pick not in truth.cells:
            entry.update(regret_paired=regret, rounds=0,
                         note="the optimum's cell" if pick == best else "not in the JSON's grid")
            out.append(entry)
            continue
        store = TruthStore(workloads[script], config, root)
        runs = paired_runs(store, pick, best, rounds, quiet)
        if _failed(runs):
            entry.update(regret_paired=None, rounds=rounds, note="a run failed")
            out.append(entry)
            continue
        if by_loss:
            figures = {c: [(store.run_to_target(c, path, path.with_name(path.name + "-long"),
                                               target, tau), t.mem_gb_peak)
                           for t, path in ts] for c, ts in runs.items()}
            if any(math.isinf(x) for fs in figures.values() for x, _ in fs):
                entry.update(regret_paired=None, rounds=rounds,
                             note=f"a run did not reach the target loss in {LONG_FACTOR}x its job")
                out.append(entry)
                continue
        else:
            figures = {c: [(t.wall_time_s, t.mem_gb_peak) for t, _ in ts]
                       for c, ts in runs.items()}
        entry.update(paired_regret(truth, pref, pick, memory, best, figures[pick],
                                   figures[best]), rounds=rounds)
        out.append(entry)
    return out


def paired_regret(truth: GroundTruth, preference: str, pick: Cell, memory_gb: float,
                  best: Cell, pick_runs: list[tuple[float, float]],
                  best_runs: list[tuple[float, float]]) -> dict[str, Any]:
    """Regret of ``pick`` (at the memory it requests) against ``best`` (at its peak), each
    judged by the median seconds and the largest peak of its paired runs ``(seconds, GB)``;
    out of memory is infinite regret. Prices and the balanced normalisers are the ground
    truth's."""
    t_pick, p_pick = _median_and_peak(pick_runs)
    t_best, p_best = _median_and_peak(best_runs)
    value = truth.objective(pick, memory_gb, preference, time_s=t_pick, peak_gb=p_pick)
    opt = truth.objective(best, p_best, preference, time_s=t_best, peak_gb=p_best)
    ratios = [a[0] / b[0] for a, b in zip(pick_runs, best_runs, strict=True)]
    return {"regret_paired": value / opt - 1.0 if math.isfinite(value) else None,
            "time_s": {pick.key(): t_pick, best.key(): t_best},
            "time_ratio_per_round": [round(x, 3) for x in ratios]}


def rejudge_dominated(rows: list[dict[str, Any]], grids: dict[str, Any], root: Path,
                      code: str, rounds: int, quiet: bool) -> list[dict[str, Any]]:
    """The rows flagged dominated by an own trial, re-judged on paired same-hour runs."""
    config, prices, workloads = _setting()
    out = []
    for row in rows:
        if not (row["method"].startswith("cloudopt@") and row.get("dominated_by_own_trial")):
            continue
        script, pref, w = row["script"], row["preference"], workloads[row["script"]]
        truth = truth_of(grids[script], prices)
        store = TruthStore(w, config, root)
        pick, memory = _cell(row["recommended"]), float(row["recommended"]["memory_gb"])
        entry: dict[str, Any] = {"script": script, "preference": pref, "recommended": pick.key()}
        found = sorted(store.dir.glob(f"cloudopt-{code}-*/b{row['budget']}-{pref}/bench.json"))
        if len(found) != 1:
            entry["note"] = f"{len(found)} cached cloudopt runs of code {code} found"
            out.append(entry)
            continue
        trials = [TrialSummary.from_dict(t)
                  for t in json.loads(found[0].read_text()).get("trials", [])]
        own = dominating_cell(trials, w, truth, pref, pick, memory)
        if own is None:
            entry["note"] = "no own trial beats it under this ground truth"
            out.append(entry)
            continue
        entry["own_trial"] = own.key()
        runs = paired_runs(store, pick, own, rounds, quiet)
        if _failed(runs):
            entry["note"] = "a run failed"
            out.append(entry)
            continue
        fig = {c: [(t.wall_time_s, t.mem_gb_peak) for t, _ in ts] for c, ts in runs.items()}
        entry.update(dominated_paired(truth, pref, pick, memory, own, fig[pick], fig[own]),
                     rounds=rounds)
        out.append(entry)
    return out


def dominated_paired(truth: GroundTruth, preference: str, pick: Cell, memory_gb: float,
                     own: Cell, pick_runs: list[tuple[float, float]],
                     own_runs: list[tuple[float, float]]) -> dict[str, Any]:
    """Whether ``own`` (at a request right-sized from its paired peak) beats ``pick`` (at the
    memory it requests) by more than 2% on their paired runs' median seconds."""
    t_pick, p_pick = _median_and_peak(pick_runs)
    t_own, p_own = _median_and_peak(own_runs)
    value = truth.objective(pick, memory_gb, preference, time_s=t_pick, peak_gb=p_pick)
    other = truth.objective(own, right_size(p_own), preference, time_s=t_own, peak_gb=p_own)
    return {"own_vs_recommended_paired": other / value - 1.0 if math.isfinite(value) else None,
            "dominated_paired": bool(other < 0.98 * value),
            "time_s": {pick.key(): t_pick, own.key(): t_own}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("json", type=Path, help="the JSON of recommendation_regret.py")
    p.add_argument("--rounds", type=int, default=3, help="runs of each cell (paired)")
    p.add_argument("--root", type=Path, default=None,
                   help="the suite's cache folder (default: the JSON's --root)")
    p.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    p.add_argument("--ruler", choices=("samples", "loss"), default="samples",
                   help="judge by the whole job's time (samples) or the time to the suite's "
                   "target loss (loss)")
    p.add_argument("--scripts", default=None, help="comma-separated names (default: all)")
    p.add_argument("--preferences", default=None, help="comma-separated (default: all)")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    if not args.json.is_file():
        print(f"{args.json}: not found", file=sys.stderr)
        return 2
    body = json.loads(args.json.read_text())
    root = args.root or Path(body["settings"]["root"])
    rows = [r for r in body["rows"]
            if (args.scripts is None or r["script"] in args.scripts.split(","))
            and (args.preferences is None or r["preference"] in args.preferences.split(","))]
    out = rejudge(rows, body["grids"], root, args.rounds, args.quiet, args.ruler)
    print(f"\nruler: {args.ruler}")
    print("\n| script | preference | recommended | optimum | regret (ground truth) | "
          "regret (paired, same hour) | time ratio per round |")
    print("|---|---|---|---|---|---|---|")
    for e in out:
        ratios = ", ".join(f"{x:.2f}" for x in e.get("time_ratio_per_round", [])) or "-"
        print(f"| {e['script']} | {e['preference']} | {e['recommended']} | {e['optimum']} | "
              f"{pct(e['regret_truth'])} | "
              f"{pct(e['regret_paired']) if e['regret_paired'] is not None else e.get('note')} "
              f"| {ratios} |")
    paired = [e["regret_paired"] for e in out if e["regret_paired"] is not None]
    truthful = [e["regret_truth"] for e in out if e["regret_truth"] is not None]
    if paired:
        print(f"\ncloudopt, {len(paired)} rows: median regret {pct(statistics.median(truthful))} "
              f"(ground truth) vs {pct(statistics.median(paired))} (paired); worst "
              f"{pct(max(truthful))} vs {pct(max(paired))}")
    dominated = [] if args.ruler == "loss" else rejudge_dominated(
        rows, body["grids"], root, body["cloudopt_code"], args.rounds, args.quiet)
    if dominated:
        print("\n| script | preference | recommended | own trial that dominated it (ground truth) "
              "| own trial vs recommended (paired; > 0: the recommendation is better) "
              "| still dominated |")
        print("|---|---|---|---|---|---|")
        for e in dominated:
            if "dominated_paired" not in e:
                print(f"| {e['script']} | {e['preference']} | {e['recommended']} | - | - | "
                      f"{e['note']} |")
                continue
            print(f"| {e['script']} | {e['preference']} | {e['recommended']} | {e['own_trial']} "
                  f"| {pct(e['own_vs_recommended_paired'])} | "
                  f"{'yes' if e['dominated_paired'] else 'no'} |")
        still = sum(bool(e.get("dominated_paired")) for e in dominated)
        print(f"\ndominated by an own trial: {len(dominated)} rows under the ground truth, "
              f"{still} on paired same-hour runs")
    if args.out:
        args.out.write_text(json.dumps({"rows": out, "dominated": dominated}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
