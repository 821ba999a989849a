"""``python -m optimizer --train-file F ...``: measure a training script under several allocations.

Parses arguments, loads the configuration, validates the scripts and preference, then calls
:mod:`optimizer.baseline` to run the baseline trials and prints their table, the best trial
for the preference and its SLA status. The trial loop lives in the library, not here.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd

from optimizer.baseline import (
    best_trial,
    format_trials_table,
    plan_baseline,
    rank_trials,
    run_baseline,
)
from optimizer.cli import commands_epilog
from optimizer.config import OptimizerConfig, load_config, parse_preference
from optimizer.errors import CloudoptError, ConfigError
from optimizer.records import atomic_write_json
from optimizer.sla import calculate_sla_violations
from optimizer.training import TrainingModuleManager


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog, description="Find the cheapest or fastest way to run a training script "
        "within its SLA, by running it for real under a few resource settings.",
        epilog=commands_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train-file", action="append", required=True, metavar="FILE",
                   help="training script (repeat for several)")
    p.add_argument("--preference", default="balanced",
                   help="cost, time, balanced, resource, or weights 'c,t,r' summing to 1")
    p.add_argument("--config", default=None, help="TOML configuration (default: configs/default.toml)")
    p.add_argument("--baseline-samples", type=int, default=None, metavar="N",
                   help="allocations measured for real")
    p.add_argument("--time-max", type=float, default=None, help="SLA: whole-job seconds")
    p.add_argument("--cost-max", type=float, default=None, help="SLA: whole-job dollars")
    p.add_argument("--throughput-min", type=float, default=None, help="SLA: samples/s")
    p.add_argument("--train-args", default="", help="arguments passed to the script (quoted)")
    p.add_argument("--batch-size-arg", default=None, metavar="FLAG",
                   help="flag that sets the script's batch size (e.g. --batch_size or --bs={})")
    p.add_argument("--probe-seconds", type=float, default=None, metavar="S",
                   help="time box of each trial (0: run every trial to its end)")
    p.add_argument("--total-samples", type=float, default=None, metavar="N",
                   help="samples of the whole job, when the script does not report them")
    p.add_argument("--output", default=None, metavar="DIR", help="run folder (default runs/<script>-<time>)")
    p.add_argument("--resume", default=None, metavar="DIR",
                   help="continue a run folder, skipping recorded trials")
    p.add_argument("--dataset-path", default=None, help="dataset location (recorded with the run)")
    p.add_argument("--offline-logs", nargs="*", default=None, metavar="CSV",
                   help="training logs of earlier runs for offline analysis")
    p.add_argument("--phase-model", default=None, metavar="DIR", help="saved phase model")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p


def _load(args: argparse.Namespace) -> OptimizerConfig:
    overrides = {
        "sla": {"time_max": args.time_max, "cost_max": args.cost_max,
                "throughput_min": args.throughput_min},
        "run": {"baseline_samples": args.baseline_samples,
                "probe_seconds": args.probe_seconds if args.probe_seconds else None},
    }
    config = load_config(args.config, overrides)
    args.preference = parse_preference(args.preference)
    config.multi_objective.vector(args.preference)  # unknown names fail here (exit 2)
    if args.probe_seconds is not None and args.probe_seconds < 0:
        raise ConfigError(f"--probe-seconds must be >= 0 (got {args.probe_seconds!r})")
    return config


def _run_dir(args: argparse.Namespace, config: OptimizerConfig, script: Path, n_files: int) -> Path:
    if args.resume:
        base = Path(args.resume)
        if not base.is_dir():
            raise CloudoptError(f"--resume {base}: no such run folder")
    elif args.output:
        base = Path(args.output)
    else:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        return Path(config.run.output_dir) / f"{_slug(script.stem)}-{stamp}"
    return base / _slug(script.stem) if n_files > 1 else base


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "run"


def optimize_file(manager: TrainingModuleManager, run_dir: Path, config: OptimizerConfig,
                  args: argparse.Namespace) -> dict[str, Any]:
    """Baseline trials of one script; prints their table, the best trial and the SLA status."""
    info = manager.analyze_module()
    allocations = plan_baseline(config.resources, config.run.baseline_samples,
                                uses_gpu=bool(info.get("uses_gpu")))
    probe = None if args.probe_seconds == 0 else config.run.probe_seconds
    run_dir.mkdir(parents=True, exist_ok=True)
    config.save(run_dir / "config.json")
    atomic_write_json(run_dir / "run.json", {
        "train_file": str(manager.module_path), "train_args": manager.train_args,
        "batch_size_arg": manager.batch_size_arg, "preference": args.preference,
        "probe_seconds": probe, "total_samples": args.total_samples,
        "dataset_path": args.dataset_path, "offline_logs": args.offline_logs,
        "phase_model": args.phase_model, "analysis": info,
    })
    print(f"{manager.module_path}: {info.get('model_family') or 'unknown'} model, "
          f"{len(allocations)} baseline trial(s) "
          f"({'probe ' + format(probe, 'g') + ' s each' if probe else 'full runs'}) -> {run_dir}")
    summaries = run_baseline(manager, allocations, run_dir, config, probe_seconds=probe,
                             total_samples=args.total_samples, quiet=args.quiet)
    ranked = rank_trials(summaries, config, args.preference)
    print(format_trials_table(ranked))
    best = best_trial(ranked)
    if best is None:
        print("no trial succeeded; see stderr.log in the trial folders")
        return {"run_dir": str(run_dir), "best": None}
    sla = calculate_sla_violations(
        ranked.loc[[0], ["job_time_s", "job_cost", "throughput", "mem_gb_peak"]].rename(
            columns={"job_time_s": "predicted_total_time_s", "job_cost": "predicted_total_cost"}),
        config.sla)
    bs = "default" if pd.isna(best["batch_size"]) else int(best["batch_size"])
    rate = ("throughput unmeasured" if pd.isna(best["throughput"])
            else f"{best['throughput']:.1f} samples/s")
    print(f"best for preference {args.preference!r}: {best['trial_id']} "
          f"({int(best['gpus'])} GPU, {int(best['cpus'])} CPU, {best['memory_gb']:g} GB, "
          f"batch {bs}): job {best['job_time_s']:.1f} s, ${best['job_cost']:.6f}, {rate}")
    print("SLA: " + ", ".join(f"{k} {'met' if v else 'VIOLATED'}" for k, v in sla.items()))
    return {"run_dir": str(run_dir), "best": best, "sla": sla}


def run(args: argparse.Namespace) -> int:
    config = _load(args)
    managers = [TrainingModuleManager(f, args.train_args, args.batch_size_arg)
                for f in args.train_file]
    for m in managers:  # every script is checked before any trial runs
        m.load_module()
    results = []
    for m in managers:
        run_dir = _run_dir(args, config, m.module_path, len(managers))
        results.append(optimize_file(m, run_dir, config, args))
    sys.stdout.flush()
    return 0 if all(r["best"] is not None for r in results) else 1
