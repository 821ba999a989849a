"""Calibrate a workload preset from real trials of a training script.

Runs the script for real under a grid of allocations with the project's runner
(:meth:`optimizer.trials.training.TrainingModuleManager.run_training`), fits
:class:`envs.workload.WorkloadModel` to the measured trials (:mod:`optimizer.search.workload_fit`) and
writes a preset TOML
for ``configs/workloads`` whose comments record how it was made (command, trials, fit quality).

Usage::

    python -m optimizer.search.calibrate examples/train_mlp.py --name mlp-cpu --cpus 1,2 \
        --batch 32,64,128,256,512,1024 --repeats 2 --noise-scale 256 --ref-batch 128 \
        --args "--epochs 1 --samples 6000" --total-samples 2e6

Each allocation can be measured ``--repeats`` times; the fastest repeat is kept, because on a
shared machine other processes only ever slow a run down. ``--from-run DIR`` fits trials
already recorded under ``DIR/trials`` instead of running new ones; ``--fix NAME=VALUE`` holds
a parameter the trials cannot inform (see ``configs/workloads/mlp-cpu.toml`` for a preset
made this way).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from tqdm import tqdm

from envs import EnvConfig, WorkloadModel
from envs.workload import PRESET_DIR
from optimizer.foundation.allocation import Allocation
from optimizer.foundation.atomic_files import atomic_write_text
from optimizer.foundation.config import ResourceConfig, SLAConfig
from optimizer.foundation.errors import CloudoptError
from optimizer.search.workload_fit import fit_workload_model
from optimizer.trials.records import TrialSummary, iter_trials, job_size
from optimizer.trials.training import TrainingModuleManager, TrialRequest


def measure(
    train_file: str | Path,
    allocations: Sequence[Allocation],
    run_dir: str | Path,
    *,
    train_args: Sequence[str] = (),
    resource_config: ResourceConfig | None = None,
    repeats: int = 1,
    probe_seconds: float | None = None,
    timeout_s: float = 120.0,
    quiet: bool = True,
) -> list[TrialSummary]:
    """Run ``train_file`` under each allocation (``repeats`` times); the best trial of each.

    Returns one :class:`TrialSummary` per allocation (the repeat with the highest throughput,
    or the last failed one), in the order given. Trials are recorded under
    ``run_dir/trials/<index>-<allocation key>-r<repeat>``.
    """
    res = resource_config or ResourceConfig(gpu_count_max=0)
    mgr = TrainingModuleManager(str(train_file), list(train_args))
    # Round-robin over allocations, so a burst of load on the machine slows one repeat of
    # several allocations rather than every repeat of one.
    jobs = [(i, a, r) for r in range(repeats) for i, a in enumerate(allocations)]
    best: dict[int, TrialSummary] = {}
    for i, alloc, r in tqdm(jobs, desc="trials", disable=quiet or None):
        trial_dir = Path(run_dir) / "trials" / f"{i:02d}-{alloc.key()}-r{r}"
        s = mgr.run_training(
            TrialRequest(alloc, trial_dir, probe_seconds=probe_seconds, timeout_s=timeout_s), res
        )
        prev = best.get(i)
        if prev is None or (s.ok and (not prev.ok or (s.throughput or 0) > (prev.throughput or 0))):
            best[i] = s
    return [best[i] for i in range(len(allocations))]


def fastest_per_allocation(trials: Iterable[TrialSummary]) -> list[TrialSummary]:
    """The highest-throughput usable trial of each allocation, in first-seen order."""
    best: dict[str, TrialSummary] = {}
    for t in trials:
        if not (t.ok and t.throughput):
            continue
        key = t.allocation.key()
        if key not in best or t.throughput > best[key].throughput:
            best[key] = t
    return list(best.values())


def preset_text(
    model: WorkloadModel,
    trials: Sequence[TrialSummary],
    *,
    name: str,
    command: str,
    job: dict,
    grid: dict,
    resources: dict,
    sla: dict,
    notes: Sequence[str] = (),
) -> str:
    """TOML of a preset from a fitted model, with comments recording its provenance."""
    rep = model.fit_report_
    assert rep is not None, "fit the model first"
    lines = [
        f"# {name}: workload preset fitted to real trials by optimizer/search/calibrate.py on "
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC.",
        f"# Command: {command}",
    ]
    lines += [f"# {n}" for n in notes]
    lines.append(
        f"# Fit: R2 throughput {rep.r2_throughput:.4f}, R2 memory {rep.r2_memory:.4f}, "
        f"largest throughput error {100 * rep.max_rel_error:.1f}%, "
        f"{rep.n_trials} trials, {rep.dof} degrees of freedom."
    )
    for k, why in rep.fixed.items():
        lines.append(f"# Not identified by the trials: {k}: {why}.")
    lines.append("# Trials (allocation: measured -> fitted samples/s):")
    for row in rep.per_point:
        lines.append(f"#   {row['trial_id']}: {row['measured']:.1f} -> {row['predicted']:.1f}")
    failed = [t for t in trials if not t.ok]
    for t in failed:
        lines.append(f"#   {t.trial_id}: failed ({t.reason}), not used")
    p = model.params
    lines += ["", "[model]"]
    for k, v in vars(p).items():
        lines.append(f"{k} = {_toml(v)}")
    for ph in model.phases:
        lines += [
            "",
            "[[phases]]",
            f"id = {ph.phase_id}",
            f'name = "{ph.name or "all"}"',
            f"fraction = {ph.fraction!r}",
            f"cpu_scale = {ph.cpu_scale!r}",
            f"mem_scale = {ph.mem_scale!r}",
        ]
    for title, table in (("job", job), ("grid", grid), ("resources", resources), ("sla", sla)):
        lines += ["", f"[{title}]"] + [f"{k} = {_toml(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


def _toml(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_toml(x)}" for k, x in v.items()) + " }"
    if isinstance(v, float):
        return repr(float(f"{v:.6g}"))
    return repr(v)


def _parser() -> argparse.ArgumentParser:
    """The command line of ``python -m optimizer.search.calibrate``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("train_file")
    ap.add_argument("--name", default="mlp-cpu")
    ap.add_argument("--args", default="", help="arguments of the training script")
    ap.add_argument("--cpus", default="1,2")
    ap.add_argument("--batch", default="32,64,128,256,512,1024")
    ap.add_argument("--memory-gb", type=float, default=4.0)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--probe-seconds", type=float, default=None)
    ap.add_argument("--noise-scale", type=float, default=0.0)
    ap.add_argument("--ref-batch", type=int, default=None)
    ap.add_argument("--run-dir", default="runs/calibrate")
    ap.add_argument("--out", default=None, help=f"preset path (default {PRESET_DIR}/NAME.toml)")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument(
        "--total-samples",
        type=float,
        default=None,
        help="work of the modelled job (default: the largest total_samples a trial reports)",
    )
    ap.add_argument("--n-steps", type=int, default=10, help="adjustment intervals per job")
    ap.add_argument(
        "--fix",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="hold a step-time parameter at a value (repeatable), e.g. parallel_fraction=0.7",
    )
    ap.add_argument(
        "--from-run",
        default=None,
        help="fit trials already recorded in this run folder (fastest per allocation) "
        "instead of running new ones",
    )
    return ap


