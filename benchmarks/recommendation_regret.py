"""Recommendation regret: cloudopt's recommendation against the measured best allocation.

For each script of ``benchmarks/workloads/workloads.toml``:

1. ground truth: every cell of a grid (CPU threads x batch sizes x GPUs 0/1 where a GPU exists
   x data-loader workers where the script has them) run to its end ``--repeats`` times (median),
   cached per machine and script under ``runs/regret/`` (``regret_truth.py``);
2. cloudopt's main command per preference (cost, time, balanced) at ``--budgets`` baseline
   probes; the peers at the same number of trials: the default allocation, cloudopt's best
   probe, random search and Optuna's TPE and GP samplers (``regret_peers.py``);
3. regret, search cost and memory slack of every recommendation (``regret_score.py``): a table
   per method, a table per case, a JSON row per script x preference x method, and a plot of
   regret against search cost;
4. under ``--ruler loss`` or ``both`` (the default), a second ruler: every recommendation's
   regret by the time and cost to reach the loss the default allocation's job ends at
   (``regret_loss.py``), cells that miss it run again for longer.

    python benchmarks/recommendation_regret.py --quick --json out.json     # <= 15 min, 2 cores
    python benchmarks/recommendation_regret.py --json runs/regret/full.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from regret_loss import (
    EMA_SHARE,
    LONG_FACTOR,
    add_loss_summary,
    describe_cells,
    loss_fields,
    loss_truth,
    target_loss,
)
from regret_peers import (
    CloudoptRunner,
    cloudopt_picks,
    code_digest,
    default_cell,
    optuna_pick,
)
from regret_score import (
    PREFERENCES,
    GroundTruth,
    Pick,
    Prices,
    evaluate,
    format_rows,
    format_summary,
    mean_of_picks,
    pct,
    plot,
    random_search,
    summarize,
)
from regret_truth import (
    ROOT,
    TruthStore,
    cuda_device_name,
    describe_machine,
    grid_cells,
    load_workloads,
    read_loss_curve,
)

from optimizer.foundation.config import OptimizerConfig, load_config

QUICK_LOOP = "--refine-rounds 2 --runoff-rounds 2 --runoff-size 2"
"""The quick benchmark's closed loop: a round and a run-off round fewer, two settings in it."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true",
                   help="the quick scripts, small grids and jobs, default budget only")
    p.add_argument("--scripts", default=None, help="comma-separated names (default: all)")
    p.add_argument("--preferences", default=",".join(PREFERENCES))
    p.add_argument("--budgets", default=None,
                   help="cloudopt --baseline-samples values (default 2,4,8; quick: 4)")
    p.add_argument("--repeats", type=int, default=2, help="full runs per grid cell")
    p.add_argument("--seeds", type=int, default=None,
                   help="seeds of each randomised peer (default 200 random, 10 Optuna)")
    p.add_argument("--agent-seconds", type=float, default=None,
                   help="cloudopt's agent budget (default: its own; quick: 5)")
    p.add_argument("--probe-seconds", type=float, default=None,
                   help="cloudopt's probe time box (default: its own)")
    p.add_argument("--cloudopt-args", default=None, metavar="FLAGS",
                   help="more flags for every cloudopt run (default: none; quick: "
                   f"{QUICK_LOOP!r}, a shorter closed loop)")
    p.add_argument("--root", default=str(ROOT / "runs" / "regret"), help="cache folder")
    p.add_argument("--json", default=None, metavar="PATH")
    p.add_argument("--plot", default=None, metavar="PNG",
                   help="regret against search cost (default: next to --json, or the cache)")
    p.add_argument("--no-optuna", action="store_true", help="leave the Optuna peers out")
    p.add_argument("--ruler", choices=("samples", "loss", "both"), default="both",
                   help="score by the whole job's time and cost (samples), by the time and cost "
                   "to reach the default allocation's final loss (loss), or both")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    args.budgets = [int(b) for b in (args.budgets or ("4" if args.quick else "2,4,8")).split(",")]
    if args.quick and args.agent_seconds is None:
        args.agent_seconds = 5.0
    if args.cloudopt_args is None:
        args.cloudopt_args = QUICK_LOOP if args.quick else ""
    args.preferences = [s.strip() for s in args.preferences.split(",") if s.strip()]
    for pref in args.preferences:
        if pref not in PREFERENCES:
            p.error(f"--preferences: unknown preference {pref!r} (known: {', '.join(PREFERENCES)})")
    return args


