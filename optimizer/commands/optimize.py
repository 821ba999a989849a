"""``python -m optimizer --train-file F ...``: optimize the resources of training scripts.

Parses arguments, loads the configuration, validates the scripts and the preference, then hands
each script to :class:`optimizer.pipeline.CloudResourceOptimizer` (baseline trials, phases, workload
fit, agents, a real run of the recommendation, report) and prints the baseline table and a
summary. Every stage lives in the library, not here.
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd

from optimizer.cli import commands_epilog
from optimizer.commands.resume import (
    fill_from_run,
    has_recorded_options,
    recorded_result,
    resume_command,
)
from optimizer.foundation.allocation import Allocation, describe_allocation, job_words
from optimizer.foundation.atomic_files import atomic_write_json, read_json
from optimizer.foundation.config import OptimizerConfig, load_config
from optimizer.foundation.errors import CloudoptError, ConfigError
from optimizer.foundation.job import Job
from optimizer.foundation.preferences import parse_preference
from optimizer.pipeline import CloudResourceOptimizer, OptimizationResult
from optimizer.search.baseline import best_trial, format_trials_table, rank_trials
from optimizer.search.job_setup import prepare
from optimizer.trials.executors import check_available
from optimizer.trials.launchers.launch_rule import decide_launch
from optimizer.trials.training import TrainingModuleManager


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog, description="Find the cheapest or fastest way to run a training script "
        "within its SLA, by running it for real under a few resource settings.",
        epilog=commands_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train-file", action="append", default=None, metavar="FILE",
                   help="training script (repeat for several); required unless --resume")
    p.add_argument("--preference", default=None,
                   help="cost, time, balanced (default), resource, or weights 'c,t,r' "
                   "summing to 1")
    p.add_argument("--config", default=None, help="TOML configuration (default: configs/default.toml)")
    p.add_argument("--baseline-samples", type=int, default=None, metavar="N",
                   help="allocations measured for real")
    p.add_argument("--time-max", type=float, default=None, help="SLA: whole-job seconds")
    p.add_argument("--cost-max", type=float, default=None, help="SLA: whole-job dollars")
    p.add_argument("--throughput-min", type=float, default=None, help="SLA: samples/s")
    p.add_argument("--train-args", default=None, help="arguments passed to the script (quoted)")
    p.add_argument("--batch-size-arg", default=None, metavar="FLAG",
                   help="flag that sets the script's batch size (e.g. --batch_size or --bs={}); "
                   "also a Hydra override (data.batch_size={}, +data.batch_size={}), a "
                   "LightningCLI flag (--data.batch_size) or a key of a YAML/JSON file among "
                   "the script's arguments (cfg.yaml:train.batch_size: trials get a copy with "
                   "it set); --lr-arg and --workers-arg take the same forms")
    p.add_argument("--batch-size-max", type=int, default=None, metavar="N",
                   help="largest batch size a trial or plan may use ([resources].batch_size_max;"
                   " default: no bound)")
    p.add_argument("--budget", default=None, metavar="N|auto",
                   help="real runs the whole search may make, probes, rounds, sweeps and run-off "
                   "included ([run].budget, default 12; 0: no limit; auto: at most "
                   "[run].budget_share of one job's cost)")
    p.add_argument("--lr-arg", default=None, metavar="FLAG",
                   help="flag that sets the script's learning rate (e.g. --lr): when the "
                   "recommended batch differs from the script's, the linear and square-root "
                   "scalings are measured and the better one recommended")
    p.add_argument("--epochs-arg", default=None, metavar="FLAG",
                   help="flag that sets the script's epochs (default: --epochs, --num-epochs, "
                   "--max-epochs, --num-train-epochs ... where the script reads one): a more "
                   "sample-efficient batch is recommended with the fewer epochs that reach the "
                   "script's own final loss; without one, batches are judged by their whole job")
    p.add_argument("--steps-arg", default=None, metavar="FLAG",
                   help="flag or override that sets the job's optimizer steps, for a job "
                   "measured in steps (default: --max_steps, --max_iters=, trainer.max_steps=, "
                   "... where the arguments or the source set one): at the same steps a larger "
                   "batch trains on more samples, so batches are compared by the training their "
                   "whole job makes, and a batch may be recommended with the steps that reach "
                   "the script's own final loss")
    p.add_argument("--memory-max", type=float, default=None, metavar="GB",
                   help="largest memory limit a trial may run under ([resources].memory_max; "
                   "default: the machine's memory)")
    p.add_argument("--batch-size-env", default=None, metavar="NAME",
                   help="environment variable the script reads its batch size from (e.g. "
                   "BATCH_SIZE), for scripts without a batch-size flag")
    p.add_argument("--workers-arg", default=None, metavar="FLAG",
                   help="flag that sets the script's data-loader workers (e.g. --workers or "
                   "--num-workers={}): the chosen setting is then measured at other worker "
                   "counts too")
    p.add_argument("--launcher", choices=("auto", "python", "torchrun"), default="auto",
                   help="how a trial starts the script: torchrun (one process per data-parallel "
                   "worker, gloo on CPU, NCCL on GPU), python, or auto (default): as the script "
                   "runs without a launcher, unless it cannot (it reads LOCAL_RANK, RANK or "
                   "WORLD_SIZE with no default outside a guard) or it joins a process group "
                   "that can start 2 workers here. A distributed path that needs NCCL or CUDA "
                   "where there is none runs single-process, even with torchrun")
    p.add_argument("--workers-max", type=int, default=None, metavar="N",
                   help="with torchrun: the most data-parallel workers a trial runs (default: "
                   "the GPUs, else 2); the number is chosen by goodput")
    p.add_argument("--probe-seconds", type=float, default=None, metavar="S",
                   help="time box of each trial (0: run every trial to its end)")
    p.add_argument("--total-samples", type=float, default=None, metavar="N",
                   help="samples of the whole job, when the script does not report them")
    p.add_argument("--output", default=None, metavar="DIR", help="run folder (default runs/<script>-<time>)")
    p.add_argument("--resume", default=None, metavar="DIR",
                   help="continue a run folder with the options it recorded (those given "
                   "again win); recorded trials are reused, not rerun")
    p.add_argument("--dataset-path", default=None, help="dataset location (recorded with the run)")
    p.add_argument("--offline-logs", default=None, metavar="DIR_OR_GLOB",
                   help="training logs of earlier runs: baseline sampling starts from the "
                   "configuration they predict")
    p.add_argument("--history", action="append", default=None, metavar="SPEC",
                   help="earlier runs of this script (repeatable): a cloudopt run folder or a "
                   "folder of them, prometheus+http://..., mlflow:URI[#experiment], "
                   "tensorboard:DIR (README: --history). Their throughput and memory at the "
                   "settings they ran are fitted as prior measurements; real runs go only "
                   "where they are silent")
    p.add_argument("--history-job", default=None, metavar="NAME",
                   help="the history's name for this job (default: the script's name)")
    p.add_argument("--agent-seconds", type=float, default=None, metavar="S",
                   help="training budget of each RL agent (default: [run].agent_seconds)")
    # default None, read as measure: a resumed run keeps the mode it recorded
    p.add_argument("--live-plan", choices=("measure", "write", "off"), default=None,
                   help="for a job with stages (start-up, training, evaluation, checkpoints): "
                   "the agents' per-stage plan written to live-plan.json and run beside the "
                   "static recommendation (measure, the default), written only, or not made")
    p.add_argument("--refine-rounds", type=int, default=None, metavar="N",
                   help="closed-loop rounds after the baseline: measure the plan, refit, "
                   "re-plan (default: [run].refine_rounds)")
    p.add_argument("--runoff-rounds", type=int, default=None, metavar="N",
                   help="rounds of the closing run-off, where settings that measured close "
                   "are run again back to back; 0 skips it (default: [run].runoff_rounds)")
    p.add_argument("--runoff-size", type=int, default=None, metavar="N",
                   help="at most this many settings in the run-off (default: [run].runoff_size)")
    p.add_argument("--phase-model", default=None, metavar="DIR", help="saved phase model")
    p.add_argument("--image", default=None, metavar="IMAGE",
                   help="container image of the Kubernetes Job in k8s-job.yaml")
    p.add_argument("--executor", default=None, metavar="{local,ray,replay:DIR}",
                   help="where trials run: local (default; one after another), ray (Ray "
                        "tasks, side by side where they fit; pip install 'cloudopt[ray]'), or "
                        "replay:DIR (answered from a recorded grid's runs, for benchmarks)")
    p.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="with --executor ray: a cluster to join (auto, ray://head:10001); "
                        "default: start a local Ray sized to this machine")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p


def _load(args: argparse.Namespace) -> tuple[OptimizerConfig, list[Job]]:
    """The configuration and one :class:`Job` per script, from the command line (with a resumed
    folder's recorded options where not given again); bad values exit 2 naming them."""
    if args.resume:
        if not Path(args.resume).is_dir():
            raise CloudoptError(f"--resume {args.resume}: no such run folder")
        if args.train_file and not has_recorded_options(Path(args.resume)):
            pass  # a folder of trials without run.json: resumed with the options given
        else:
            changed = fill_from_run(args)
            print(f"resuming {args.resume}" + (": changed " + "; ".join(changed) if changed
                                                else " with its recorded options"))
    if not args.train_file:
        raise CloudoptError("--train-file FILE is required (or --resume DIR of a run folder)")
    options = {**vars(args), "budget": _budget(args.budget), "preference": parse_preference(
        "balanced" if args.preference is None else args.preference)}
    jobs = [Job.from_options(options, f) for f in args.train_file]
    config = load_config(args.config, jobs[0].overrides())
    if args.resume:
        _same_machine(Path(args.resume), config)
    check_available(config.run.executor)
    config.multi_objective.vector(jobs[0].preference)  # unknown names fail here (exit 2)
    for flag, value, low, strict in (("--probe-seconds", args.probe_seconds, 0, False),
                                     ("--agent-seconds", args.agent_seconds, 0, True),
                                     ("--baseline-samples", args.baseline_samples, 1, False),
                                     ("--refine-rounds", args.refine_rounds, 0, False),
                                     ("--runoff-rounds", args.runoff_rounds, 0, False),
                                     ("--runoff-size", args.runoff_size, 2, False),
                                     ("--total-samples", args.total_samples, 0, True)):
        if value is not None and (value < low or (strict and value == low)):
            raise ConfigError(f"{flag} must be {'>' if strict else '>='} {low} (got {value:g})")
    return config, jobs


def _same_machine(folder: Path, config: OptimizerConfig) -> None:
    """A run folder resumed where its CPUs and GPUs differ would plan other settings, run them
    beside trials that cannot be compared, and overwrite the config it recorded (a folder
    brought back from a GPU machine did): refused, naming both machines."""
    files = [folder / "config.json", *sorted(folder.glob("*/config.json"))]
    recorded = next((read_json(f) for f in files if f.is_file()), None)
    res = (recorded or {}).get("resources") or {}
    was = (res.get("cpu_count_max"), res.get("gpu_count_max"))
    now = (config.resources.cpu_count_max, config.resources.gpu_count_max)
    if None not in was and tuple(was) != now:
        raise CloudoptError(
            f"--resume {folder}: recorded on a machine with {was[0]} CPU(s) and {was[1]} "
            f"GPU(s); here the bounds are {now[0]} CPU(s) and {now[1]} GPU(s), so its trials "
            "would not be reused. Resume it on that machine, set the same [resources] "
            "bounds with --config, or start a new run with --train-file")


def _run_dir(args: argparse.Namespace, config: OptimizerConfig, script: Path, n_files: int) -> Path:
    if args.resume:
        base = Path(args.resume)  # checked in _load
    elif args.output:
        base = Path(args.output)
    else:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        return Path(config.run.output_dir) / f"{_slug(script.stem)}-{stamp}"
    return base / _slug(script.stem) if n_files > 1 else base


def _budget(value: str | None) -> int | str | None:
    """``--budget``: a whole number or ``auto`` (anything else: exit 2 naming the value)."""
    if value is None or value == "auto":
        return value
    try:
        return int(value)
    except ValueError:
        raise CloudoptError(f"--budget {value!r}: give a whole number of runs (0: no limit) "
                            "or auto") from None


def choose_launcher(asked: str | None, source: str) -> str:
    """``torchrun`` or ``python``: auto runs the script as it runs without a launcher unless it
    cannot, or its process group starts here; a distributed path that cannot start here runs
    single-process even when torchrun is asked
    (:func:`optimizer.trials.launchers.launch_rule.decide_launch`)."""
    return decide_launch(asked, source).launcher


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "run"


def optimize_file(optimizer: CloudResourceOptimizer, job: Job, manager: TrainingModuleManager,
                  run_dir: Path) -> OptimizationResult:
    """The whole pipeline for one prepared script (:func:`optimizer.search.job_setup.prepare`);
    prints the baseline table and a summary."""
    config = optimizer.config
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(run_dir / "run.json", job.record())
    result = optimizer.run_job(job, manager, run_dir)
    ranked = rank_trials(result.baseline, config, job.preference)
    print(format_trials_table(ranked))
    best = best_trial(ranked)
    if best is not None:  # a sentence: the setting in words, its trial id stays in the table
        alloc = Allocation(int(best["gpus"]), int(best["cpus"]), float(best["memory_gb"]),
                           None if pd.isna(best["batch_size"]) else int(best["batch_size"]))
        rate = ("throughput unmeasured" if pd.isna(best["throughput"])
                else f"{best['throughput']:.1f} samples/s")
        print(f"best baseline setting for {job.preference!r}: "
              f"{describe_allocation(alloc, gpus=bool(ranked['gpus'].max()))}: "
              f"{job_words(best['job_cost'], best['job_time_s'])}, {rate}")
    print(summary_table(result))
    return result


def _to_progress(measured: dict[str, Any], job: dict[str, Any] | None = None) -> str:
    """What the recommend row's seconds mean where the batch's whole job makes more or less
    training than the script's own: a job of other epochs or steps (``job``, the
    recommendation's ``job_length``), or its whole job, which trains at least as well."""
    eff = float(measured.get("efficiency", 1.0) or 1.0)
    whole = float(measured.get("whole_job_s", 0.0))
    progress = float(measured.get("progress", eff) or eff)
    if abs(eff - 1.0) <= 1e-6 and abs(progress - 1.0) <= 1e-6:
        return ""
    if job is None:  # no job length judged it (efficiency without one): no command to run
        return (f"; time and cost to the script's own batch's training progress (efficiency "
                f"{eff:.2f}; its whole job: {whole:.1f} s)")
    unit = job.get("unit") or "epochs"
    if job.get("args"):
        return (f"; a job of {' '.join(job['args'])}, which reaches the script's own batch's "
                f"final loss (efficiency {eff:.2f}; at the script's {unit}: {whole:.1f} s)")
    return (f"; its whole job, which trains at least as well (efficiency {eff:.2f}; "
            f"{job.get('judged_by') or 'judged by its efficiency'})")


def summary_table(result: OptimizationResult) -> str:
    """Baseline (reference trial) against the optimized run, and where the report is."""
    from optimizer.trials.records import job_cost, job_time

    rec = result.recommendation
    rows = [("baseline", result.baseline[0]), ("optimized", result.optimized)]
    alloc = rec.allocation
    gpus = any(t.allocation.gpus for _, t in rows if t is not None) or bool(alloc.gpus)
    said = {name: describe_allocation(t.allocation, gpus=gpus) for name, t in rows
            if t is not None}
    said["recommend"] = describe_allocation(alloc, gpus=gpus)
    wide = max(34, *map(len, said.values()))
    lines = [f"{'run':<10} {'allocation':<{wide}} {'job_time_s':>10} {'job_cost_$':>12} "
             f"{'samples/s':>10}  figures"]
    for name, t in rows:
        if t is None or not t.ok:
            lines.append(f"{name:<10} {'failed' if t is not None else '-':<{wide}}")
            continue
        jt, jc = job_time(t), job_cost(t)
        lines.append(
            f"{name:<10} {said[name]:<{wide}} "
            f"{'-' if jt is None else format(jt, '.1f'):>10} "
            f"{'-' if jc is None else format(jc, '.6f'):>12} "
            f"{'-' if t.throughput is None else format(t.throughput, '.1f'):>10}  "
            f"{'measured' if t.status == 'completed' else 'time/cost predicted from a probe'}")
    m = rec.measured
    if m:
        lines.append(
            f"{'recommend':<10} {said['recommend']:<{wide}} {m['job_time_s']:>10.1f} "
            f"{m['job_cost']:>12.6f} {m['throughput'] or 0:>10.1f}  trial {m['trial']} at "
            "the right-sized memory request" + _to_progress(m, rec.job_length))
    lines.append(f"recommended by: {rec.agent}")
    for run_name, status in result.sla_status.items():
        lines.append(f"SLA {run_name}: " + ", ".join(
            f"{k} {'met' if ok else 'VIOLATED'}" for k, ok in status.items()))
    for note in rec.notes:
        lines.append(f"note: {note}")
    for w in result.comparison.get("monitor", {}).get("warnings", []):
        lines.append(f"warning: {w}")
    lines.append(f"report: {result.report_paths.get('report_html')}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    config, jobs = _load(args)
    prepared = [prepare(job, config) for job in jobs]  # every script checked before any trial
    for job, manager in prepared:
        optimizer = CloudResourceOptimizer(copy.deepcopy(config), quiet=args.quiet)
        run_dir = _run_dir(args, config, job.train_file, len(prepared))
        if args.resume:
            _said_before(run_dir)
        try:
            optimize_file(optimizer, job, manager, run_dir)
        except KeyboardInterrupt:
            if (run_dir / "run.json").exists():
                target = Path(args.resume or args.output or run_dir)
                print(f"to continue: {resume_command(target)}", file=sys.stderr)
            raise
    sys.stdout.flush()
    return 0


def _said_before(run_dir: Path) -> None:
    """What a resumed folder recommended last, read back from its result."""
    previous, why = recorded_result(run_dir)
    if previous is not None:
        rec = previous.recommendation
        print(f"{run_dir}: its last recommendation: {describe_allocation(rec.allocation)} "
              f"({rec.agent}, preference {previous.preference})")
    elif why:
        print(f"{run_dir}: its recorded result is not read back ({why}); it is written anew")