def _trials(args: argparse.Namespace, cpus: list[int],
            batches: list[int]) -> list[TrialSummary]:
    """The trials to fit: recorded ones with ``--from-run``, else the grid measured now."""
    if args.from_run:
        return fastest_per_allocation(iter_trials(args.from_run))
    allocs = [Allocation(0, c, args.memory_gb, b) for c in cpus for b in batches]
    return measure(
        args.train_file,
        allocs,
        args.run_dir,
        train_args=shlex.split(args.args),
        repeats=args.repeats,
        probe_seconds=args.probe_seconds,
        quiet=args.quiet,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    cpus = [int(x) for x in args.cpus.split(",")]
    batches = [int(x) for x in args.batch.split(",")]
    trials = _trials(args, cpus, batches)
    if args.from_run and not trials:
        print(f"error: no trials recorded in {args.from_run}/trials")
        return 2
    try:
        fixed = {}
        for item in args.fix:
            key, _, value = item.partition("=")
            fixed[key.strip()] = float(value)
        model = fit_workload_model(
            trials, name=args.name, noise_scale=args.noise_scale, ref_batch=args.ref_batch,
            fixed=fixed,
        )
    except CloudoptError as exc:
        print(f"error: {exc}")
        return 2
    rep = model.fit_report_
    print(f"fit: R2 {rep.r2_throughput:.4f}, largest error {100 * rep.max_rel_error:.1f}%")
    for row in rep.per_point:
        print(
            f"  {row['trial_id']}: measured {row['measured']:.1f} predicted "
            f"{row['predicted']:.1f} samples/s"
        )
    out = Path(args.out) if args.out else PRESET_DIR / f"{args.name}.toml"
    command = "python -m optimizer.search.calibrate " + shlex.join(
        list(argv) if argv is not None else sys.argv[1:]
    )
    text = preset_text(
        model,
        trials,
        name=args.name,
        command=command,
        **_job_settings(model, trials, args, cpus, batches),
        notes=[
            f"Script arguments: {args.args or '(none)'}; memory limit "
            f"{args.memory_gb:g} GB per trial; fastest of {args.repeats} "
            "repeat(s) kept (other processes only slow a run down).",
            f"Gradient noise scale {args.noise_scale:g} (given, not measured; "
            "0 = statistical efficiency off).",
            *[f"Held fixed (--fix): {item}." for item in args.fix],
        ],
    )
    atomic_write_text(out, text)
    print(f"wrote {out}")
    return 0


def _job_settings(model: WorkloadModel, trials: Sequence[TrialSummary], args, cpus, batches):
    """Preset tables for the command line: bounds from the measured grid, SLA 20% looser than
    the script's default allocation."""
    res = ResourceConfig(
        gpu_count_min=0,
        gpu_count_max=0,
        cpu_count_min=min(cpus),
        cpu_count_max=max(cpus),
        memory_min=0.5,
        memory_max=args.memory_gb,
        memory_step=0.5,
        cost_per_gpu_hour=0.0,
    )
    meta = job_settings(model, trials, resources=res, batch_sizes=batches, n_steps=args.n_steps,
                        total_samples=args.total_samples)
    init = meta["job"]["initial"]
    init.update(cpus=min(cpus), memory_gb=args.memory_gb)
    meta["sla"] = baseline_sla(model, meta, res)
    keys = (
        "gpu_count_min",
        "gpu_count_max",
        "cpu_count_min",
        "cpu_count_max",
        "memory_min",
        "memory_max",
        "memory_step",
        "cost_per_gpu_hour",
        "cost_per_cpu_hour",
        "cost_per_gb_hour",
    )
    meta["resources"] = {k: getattr(res, k) for k in keys}
    return meta


def job_settings(
    model: WorkloadModel,
    trials: Sequence[TrialSummary],
    *,
    resources: ResourceConfig,
    batch_sizes: Sequence[int] | None = None,
    n_steps: int = 10,
    total_samples: float | None = None,
) -> dict:
    """Job and grid tables of a preset from measured trials.

    The job's work is ``total_samples``, else :func:`job_size` of the trials (never assumed:
    unknown is an error); a restart costs the median
    start-up time of the completed trials (wall time minus samples / throughput); the batch
    grid spans the measured batch sizes and one power of two beyond each end; the first usable
    trial's allocation starts episodes.
    """
    ok = [t for t in trials if t.ok and t.throughput]
    if not ok:
        raise CloudoptError("no usable trial to take the job's size and start from")
    total = total_samples or job_size(ok)
    if not total:
        raise CloudoptError(
            "the job's size is unknown: no trial reported total_samples and none ran to its "
            "end; give --total-samples (or let one trial run whole)")
    startup = [
        t.wall_time_s - t.samples / t.throughput
        for t in ok
        if t.status == "completed" and t.samples
    ]
    restart = float(max(np.median(startup), 0.0)) if startup else 0.0
    batches = sorted(batch_sizes or {int(t.allocation.batch_size) for t in ok})
    if batch_sizes is None and len(batches) > 1:
        # One step beyond the measured range on each side: the agents may plan there, and
        # the closed loop measures such a plan before it is believed.
        measured = set(batches)
        batches = [max(1, batches[0] // 2), *batches, batches[-1] * 2]
        if resources.batch_size_max is not None:  # a measured size stays: it was run
            batches = [b for b in batches if b <= resources.batch_size_max or b in measured]
    first = ok[0].allocation
    n_cpu = resources.cpu_count_max - resources.cpu_count_min
    return {
        "job": {
            "total_samples": total,
            "n_steps": n_steps,
            "restart_s": round(restart, 2),
            "initial": {
                "gpus": first.gpus,
                "cpus": first.cpus,
                "memory_gb": first.memory_gb,
                "batch_size": model.params.ref_batch,
            },
        },
        "grid": {
            "cpu_step": max(1, -(-n_cpu // 7)),
            "batch_min": batches[0],
            "batch_max": batches[-1],
        },
    }


def baseline_sla(
    model: WorkloadModel, meta: dict, resources: ResourceConfig, margin: float = 0.2
) -> dict:
    """SLA limits ``margin`` looser than the job run at its initial allocation throughout."""
    init = meta["job"]["initial"]
    pred = model.predict(init["gpus"], init["cpus"], init["memory_gb"], init["batch_size"])
    t_job = meta["job"]["total_samples"] / float(pred["goodput"])
    hourly = (
        init["gpus"] * resources.cost_per_gpu_hour
        + init["cpus"] * resources.cost_per_cpu_hour
        + init["memory_gb"] * resources.cost_per_gb_hour
    )
    return {
        "time_max": float(f"{(1 + margin) * t_job:.6g}"),
        "cost_max": float(f"{(1 + margin) * hourly * t_job / 3600:.6g}"),
        "memory_max": float(resources.memory_max),
    }


def env_config_from_trials(
    trials: Sequence[TrialSummary],
    *,
    resources: ResourceConfig,
    sla: SLAConfig | None = None,
    preference: str | Sequence[float] = "balanced",
    noise_scale: float | None = None,
    ref_batch: int | None = None,
    n_steps: int = 10,
    total_samples: float | None = None,
    **env_kwargs,
) -> EnvConfig:
    """Fit a workload model to measured trials and wrap it in an :class:`envs.EnvConfig`.

    The job and grid come from :func:`job_settings`; ``sla`` defaults to :func:`baseline_sla`
    (20% looser than staying at the first trial's allocation). ``env_kwargs`` are further
    EnvConfig fields. Raises :class:`CloudoptError` when the trials cannot identify the model.
    """
    model = fit_workload_model(trials, noise_scale=noise_scale, ref_batch=ref_batch)
    model.meta.update(job_settings(model, trials, resources=resources, n_steps=n_steps,
                                   total_samples=total_samples))
    if sla is None:
        sla = SLAConfig(**baseline_sla(model, model.meta, resources))
    return EnvConfig(
        workload=model, preference=preference, sla=sla, resources=resources, **env_kwargs
    )


if __name__ == "__main__":
    raise SystemExit(main())
