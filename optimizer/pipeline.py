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
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import OptimizerConfig, load_config, validate_preference
from optimizer.foundation.errors import CloudoptError
from optimizer.foundation.gpu import nvml_device_count, visible_device_indices
from optimizer.search import baseline as probes
from optimizer.search.after_loop.runoff import PREFIX as RUNOFF_PREFIX
from optimizer.search.after_loop.scaling import backend_fallback
from optimizer.search.baseline import memory_for, plan_baseline, run_baseline
from optimizer.search.budget import RunBudget, auto_budget, make_budget, within_budget
from optimizer.search.choice import same_setting
from optimizer.search.core.state import SearchJob
from optimizer.search.goodput.job_length import JobLength, job_length
from optimizer.search.goodput.probe_target import target_for_batch
from optimizer.search.job_options import JobOptions, JobSpec
from optimizer.trials import oom_retry
from optimizer.trials.batch import label_batch
from optimizer.trials.cost import ResourceCostCalculator, cost_time_flags, trial_figures
from optimizer.trials.executors import TrialExecutor, TrialRequest, make_executor
from optimizer.trials.failures import cause_of, no_usable_baseline
from optimizer.trials.guard import clean_stale_work
from optimizer.trials.launchers.launch_rule import decide_launch
from optimizer.trials.records import TrialSummary, job_cost, job_size, job_time, with_job_size
from optimizer.trials.training import TrainingModuleManager


@dataclass
class OptimizationResult:
    run_dir: Path
    preference: Any
    baseline: list[TrialSummary]
    optimized: TrialSummary | None
    recommendation: dict[str, Any]
    comparison: dict[str, Any] = field(default_factory=dict)
    report_paths: dict[str, Path] = field(default_factory=dict)
    sla_status: dict[str, dict[str, bool]] = field(default_factory=dict)
    """Per run (``baseline``, ``optimized``): whether each SLA was met."""