def prices_of(config: OptimizerConfig) -> Prices:
    r = config.resources
    return Prices(r.cost_per_gpu_hour, r.cost_per_cpu_hour, r.cost_per_gb_hour,
                  r.gpu_count_max, r.cpu_count_max, r.memory_max,
                  tuple(config.multi_objective.vector("balanced")))


def loss_ruler(store: TruthStore, truth: GroundTruth,
               say: Callable[..., None]) -> tuple[GroundTruth | None, dict[str, Any]]:
    """The ground truth under the loss ruler for every measured cell (``regret_loss``), running
    the repetitions that miss the default's loss again for longer; and what the JSON records."""
    d = truth.default
    curves = [read_loss_curve(store.cell_dir(d) / f"rep{k}", d.batch)
              for k in range(store.repeats)]
    if any(c is None for c in curves):
        say(f"{store.w.name}: the probe recorded no loss at the default allocation: no loss ruler")
        return None, {"note": "no loss recorded at the default allocation"}
    tau = EMA_SHARE * float(np.mean([c.samples[-1] for c in curves]))
    target = target_loss(curves, tau)
    t0 = time.monotonic()
    times = {c: store.times_to_target(c, target, tau) for c in sorted(truth.cells)}
    lt = loss_truth(truth, times)
    longs = sum(store.long_dir(c, k).is_dir() for c in times for k in range(store.repeats))
    never = [c.key() for c, ts in times.items() if np.median(ts) == np.inf]
    say(f"{store.w.name}: loss ruler: target {target:.4f} (EMA over {tau:.0f} samples), "
        f"{longs} repetitions run {LONG_FACTOR}x longer, never reached: {never or 'none'} "
        f"({time.monotonic() - t0:.0f} s this run)")
    info = {"target_loss": target, "ema_samples": tau, "long_factor": LONG_FACTOR,
            "long_runs": longs, "cells": describe_cells(times)}
    if lt is not None:
        info["optimum"] = {p: lt.optimum(p)[0].key() for p in PREFERENCES}
    return lt, info


