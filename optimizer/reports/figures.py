"""The figures of the runs a recommendation is measured against: one row per trial (its
setting, how it ran, the job's time and cost, whether those were measured or predicted from
a probe) and whether it met the SLA. ``recommendation.json``'s ``baseline`` and ``optimized``,
the report's tables and ``optimization_metrics.csv`` are these rows.

:func:`run_result` puts them into the typed result beside the recommendation and the cost
comparison; :class:`OptimizationResult` is what the main job hands back: that result, the runs
it was measured on and the paths of what was written from it
(:func:`optimizer.reports.run_report.write_run`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from optimizer.foundation.atomic_files import atomic_write_csv
from optimizer.foundation.config import OptimizerConfig, SLAConfig
from optimizer.foundation.job import Preference
from optimizer.foundation.result import Recommendation, RunResult
from optimizer.trials.cost import ResourceCostCalculator, cost_time_flags, trial_figures
from optimizer.trials.records import TrialSummary, job_cost, job_time
from optimizer.trials.sla import calculate_sla_violations


def trial_row(role: str, t: TrialSummary) -> dict[str, Any]:
    """One trial's row: its setting, status, the job's time and cost and where they come from."""
    a = t.allocation
    return {"run": role, "trial": t.trial_id, "status": t.status, "gpus": a.gpus, "cpus": a.cpus,
            "memory_gb": a.memory_gb, "batch_size": a.batch_size,
            "measured_wall_s": t.wall_time_s, "throughput": t.throughput,
            "throughput_source": t.throughput_source, "job_time_s": job_time(t),
            "job_cost": job_cost(t), "hourly_cost": t.hourly_cost,
            "figures": "measured" if t.status == "completed" else "throughput measured, "
            "job time/cost predicted", "cpu_util_pct": t.cpu_util_mean,
            "mem_gb_peak": t.mem_gb_peak,
            "ran_beside": ", ".join(t.concurrent_with) or "nothing (alone)"}


def sla_met(t: TrialSummary, sla: SLAConfig) -> dict[str, bool]:
    """Whether trial ``t``'s job met each limit of ``sla``."""
    frame = pd.DataFrame([{"predicted_total_time_s": job_time(t),
                           "predicted_total_cost": job_cost(t), "throughput": t.throughput,
                           "mem_gb_peak": t.mem_gb_peak, "gpus": t.allocation.gpus,
                           "gpu_util_mean": t.gpu_util_mean, "cpu_util_mean": t.cpu_util_mean}])
    return {k: bool(v) for k, v in calculate_sla_violations(frame, sla).items()}


def run_figures(reference: TrialSummary, optimized: TrialSummary | None,
                sla: SLAConfig) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The reference trial's row and the recommended run's, each with its SLA (``sla``; None
    for a recommended run that failed)."""
    base = {**trial_row("baseline", reference), "sla": sla_met(reference, sla)}
    if optimized is None:
        return base, None
    return base, {**trial_row("optimized", optimized),
                  "sla": sla_met(optimized, sla) if optimized.ok else None}


def run_result(config: OptimizerConfig, preference: Preference, rec: Recommendation,
               reference: TrialSummary, optimized: TrialSummary) -> RunResult:
    """``rec`` beside the runs it is measured against: their rows (:func:`run_figures`) and
    the cost comparison under ``preference`` (none for a failed run), with the monitor's flags
    of a cost or time increase or an efficiency drop."""
    calc = ResourceCostCalculator.from_config(config.resources)
    comparison = calc.compare_configurations(
        reference, optimized, baseline_time_s=job_time(reference),
        optimized_time_s=job_time(optimized), preference=preference,
        preferences=config.multi_objective) if optimized.ok else {}
    comparison["monitor"] = cost_time_flags(*map(trial_figures, (reference, optimized)))
    return RunResult(preference, rec, *run_figures(reference, optimized, config.sla),
                     comparison)


@dataclass
class OptimizationResult:
    """One optimization: its run folder, its typed result (``recommendation.json``), the
    baseline trials and the recommended run, and the paths of what was written."""

    run_dir: Path
    result: RunResult
    baseline: list[TrialSummary]
    optimized: TrialSummary | None
    report_paths: dict[str, Path] = field(default_factory=dict)

    @property
    def preference(self) -> Preference:
        return self.result.preference

    @property
    def recommendation(self) -> Recommendation:
        return self.result.recommendation

    @property
    def comparison(self) -> dict[str, Any]:
        return self.result.comparison

    @property
    def sla_status(self) -> dict[str, dict[str, bool]]:
        """Per run (``baseline``, ``optimized``): whether each SLA was met."""
        return self.result.sla_status


def write_optimization_metrics(run_dir: Path, preference: Preference,
                               runs: dict[str, TrialSummary | None]) -> Path:
    """``optimization_metrics.csv``: one row per run (``baseline`` reference, ``optimized``)
    for plotting across runs."""
    rows = [{"role": role, "preference": str(preference), **trial_figures(t),
             "gpus": t.allocation.gpus, "cpus": t.allocation.cpus,
             "memory_gb": t.allocation.memory_gb, "batch_size": t.allocation.batch_size,
             "status": t.status} for role, t in runs.items() if t is not None]
    path = run_dir / "optimization_metrics.csv"
    atomic_write_csv(path, pd.DataFrame(rows))
    return path


def save_optimization_metrics(result: OptimizationResult) -> Path:
    """``optimization_metrics.csv`` of ``result``: the first baseline trial and the
    recommended run (:func:`write_optimization_metrics`)."""
    return write_optimization_metrics(result.run_dir, result.preference, {
        "baseline": result.baseline[0], "optimized": result.optimized})


__all__ = ["OptimizationResult", "run_figures", "run_result", "save_optimization_metrics",
           "sla_met", "trial_row", "write_optimization_metrics"]