class CloudResourceOptimizer:
    """Optimizes the resources of training scripts (see the module docstring for the stages).

    The search reaches it through :class:`optimizer.search.core.port.SearchPort` only: the
    settings (``config``, ``user_preference``, ``budget``, ``quiet``, ``job_length``,
    ``log_path``) and :meth:`say`, :meth:`measure`, :meth:`label_batch`,
    :meth:`trial_executor`; what the search works out comes back from
    :func:`optimizer.search.stages.refine`.

    Parameters
    ----------
    config : OptimizerConfig, optional
        Resolved configuration (default: ``configs/default.toml``).
    quiet : bool
        No progress bars or stage messages.
    """

    _default_batch: int | None = None  # the script's own batch size, read from its source

    def __init__(self, config: OptimizerConfig | None = None, *, quiet: bool = False) -> None:
        self.config, self.quiet = config or load_config(), quiet
        self.offline_analyzer: Any = None
        self.training_manager: TrainingModuleManager | None = None
        self.job_spec: JobSpec | None = None
        """The job, described once (:class:`~optimizer.search.job_options.JobSpec`)."""
        self.oom_chain: list[TrialSummary] = []
        self.budget, self.efficiency = RunBudget(None, Path(".")), None  # set per run
        self.job_length: JobLength | None = None  # the script's length knob, read per run
        self.log_path: Path | None = None  # the run's main.log
        self.cloud_env: Any = None
        self.agent: Any = None
        self.user_preference: str | tuple[float, float, float] = "balanced"
        self.rl_metrics = pd.DataFrame()
        self.metrics_tracker: Any = None
        self.executor: TrialExecutor | None = None

    def trial_executor(self) -> TrialExecutor:
        """Where this optimizer's trials run (``[run].executor``), started on first use."""
        if self.executor is None:
            run = self.config.run
            self.executor = make_executor(run.executor, run.ray_address or None, seed=run.seed)
        return self.executor

    def close(self) -> None:
        """Stop what the executor started (a local Ray)."""
        if self.executor is not None:
            self.executor.close()
            self.executor = None

    # ------------------------------------------------------------------ settings and checks
    def set_user_preference(self, preference: str | Sequence[float]) -> None:
        """``cost``, ``time``, ``balanced``, ``resource`` or three weights summing to 1."""
        if isinstance(preference, str) and "," in preference:
            preference = preference.split(",")
        if isinstance(preference, str):
            self.config.multi_objective.vector(preference)
            self.user_preference = preference
        else:
            self.user_preference = validate_preference(preference, "preference")

    def validate_gpu_configuration(self) -> dict[str, Any]:
        """Whether CUDA, ``CUDA_VISIBLE_DEVICES`` and NVML agree on the GPUs this job can use."""
        try:
            import torch

            cuda = bool(torch.cuda.is_available())
            torch_count = torch.cuda.device_count() if cuda else 0
        except Exception:  # a broken CUDA install must not stop a CPU-only optimization
            cuda, torch_count = False, 0
        nvml = nvml_device_count()
        visible = visible_device_indices()
        issues = []
        if nvml and not cuda:
            issues.append(f"NVML sees {nvml} GPU(s) but torch.cuda is not available "
                          "(CPU-only torch build or driver mismatch)")
        if cuda and torch_count != len(visible):
            issues.append(f"torch sees {torch_count} GPU(s) but CUDA_VISIBLE_DEVICES/NVML give "
                          f"{len(visible)}")
        return {"cuda_available": cuda, "torch_device_count": torch_count,
                "nvml_device_count": nvml, "visible_devices": visible,
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                "consistent": not issues, "issues": issues}

    @staticmethod
    def monitor_cost_time_efficiency(baseline: dict[str, Any], current: dict[str, Any],
                                     tolerance: float = 0.05) -> dict[str, Any]:
        """Flag a cost or time increase (beyond ``tolerance``) or an efficiency drop
        (:func:`optimizer.trials.cost.cost_time_flags`)."""
        return cost_time_flags(baseline, current, tolerance)

    # ------------------------------------------------------------------ the pipeline
    def _say_replaced(self, manager: TrainingModuleManager) -> None:
        """Recorded trials found stale (another script version or command line), once each."""
        for line in manager.replaced:
            self.say(line, always=True)
        manager.replaced.clear()

    def say(self, text: str, always: bool = False) -> None:
        """A stage message: printed unless quiet (or ``always``), and appended to ``main.log``."""
        if always or not self.quiet:
            print(text, flush=True)
        log = self.log_path
        if log is not None:
            with open(log, "a", encoding="utf-8") as fh:
                fh.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text}\n")

    def optimize_training(self, train_file: str | os.PathLike, run_dir: str | os.PathLike,
                          options: JobOptions | None = None) -> OptimizationResult:
        """Run the six stages for one script into ``run_dir`` (resuming what is recorded)."""
        try:
            return self._optimize(train_file, Path(run_dir), options or JobOptions())
        finally:
            self.close()

    def _optimize(self, train_file: str | os.PathLike, run_dir: Path,
                  opts: JobOptions) -> OptimizationResult:
        run_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = run_dir / "main.log"
        for line in clean_stale_work(run_dir / "trials") + clean_stale_work(run_dir / "live"):
            self.say(line)
        recorded = {d.name for d in (run_dir / "trials").glob("*") if (d / "summary.json").exists()}
        manager = TrainingModuleManager(train_file, opts.train_args, opts.batch_size_arg,
                                        opts.batch_size_env, opts.workers_arg)
        manager.in_process_probe = self.config.run.in_process_probe
        manager.config_copies = run_dir / "configs"  # a cfg.yaml:key form's per-value copies
        launch = decide_launch(opts.launcher, manager.load_module().source)
        manager.launcher, launch_note = launch.launcher, opts.launch_note or launch.note
        manager.launch_required = launch.required
        if not launch.workers:  # a 2-worker trial would not start here (launch_rule)
            opts = dataclasses.replace(opts, workers_max=1)
        if launch_note:
            self.say(launch_note)
        self.budget = make_budget(self.config.run.budget, run_dir / "trials",
                                  manager.script_digest())
        self.training_manager = manager
        manager.load_module()
        spec = self.job_spec = JobSpec.describe(manager, opts)
        self._default_batch = spec.default_batch
        self.job_length = job_length(manager.module.tree, manager.train_args, spec.epochs_arg,
                                     steps_flag=spec.steps_arg, batch_flag=spec.batch_size_arg,
                                     script=manager.module)
        analysis = manager.analyze_module()
        gpu_check = self.validate_gpu_configuration()
        self.config.save(run_dir / "config.json")
        baseline = self._baseline(manager, analysis, run_dir, opts)
        usable = [t for t in baseline if t.ok and t.throughput]
        if not usable:
            probe = None if opts.probe_seconds == 0 else (opts.probe_seconds
                                                          or self.config.run.probe_seconds)
            raise no_usable_baseline(str(train_file), baseline, probe,
                                     self.config.run.trial_timeout_s,
                                     self.config.resources.memory_max, run_dir, manager.launcher)
        reference = usable[0]
        total = spec.total_samples or job_size(usable)

        if not total:  # learned from one whole run, never assumed
            whole = self.measure(manager, reference.allocation, "whole", run_dir,
                                 dataclasses.replace(opts, probe_seconds=0), None)
            whole = self.label_batch(whole, run_dir / "trials" / whole.trial_id,
                                     spec.batch_settable)
            if self.oom_chain:
                raise oom_retry.OutgrewMemory(oom_retry.outgrew_message(
                    str(train_file), self.oom_chain, self.config.resources.memory_max, run_dir))
            if not whole.ok:  # no job size: the trials cannot be compared as whole jobs
                cause = cause_of(whole, None, self.config.run.trial_timeout_s)
                raise CloudoptError(f"{train_file}: the job's size is unknown (no trial "
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
            auto_budget(self.budget, usable, whole_cost, self.config.run.budget_share,
                        floor=sum(not t.history for t in baseline) + 1)
            self.say(self.budget.note, always=True)
        sla_source = self._set_sla(usable, opts)
        self.config.save(run_dir / "config.json")  # as applied: the SLA the run was held to
        earlier = self._earlier_trials(manager, run_dir, usable)
        profile, phase_note = self._phases(reference, run_dir, opts)
        from optimizer.search.stages import refine

        more = [a for a in opts.history.fallback(self._planned_probes(manager, analysis, opts, 8))
                if not any(same_setting(t.allocation, a) for t in baseline)]
        job = SearchJob(manager, run_dir, opts, total, reference, profile,
                        spec.batch_settable, more, earlier, spec)
        outcome = refine(self, job, usable)
        self.efficiency = outcome.efficiency  # what the search measured last, kept for callers
        rec, optimized = outcome.recommendation.to_dict(), outcome.final
        rec["sla_source"] = sla_source
        opts.history.annotate(rec, optimized)  # --history: what was used (search/prior/seed)
        if recorded:
            names = sorted(d.name for d in (run_dir / "trials").glob("*")
                           if (d / "summary.json").exists())
            new = [n for n in names if n not in recorded]
            self.say(f"trials reused from the run folder: {', '.join(sorted(recorded))}; "
                     f"measured now: {', '.join(new) or 'none'}", always=True)
        for note in (launch_note, backend_fallback(outcome.trials), phase_note):
            if note:
                rec.setdefault("notes", []).append(note)
        result = self._finish(run_dir, baseline, reference, optimized, rec, profile,
                              analysis, gpu_check, opts)
        return result

    def _baseline(self, manager: TrainingModuleManager, analysis: dict[str, Any],
                  run_dir: Path, opts: JobOptions) -> list[TrialSummary]:
        cfg = self.config
        allocations = opts.history.uncovered(self._planned_probes(manager, analysis, opts))
        done = [(probes.probe_folder(run_dir, i, a) / "summary.json").exists()
                for i, a in enumerate(allocations)]
        allocations = within_budget(self.budget, allocations, done)
        if not self.job_spec.batch_settable:
            hint = manager.batch_knob_hint()
            self.say("batch size: the script neither takes --batch-size-arg nor reads "
                     "OPTIMIZER_BATCH_SIZE, so it is not varied and the model keeps it fixed"
                     + (f"; its source names a batch size: {hint} would let cloudopt vary it"
                        if hint else ""), always=hint is not None)
        elif self._default_batch is None:
            self.say("batch size: the script's default is not known from its source; trials at "
                     "the default take the batch_size=N it prints, if any")
        else:
            found = manager.default_batch_setting()
            self.say(f"batch size: the script's default is {self._default_batch} (from "
                     f"{found.source if found is not None else 'its source'})")
        probe = None if opts.probe_seconds == 0 else (opts.probe_seconds or cfg.run.probe_seconds)
        self.say(f"{manager.module_path}: {len(allocations)} baseline trial(s), "
                 f"{'probes of ' + format(probe, 'g') + ' s' if probe else 'full runs'}")
        trials = run_baseline(manager, allocations, run_dir, cfg, probe_seconds=probe,
                              total_samples=self.job_spec.total_samples, quiet=self.quiet,
                              executor=self.trial_executor(), ref_batch=self._default_batch)
        self._say_replaced(manager)
        settable = self.job_spec.batch_settable
        return opts.history.with_baseline([self.label_batch(  # --history: priors join (prior/)
            t, run_dir / "trials" / probes.trial_folder(run_dir, t), settable) for t in trials])

    def _earlier_trials(self, manager: TrainingModuleManager, run_dir: Path,
                        have: list[TrialSummary]) -> list[TrialSummary]:
        """Usable trials an earlier run of this folder measured beyond the baseline (its
        closed loop's, say, under another preference). A measurement does not depend on the
        preference, so they compete for the final choice of a resumed run; the rounds plan as
        before (their recorded plans stay reusable). Stale ones are set aside."""
        known = {t.trial_id for t in have}
        out = []
        for d in sorted((run_dir / "trials").glob("*")):
            if d.name[:2].isdigit() or d.name in known or not (d / "summary.json").exists():
                continue
            t = manager.recorded_trial(d)
            if t is not None and t.ok and t.throughput:
                out.append(self.label_batch(t, d, self.job_spec.batch_settable))
        self._say_replaced(manager)
        if out:
            self.say("measured earlier in this run folder, in the running for the final "
                     "choice: " + ", ".join(t.trial_id for t in out), always=True)
        return out

    def _planned_probes(self, manager: TrainingModuleManager, analysis: dict[str, Any],
                        opts: JobOptions, extra: int = 0) -> list[Allocation]:
        """Baseline allocations (``extra`` more for when the model cannot be fitted), batch
        variations around the script's own batch size, and none it cannot be told."""
        return self.plan_trials(analysis, opts.offline_logs, extra=extra,
                                reference_batch=self._default_batch,
                                vary_batch=self.job_spec.batch_settable)

    def label_batch(self, t: TrialSummary, trial_dir: Path, settable: bool) -> TrialSummary:
        """``t`` labelled with the batch size it ran with (the script's own where unset)."""
        return label_batch(t, trial_dir, self._default_batch, settable)

    def plan_trials(self, analysis: dict[str, Any], offline_logs: str | None = None, *,
                    extra: int = 0, reference_batch: int | None = None,
                    vary_batch: bool = True) -> list[Allocation]:
        """Baseline allocations; with offline logs, the one they predict comes first."""
        cfg = self.config
        allocations = plan_baseline(cfg.resources, cfg.run.baseline_samples + extra,
                                    uses_gpu=bool(analysis.get("uses_gpu")),
                                    reference_batch=reference_batch, vary_batch=vary_batch,
                                    favour_time=probes.favours_time(
                                        cfg, self.user_preference, self.budget.total))
        if offline_logs:
            from optimizer.offline.analyzer import predict_start_allocation

            start = predict_start_allocation(offline_logs, analysis, self.user_preference,
                                             resources=cfg.resources)
            allocations = [start, *[a for a in allocations if a != start]]
            allocations = allocations[: cfg.run.baseline_samples + extra]
            self.say(f"offline logs suggest starting from {start.key()}")
        return allocations

    def _set_sla(self, trials: list[TrialSummary], opts: JobOptions) -> str:
        """Limits not given explicitly come from the baseline (forecast + 25%) when enabled."""
        sla = self.config.sla
        if not self.config.run.sla_from_baseline:
            return "configuration"
        saved = {k: getattr(sla, k) for k in opts.sla_given}
        history = [{"time": job_time(t), "cost": job_cost(t), "throughput": t.throughput}
                   for t in trials]
        sla.update_from_baseline_history(history, margin=0.25)
        sla.throughput_min = saved.get("throughput_min", 0.0)
        for k, v in saved.items():
            setattr(sla, k, v)
        given = ", ".join(sorted(opts.sla_given)) or "none"
        return f"baseline forecast + 25% (explicit: {given})"

    def _phases(self, reference: TrialSummary, run_dir: Path, opts: JobOptions):
        from optimizer.trials.phase_profile import detector_for, profile_trace, stage_agreement

        trace_path = probes.trial_path(run_dir, reference) / "trace.csv"
        try:
            trace = pd.read_csv(trace_path)
            profile = profile_trace(trace, detector_for(trace, opts.phase_model))
        except (CloudoptError, ValueError, OSError, KeyError) as exc:
            if opts.phase_model:  # a model the user named must work
                raise
            return None, f"phases not used: {exc}"
        self.say("phases of the baseline trace: " + ", ".join(
            f"{p} ({f:.0%})" for p, f in profile.sequence))
        agreement = stage_agreement(pd.read_csv(trace_path), profile.labels,
                                    trace_path.with_name("stages.csv"))
        if agreement is not None:  # the probe's stage marks are this trace's ground truth
            profile.stage_agreement = agreement
            self.say(f"phases against the stages the probe marked ({', '.join(agreement['stages'])}):"
                     f" adjusted Rand index {agreement['adjusted_rand']:.2f} over "
                     f"{agreement['samples']} samples")
        return profile, None

    def measure(self, manager: TrainingModuleManager, alloc: Allocation, prefix: str,
                run_dir: Path, opts: JobOptions, total: float | None) -> TrialSummary:
        """Run ``alloc`` as trial ``trials/<prefix>-<key>`` (reloaded when recorded): to its end
        when the time box would cut it short of little, else as a probe. It runs under the
        baseline's memory limit (the request is sized later, from what it used); killed there,
        again under more, up to ``[resources].memory_max`` (:attr:`oom_chain` then holds the
        runs of a setting killed at the largest limit)."""
        spec = self.job_spec
        settable = spec.batch_settable if spec is not None else manager.batch_control() is not None
        alloc = Allocation(alloc.gpus, alloc.cpus, memory_for(alloc.cpus, self.config.resources),
                           alloc.batch_size if settable else None,
                           alloc.workers if manager.workers_arg else None,
                           alloc.replicas if manager.launcher == "torchrun" else 1)
        chain = [self._measure_once(manager, alloc, prefix, run_dir, opts, total)]
        # Killed at its limit: again only with more memory (optimizer.trials.oom_retry).
        while oom_retry.killed_for_memory(chain[-1]):
            more = oom_retry.next_memory(chain[-1], run_dir / "trials" / chain[-1].trial_id,
                                         self.config.resources.memory_max)
            if more is None:
                break
            self.say(f"{chain[-1].trial_id} was killed at its {alloc.memory_gb:g} GB limit "
                     f"(peak {chain[-1].mem_gb_peak:.2f} GB): again with {more:g} GB")
            alloc = dataclasses.replace(alloc, memory_gb=more)
            chain.append(self._measure_once(manager, alloc, prefix, run_dir, opts, total))
        self.oom_chain = chain if oom_retry.killed_for_memory(chain[-1]) else []
        return chain[-1]

    def _measure_once(self, manager: TrainingModuleManager, alloc: Allocation, prefix: str,
                      run_dir: Path, opts: JobOptions, total: float | None) -> TrialSummary:
        trial_dir = run_dir / "trials" / f"{prefix}-{alloc.key()}"
        recorded = manager.recorded_trial(trial_dir)
        if recorded is not None:
            return recorded
        self._say_replaced(manager)
        run = self.config.run
        probe = None if opts.probe_seconds == 0 else (opts.probe_seconds or run.probe_seconds)
        if probe and probe >= 0.5 * run.trial_timeout_s:
            probe = None
        self.say(f"measuring {alloc.key()} ({'probe' if probe else 'whole job'})")
        target = (target_for_batch(alloc.batch_size, run_dir, self._default_batch,
                                   again=prefix.startswith(RUNOFF_PREFIX))  # a 2nd curve
                  if probe and run.goodput and alloc.batch_size is not None else None)
        request = TrialRequest(alloc, trial_dir, probe_seconds=probe, timeout_s=run.trial_timeout_s,
                               monitor_interval=run.monitor_interval, total_samples=total,
                               loss_target=target)
        # One trial at a time here: the closed loop's steps depend on each other, and a trial
        # alone measures what the job gets alone (see optimizer.trials.executors).
        return [s for _, s in self.trial_executor().run(manager, [request],
                                                        self.config.resources)][0]

    # ------------------------------------------------------------------ outputs
    def _finish(self, run_dir: Path, baseline: list[TrialSummary], reference: TrialSummary,
                optimized: TrialSummary, rec: dict[str, Any], profile: Any,
                analysis: dict[str, Any], gpu_check: dict[str, Any],
                opts: JobOptions) -> OptimizationResult:
        from optimizer.reports.run_report import write_outputs

        calc = ResourceCostCalculator.from_config(self.config.resources)
        comparison = calc.compare_configurations(
            reference, optimized, baseline_time_s=job_time(reference),
            optimized_time_s=job_time(optimized), preference=self.user_preference,
            preferences=self.config.multi_objective) if optimized.ok else {}
        flags = self.monitor_cost_time_efficiency(*map(trial_figures, (reference, optimized)))
        comparison["monitor"] = flags
        from agents.metrics import RLMetricsTracker

        self.metrics_tracker = RLMetricsTracker(run_dir / "metrics")
        result = OptimizationResult(run_dir, self.user_preference, baseline, optimized, rec,
                                    comparison)
        result.report_paths = write_outputs(self, result, reference, profile, analysis,
                                            gpu_check, opts)
        return result

    def save_all_metrics(self) -> dict[str, Path]:
        """Write the tracker's CSVs (allocation history, rewards, SLA, Pareto, performance)."""
        if self.metrics_tracker is None:
            raise CloudoptError("no optimization has run yet: nothing to save")
        return self.metrics_tracker.save_all_metrics()

    def save_optimization_metrics(self, result: OptimizationResult) -> Path:
        """One CSV row per run (baseline reference, optimized) for plotting across runs."""
        from optimizer.foundation.atomic_files import atomic_write_csv

        rows = []
        for role, t in (("baseline", result.baseline[0]), ("optimized", result.optimized)):
            if t is None:
                continue
            rows.append({"role": role, "preference": str(result.preference), **trial_figures(t),
                         "gpus": t.allocation.gpus, "cpus": t.allocation.cpus,
                         "memory_gb": t.allocation.memory_gb,
                         "batch_size": t.allocation.batch_size, "status": t.status})
        path = result.run_dir / "optimization_metrics.csv"
        atomic_write_csv(path, pd.DataFrame(rows))
        return path

    def generate_report(self, result: OptimizationResult) -> dict[str, Path]:
        """The report paths written by :meth:`optimize_training` (it writes them itself)."""
        return result.report_paths


__all__ = ["CloudResourceOptimizer", "JobOptions", "OptimizationResult"]
