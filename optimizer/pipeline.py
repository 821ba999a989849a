"""``CloudResourceOptimizer``: the main job, from a training script to a measured recommendation.

:meth:`CloudResourceOptimizer.optimize_training` runs six stages, each recorded in the run
folder so that ``--resume`` continues where an interrupted run stopped:

1. load and scan the script (its batch size: settable or not, its default read from the
   source); check that CUDA, ``CUDA_VISIBLE_DEVICES`` and NVML agree;
2. baseline trials: real, monitored, time-boxed runs under a few allocations (``trials/NN-*``,
   never rerun once recorded), each labelled with the batch size it ran with;
3. phases of the baseline trace (shipped default phase model or ``--phase-model``);
4. the search (:func:`optimizer.search.stages.refine`, its stages in order): the closed loop,
   within the budget of real runs (the model fitted, agents trained on it in ``rl/``, their plan
   or the largest expected improvement measured, refit, re-plan), the workers sweeps, the run-off;
5. its recommendation: the best *measured* trial by goodput, memory right-sized; the learning
   rate; for a job with stages, the per-stage live plan (``live-plan.json``), measured beside it;
6. metric CSVs, ``recommendation.json``, ``k8s-resources.yaml`` and the report.

Without an identifiable model, more probes; the best measured trial is recommended anyway.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import OptimizerConfig, load_config, validate_preference
from optimizer.foundation.errors import CloudoptError
from optimizer.foundation.gpu import gpu_consistency
from optimizer.foundation.job import Job, Preference
from optimizer.foundation.result import Recommendation
from optimizer.history.sources import read_history
from optimizer.reports.figures import OptimizationResult, run_result, save_optimization_metrics
from optimizer.search import baseline as probes
from optimizer.search.after_loop.scaling import backend_fallback
from optimizer.search.baseline import plan_baseline, run_baseline
from optimizer.search.budget import auto_budget, make_budget, within_budget
from optimizer.search.choice import same_setting
from optimizer.search.core.state import SearchJob
from optimizer.search.goodput.job_length import job_length
from optimizer.search.job_setup import history_seed, prepare
from optimizer.search.prior.seed import HistorySeed
from optimizer.search.trial_port import TrialPort
from optimizer.trials import oom_retry
from optimizer.trials.cost import cost_time_flags
from optimizer.trials.failures import cause_of, no_usable_baseline
from optimizer.trials.guard import clean_stale_work
from optimizer.trials.records import TrialSummary, job_cost, job_size, job_time, with_job_size
from optimizer.trials.training import TrainingModuleManager

if TYPE_CHECKING:  # types only: the tracker and the phases load torch
    from agents.metrics import RLMetricsTracker
    from optimizer.trials.phase_profile import PhaseProfile


class CloudResourceOptimizer:
    """Optimizes the resources of training scripts (see the module docstring for the stages).

    It runs the stages; every trial, its own and the search's, is measured through its
    :attr:`port` (:class:`optimizer.search.trial_port.TrialPort`), which the search reaches as
    :class:`optimizer.search.core.port.SearchPort` and which holds the run's settings as the
    pipeline learns them (budget, job length, ``main.log``). What the search works out comes
    back from :func:`optimizer.search.stages.refine`; the outputs are written from the typed
    result (:func:`optimizer.reports.run_report.write_run`), not from this object.

    Parameters
    ----------
    config : OptimizerConfig, optional
        Resolved configuration (default: ``configs/default.toml``).
    quiet : bool
        No progress bars or stage messages.
    """

    def __init__(self, config: OptimizerConfig | None = None, *, quiet: bool = False) -> None:
        self.port = TrialPort(config or load_config(), quiet=quiet)
        self.metrics_tracker: RLMetricsTracker | None = None

    @property
    def config(self) -> OptimizerConfig:
        """The resolved configuration, the one the search reads through the port."""
        return self.port.config

    @property
    def quiet(self) -> bool:
        """No progress bars or stage messages."""
        return self.port.quiet

    @property
    def user_preference(self) -> Preference:
        """What the recommendation is judged by (:meth:`set_user_preference`)."""
        return self.port.user_preference

    def close(self) -> None:
        """Stop what the trials' executor started (a local Ray)."""
        self.port.close()

    # ------------------------------------------------------------------ settings and checks
    def set_user_preference(self, preference: str | Sequence[float]) -> None:
        """``cost``, ``time``, ``balanced``, ``resource`` or three weights summing to 1."""
        if isinstance(preference, str) and "," in preference:
            preference = preference.split(",")
        if isinstance(preference, str):
            self.config.multi_objective.vector(preference)
            self.port.user_preference = preference
        else:
            self.port.user_preference = validate_preference(preference, "preference")

    def validate_gpu_configuration(self) -> dict[str, Any]:
        """Whether CUDA, ``CUDA_VISIBLE_DEVICES`` and NVML agree on the GPUs this job can use
        (:func:`optimizer.foundation.gpu.gpu_consistency`)."""
        return gpu_consistency()

    @staticmethod
    def monitor_cost_time_efficiency(baseline: dict[str, Any], current: dict[str, Any],
                                     tolerance: float = 0.05) -> dict[str, Any]:
        """Flag a cost or time increase (beyond ``tolerance``) or an efficiency drop
        (:func:`optimizer.trials.cost.cost_time_flags`)."""
        return cost_time_flags(baseline, current, tolerance)

    # ------------------------------------------------------------------ the pipeline
    def optimize_training(self, train_file: str | os.PathLike, run_dir: str | os.PathLike,
                          options: Job | None = None) -> OptimizationResult:
        """Run the six stages for one script into ``run_dir`` (resuming what is recorded);
        ``options``: the job (default: the configuration's settings and
        :attr:`user_preference`)."""
        job = options or Job(Path(train_file), preference=self.user_preference)
        job = dataclasses.replace(job, train_file=Path(train_file))
        try:
            prepared, manager = prepare(job, self.config)
            return self._optimize(prepared, manager, Path(run_dir))
        finally:
            self.close()

    def run_job(self, job: Job, manager: TrainingModuleManager,
                run_dir: str | os.PathLike) -> OptimizationResult:
        """The six stages for a prepared ``job`` (:func:`optimizer.search.job_setup.prepare`,
        whose ``manager`` runs its trials) into ``run_dir``."""
        try:
            return self._optimize(job, manager, Path(run_dir))
        finally:
            self.close()

    def _optimize(self, job: Job, manager: TrainingModuleManager,
                  run_dir: Path) -> OptimizationResult:
        port = self.port
        run_dir.mkdir(parents=True, exist_ok=True)
        port.log_path = run_dir / "main.log"
        for line in clean_stale_work(run_dir / "trials") + clean_stale_work(run_dir / "live"):
            port.say(line)
        recorded = {d.name for d in (run_dir / "trials").glob("*") if (d / "summary.json").exists()}
        self.set_user_preference(job.preference)
        manager.in_process_probe = self.config.run.in_process_probe
        manager.config_copies = run_dir / "configs"  # a cfg.yaml:key form's per-value copies
        if job.launch.note:
            port.say(job.launch.note)
        port.budget = make_budget(self.config.run.budget, run_dir / "trials",
                                  manager.script_digest())
        port.job = job
        history = history_seed(job, manager, self.config, run_dir,  # --history (search/prior/)
                               [(spec, read_history(spec)) for spec in job.history])
        if history.on:
            port.say("\n".join(history.notes()))
        script = manager.load_module()
        port.job_length = job_length(script.tree, manager.train_args, job.epochs_arg,
                                     steps_flag=job.steps_arg, batch_flag=job.batch_size_arg,
                                     script=script)
        analysis = manager.analyze_module()
        gpu_check = self.validate_gpu_configuration()
        self.config.save(run_dir / "config.json")
        baseline = self._baseline(manager, analysis, run_dir, job, history)
        usable = [t for t in baseline if t.ok and t.throughput]
        if not usable:
            raise no_usable_baseline(str(job.train_file), baseline,
                                     job.probe_box(self.config.run.probe_seconds),
                                     self.config.run.trial_timeout_s,
                                     self.config.resources.memory_max, run_dir, manager.launcher)
        reference = usable[0]
        total = job.total_samples or job_size(usable)

        if not total:  # learned from one whole run, never assumed
            whole = port.measure(manager, reference.allocation, "whole", run_dir,
                                 dataclasses.replace(job, probe_seconds=0), None)
            whole = port.label_batch(whole, run_dir / "trials" / whole.trial_id,
                                     job.batch_settable)
            if port.oom_chain:
                raise oom_retry.OutgrewMemory(oom_retry.outgrew_message(
                    str(job.train_file), port.oom_chain, self.config.resources.memory_max,
                    run_dir))
            if not whole.ok:  # no job size: the trials cannot be compared as whole jobs
                cause = cause_of(whole, None, self.config.run.trial_timeout_s)
                raise CloudoptError(f"{job.train_file}: the job's size is unknown (no trial "
                                    "reported it), and the whole run meant to measure it "
                                    f"{cause}; or give --total-samples N"
                                    f"\n  (trial records: {run_dir / 'trials'})")
            total = job_size([whole])
            if whole.throughput:
                usable.append(whole)
        baseline, usable = with_job_size(baseline, total, usable), with_job_size(usable, total)
        reference = usable[0]
        if self.config.run.budget == "auto":
            whole_cost = (total / reference.throughput * reference.hourly_cost / 3600
                          if total and reference.throughput else None)
            auto_budget(port.budget, usable, whole_cost, self.config.run.budget_share,
                        floor=sum(not t.history for t in baseline) + 1)
            port.say(port.budget.note, always=True)
        sla_source = self._set_sla(usable, job)
        self.config.save(run_dir / "config.json")  # as applied: the SLA the run was held to
        earlier = self._earlier_trials(manager, run_dir, usable, job.batch_settable)
        profile, phase_note = self._phases(reference, run_dir, job)
        from optimizer.search.stages import refine

        more = [a for a in history.fallback(self._planned_probes(analysis, job, extra=8))
                if not any(same_setting(t.allocation, a) for t in baseline)]
        search = SearchJob(manager, run_dir, job, total, reference, profile, more, earlier)
        outcome = refine(port, search, usable)
        rec, optimized = outcome.recommendation, outcome.final
        rec.sla_source = sla_source
        history.annotate(rec, optimized)  # --history: what was used (search/prior/seed)
        if recorded:
            names = sorted(d.name for d in (run_dir / "trials").glob("*")
                           if (d / "summary.json").exists())
            new = [n for n in names if n not in recorded]
            port.say(f"trials reused from the run folder: {', '.join(sorted(recorded))}; "
                     f"measured now: {', '.join(new) or 'none'}", always=True)
        rec.notes += [note for note in (job.launch.note, backend_fallback(outcome.trials),
                                        phase_note) if note]
        return self._finish(job, manager, run_dir, baseline, reference, optimized, rec,
                            profile, analysis, gpu_check)

    def _baseline(self, manager: TrainingModuleManager, analysis: dict[str, Any],
                  run_dir: Path, job: Job, history: HistorySeed) -> list[TrialSummary]:
        cfg, port = self.config, self.port
        allocations = history.uncovered(self._planned_probes(analysis, job))
        done = [(probes.probe_folder(run_dir, i, a) / "summary.json").exists()
                for i, a in enumerate(allocations)]
        allocations = within_budget(port.budget, allocations, done)
        if not job.batch_settable:
            hint = manager.batch_knob_hint()
            port.say("batch size: the script neither takes --batch-size-arg nor reads "
                     "OPTIMIZER_BATCH_SIZE, so it is not varied and the model keeps it fixed"
                     + (f"; its source names a batch size: {hint} would let cloudopt vary it"
                        if hint else ""), always=hint is not None)
        elif job.default_batch is None:
            port.say("batch size: the script's default is not known from its source; trials at "
                     "the default take the batch_size=N it prints, if any")
        else:
            found = manager.default_batch_setting()
            port.say(f"batch size: the script's default is {job.default_batch} (from "
                     f"{found.source if found is not None else 'its source'})")
        probe = job.probe_box(cfg.run.probe_seconds)
        port.say(f"{manager.module_path}: {len(allocations)} baseline trial(s), "
                 f"{'probes of ' + format(probe, 'g') + ' s' if probe else 'full runs'}")
        trials = run_baseline(manager, allocations, run_dir, cfg, probe_seconds=probe,
                              total_samples=job.total_samples, quiet=self.quiet,
                              executor=port.trial_executor(), ref_batch=job.default_batch)
        port.say_replaced(manager)
        return history.with_baseline([port.label_batch(  # --history: priors join (prior/)
            t, run_dir / "trials" / probes.trial_folder(run_dir, t), job.batch_settable)
            for t in trials])

    def _earlier_trials(self, manager: TrainingModuleManager, run_dir: Path,
                        have: list[TrialSummary], settable: bool) -> list[TrialSummary]:
        """Usable trials an earlier run of this folder measured beyond the baseline (its
        closed loop's, say, under another preference). A measurement does not depend on the
        preference, so they compete for the final choice of a resumed run; the rounds plan as
        before (their recorded plans stay reusable). Stale ones are set aside."""
        port = self.port
        known = {t.trial_id for t in have}
        out = []
        for d in sorted((run_dir / "trials").glob("*")):
            if d.name[:2].isdigit() or d.name in known or not (d / "summary.json").exists():
                continue
            t = manager.recorded_trial(d)
            if t is not None and t.ok and t.throughput:
                out.append(port.label_batch(t, d, settable))
        port.say_replaced(manager)
        if out:
            port.say("measured earlier in this run folder, in the running for the final "
                     "choice: " + ", ".join(t.trial_id for t in out), always=True)
        return out

    def _planned_probes(self, analysis: dict[str, Any], job: Job,
                        extra: int = 0) -> list[Allocation]:
        """Baseline allocations (``extra`` more for when the model cannot be fitted), batch
        variations around the script's own batch size, and none it cannot be told."""
        return self.plan_trials(analysis, job.offline_logs, extra=extra,
                                reference_batch=job.default_batch, vary_batch=job.batch_settable)

    def plan_trials(self, analysis: dict[str, Any], offline_logs: str | None = None, *,
                    extra: int = 0, reference_batch: int | None = None,
                    vary_batch: bool = True) -> list[Allocation]:
        """Baseline allocations; with offline logs, the one they predict comes first."""
        cfg = self.config
        allocations = plan_baseline(cfg.resources, cfg.run.baseline_samples + extra,
                                    uses_gpu=bool(analysis.get("uses_gpu")),
                                    reference_batch=reference_batch, vary_batch=vary_batch,
                                    favour_time=probes.favours_time(
                                        cfg, self.user_preference, self.port.budget.total))
        if offline_logs:
            from optimizer.offline.analyzer import predict_start_allocation

            start = predict_start_allocation(offline_logs, analysis, self.user_preference,
                                             resources=cfg.resources)
            allocations = [start, *[a for a in allocations if a != start]]
            allocations = allocations[: cfg.run.baseline_samples + extra]
            self.port.say(f"offline logs suggest starting from {start.key()}")
        return allocations

    def _set_sla(self, trials: list[TrialSummary], job: Job) -> str:
        """Limits not given explicitly come from the baseline (forecast + 25%) when enabled."""
        sla = self.config.sla
        if not self.config.run.sla_from_baseline:
            return "configuration"
        saved = {k: getattr(sla, k) for k in job.sla_given}
        history = [{"time": job_time(t), "cost": job_cost(t), "throughput": t.throughput}
                   for t in trials]
        sla.update_from_baseline_history(history, margin=0.25)
        sla.throughput_min = saved.get("throughput_min", 0.0)
        for k, v in saved.items():
            setattr(sla, k, v)
        given = ", ".join(sorted(job.sla_given)) or "none"
        return f"baseline forecast + 25% (explicit: {given})"

    def _phases(self, reference: TrialSummary, run_dir: Path,
                job: Job) -> tuple[PhaseProfile | None, str | None]:
        from optimizer.trials.phase_profile import detector_for, profile_trace, stage_agreement

        port = self.port
        trace_path = probes.trial_path(run_dir, reference) / "trace.csv"
        try:
            trace = pd.read_csv(trace_path)
            profile = profile_trace(trace, detector_for(trace, job.phase_model))
        except (CloudoptError, ValueError, OSError, KeyError) as exc:
            if job.phase_model:  # a model the user named must work
                raise
            return None, f"phases not used: {exc}"
        port.say("phases of the baseline trace: " + ", ".join(
            f"{p} ({f:.0%})" for p, f in profile.sequence))
        agreement = stage_agreement(pd.read_csv(trace_path), profile.labels,
                                    trace_path.with_name("stages.csv"))
        if agreement is not None:  # the probe's stage marks are this trace's ground truth
            profile.stage_agreement = agreement
            port.say(f"phases against the stages the probe marked ({', '.join(agreement['stages'])}):"
                     f" adjusted Rand index {agreement['adjusted_rand']:.2f} over "
                     f"{agreement['samples']} samples")
        return profile, None

    # ------------------------------------------------------------------ outputs
    def _finish(self, job: Job, manager: TrainingModuleManager, run_dir: Path,
                baseline: list[TrialSummary], reference: TrialSummary, optimized: TrialSummary,
                rec: Recommendation, profile: PhaseProfile | None, analysis: dict[str, Any],
                gpu_check: dict[str, Any]) -> OptimizationResult:
        """The typed result (the recommendation beside the runs it is measured against), then
        every output rendered from it (:func:`optimizer.reports.run_report.write_run`)."""
        from agents.metrics import RLMetricsTracker
        from optimizer.reports.run_report import ReportInputs, write_run

        result = run_result(self.config, self.user_preference, rec, reference, optimized)
        self.metrics_tracker = RLMetricsTracker(run_dir / "metrics")
        return write_run(ReportInputs(run_dir, result, baseline, reference, optimized,
                                      self.config, self.metrics_tracker, job, manager, profile,
                                      analysis, gpu_check))

    def save_all_metrics(self) -> dict[str, Path]:
        """Write the tracker's CSVs (allocation history, rewards, SLA, Pareto, performance)."""
        if self.metrics_tracker is None:
            raise CloudoptError("no optimization has run yet: nothing to save")
        return self.metrics_tracker.save_all_metrics()

    def save_optimization_metrics(self, result: OptimizationResult) -> Path:
        """One CSV row per run (baseline reference, optimized) for plotting across runs
        (:func:`optimizer.reports.figures.save_optimization_metrics`)."""
        return save_optimization_metrics(result)

    def generate_report(self, result: OptimizationResult) -> dict[str, Path]:
        """The report paths written by :meth:`optimize_training` (it writes them itself)."""
        return result.report_paths


__all__ = ["CloudResourceOptimizer", "Job", "OptimizationResult"]
