"""The workers of a data-parallel job chosen by goodput, against a measured grid.

For ``examples/train_ddp.py`` (DDP over gloo, launched by torchrun):

1. a grid of whole runs, data-parallel workers x CPUs x per-worker batch, each to its end with
   the held-out loss it prints, run with cloudopt's own runner and launcher (torchrun, cores
   split between the ranks) so that affinity and threads match its trials;
2. cloudopt as a user runs it (``--launcher torchrun --workers-max W --batch-size-arg
   --batch-size``), once per preference;
3. the recommendation scored against the grid as ``wild.py`` scores (``wild_score``): regret
   against the cheapest (or fastest) cell that trains as well as the script's own batch on one
   worker (held-out loss within 1% of it), whether the pick does, and its claimed job time and
   cost against the whole job measured at that setting (run now where the grid lacks it);
4. the probe's samples summed over ranks against what the script counts (``global samples
   trained: N``, an all-reduce) in every multi-worker cell.

Whole runs are cached in ``runs/ddp_scaling/<machine>/<hash>/cells/<setting>/rep<k>/``; a rerun
measures nothing again. On this 2-core machine the grid is 1 and 2 workers; on a 16-core or
GPU machine give ``--workers 1,2,4,8 --cpus 2,4,8,16``.

    python benchmarks/ddp_scaling.py --quick
    python benchmarks/ddp_scaling.py --json runs/ddp_scaling/full.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from regret_truth import machine_key
from wild_score import (
    CellRuns,
    Prices,
    claim_error,
    claimed,
    objective,
    optimum,
    regret,
    target_loss,
    trains_as_well,
    with_args,
)

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from optimizer.foundation.allocation import Allocation  # noqa: E402
from optimizer.foundation.config import load_config  # noqa: E402
from optimizer.trials.records import TrialSummary  # noqa: E402
from optimizer.trials.training import TrainingModuleManager, TrialRequest  # noqa: E402

SCRIPT = ROOT / "examples" / "train_ddp.py"
RUNS = ROOT / "runs" / "ddp_scaling"
DEFAULT_BATCH = 64
LOSS = re.compile(r"test loss ([0-9.eE+-]+)")
COUNTED = re.compile(r"global samples trained: (\d+)")


@dataclass(frozen=True)
class DDPSetting:
    """A whole run's setting: workers, CPUs (the job's), batch per worker, extra arguments."""

    replicas: int
    cpus: int
    batch: int
    extra: tuple[str, ...] = ()

    def key(self) -> str:
        tail = "".join(f"_{re.sub(r'[^A-Za-z0-9.=-]+', '', a)}" for a in self.extra)
        return f"r{self.replicas}-c{self.cpus}-b{self.batch}{tail}"

    def label(self) -> str:
        tail = f", {' '.join(self.extra)}" if self.extra else ""
        return f"{self.replicas}w×{self.cpus}c×{self.batch}{tail}"


def say(text: str) -> None:
    print(text, flush=True)


def run_cell(setting: DDPSetting, base: Sequence[str], folder: Path, reps: int,
             memory_gb: float) -> tuple[CellRuns, list[tuple[float, float]]]:
    """Whole runs of ``setting`` (cached), and per multi-worker run ``(probe samples, samples
    the script counted)``."""
    m = TrainingModuleManager(SCRIPT, with_args(base, setting.extra), "--batch-size")
    m.launcher = "torchrun"
    cell = CellRuns(setting, [], [], [], [])  # type: ignore[arg-type]
    counts = []
    for k in range(reps):
        rep = folder / setting.key() / f"rep{k}"
        if not (rep / "summary.json").is_file():
            say(f"  whole run {setting.label()} rep {k}")
            alloc = Allocation(cpus=setting.cpus, memory_gb=memory_gb, batch_size=setting.batch,
                               replicas=setting.replicas)
            m.run_training(TrialRequest(alloc, rep, timeout_s=1800), load_config(None).resources)
        s = TrialSummary.load(rep)
        out = (rep / "stdout.log").read_text(errors="replace") \
            if (rep / "stdout.log").exists() else ""
        if s.status != "completed":
            continue
        loss, counted = LOSS.findall(out), COUNTED.findall(out)
        cell.wall_s.append(float(s.wall_time_s))
        cell.peak_gb.append(float(s.mem_gb_peak or 0.0))
        cell.losses.append(float(loss[-1]) if loss else None)
        cell.cores.append(float(s.cpu_cores_mean or 0.0))
        if setting.replicas > 1 and counted and s.samples:
            counts.append((float(s.samples), float(counted[-1])))
    return cell, counts


def run_cloudopt(preference: str, base: Sequence[str], folder: Path, workers_max: int,
                 extra: Sequence[str]) -> dict[str, Any]:
    """cloudopt as a user runs it; its recommendation and wall time."""
    out = folder / f"cloudopt-{preference}"
    cmd = [sys.executable, "-m", "optimizer", "--train-file", str(SCRIPT),
           f"--train-args={' '.join(base)}", "--batch-size-arg=--batch-size",
           "--launcher", "torchrun", "--workers-max", str(workers_max),
           "--preference", preference, "--output", str(out), "--quiet", *extra]
    say(f"  cloudopt --preference {preference}")
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - t0
    rec_path = out / "recommendation.json"
    if proc.returncode != 0 or not rec_path.exists():
        return {"exit": proc.returncode, "wall_s": wall, "error": proc.stderr[-600:]}
    rec = json.loads(rec_path.read_text())
    a = rec.get("allocation") or {}
    job = [str(x) for x in (rec.get("job_length") or {}).get("args") or []]
    setting = DDPSetting(int(a.get("replicas") or 1), int(a.get("cpus") or 1),
                         int(a.get("batch_size") or DEFAULT_BATCH), tuple(job))
    trials = list((out / "trials").glob("*/summary.json"))
    return {"exit": 0, "wall_s": wall, "setting": setting,
            "memory_gb": float(a.get("memory_gb") or 0.0), **claimed(rec),
            "trials": len(trials), "scaling": rec.get("scaling")}


def score(cells: list[CellRuns], cloud: dict[str, Any], preference: str, prices: Prices,
          pick: CellRuns | None) -> dict[str, Any]:
    l0 = target_loss([c for c in cells if c.setting.replicas == 1], DEFAULT_BATCH)
    best = optimum(cells, lambda c: trains_as_well(c.loss, l0), preference, prices)
    row: dict[str, Any] = {"preference": preference, "exit": cloud.get("exit"),
                           "cloudopt_wall_s": cloud.get("wall_s"), "l0": l0,
                           "optimum": None if best is None else best.setting.label(),
                           "optimum_value": None if best is None else
                           objective(best, preference, prices)}
    setting = cloud.get("setting")
    if setting is None or pick is None or not pick.wall_s:
        row["regret"] = math.inf
        return row
    memory = cloud.get("memory_gb") or pick.peak
    value = objective(pick, preference, prices, memory_gb=memory)
    cost = prices.cost(setting.cpus, memory, pick.time_s)
    row.update(pick=setting.label(), pick_time_s=pick.time_s, pick_cost=cost,
               pick_loss=pick.loss, pick_trains_as_well=trains_as_well(pick.loss, l0),
               regret=None if best is None else regret(value, row["optimum_value"]),
               claim_time=claim_error(cloud.get("claimed_time_s"), pick.time_s),
               claim_cost=claim_error(cloud.get("claimed_cost"), cost),
               trials=cloud.get("trials"))
    return row


def _pct(x: Any) -> str:
    return "-" if x is None else ("inf" if not math.isfinite(x) else f"{100 * x:+.1f}%")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", default="1,2")
    p.add_argument("--cpus", default="1,2")
    p.add_argument("--batches", default="32,64,128,256")
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--preferences", default="cost,time")
    p.add_argument("--quick", action="store_true",
                   help="a shorter job (--samples 16384 --hidden 512) and batches 32,64,128")
    p.add_argument("--cloudopt-args", default="--live-plan off",
                   help="extra options for cloudopt (one string)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    base = ["--samples", "16384", "--hidden", "512"] if args.quick else []
    batches = [32, 64, 128] if args.quick and args.batches == p.get_default("batches") else \
        [int(b) for b in args.batches.split(",")]
    workers = [int(w) for w in args.workers.split(",")]
    cpus = [int(c) for c in args.cpus.split(",")]
    digest = hashlib.sha256((SCRIPT.read_text() + " ".join(base)).encode()).hexdigest()[:10]
    folder = RUNS / machine_key() / digest
    config = load_config(None)
    prices = Prices(config.resources.cost_per_cpu_hour, config.resources.cost_per_gb_hour)
    grid = [DDPSetting(r, c, b) for r in workers for c in cpus if c >= r for b in batches]
    say(f"grid of {len(grid)} settings x {args.reps} whole runs in {folder}")
    cells, counts = [], []
    for s in grid:
        cell, cc = run_cell(s, base, folder / "cells", args.reps, memory_gb=8.0)
        cells.append(cell)
        counts += cc
    for c in cells:
        say(f"  {c.setting.label():>14}: {c.time_s if c.wall_s else float('nan'):6.1f} s, "
            f"loss {c.loss}, peak {c.peak if c.peak_gb else float('nan'):.2f} GB")
    rows = []
    for pref in args.preferences.split(","):
        cloud = run_cloudopt(pref, base, folder, max(workers), args.cloudopt_args.split())
        setting = cloud.get("setting")
        pick = next((c for c in cells if c.setting == setting), None)
        if setting is not None and pick is None:
            pick, _ = run_cell(setting, base, folder / "cells", args.reps, memory_gb=8.0)
        rows.append(score(cells, cloud, pref, prices, pick))
    errors = [abs(a / b - 1) for a, b in counts]
    say("\n| preference | pick | grid optimum | regret | pick trains as well | claim time | "
        "claim cost | cloudopt runs | cloudopt wall |")
    say("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        say(f"| {r['preference']} | {r.get('pick', '-')} | {r.get('optimum')} | "
            f"{_pct(r.get('regret'))} | {r.get('pick_trains_as_well')} | "
            f"{_pct(r.get('claim_time'))} | {_pct(r.get('claim_cost'))} | "
            f"{r.get('trials', '-')} | {r.get('cloudopt_wall_s', 0):.0f} s |")
    if errors:
        say(f"\nsamples summed over ranks against the script's count: worst "
            f"{100 * max(errors):.2f}% off over {len(errors)} multi-worker runs")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({
            "cells": [{"setting": c.setting.label(), "wall_s": c.wall_s, "peak_gb": c.peak_gb,
                       "losses": c.losses, "cores": c.cores} for c in cells],
            "rows": rows, "sample_count_errors": errors}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
