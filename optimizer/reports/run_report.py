"""Outputs of the main job: metric CSVs, ``recommendation.json``, ``k8s-resources.yaml``, plots
and ``report.md``/``report.html``.

Every figure in the report says whether it was measured or predicted: completed trials are
measured whole; probes measure throughput and predict the job's time and cost from it; the
plan's totals are the workload model's predictions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from optimizer.foundation.allocation import Allocation, describe_allocation
from optimizer.foundation.atomic_files import atomic_write_json, atomic_write_text
from optimizer.foundation.config import OptimizerConfig, ResourceConfig
from optimizer.foundation.errors import CloudoptError
from optimizer.foundation.job import Job
from optimizer.foundation.memory import right_size_memory
from optimizer.foundation.result import Recommendation, RunResult
from optimizer.reports.cluster import JobShape, write_cluster_outputs
from optimizer.reports.decision import answer as _answer
from optimizer.reports.decision import rounds_section
from optimizer.reports.figures import OptimizationResult, save_optimization_metrics, trial_row
from optimizer.reports.goodput import goodput_section, plot_efficiency
from optimizer.reports.k8s import k8s_resources_yaml
from optimizer.reports.live import live_section, plot_live, write_live_k8s
from optimizer.reports.plots import (
    plot_allocation,
    plot_comparison,
    plot_curves,
    plot_pareto,
    plot_phases,
)
from optimizer.reports.render import Report, dollars, fmt, format_value
from optimizer.reports.scaling import plot_scaling, scaling_section
from optimizer.reports.sources import sources_section
from optimizer.trials.launchers.torchrun import under_torchrun
from optimizer.trials.phase_profile import PhaseProfile, phase_needs
from optimizer.trials.records import TrialSummary, iter_trials
from optimizer.trials.resources import ResourceManager

if TYPE_CHECKING:  # types only: the tracker loads torch
    from agents.metrics import RLMetricsTracker
    from optimizer.trials.training import TrainingModuleManager


@dataclass(frozen=True)
class ReportInputs:
    """What every output is rendered from: the typed result, the runs it is measured against,
    the configuration, the tracker the metric CSVs come from, and the job with the manager
    that ran its trials (None, both: a result rendered without its script)."""

    run_dir: Path
    result: RunResult
    baseline: list[TrialSummary]
    reference: TrialSummary
    optimized: TrialSummary | None
    config: OptimizerConfig
    tracker: RLMetricsTracker
    job: Job | None = None
    manager: TrainingModuleManager | None = None
    profile: PhaseProfile | None = None
    analysis: dict[str, Any] = field(default_factory=dict)
    gpu_check: dict[str, Any] = field(default_factory=dict)


def _job_shape(out: ReportInputs, alloc: Allocation, env: dict[str, str],
               args: list[str] | None) -> JobShape:
    """The recommended job as the cluster outputs write it: its command as the trials ran it,
    the VPA's bounds from the measured peaks, and by the phases where they differ: a Job's
    pods keep their first request for the whole run, so the CPU floor is what the busiest
    phase uses, not the run's mean."""
    rec, job, profile = out.result.recommendation, out.job, out.profile
    trials = [t for t in iter_trials(out.run_dir) if t.ok and t.mem_gb_peak > 0]
    final = out.optimized
    peak = final.mem_gb_peak if final is not None and final.mem_gb_peak > 0 else alloc.memory_gb
    # the VPA's floor is what the whole job reaches (a probe's peak is a floor of that, never
    # the answer: a job that grows would be scaled down to it)
    peak = max(peak, float(rec.memory.get("peak_gb") or 0.0))
    top = max([right_size_memory(t.mem_gb_peak) for t in trials] + [alloc.memory_gb])
    used = final.cpu_cores_mean if final is not None and final.cpu_cores_mean > 0 else 0.1
    needs = phase_needs(profile, used, peak, alloc.cpus) if profile is not None else None
    comment = (f"cloudopt recommendation ({rec.agent}, preference {out.result.preference}); "
               "image: set --image (the default is a placeholder)")
    if needs is not None and not needs.empty:
        used = max(used, float(needs["cpu_cores"].max()))
        comment += "\nphases differ; what each needs (VPA CPU floor: the busiest):" + "".join(
            f"\n  phase {int(r.phase)} ({fmt(r.share, '.0%')} of the run): "
            f"{fmt(r.cpu_cores, '.2f')} cores, {fmt(r.mem_gb, '.2f')} GB"
            for r in needs.itertuples())
    script = str(job.train_file) if job is not None else "train.py"
    job_args = args if args is not None else (list(job.train_args) if job is not None else [])
    workers, mgr = alloc.workers, out.manager
    if workers is None and mgr is not None and job is not None and job.workers_arg:
        try:
            workers = mgr.default_workers()
        except CloudoptError:  # its config file went since the start: the flag alone decides
            workers = None
    ranks = (final.model_info or {}).get("rank_mem_gb_peak") if final is not None else None
    config = out.config
    return JobShape(
        alloc, env, name=out.run_dir.name, script=script, args=list(job_args),
        # as the trials ran it: torchrun for several workers, one only where it is required
        launcher="torchrun" if job is not None and under_torchrun(
            job.launch.launcher, alloc.replicas, job.launch.required) else "python",
        loader_workers=workers, workers_flag=(job.workers_arg or None) if job else None,
        rank_peaks_gb=list(ranks) if ranks else None, memory_bounds_gb=(peak, top),
        cpu_bounds=(round(used, 1), config.resources.cpu_count_max),
        image=job.image if job is not None else None, sla_time_s=config.sla.time_max,
        predicted_time_s=rec.job_time_s(), comment=comment)


