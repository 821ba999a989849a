"""A search from history against a fresh one: real runs used, and the picks' cost measured.

1. a fresh search: ``python -m optimizer --train-file examples/train_mlp.py --preference cost``
   (the README's demo, with ``--probe-seconds``/``--agent-seconds`` to keep it short);
2. the same command with ``--history`` of the fresh search's run folder, as a job that ran last
   week would be searched;
3. both recommendations run for real as the user would run them (the recommended CPUs pinned,
   batch size and job length, whole runs, ABAB so a drift of the machine's speed favours
   neither), each priced at its recommended CPUs and memory: the preference's objective
   (``cost``) measured, not claimed.

Printed: real runs each search made, each pick, its claimed and measured cost, and the ratio of
the history pick's measured cost to the fresh pick's (goal: at most 1.03 with at most 2 real
runs). Run it alone on the machine: its runs are measurements.

    python benchmarks/history_search.py [--reps 3] [--out runs/history-search] [--json PATH]
        [--fresh DIR]   # a fresh search's run folder already made: step 1 skipped
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from optimizer.foundation.allocation import Allocation, describe_allocation
from optimizer.foundation.config import load_config
from optimizer.trials.cost import ResourceCostCalculator

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = "examples/train_mlp.py"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--probe-seconds", type=float, default=10.0)
    p.add_argument("--agent-seconds", type=float, default=5.0)
    p.add_argument("--budget", default=None, help="the fresh search's (default: the config's)")
    p.add_argument("--reps", type=int, default=3, help="whole runs of each pick")
    p.add_argument("--out", default=str(ROOT / "runs" / "history-search"))
    p.add_argument("--fresh", default=None, metavar="DIR",
                   help="a fresh search's run folder (skips the fresh search)")
    p.add_argument("--json", default=None, metavar="PATH")
    return p.parse_args(argv)


def search(out: Path, args: argparse.Namespace, *extra: str) -> dict[str, Any]:
    """The main command on the demo script into ``out``; its recommendation and real runs."""
    cmd = [sys.executable, "-m", "optimizer", "--train-file", SCRIPT, "--preference", "cost",
           "--probe-seconds", str(args.probe_seconds), "--agent-seconds",
           str(args.agent_seconds), "--output", str(out), "--quiet", *extra]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return read_search(out, time.perf_counter() - start)


def read_search(out: Path, seconds: float | None = None) -> dict[str, Any]:
    rec = json.loads((out / "recommendation.json").read_text())
    real = sorted(d.name for d in (out / "trials").iterdir() if (d / "summary.json").is_file())
    history = rec.get("history") or {}
    live = len(list((out / "live").glob("**/summary.json")))  # the live plan's check, after
    return {"dir": str(out), "real_runs": len(real), "trials": real, "live_runs": live,
            "history_runs": history.get("runs_used", 0), "seconds": seconds,
            "allocation": rec["allocation"],
            "job_args": list((rec.get("job_length") or {}).get("args") or []),
            "claimed_cost": rec["measured"]["job_cost"], "final_trial": rec["final_trial"],
            "rests_on_history": "rests_on_history" in history}


def whole_run(pick: dict[str, Any], folder: Path) -> tuple[float, float | None]:
    """One whole run of a pick's job, pinned to its CPUs: (wall seconds, last loss)."""
    a = pick["allocation"]
    env = dict(os.environ, OMP_NUM_THREADS=str(a["cpus"]), MKL_NUM_THREADS=str(a["cpus"]),
               OPTIMIZER_METRICS_CSV=str(folder / "metrics.csv"))
    if a["batch_size"] is not None:
        env["OPTIMIZER_BATCH_SIZE"] = str(a["batch_size"])
    folder.mkdir(parents=True, exist_ok=True)
    cores = set(range(int(a["cpus"])))
    start = time.perf_counter()
    subprocess.run([sys.executable, SCRIPT, *pick["job_args"]], cwd=ROOT, env=env, check=True,
                   capture_output=True, preexec_fn=lambda: os.sched_setaffinity(0, cores))
    wall = time.perf_counter() - start
    rows = (folder / "metrics.csv").read_text().strip().splitlines()
    loss = float(rows[-1].split(",")[3]) if len(rows) > 1 else None
    return wall, loss


def measure_picks(picks: dict[str, dict[str, Any]], reps: int, out: Path) -> None:
    """Whole runs of each pick, alternating (ABAB...), priced at its recommended CPUs and
    memory; the figures go into each pick's dict."""
    calc = ResourceCostCalculator.from_config(load_config(None).resources)
    runs: dict[str, list[tuple[float, float | None]]] = {k: [] for k in picks}
    for r in range(reps):
        for name, pick in picks.items():
            runs[name].append(whole_run(pick, out / "measured" / f"{name}-{r}"))
    for name, pick in picks.items():
        hourly = calc.calculate_hourly_cost(Allocation(**pick["allocation"]))
        walls = np.array([w for w, _ in runs[name]])
        pick.update(hourly=hourly, measured_wall_s=float(walls.mean()),
                    measured_cost=float(walls.mean() * hourly / 3600),
                    cost_rel_sd=float(walls.std(ddof=1) / walls.mean()) if reps > 1 else None,
                    final_loss=float(np.mean([v for _, v in runs[name] if v is not None])))


def table(picks: dict[str, dict[str, Any]]) -> str:
    head = ("| search | real runs | runs from history | pick | claimed cost | measured cost "
            "(mean of whole runs, sd) | final loss |\n|---|---|---|---|---|---|---|")
    rows = []
    for name, p in picks.items():
        words = describe_allocation(p["allocation"]) + (
            f", {' '.join(p['job_args'])}" if p["job_args"] else "")
        sd = f", {p['cost_rel_sd']:.1%}" if p.get("cost_rel_sd") is not None else ""
        live = f" (+{p['live_runs']} live-plan check)" if p.get("live_runs") else ""
        rows.append(f"| {name} | {p['real_runs']}{live} | {p['history_runs']} | {words} | "
                    f"${p['claimed_cost']:.6f} | ${p['measured_cost']:.6f}{sd} | "
                    f"{p['final_loss']:.4f} |")
    return "\n".join([head, *rows])


def _job(pick: dict[str, Any]) -> tuple[Any, ...]:
    """A pick as the job it runs (memory is a request: it does not change the run)."""
    a = pick["allocation"]
    return a["gpus"], a["cpus"], a["batch_size"], a["workers"], tuple(pick["job_args"])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out) / time.strftime("%Y%m%d-%H%M%S")
    budget = ["--budget", args.budget] if args.budget else []
    fresh = read_search(Path(args.fresh)) if args.fresh else search(out / "fresh", args, *budget)
    history = search(out / "history", args, "--history", fresh["dir"])
    picks = {"fresh": fresh, "history": history}
    measure_picks(picks, args.reps, out)
    measured = history["measured_cost"] / fresh["measured_cost"]
    same = _job(fresh) == _job(history)
    # One job picked twice runs as long whichever pick it is: the runs' difference is the
    # machine's noise (said beside it), and the picks differ by their memory requests' price.
    ratio = history["hourly"] / fresh["hourly"] if same else measured
    print(table(picks))
    print(f"history / fresh cost, measured: {ratio:.3f} (goal <= 1.03)"
          + (f"; the same job picked by both (its two sets of runs differ by {measured - 1:+.1%},"
             " the machine's noise)" if same else "")
          + f"; real runs: {history['real_runs']} with history (goal <= 2), "
          f"{fresh['real_runs']} fresh")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"picks": picks, "ratio": ratio, "same": same,
                                               "measured_ratio": measured}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
