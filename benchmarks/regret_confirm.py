"""Rows of the regret-against-runs curves confirmed with real runs (issue 41).

``regret_curves.py`` answers cloudopt's trials from a grid's recorded runs (``--executor
replay:``). Here the same main command runs for real on this machine (the local executor, seed
0, the same budget and settings), and both recommendations are scored against the same
ground truth. Beside them, each real trial's wall time against its cell's recorded runs: how
far the machine today is from the one the grid was measured on.

Run it alone on the machine: its trials are measurements.

    python benchmarks/regret_confirm.py --budget 6 [--scripts cnn,tab] [--goodput off]
        [--json runs/curves/confirm.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from recommendation_regret import prices_of
from regret_curves import cloudopt_pick, cloudopt_run, proposer_of, unpack
from regret_peers import CloudoptRunner, default_cell, effective_cell
from regret_score import PREFERENCES, GroundTruth, evaluate, pct
from regret_truth import ROOT, TruthStore, grid_cells, load_workloads

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import load_config


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget", type=int, default=6, help="real runs per cloudopt run")
    p.add_argument("--scripts", default=None, help="comma-separated (default: every large one)")
    p.add_argument("--preferences", default=",".join(PREFERENCES))
    p.add_argument("--goodput", choices=("on", "off"), default="off")
    p.add_argument("--agent-seconds", type=float, default=5.0)
    p.add_argument("--repeats", type=int, default=3, help="runs per cell of the recorded grid")
    p.add_argument("--root", default=str(ROOT / "runs" / "regret"))
    p.add_argument("--json", default=None, metavar="PATH")
    args = p.parse_args(argv)
    args.preferences = [s.strip() for s in args.preferences.split(",") if s.strip()]
    args.seeds, args.jobs, args.quiet = 1, 1, True
    return args


def real_run(store: TruthStore, budget: int, pref: str, args: argparse.Namespace
             ) -> dict[str, Any]:
    """The main command for real, with the replayed run's settings but its executor."""
    off = args.goodput == "off"
    cfg = store.dir / "curves" / f"seed0-real{'-samples' if off else ''}.toml"
    cfg.parent.mkdir(parents=True, exist_ok=True)
    cfg.write_text("[run]\nseed = 0\n" + ("goodput = false\n" if off else ""))
    runner = CloudoptRunner(store, budget, agent_seconds=args.agent_seconds, probe_seconds=None,
                            quiet=True, extra=f"--budget {budget} --live-plan off --config {cfg}",
                            budget_flag=None)
    return runner.run(pref)


def trial_drift(body: dict[str, Any], w: Any, store: TruthStore) -> list[float]:
    """Each real trial's wall time over its cell's recorded median (trials that ran whole)."""
    out = []
    for t in body.get("trials", []):
        if t.get("status") != "completed":
            continue
        cell = effective_cell(w, Allocation(**t["allocation"]))
        recorded = [json.loads(p.read_text())["wall_time_s"]
                    for p in (store.cell_dir(cell)).glob("rep*/summary.json")]
        if recorded:
            out.append(float(t["wall_time_s"]) / float(np.median(recorded)))
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    config = load_config(None)
    wanted = set(args.scripts.split(",")) if args.scripts else None
    rows = []
    print("| script | preference | replayed: regret | proposer | real: regret | proposer | "
          "real runs | real trial / recorded median (median, range) |")
    print("|---|---|---|---|---|---|---|---|")
    for w in load_workloads(variant="large"):
        if w.needs_gpu or (wanted and w.name not in wanted):
            continue
        store = TruthStore(w, config, Path(args.root), repeats=args.repeats)
        unpack(store)
        truths = store.measure_all(grid_cells(w, config, gpus=False), quiet=True)
        dcell, _ = default_cell(w, config)
        truth = GroundTruth(truths, prices_of(config), dcell)
        for pref in args.preferences:
            replayed = cloudopt_run(store, w, args.budget, pref, 0, args)
            real = real_run(store, args.budget, pref, args)
            a = evaluate(truth, cloudopt_pick(replayed, w, truth, args.budget), pref, w.name)
            b = evaluate(truth, cloudopt_pick(real, w, truth, args.budget), pref, w.name)
            drift = trial_drift(real, w, store)
            rows.append({"script": w.name, "preference": pref, "budget": args.budget,
                         "replayed": a, "real": b, "drift": drift,
                         "replayed_proposer": proposer_of(replayed),
                         "real_proposer": proposer_of(real)})
            spread = (f"{np.median(drift):.2f} ({min(drift):.2f}-{max(drift):.2f})"
                      if drift else "n/a")
            print(f"| {w.name} | {pref} | {pct(a['regret'])} | {proposer_of(replayed)} | "
                  f"{pct(b['regret'])} | {proposer_of(real)} | {len(real.get('trials', []))} | "
                  f"{spread} |", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows}, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