# ---------------------------------------------------------------------------------- plots
def _read_rl(run_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, pd.DataFrame]]:
    rl = run_dir / "rl"

    def read(name: str) -> pd.DataFrame:
        p = rl / name
        return pd.read_csv(p) if p.exists() and p.stat().st_size > 1 else pd.DataFrame()

    curves = {p.stem.removeprefix("curve_"): read(p.name) for p in sorted(rl.glob("curve_*.csv"))}
    return read("decisions.csv"), read("pareto_sweep.csv"), curves


def write_outputs(out: ReportInputs) -> dict[str, Path]:
    """Write every output of one optimization into ``out.run_dir``; return their paths."""
    run_dir, result = out.run_dir, out.result
    plots = run_dir / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    rec, optimized, tracker = result.recommendation, out.optimized, out.tracker
    decisions, sweep, curves = _read_rl(run_dir)
    _track_decisions(tracker, decisions, rec)
    if not sweep.empty:
        _track_pareto(tracker, sweep, out.config.resources)
    for t in out.baseline:
        tracker.add_performance_metrics(**trial_row("baseline", t))
    if optimized is not None:
        tracker.add_performance_metrics(**trial_row("optimized", optimized))
    for source, status in result.sla_status.items():
        tracker.add_sla_status(source, status)
    csvs = tracker.save_all_metrics()
    paths: dict[str, Path] = {f"metrics/{k}": v for k, v in csvs.items()}

    alloc = rec.allocation
    env = ResourceManager.apply_configuration(alloc, env={},
                                              resource_config=out.config.resources)
    env = {k: v for k, v in env.items() if not k.startswith("COST_PER")}
    job, mgr, args = out.job, out.manager, None
    if mgr is not None and job is not None and (job.batch_control != "env"
                                                or job.batch_size_env):
        env.pop("OPTIMIZER_BATCH_SIZE", None)  # the script ignores it: no false promise
        env.update(mgr.batch_environment(alloc.batch_size))
    if mgr is not None and job is not None:
        flagged = (mgr.run_args(alloc) + list((rec.learning_rate or {}).get("args", []))
                   + list((rec.job_length or {}).get("args", [])))
        args = flagged if flagged != list(job.train_args) else None
    atomic_write_text(run_dir / "k8s-resources.yaml", k8s_resources_yaml(
        alloc, env, name=run_dir.name, args=args,
        comment=f"cloudopt recommendation ({rec.agent}, preference {result.preference})"))
    paths["k8s"] = run_dir / "k8s-resources.yaml"
    shape = _job_shape(out, alloc, env, args)
    # k8s-job.yaml; a data-parallel pick: trainjob.yaml and ray_train_job.py beside it
    paths.update(write_cluster_outputs(run_dir, shape))
    paths.update(write_live_k8s(run_dir, rec.live, env, name=shape.name,
                                command=["python", Path(shape.script).name, *shape.args],
                                image=shape.image, sla_time_s=shape.sla_time_s,
                                predicted_time_s=shape.predicted_time_s,
                                shm=shape.uses_loader_workers))
    paths["recommendation"] = run_dir / "recommendation.json"
    atomic_write_json(paths["recommendation"], result.to_json())

    figs = _figures(plots, out, decisions, sweep, curves)
    md, page = _build_report(out, decisions, figs).write(run_dir)
    paths["report_md"], paths["report_html"] = md, page
    return paths


