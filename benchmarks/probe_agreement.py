"""Does the in-process probe count what the script says it did? (issue 38)

Runs each script of the regret suite (``benchmarks/workloads/workloads.toml``; its GPU script
only where a GPU is present) to its end at 1 and 2 CPUs and several batch sizes, through the
project's runner with the probe on, and compares the rate the script printed (or wrote to its metrics CSV) with the probe's:

- ``same windows``: the probe's samples per second over the stretches the printed rates cover
  (from one printed line to the next; a single line from the start of training), which is
  what checks the probe's counting and timing;
- ``steady``: the probe's steady rate (warm-up and pauses left out), the figure cloudopt
  uses, against the printed rate's mean. It differs where a script's rate includes its
  epoch's data loading or covers only its last epoch.

The runs are recorded under ``runs/probe_agreement/{full,quick}/<machine>/`` and reused.

    python benchmarks/probe_agreement.py [--scripts mlp,cnn] [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from regret_score import Cell  # noqa: E402
from regret_truth import (  # noqa: E402
    TruthStore,
    cuda_device_name,
    load_workloads,
    machine_key,
)

from optimizer.foundation.allocation import Allocation  # noqa: E402
from optimizer.foundation.atomic_files import atomic_write_json  # noqa: E402
from optimizer.foundation.config import load_config  # noqa: E402
from optimizer.trials.probe.summary import PRINTED_GAP  # noqa: E402
from optimizer.trials.records import TrialSummary  # noqa: E402
from optimizer.trials.training import TrainingModuleManager, TrialRequest  # noqa: E402

EXTRA_BATCHES = {"charlm": [4, 8]}
"""Batches below the suite's grid that the closed loop proposed on the full suite, where the
gaps were largest."""


def settings(w, quick: bool) -> list[Cell]:
    batches = sorted({*w.batch_sizes, *EXTRA_BATCHES.get(w.name, [])})
    if quick:
        batches = sorted({batches[0], w.default_batch, batches[-1]})
    return [Cell(1 if w.needs_gpu else 0, c, b, w.default_workers) for c in (1, 2)
            for b in batches]


def run_cell(store: TruthStore, cell: Cell) -> TrialSummary:
    """One run to the end, set up as the main command sets a trial up: a script that reads its
    batch from its own variable gets it through ``--batch-size-env``, so the runner knows the
    batch its steps take (the regret suite's ground truth sets the variable itself)."""
    w, trial_dir = store.w, store.cell_dir(cell) / "rep0"
    if not w.batch.startswith("env:"):
        return store.run_in(cell, trial_dir)
    if (trial_dir / "summary.json").exists():
        return TrialSummary.load(trial_dir)
    manager = TrainingModuleManager(w.file, w.train_args, batch_size_env=w.batch[4:])
    return manager.run_training(TrialRequest(
        Allocation(cell.gpus, cell.cpus, store.memory_gb, cell.batch), trial_dir,
        probe_seconds=None, timeout_s=store.timeout_s,
        monitor_interval=store.config.run.monitor_interval, quiet=True), store.config.resources)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scripts", default="", help="comma-separated names (default: every CPU one)")
    p.add_argument("--quick", action="store_true",
                   help="the suite's quick arguments and three batch sizes per script")
    p.add_argument("--json", type=Path, help="write the rows here")
    args = p.parse_args(argv)
    config = load_config(None)
    wanted = {s for s in args.scripts.split(",") if s}
    root = ROOT / "runs" / "probe_agreement" / ("quick" if args.quick else "full")
    rows = []
    for w in load_workloads(variant="quick" if args.quick else None):
        if (w.needs_gpu and not cuda_device_name()) or (wanted and w.name not in wanted):
            continue
        store = TruthStore(w, config, root, repeats=1)
        for cell in settings(w, args.quick):
            t = run_cell(store, cell)
            pr = t.probe or {}
            rows.append({
                "script": w.name, "cpus": cell.cpus, "batch": cell.batch, "status": t.status,
                "source": pr.get("printed_source"), "printed": pr.get("printed_throughput"),
                "probe_same_windows": pr.get("probe_same_windows"),
                "windows": pr.get("printed_windows"), "gap": pr.get("printed_gap"),
                "gap_steady": pr.get("printed_gap_steady")})
            r = rows[-1]
            print(f"{w.name:9s} {cell.cpus} CPU batch {cell.batch:5d}: printed {r['printed']} "
                  f"probe {r['probe_same_windows']} over {r['windows']} windows, gap "
                  f"{_pct(r['gap'])} (steady {_pct(r['gap_steady'])})", flush=True)
    print(f"\nmachine {machine_key()}; within {PRINTED_GAP:.0%} of the printed rate:")
    print("| script | trials with a printed rate | same windows: within | worst | "
          "steady rate: within | worst |")
    print("|---|---|---|---|---|---|")
    for name in dict.fromkeys(r["script"] for r in rows):
        got = [r for r in rows if r["script"] == name and r["gap"] is not None]
        if not got:
            print(f"| {name} | 0 | | | | |")
            continue
        same = np.array([r["gap"] for r in got])
        steady = np.array([r["gap_steady"] for r in got])
        print(f"| {name} | {len(got)} | {(abs(same) <= PRINTED_GAP).sum()} | "
              f"{_pct(same[np.argmax(abs(same))])} | {(abs(steady) <= PRINTED_GAP).sum()} | "
              f"{_pct(steady[np.argmax(abs(steady))])} |")
    if args.json:
        atomic_write_json(args.json, {"machine": machine_key(), "rows": rows})
    return 0


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.1%}"


if __name__ == "__main__":
    raise SystemExit(main())