def bench_script(w: Any, config: OptimizerConfig, args: argparse.Namespace,
                 has_gpu: bool) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Ground truth, cloudopt and the peers for one script: its JSON rows and its grid."""
    say = (lambda *a: None) if args.quiet else (lambda *a: print(*a, flush=True))
    store = TruthStore(w, config, Path(args.root), repeats=args.repeats)
    cells = grid_cells(w, config, gpus=has_gpu)
    t0 = time.monotonic()
    truths = store.measure_all(cells, quiet=args.quiet)
    dcell, dmem = default_cell(w, config)
    if dcell not in {t.cell for t in truths}:
        extra = store.measure(dcell, on_grid=False)
        if extra is None:
            raise SystemExit(f"{w.name}: the default allocation {dcell.key()} failed")
        truths.append(extra)
    truth = GroundTruth(truths, prices_of(config), dcell)
    say(f"{w.name}: ground truth of {len(truths)} cells in {store.dir} "
        f"({time.monotonic() - t0:.0f} s this run)")
    seeds_random = args.seeds or 200
    seeds_optuna = args.seeds or 10
    # Each row with the picks behind it: the loss ruler judges the same picks once every cell
    # they name (cloudopt's off the grid too) is measured.
    scored: list[tuple[dict[str, Any], list[Pick]]] = []

    def score(pick: Pick, pref: str) -> dict[str, Any]:
        scored.append((evaluate(truth, pick, pref, w.name), [pick]))
        return scored[-1][0]

    def score_seeds(make: Callable[[int], Pick], pref: str, seeds: int) -> None:
        picks: list[Pick] = []

        def kept(seed: int) -> Pick:
            picks.append(make(seed))
            return picks[-1]

        scored.append((mean_of_picks(truth, kept, pref, seeds, w.name), picks))

    for pref in args.preferences:
        score(Pick("default", dcell, dmem), pref)
    for budget in args.budgets:
        runner = CloudoptRunner(store, budget, agent_seconds=args.agent_seconds,
                                probe_seconds=args.probe_seconds, extra=args.cloudopt_args,
                                quiet=args.quiet)
        first = None
        for pref in args.preferences:
            t1 = time.monotonic()
            body = runner.run(pref, seed_from=first)
            first = first or pref
            rec, probe = cloudopt_picks(body, w, truth, store, pref, budget)
            r = score(rec, pref)
            score(probe, pref)
            n = rec.trials
            if n < 1:
                say(f"{w.name} {pref} budget {budget}: cloudopt ran no trial ({rec.note})")
                continue
            score_seeds(lambda s, n=n, p=pref: random_search(
                truth, n, p, np.random.default_rng(s)), pref, seeds_random)
            if not args.no_optuna:
                for sampler in ("tpe", "gp"):
                    score_seeds(lambda s, n=n, p=pref, sm=sampler: optuna_pick(truth, n, p, s, sm),
                                pref, seeds_optuna)
            say(f"{w.name} {pref} budget {budget}: cloudopt ({rec.note or 'failed'}) regret "
                f"{pct(r['regret'])} in {n} trials ({time.monotonic() - t1:.0f} s)")
    grid = {"dir": str(store.dir), "default": dcell.key(), "cells": [
        {**t.cell.as_dict(), "on_grid": t.on_grid, "time_s": t.time_s, "peak_gb": t.peak,
         "wall_s": t.wall_s} for t in sorted(truth.cells.values(), key=lambda t: t.cell)],
        "optimum": {p: truth.optimum(p)[0].key() for p in args.preferences}}
    if args.ruler != "samples":
        lt, grid["loss"] = loss_ruler(store, truth, say)
        for row, picks in scored:
            row.update(loss_fields(lt, picks, row["preference"]))
    return [row for row, _ in scored], grid


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    config = load_config()
    has_gpu = cuda_device_name() is not None
    workloads = load_workloads(quick=args.quick)
    if args.scripts:
        wanted = {s.strip() for s in args.scripts.split(",")}
        unknown = wanted - {w.name for w in workloads}
        if unknown:
            raise SystemExit(f"--scripts: unknown {sorted(unknown)} (known: "
                             f"{', '.join(w.name for w in workloads)})")
        workloads = [w for w in workloads if w.name in wanted]
    t0 = time.monotonic()
    rows: list[dict[str, Any]] = []
    grids: dict[str, Any] = {}
    for w in workloads:
        if w.needs_gpu and not has_gpu:
            print(f"{w.name}: skipped (needs CUDA; none on this machine)")
            continue
        r, g = bench_script(w, config, args, has_gpu)
        rows += r
        grids[w.name] = g
    summary = summarize(rows)
    if args.ruler != "samples":
        add_loss_summary(summary, rows)
    print("\nPer method (over scripts x preferences; regret of randomised peers is their mean "
          "over seeds; '(loss)': time and cost to the default's final loss):")
    print(format_summary(summary, args.ruler))
    if args.ruler != "loss":
        print("\nRegret per case (samples/s ruler: the whole job):")
        print(format_rows(rows))
    if args.ruler != "samples":
        print("\nRegret per case (loss ruler: time and cost to the default's final loss):")
        print(format_rows(rows, key="regret_loss"))
    print(f"\n{len(rows)} rows in {time.monotonic() - t0:.0f} s")
    out_dir = Path(args.json).parent if args.json else Path(args.root)
    plot_path = Path(args.plot) if args.plot else out_dir / "regret_vs_search_cost.png"
    plot_path.parent.mkdir(parents=True, exist_ok=True)
    if rows:
        plot(summary, rows, plot_path)
        print(f"plot: {plot_path}")
    if args.json:
        body = {"machine": describe_machine(config), "cloudopt_code": code_digest(),
                "settings": {k: v for k, v in vars(args).items() if k not in ("json", "plot")},
                "summary": summary, "rows": rows, "grids": grids}
        Path(args.json).write_text(json.dumps(body, indent=1, allow_nan=False) + "\n")
        print(f"json: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