def write_run(out: ReportInputs) -> OptimizationResult:
    """Every output of the main job written from ``out`` (:func:`write_outputs`, then
    ``optimization_metrics.csv``); the result it hands back, with their paths."""
    result = OptimizationResult(out.run_dir, out.result, out.baseline, out.optimized)
    result.report_paths = write_outputs(out)
    result.report_paths["optimization_metrics"] = save_optimization_metrics(result)
    return result


def _track_decisions(tracker: RLMetricsTracker, decisions: pd.DataFrame,
                     rec: Recommendation) -> None:
    """Every step of the recommended plan, as the design's adjustment records."""
    keys = ("gpus", "cpus", "memory_gb", "batch_size")
    init = rec.initial or rec.allocation
    old = tuple(getattr(init, k) for k in keys)
    for d in decisions.to_dict("records"):
        new = tuple(d[k] for k in keys)
        tracker.add_adjustment_metrics(
            d["step"], d["action"], old, new, d["reward"],
            reward_components={"cost": d["r_cost"], "time": d["r_time"],
                               "efficiency": d["r_efficiency"], "sla": d["r_sla"]},
            sla_status={"all_met": d["r_sla"] >= 0, "oom": bool(d["oom"])},
            description=d["description"], policy=rec.agent,
            uncertainty=None if pd.isna(d.get("uncertainty")) else d["uncertainty"],
            extra={"phase": d["phase"], "effect": d.get("effect"),
                   "confidence": d.get("confidence")})
        old = new


def _track_pareto(tracker: RLMetricsTracker, sweep: pd.DataFrame,
                  resources: ResourceConfig) -> None:
    """The DP optimum per cost/time weight as (cost, time, resource) outcomes, with their
    front and hypervolume against 10% beyond the worst cost and time and a full machine."""
    share = [sweep["cpus"] / max(resources.cpu_count_max, 1),
             sweep["memory_gb"] / max(resources.memory_max, 1e-9)]
    if resources.gpu_count_max:
        share.append(sweep["gpus"] / resources.gpu_count_max)
    outcomes = sweep.assign(time=sweep["time_s"], resource=sum(share) / len(share),
                            label=[f"w_cost={w:.1f}" for w in sweep["w_cost"]])
    reference = (1.1 * outcomes["cost"].max(), 1.1 * outcomes["time"].max(), 1.0)
    tracker.add_pareto_front(outcomes, reference, label="dp-sweep")


