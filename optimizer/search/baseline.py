"""Baseline trials: a few real, measured runs of the script under different allocations.

:func:`plan_baseline` picks the allocations: the default one (every CPU the bounds allow, one
GPU when the script uses CUDA and GPUs exist, the script's own batch size), then variations of
one knob at a time (thread count, batch size, GPU count) in an order that gives the most
distinct information for a small ``n``. :func:`run_baseline` runs them into
``runs/<run>/trials/<NN-key>/`` and skips trials already recorded (resume).
:func:`rank_trials` scores the measured trials under a preference over (cost, time, resource):
each objective is divided by its best value among the usable trials, the weighted sum is the
score (1.0 is an ideal trial), and trials meeting the SLA rank before those that do not.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import OptimizerConfig, ResourceConfig
from optimizer.search.budget import probes_within
from optimizer.search.choice import resource_share
from optimizer.search.goodput.probe_target import loss_target_from_trials
from optimizer.trials.executors import LocalExecutor, TrialExecutor, TrialRequest
from optimizer.trials.failures import failing_alike
from optimizer.trials.records import (
    TrialSummary,
    summaries_to_frame,
    trial_files,
    write_trials_csv,
)
from optimizer.trials.sla import calculate_sla_violations
from optimizer.trials.training import TrainingModuleManager

GB_PER_CPU = 4.0
"""Memory given per CPU by default, the ratio of common general-purpose cloud instances."""
REFERENCE_BATCH = 128
"""Batch size the batch variations are built around when the script's default is unknown."""


def default_allocation(resources: ResourceConfig, uses_gpu: bool = False) -> Allocation:
    """All the CPUs allowed, one GPU if the script uses CUDA and any exist, 4 GB per CPU."""
    gpus = resources.gpu_count_min
    if uses_gpu and resources.gpu_count_max > 0:
        gpus = max(gpus, 1)
    cpus = resources.cpu_count_max
    return Allocation(gpus=gpus, cpus=cpus, memory_gb=memory_for(cpus, resources))


def memory_for(cpus: int, resources: ResourceConfig) -> float:
    """The memory limit a trial on ``cpus`` CPUs runs under (``GB_PER_CPU`` within bounds)."""
    return float(min(resources.memory_max, max(resources.memory_min, GB_PER_CPU * cpus)))


