"""What a finished run amounts to: its :class:`~optimizer.trials.records.TrialSummary`.

Status and reason, the throughput from the best source (the script's own metrics rows, else
the in-process probe's steps, else the rates it printed, else work over time), the whole
job's size and time (measured, or predicted for a probe), the cost at the allocation's prices,
the resources used and what the script tells about its model and data.
"""

from __future__ import annotations

import os
import socket
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from optimizer.foundation.config import ResourceConfig
from optimizer.trials.cost import ResourceCostCalculator
from optimizer.trials.launchers import torchrun
from optimizer.trials.launchers.plan import LaunchPlan
from optimizer.trials.monitor import CSVMonitor
from optimizer.trials.output import (
    final_heldout_loss,
    parse_key_values,
    reported_model_info,
    to_number,
    total_samples_from_args,
)
from optimizer.trials.probe import read_probe, write_stage_marks
from optimizer.trials.probe.summary import ProbeFigures, probe_figures
from optimizer.trials.records import TrialSummary, choose_job_size, exit_seconds, predict_time
from optimizer.trials.run.launch import TrialLaunch
from optimizer.trials.run.request import TrialRequest
from optimizer.trials.runner import (
    TrialRun,
    classify,
    measured_throughput,
    printed_windows,
    tail,
)


def model_info(analysis: dict[str, Any], metrics: pd.DataFrame | str | os.PathLike | None,
               stdout_text: str = "") -> dict[str, Any]:
    """What the script tells about its model and data (``model_name, model_family, params,
    layers, dataset`` in columns of its metrics CSV, a frame or a path, and ``key=value``
    tokens in its output), over what its source shows (``analysis``)."""
    if metrics is not None and not isinstance(metrics, pd.DataFrame):
        metrics = CSVMonitor(metrics).load_latest_data()
    return reported_model_info(analysis, metrics, stdout_text)


def _rate(run: TrialRun, plan: LaunchPlan, status: str, work: Path
          ) -> tuple[float | None, float | None, str, float | None, ProbeFigures, Any]:
    """(samples, samples/s, source, startup s, the probe's figures, its record)."""
    samples, thr, source, startup = measured_throughput(run)
    record = read_probe(run.probe_path) if run.probe_path is not None else None
    if record is not None:
        write_stage_marks(record, work / "stages.csv")
    fig = probe_figures(record, plan.script.tree, list(plan.train_args), status,
                        thr if source != "wall_time" else None, source,
                        run.batch_size or plan.default_batch_size(),
                        printed_windows(run, record, source))
    # Rows the script wrote for cloudopt (OPTIMIZER_METRICS_CSV) are its own exact account;
    # otherwise the probe's steps come before rates the script printed.
    if fig.throughput and source != "metrics_csv":
        samples, thr, source, startup = fig.samples, fig.throughput, "probe", fig.startup_s
    return samples, thr, source, startup, fig, record


def summarize(run: TrialRun, plan: LaunchPlan, request: TrialRequest, launch: TrialLaunch,
              wall: float, resource_config: ResourceConfig,
              analysis: dict[str, Any]) -> TrialSummary:
    """Status, time, throughput (and its source), cost and resource use of a finished run."""
    allocation, work = request.allocation, launch.work
    code = run.proc.returncode
    status, reason = classify(run, code)
    stdout_text = "\n".join(run.stdout_text)
    samples, thr, source, startup, fig, record = _rate(run, plan, status, work)
    sizes = [("given", request.total_samples), ("metrics", run.csv_total),
             ("printed", to_number(parse_key_values(stdout_text).get("total_samples"))),
             ("arguments", total_samples_from_args(list(plan.train_args))),
             (fig.total_source, fig.total_samples)]
    size_source, total = choose_job_size(sizes, status, thr, source, wall, startup)
    if source == "wall_time" and total is not None and status == "completed":
        samples, thr = total, total / wall if wall > 0 else None
    hourly = ResourceCostCalculator.from_config(resource_config).calculate_hourly_cost(
        allocation)
    end = None if record is None else record.training_end_t  # trial_dir/.work below
    exit_s = exit_seconds(status, wall, end, work.parent.parent, allocation.cpus)
    predicted = predict_time(status, wall, samples, total, thr, startup, exit_s)
    stats, stderr = run.monitor.stats(startup), tail(work / "stderr.log")
    if status == "probe" and thr is None:
        reason = "no throughput measured before the time box ended"
    if reason.startswith("crash") and (rank := torchrun.rank_failure(stderr, run.probe_world)):
        reason = f"crash ({rank})"
    info = model_info(analysis, work / "metrics.csv", stdout_text)
    if run.batch_size is not None:  # the allocation's, else what the script printed
        info["batch_size"] = run.batch_size
    if status == "completed":  # the held-out loss the whole job ends at, where printed
        info["heldout_loss"] = final_heldout_loss(stdout_text)
    return TrialSummary(
        trial_id=launch.trial_id, status=status, allocation=allocation, reason=reason,
        exit_code=code, wall_time_s=round(wall, 3), samples=samples, throughput=thr,
        throughput_source=source, hourly_cost=hourly, cost=hourly * wall / 3600,
        total_samples=total, predicted_total_time_s=predicted,
        predicted_total_cost=None if predicted is None else hourly * predicted / 3600,
        startup_s=None if startup is None else round(float(startup), 3), exit_s=exit_s,
        cpu_util_mean=100 * stats["cpu_cores_mean"] / max(allocation.cpus, 1),
        **stats, train_file=str(plan.script.path), train_args=list(plan.train_args),
        model_info=info,
        stderr_tail=stderr if status == "failed" else "", started_at=launch.started_at,
        finished_at=datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
        node=socket.gethostname(), job_size_source=size_source, probe=fig.info,
    )


__all__ = ["model_info", "summarize"]
