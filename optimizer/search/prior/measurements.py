"""History runs as prior measurements: trial records the search fits and ranks like its own,
which no budget counts.

:func:`prior_trial` turns one :class:`~optimizer.history.run.HistoryRun` into a
:class:`~optimizer.trials.records.TrialSummary` (``history`` says where it was read), so that
it compares with a real probe of this search:

- the setting is the one the run had: its CPUs and GPUs, its memory limit (else the baseline's
  for those CPUs), its batch size (else the script's own, which it ran), data-loader workers
  only where this search sets them;
- its rate is the run's throughput; its peak memory the run's; its start-up the run's, else its
  wall time less its samples at that rate; priced at this configuration's prices, not at the
  ones it was billed, so every setting is judged by the same price list;
- the job's size where the run knew it (its total samples, else dataset × epochs); its whole
  job is then predicted as a probe's is (:func:`optimizer.trials.records.with_job_size`): a
  cloudopt trial that ran to its end keeps its measured time;
- a run whose history holds the probe's files (a cloudopt run folder) brings its loss curve,
  so the statistical efficiency of its batch is measured as for a probe of this search, and
  its trace (the phases of a reference read from history).

:func:`record_priors` writes them to ``runs/<run>/history/<trial>/`` (``trials.csv`` lists them
after the real trials, marked by ``history_source`` and ``history_run``).
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import ResourceConfig
from optimizer.history.run import HistoryRun
from optimizer.search.baseline import memory_for
from optimizer.trials.cost import ResourceCostCalculator
from optimizer.trials.probe import EVENTS_FILE
from optimizer.trials.probe.loss_target import FILE as LOSS_TARGET_FILE
from optimizer.trials.records import HISTORY_DIR, TrialSummary, write_trials_csv

PREFIX = "history"
"""Trial ids of prior measurements: ``history-NN-<setting>``."""


def _value(run: HistoryRun, name: str) -> float | None:
    v = run.value(name)
    return v if math.isfinite(v) else None


def prior_allocation(run: HistoryRun, resources: ResourceConfig, own_batch: int | None,
                     workers: bool) -> Allocation:
    """The setting ``run`` ran (module doc); ``own_batch``: the script's own batch size."""
    cpus = int(run.value("cpus"))
    batch = _value(run, "batch_size")
    memory = _value(run, "memory_gb") or memory_for(cpus, resources)
    count = _value(run, "workers") if workers else None
    return Allocation(int(_value(run, "gpus") or 0), cpus, float(memory),
                      int(batch) if batch else own_batch,
                      None if count is None else int(count))


def _startup(run: HistoryRun) -> float | None:
    startup = _value(run, "startup_s")
    wall, samples, thr = _value(run, "wall_s"), _value(run, "samples"), _value(run, "throughput")
    if startup is None and wall is not None and samples is not None and thr:
        startup = max(wall - samples / thr, 0.0)
    return startup


def _job_samples(run: HistoryRun) -> float | None:
    total = _value(run, "total_samples")
    if total is None and _value(run, "dataset_size") and _value(run, "epochs"):
        total = float(run.value("dataset_size") * run.value("epochs"))
    return total


def _iso(unix: float | None) -> str:
    if unix is None:
        return ""
    return datetime.fromtimestamp(unix, timezone.utc).isoformat(timespec="milliseconds")


def prior_trial(run: HistoryRun, index: int, allocation: Allocation,
                resources: ResourceConfig) -> TrialSummary:
    """``run`` at ``allocation`` as a prior measurement (module doc)."""
    wall = _value(run, "wall_s") or 0.0
    hourly = ResourceCostCalculator.from_config(resources).calculate_hourly_cost(allocation)
    whole = run.tags.get("status") == "completed"
    steps = run.tags.get("probe_steps")
    return TrialSummary(
        trial_id=f"{PREFIX}-{index:02d}-{allocation.key()}",
        status="completed" if whole else "probe", allocation=allocation, wall_time_s=wall,
        samples=_value(run, "samples"), throughput=_value(run, "throughput"),
        throughput_source="history", hourly_cost=hourly, cost=hourly * wall / 3600,
        total_samples=_job_samples(run), startup_s=_startup(run),
        cpu_cores_peak=_value(run, "cpu_p95_cores") or 0.0,
        mem_gb_peak=_value(run, "peak_mem_gb") or 0.0,
        train_file=run.tags.get("train_file", ""), started_at=_iso(run.started_at),
        concurrent_with=(run.tags.get("concurrent_with") or "").split(),
        job_size_source="history" if _job_samples(run) else "",
        probe={"steps": int(steps)} if steps and steps.isdigit() else {},
        history={"source": run.source, "run_id": run.run_id, "job": run.job})


def record_priors(run_dir: Path, priors: Sequence[TrialSummary],
                  runs: Sequence[HistoryRun]) -> None:
    """Write the prior measurements to ``run_dir/history/`` (what was there is replaced: the
    specs are read again on every start), with the probe files of runs whose history has them,
    and rewrite ``trials.csv``."""
    folder = run_dir / HISTORY_DIR
    if folder.is_dir():
        shutil.rmtree(folder)
    for trial, run in zip(priors, runs, strict=True):
        trial.save(folder / trial.trial_id)
        source = Path(run.tags.get("trial_dir") or "/nonexistent")
        for name in (EVENTS_FILE, LOSS_TARGET_FILE, "trace.csv", "stages.csv"):
            if (source / name).is_file():
                shutil.copyfile(source / name, folder / trial.trial_id / name)
    (run_dir / "trials").mkdir(parents=True, exist_ok=True)
    write_trials_csv(run_dir)


__all__ = ["PREFIX", "prior_allocation", "prior_trial", "record_priors"]