def plan_baseline(resources: ResourceConfig, n: int, *, uses_gpu: bool = False,
                  reference_batch: int | None = None,
                  vary_batch: bool = True, favour_time: bool = False) -> list[Allocation]:
    """Up to ``n`` distinct allocations, the default first.

    Parameters
    ----------
    resources : ResourceConfig
        Bounds (CPUs, GPUs, memory) the allocations stay within.
    n : int
        Number of allocations wanted (fewer when the bounds allow fewer distinct ones).
    uses_gpu : bool
        Whether the script's source uses CUDA (GPU variations only then).
    reference_batch : int, optional
        The script's batch size when known; batch variations halve and double it.
    vary_batch : bool
        False when the script's batch size cannot be set: no batch variations, so no trial is
        labelled with a batch it did not run.
    favour_time : bool
        The preference weighs time most and only two probes will run: the larger batch on
        the default's resources comes second, before fewer CPUs, so the search measures a
        setting that can beat the default on time (on the 2-core machine's tab grid, batch
        128 at 2 CPUs is 19% slower than the optimum, the default 47%; 1 CPU is slower
        still).
    """
    base = default_allocation(resources, uses_gpu)
    ref = reference_batch or REFERENCE_BATCH
    cmin, cmax = resources.cpu_count_min, resources.cpu_count_max
    # The geometric middle of the CPU range: half of 16 cores barely shows how threads speed
    # a job up (Amdahl's 16/8 ratio is 1.06-1.36 for parallel fractions 0.5-0.9, within a
    # few runs' noise; 16/4 is 1.18-2.08), and a GPU job's feeding threads stop mattering at
    # a few cores (on the H200, gpuresnet ran as fast at 1 CPU as at 16). 2 cores: 1; 4: 2.
    few = max(cmin, min(cmax, round(math.sqrt(max(cmin, 1) * cmax))))

    def alloc(cpus: int = base.cpus, batch: int | None = None, gpus: int = base.gpus):
        return Allocation(gpus=gpus, cpus=cpus, memory_gb=memory_for(cpus, resources),
                          batch_size=batch)

    candidates = [base, alloc(cpus=few), alloc(batch=ref * 2), alloc(cpus=few, batch=max(ref // 2, 1))]
    if uses_gpu and resources.gpu_count_max > 0:
        candidates.insert(1, alloc(gpus=resources.gpu_count_min))
        if resources.gpu_count_max > base.gpus:
            candidates.insert(2, alloc(gpus=resources.gpu_count_max,
                                       batch=ref * resources.gpu_count_max))
    candidates += [alloc(batch=max(ref // 2, 1)), alloc(cpus=few, batch=ref * 2),
                   alloc(cpus=cmin), alloc(batch=ref * 4), alloc(cpus=cmin, batch=ref * 2)]
    if not vary_batch:
        candidates = [c for c in candidates if c.batch_size is None]
    if resources.batch_size_max is not None:
        candidates = [c for c in candidates
                      if c.batch_size is None or c.batch_size <= resources.batch_size_max]
    out: list[Allocation] = []
    for c in candidates:
        if c not in out:
            out.append(c)
    if favour_time:
        _bigger_batch_second(out, base, ref)
    return out[:n]


def _bigger_batch_second(out: list[Allocation], base: Allocation, ref: int) -> None:
    """Move the first larger batch on the default's resources to second place in ``out``."""
    bigger = next((c for c in out[1:] if (c.gpus, c.cpus) == (base.gpus, base.cpus)
                   and c.batch_size is not None and c.batch_size > ref), None)
    if bigger is not None:
        out.remove(bigger)
        out.insert(1, bigger)


def favours_time(config: OptimizerConfig, preference: Any, budget_total: int | None) -> bool:
    """Whether :func:`plan_baseline` puts the larger batch second: the preference weighs time
    most and the budget affords two probes only. With more, the same probes run in any order,
    and the time order made the curves' later budgets worse (benchmarks/README.md, issue 41):
    the fit and the agents took another path."""
    cost, time_w, share = config.multi_objective.vector(preference)
    return bool(time_w > max(cost, share) and budget_total is not None
                and probes_within(budget_total, config.run.baseline_samples) <= 2)


def trial_folder(run_dir: Path, trial: TrialSummary) -> str:
    """The folder name of a recorded trial (its id, unless recorded under another name)."""
    for d in sorted((run_dir / "trials").iterdir()):
        if (d / "summary.json").exists() and TrialSummary.load(d).trial_id == trial.trial_id:
            return d.name
    return trial.trial_id


def trial_path(run_dir: Path, trial: TrialSummary) -> Path:
    """The folder of a recorded trial's files: :func:`trial_folder` under ``trials/``, or a
    measurement read from history's under ``history/`` (:func:`trial_files`)."""
    return trial_files(run_dir, trial) if trial.history else \
        run_dir / "trials" / trial_folder(run_dir, trial)


def trial_name(index: int, allocation: Allocation) -> str:
    return f"{index:02d}-{allocation.key()}"


def probe_folder(run_dir: str | os.PathLike, index: int, allocation: Allocation) -> Path:
    """The folder of the ``index``-th baseline probe: a probe of the same setting recorded
    under another index (a run of another preference probes in another order, and its folder
    may be reused) is that one, else ``trials/<NN-key>``."""
    trials = Path(run_dir) / "trials"
    mine = trials / trial_name(index, allocation)
    if (mine / "summary.json").exists():
        return mine
    suffix = f"-{allocation.key()}"
    for d in sorted(trials.glob(f"[0-9][0-9]{suffix}")) if trials.is_dir() else []:
        if (d / "summary.json").exists():
            return d
    return mine


def _requests(manager: TrainingModuleManager, allocations: Sequence[Allocation], run_dir: Path,
              config: OptimizerConfig, probe_seconds: float | None,
              total_samples: float | None, goodput: bool,
              ) -> tuple[list[TrialSummary | None], list[TrialRequest], list[int]]:
    """The recorded trial of each allocation (None: to run), the requests of those to run and
    their places among the allocations."""
    out: list[TrialSummary | None] = []
    requests, slots = [], []
    for i, alloc in enumerate(allocations):
        trial_dir = probe_folder(run_dir, i, alloc)
        out.append(manager.recorded_trial(trial_dir))  # None: not recorded, or stale
        if out[-1] is None:
            requests.append(TrialRequest(
                alloc, trial_dir, probe_seconds=probe_seconds,
                timeout_s=config.run.trial_timeout_s,
                monitor_interval=config.run.monitor_interval,
                total_samples=total_samples or next(
                    (t.total_samples for t in out if t is not None and t.ok and t.total_samples),
                    None), until_box=goodput and i == 0))
            slots.append(i)
    return out, requests, slots


def run_baseline(
    manager: TrainingModuleManager,
    allocations: Sequence[Allocation],
    run_dir: str | os.PathLike,
    config: OptimizerConfig,
    *,
    probe_seconds: float | None = None,
    total_samples: float | None = None,
    quiet: bool = False,
    executor: TrialExecutor | None = None,
    ref_batch: int | None = None,
) -> list[TrialSummary]:
    """Run each allocation as a trial of ``run_dir`` (skipping those already recorded).

    Trial ``i`` lives in ``run_dir/trials/<NN-key>/``; a folder with a ``summary.json`` is
    complete and is loaded instead of run again. ``runs/<run>/trials.csv`` is rewritten after
    each trial. The trials run on ``executor`` (default: one after another, locally; the job
    size found by an earlier trial is then passed on, so every probe predicts the same job).

    With ``[run].goodput`` and probes, the script's own batch size (``ref_batch``, or the
    script's default where allocations leave it unset) runs first, the first such probe for
    its whole time box; the probes of other batch sizes then train until they reach its loss
    (:mod:`optimizer.trials.probe.loss_target`), so that their efficiencies compare training as far.

    Trials that fail alike (:func:`optimizer.trials.failures.failing_alike`: two crashed on
    the same exception and none gave a rate) stop the baseline there: the rest would fail the
    same way, and the error says what to try after two runs instead of after all of them.
    """
    run_dir = Path(run_dir)
    executor = executor or LocalExecutor()
    goodput = bool(config.run.goodput and probe_seconds)
    out, requests, slots = _requests(manager, allocations, run_dir, config, probe_seconds,
                                     total_samples, goodput)
    own = [k for k, i in enumerate(slots)
           if not goodput or allocations[i].batch_size in (None, ref_batch)]
    waves = [own, [k for k in range(len(requests)) if k not in own]]
    bar = tqdm(total=len(requests), desc=f"baseline trials ({executor.name})", unit="trial",
               disable=(quiet or not requests) or None, leave=False)
    launcher = manager.launcher
    alike = None
    for n, wave in enumerate(waves):
        if not wave or alike:
            continue
        target = loss_target_from_trials([t for t in out if t is not None], run_dir,
                                         ref_batch) if n else None
        batch = [dataclasses.replace(requests[k], loss_target=target) for k in wave]
        running = iter(executor.run(manager, batch, config.resources))
        for j, summary in running:
            out[slots[wave[j]]] = summary
            bar.set_postfix_str(summary.allocation.key())
            bar.update()
            alike = failing_alike([t for t in out if t is not None], launcher)
            if alike:
                getattr(running, "close", lambda: None)()  # an executor ends its running ones
                break
    bar.close()
    write_trials_csv(run_dir)
    return [t for t in out if t is not None]


def rank_trials(summaries: Sequence[TrialSummary], config: OptimizerConfig,
                preference: str | Sequence[float] = "balanced") -> pd.DataFrame:
    """Trials as a table with ``job_time_s``, ``job_cost``, ``resource_share``, ``sla_ok`` and
    ``score`` (lower is better; NaN for failed trials), best first.

    Job time and cost are the predicted whole-job figures of probes and the measured ones of
    completed trials.
    """
    w = config.multi_objective.vector(preference)
    frame = summaries_to_frame(summaries)
    if frame.empty:
        return frame
    frame["job_time_s"] = frame["predicted_total_time_s"].astype(float)
    frame["job_cost"] = frame["predicted_total_cost"].astype(float)
    frame["resource_share"] = resource_share(config, frame["gpus"].astype(float),
                                             frame["cpus"].astype(float),
                                             frame["memory_gb"].astype(float))
    ok = frame["status"].isin(["completed", "probe"]) & frame["job_time_s"].notna()
    frame["sla_ok"] = [
        bool(ok_i) and all(calculate_sla_violations(
            frame.loc[[i], ["job_time_s", "job_cost", "throughput", "mem_gb_peak", "gpus",
                            "gpu_util_mean", "cpu_util_mean"]].rename(
                columns={"job_time_s": "predicted_total_time_s",
                         "job_cost": "predicted_total_cost"}), config.sla).values())
        for i, ok_i in zip(frame.index, ok, strict=True)]
    score = pd.Series(np.nan, index=frame.index)
    if ok.any():
        objs = frame.loc[ok, ["job_cost", "job_time_s", "resource_share"]].astype(float)
        best = objs.min().replace(0, np.nan)
        score[ok] = (objs / best).fillna(1.0).to_numpy() @ w
    frame["score"] = score
    order = frame.assign(_fail=~ok, _sla=~frame["sla_ok"]).sort_values(
        ["_fail", "_sla", "score"], kind="stable")
    return order.drop(columns=["_fail", "_sla"]).reset_index(drop=True)


def format_trials_table(ranked: pd.DataFrame) -> str:
    """A plain-text table: allocation, status, measured time, throughput, job time and cost."""
    if ranked.empty:
        return "(no trials)"
    rows = []
    for _, r in ranked.iterrows():
        bs = "default" if pd.isna(r["batch_size"]) else str(int(r["batch_size"]))
        thr = "-" if pd.isna(r["throughput"]) else f"{r['throughput']:.1f}"
        jt = "-" if pd.isna(r["job_time_s"]) else f"{r['job_time_s']:.1f}"
        jc = "-" if pd.isna(r["job_cost"]) else f"{r['job_cost']:.6f}"
        status = r["status"] if not r["reason"] else f"{r['status']} ({r['reason']})"
        rows.append([r["trial_id"], str(int(r["gpus"])), str(int(r["cpus"])),
                     f"{r['memory_gb']:g}", bs, status, f"{r['wall_time_s']:.1f}", thr,
                     f"{r['cost']:.6f}", jt, jc, "yes" if r["sla_ok"] else "no"])
    head = ["trial", "gpus", "cpus", "mem_gb", "batch", "status", "measured_s", "samples/s",
            "trial_cost_$", "job_time_s", "job_cost_$", "sla"]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(lines)


def best_trial(ranked: pd.DataFrame) -> dict[str, Any] | None:
    """The first usable row of :func:`rank_trials` as a dict, or None."""
    usable = ranked[ranked["score"].notna()] if not ranked.empty else ranked
    return None if usable.empty else usable.iloc[0].to_dict()