def _figures(plots: Path, out: ReportInputs, decisions: pd.DataFrame, sweep: pd.DataFrame,
             curves: dict[str, pd.DataFrame]) -> dict[str, Path]:
    rec, reference, optimized = out.result.recommendation, out.reference, out.optimized
    run_dir, profile = out.run_dir, out.profile
    figs: dict[str, Path] = {}
    if optimized is not None and optimized.ok:
        figs["comparison"] = plots / "baseline_vs_optimized.png"
        plot_comparison(figs["comparison"], reference, optimized, rec.predicted)
    for name, plot, data in (("efficiency", plot_efficiency, rec.goodput or {}),
                             ("live", plot_live, rec.live),
                             ("scaling", plot_scaling, rec.scaling)):
        if plot(plots / f"{name}.png", data):
            figs[name] = plots / f"{name}.png"
    figs["pareto"] = plots / "pareto.png"
    plot_pareto(figs["pareto"], sweep, out.baseline, rec.predicted, optimized)
    if not decisions.empty:
        figs["allocation"] = plots / "allocation.png"
        plot_allocation(figs["allocation"], decisions)
    if curves:
        optimum = rec.outcome("optimal")
        figs["curves"] = plots / "learning_curves.png"
        plot_curves(figs["curves"], curves, optimum["return"] if optimum else None)
    # The phases belong to the reference trial's trace; a reference that never started (an
    # allocation no Ray node could hold, say) has none, and the report goes on without them.
    reference_trace = next((d / "trace.csv" for d in sorted((run_dir / "trials").glob("*"))
                            if (d / "summary.json").is_file()
                            and TrialSummary.load(d).trial_id == reference.trial_id),
                           run_dir / "trials" / reference.trial_id / "trace.csv")
    if profile is not None and reference_trace.is_file():
        trace = pd.read_csv(reference_trace)
        if len(trace) == len(profile.labels):
            figs["phases"] = plots / "baseline_phases.png"
            plot_phases(figs["phases"], trace, profile.labels)
    return figs


