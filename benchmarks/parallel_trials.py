"""The main job's baseline stage with the local executor and with Ray: wall time, speed-up, and
what running side by side does to each trial's throughput.

Two sets of trials, each measured with both executors in the same run:

- ``baseline``: the allocations the main job probes on this machine (``plan_baseline``, the
  default budget), as ``python -m optimizer`` would run them;
- ``side-by-side``: one 1-CPU trial per core (two on a 2-core machine), the case Ray packs.

Per trial, the ratio of its Ray throughput to its local (alone) throughput is printed with
whether it ran beside others; a trial that ran alone under Ray too is the control (the
difference there is run-to-run noise, not interference). ``--repeats N`` alternates the
executors (local, Ray, Ray, local, ...) so that drift of the machine cancels out.

    .venv/bin/python benchmarks/parallel_trials.py                      # examples/train_mlp.py
    .venv/bin/python benchmarks/parallel_trials.py --repeats 2 --json runs/bench/parallel.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from optimizer.foundation.allocation import Allocation  # noqa: E402
from optimizer.pipeline import CloudResourceOptimizer  # noqa: E402
from optimizer.search.baseline import memory_for, run_baseline  # noqa: E402
from optimizer.trials.executors import make_executor  # noqa: E402
from optimizer.trials.training import TrainingModuleManager  # noqa: E402


def stage(manager, allocations, config, executor_name: str, out: Path, probe: float):
    """(wall time of the stage, Ray start-up time, trials) for one executor."""
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    executor = make_executor(executor_name)
    started = time.perf_counter() - t0
    try:
        trials = run_baseline(manager, allocations, out, config, probe_seconds=probe, quiet=True,
                              executor=executor)
    finally:
        executor.close()
    return time.perf_counter() - t0, started, trials


def measure(name, manager, allocations, config, probe, repeats, work):
    order = [("local", "ray") if r % 2 == 0 else ("ray", "local") for r in range(repeats)]
    walls = {"local": [], "ray": []}
    startup = []
    per_trial: dict[str, dict[str, list]] = {}
    for r, pair in enumerate(order):
        for ex in pair:
            wall, start, trials = stage(manager, allocations, config, ex,
                                        work / f"{name}-{ex}-{r}", probe)
            walls[ex].append(wall)
            if ex == "ray":
                startup.append(start)
            for t in trials:
                row = per_trial.setdefault(t.trial_id, {"local": [], "ray": [], "beside": []})
                row[ex].append(t.throughput if t.ok else None)
                if ex == "ray":
                    row["beside"].append(bool(t.concurrent_with))
    local, ray = statistics.median(walls["local"]), statistics.median(walls["ray"])
    ray_start = statistics.median(startup)
    print(f"\n## {name}: {len(allocations)} trials, probes of {probe:g} s, {repeats} repeat(s)")
    print(f"stage wall time: local {local:.1f} s, ray {ray:.1f} s (of which Ray start-up "
          f"{ray_start:.1f} s); speed-up {local / ray:.2f}x "
          f"({local / (ray - ray_start):.2f}x without the start-up)")
    print(f"{'trial':<24} {'local samples/s':>16} {'ray samples/s':>14} {'ray/local':>9}  ran")
    rows = []
    for tid, row in per_trial.items():
        loc = [v for v in row["local"] if v]
        par = [v for v in row["ray"] if v]
        ratio = statistics.median(par) / statistics.median(loc) if loc and par else None
        beside = "beside others" if any(row["beside"]) else "alone"
        shown = "-" if ratio is None else f"{ratio:.3f}"
        print(f"{tid:<24} {statistics.median(loc) if loc else float('nan'):>16.1f} "
              f"{statistics.median(par) if par else float('nan'):>14.1f} {shown:>9}  {beside}")
        rows.append({"trial": tid, "local": row["local"], "ray": row["ray"], "ratio": ratio,
                     "beside": any(row["beside"])})
    side = [r["ratio"] for r in rows if r["beside"] and r["ratio"]]
    alone = [r["ratio"] for r in rows if not r["beside"] and r["ratio"]]
    if side:
        print(f"throughput beside others vs alone: median {statistics.median(side) - 1:+.1%}, "
              f"worst {min(side) - 1:+.1%}"
              + (f"; trials alone under Ray (control): median {statistics.median(alone) - 1:+.1%}"
                 if alone else ""))
    return {"name": name, "wall_local_s": walls["local"], "wall_ray_s": walls["ray"],
            "ray_startup_s": startup, "speedup": local / ray,
            "speedup_without_startup": local / (ray - ray_start), "trials": rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train-file", default=str(ROOT / "examples" / "train_mlp.py"))
    ap.add_argument("--train-args", default="")
    ap.add_argument("--batch-size-arg", default=None)
    ap.add_argument("--probe-seconds", type=float, default=10.0)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--sets", default="baseline,side-by-side")
    ap.add_argument("--json", default=None, help="write the figures here")
    args = ap.parse_args()

    opt = CloudResourceOptimizer(quiet=True)
    config = opt.config
    manager = TrainingModuleManager(args.train_file, args.train_args, args.batch_size_arg)
    analysis = manager.analyze_module()
    cores = len(os.sched_getaffinity(0))
    print(f"machine: {cores} cores; script {args.train_file}")
    work = ROOT / "runs" / "bench" / "parallel_trials"
    results = []
    for name in args.sets.split(","):
        if name == "baseline":
            allocations = opt.plan_trials(analysis, reference_batch=manager.default_batch_size(),
                                          vary_batch=manager.batch_control() is not None)
        elif name == "side-by-side":
            batch = manager.default_batch_size()
            allocations = [Allocation(0, 1, memory_for(1, config.resources), batch)] * cores
            allocations = [Allocation(a.gpus, a.cpus, a.memory_gb, a.batch_size)
                           for a in allocations]
        else:
            ap.error(f"unknown set {name!r}")
        results.append(measure(name, manager, allocations, config, args.probe_seconds,
                               args.repeats, work))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"cores": cores, "script": args.train_file,
                                               "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