def _build_report(out: ReportInputs, decisions: pd.DataFrame, figs: dict[str, Path]) -> Report:
    result, reference, profile = out.result, out.reference, out.profile
    rec = result.recommendation
    r = Report(f"cloudopt report: {out.job.train_file.name if out.job else 'run'}")
    alloc = rec.allocation
    gpus = bool(alloc.gpus or reference.allocation.gpus)
    r.answer(_answer(rec, result.preference, reference, alloc, gpus))
    r.paragraph(f"Preference: {result.preference}. Recommended allocation: "
                f"{describe_allocation(alloc, gpus=gpus)} (policy: {rec.agent}). "
                f"Run folder: {out.run_dir}.")
    for note in rec.notes:
        r.note(note)
    for w in result.comparison.get("monitor", {}).get("warnings", []):
        r.note(f"cost/time monitor: {w}")
    r.heading("Baseline vs optimized")
    r.paragraph("Completed runs are measured whole; a probe measures throughput for the time "
                "box and predicts the whole job's time and cost from it (column 'figures').")
    rows = [trial_row("baseline (reference)", reference)]
    if out.optimized is not None:
        rows.append(trial_row("optimized", out.optimized))
    r.table(rows)
    comp = {k: v for k, v in result.comparison.items() if not isinstance(v, dict)}
    if comp:
        r.table([{"quantity": k, "value": v} for k, v in comp.items()])
    if "comparison" in figs:
        r.figure(figs["comparison"], "Baseline vs optimized: real runs; red mark: plan")
    sources_section(r, reference)
    rounds_section(r, rec)
    goodput_section(r, rec.goodput, figs.get("efficiency"))
    scaling_section(r, rec.scaling, figs.get("scaling"))
    live_section(r, rec.live, figs.get("live"))
    r.heading("SLA")
    sla = out.config.sla
    r.paragraph(f"Limits: time ≤ {fmt(sla.time_max)} s, cost ≤ {dollars(sla.cost_max)}, "
                f"throughput ≥ {fmt(sla.throughput_min)} samples/s, memory ≤ "
                f"{fmt(sla.memory_max)} GB "
                f"(source: {rec.sla_source or 'configuration'}).")
    r.table([{"run": k, **{m: ("met" if ok else "VIOLATED") for m, ok in v.items()}}
             for k, v in result.sla_status.items()])
    r.heading("Policies against the exact optimum")
    if rec.outcomes:
        r.paragraph("The plan starts from the fitted model's best static allocation (exact "
                    "enumeration, no restart cost since nothing has run yet); the agents, trained "
                    "on the model with throughput noise, plan the adjustments from there, where "
                    "each change costs a restart as long as the measured start-up. Each policy "
                    "is replayed on the noise-free model; share of optimum = return / "
                    "DP-optimal return.")
        r.table(rec.outcomes)
    fit = rec.fit
    if fit:
        r.table([{"workload fit": k, "value": v} for k, v in fit.items()
                 if not isinstance(v, (dict, list))])
    if "pareto" in figs:
        r.heading("Cost/time trade-off")
        r.figure(figs["pareto"], "Pareto front of the fitted model with the chosen point")
    if "allocation" in figs:
        r.heading("Allocation over time")
        r.figure(figs["allocation"], "The recommended plan, step by step")
    if "curves" in figs:
        r.heading("Learning curves")
        r.figure(figs["curves"], "Agents' training returns")
    r.heading("Phases")
    if profile is not None:
        r.table(profile.stats)
        agreement = profile.stage_agreement
        if agreement:
            r.paragraph(f"Against the stages the in-process probe marked on this trace "
                        f"({', '.join(agreement['stages'])}), the phases agree with an adjusted "
                        f"Rand index of {fmt(agreement.get('adjusted_rand'), '.2f')} over "
                        f"{agreement['samples']} samples (1: the same partition; 0: chance).")
        opt_trial = out.optimized
        needs = phase_needs(profile, opt_trial.cpu_cores_mean, opt_trial.mem_gb_peak,
                            opt_trial.allocation.cpus) \
            if opt_trial is not None and opt_trial.cpu_cores_mean > 0 else None
        if needs is not None and not needs.empty:
            r.paragraph("The phases differ in what they use. At the recommended allocation "
                        "each needs about this (the phases' shares of CPU and memory, measured "
                        "on the baseline trace, applied to the recommended run); the "
                        "Kubernetes VPA's CPU floor is the busiest phase's:")
            r.table(needs)
        if "phases" in figs:
            r.figure(figs["phases"], "Baseline trace coloured by detected phase")
    else:
        r.paragraph("No phases were detected (see notes).")
    r.heading("Every decision")
    if not decisions.empty:
        r.paragraph("Each step of the recommended plan on the noise-free model: the action the "
                    "policy chose, what it changed (bounds applied), the reward and its "
                    "components, the probability the policy gave the action (confidence) and "
                    "its Monte Carlo dropout spread (uncertainty, multi-objective agent).")
        cols = ["step", "phase", "description", "effect", "cpus", "memory_gb", "batch_size",
                "reward", "r_cost", "r_time", "r_efficiency", "r_sla", "confidence",
                "uncertainty"]
        r.table(_collapse_repeats(decisions[[c for c in cols if c in decisions]]))
    else:
        r.paragraph("No RL decisions (see notes).")
    r.heading("Baseline trials")
    r.table([trial_row("baseline", t) for t in out.baseline])
    r.heading("Environment")
    r.table([{"check": k, "value": format_value(v)} for k, v in {**out.gpu_check, **{
        f"script: {k}": v for k, v in out.analysis.items() if not isinstance(v, (dict, list))}}.items()])
    return r


def _collapse_repeats(frame: pd.DataFrame) -> pd.DataFrame:
    """Consecutive steps that repeat the same action with the same effect become one row whose
    ``step`` reads ``first–last``: ten identical blocked actions say nothing ten times."""
    keys = [c for c in ("phase", "description", "effect", "cpus", "memory_gb", "batch_size")
            if c in frame]
    if frame.empty or not keys or "step" not in frame:
        return frame
    same = frame[keys].astype(str).eq(frame[keys].astype(str).shift()).all(axis=1)
    group = (~same).cumsum()
    rows = []
    for _, g in frame.groupby(group, sort=False):
        row = g.iloc[0].to_dict()
        if len(g) > 1:
            row["step"] = f"{g['step'].iloc[0]}–{g['step'].iloc[-1]}"
        rows.append(row)
    return pd.DataFrame(rows, columns=frame.columns)
