"""The trials of one run as the search asks for them: :class:`TrialPort`.

It implements :class:`optimizer.search.core.port.SearchPort` for the main job
(:class:`optimizer.pipeline.CloudResourceOptimizer` builds one and hands it to
:func:`optimizer.search.stages.refine`): the run's settings the stages read, the stage messages
(printed and appended to ``main.log``), the executor the trials run on, and one setting measured
as a trial, again under more memory when it is killed at its limit.

It lives in the search, in the top layer beside :mod:`optimizer.search.stages`, because what a
measurement means is the search's: the baseline's memory rule
(:func:`optimizer.search.baseline.memory_for`), the loss a probe of another batch trains to
(:mod:`optimizer.search.goodput.probe_target`), the run-off's second curve. No stage imports it
(the layers forbid it): they see the protocol, so a test can hand them a stand-in.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import TYPE_CHECKING

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import OptimizerConfig
from optimizer.foundation.job import Job, Preference
from optimizer.search.after_loop.runoff import PREFIX as RUNOFF_PREFIX
from optimizer.search.baseline import memory_for
from optimizer.search.budget import RunBudget
from optimizer.search.goodput.probe_target import target_for_batch
from optimizer.trials import oom_retry
from optimizer.trials.batch import label_batch
from optimizer.trials.executors import TrialExecutor, TrialRequest, make_executor
from optimizer.trials.records import TrialSummary

if TYPE_CHECKING:  # types only: the manager is built by the caller
    from optimizer.search.goodput.job_length import JobLength
    from optimizer.trials.training import TrainingModuleManager


class TrialPort:
    """One optimizer's trials, measured and said one way for the pipeline and the search.

    The pipeline sets the run's fields as it learns them (``user_preference``, ``budget``,
    ``job``, ``job_length``, ``log_path``); the search only reads them.

    Parameters
    ----------
    config : OptimizerConfig
        Resolved configuration (its ``[run]`` table times the trials, ``[resources]`` bounds
        their memory).
    quiet : bool
        No progress bars or stage messages.
    """

    def __init__(self, config: OptimizerConfig, *, quiet: bool = False) -> None:
        self.config, self.quiet = config, quiet
        self.user_preference: Preference = "balanced"
        self.job: Job | None = None  # the job it runs, described once; set per run, as are:
        self.oom_chain: list[TrialSummary] = []
        self.budget = RunBudget(None, Path("."))
        self.job_length: JobLength | None = None  # the script's length knob
        self.log_path: Path | None = None  # the run's main.log
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

    def say(self, text: str, always: bool = False) -> None:
        """A stage message: printed unless quiet (or ``always``), and appended to ``main.log``."""
        if always or not self.quiet:
            print(text, flush=True)
        log = self.log_path
        if log is not None:
            with open(log, "a", encoding="utf-8") as fh:
                fh.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text}\n")

    def say_replaced(self, manager: TrainingModuleManager) -> None:
        """Recorded trials found stale (another script version or command line), once each."""
        for line in manager.replaced:
            self.say(line, always=True)
        manager.replaced.clear()

    def label_batch(self, t: TrialSummary, trial_dir: Path, settable: bool) -> TrialSummary:
        """``t`` labelled with the batch size it ran with (the script's own where unset)."""
        own = self.job.default_batch if self.job is not None else None
        return label_batch(t, trial_dir, own, settable)

    def measure(self, manager: TrainingModuleManager, alloc: Allocation, prefix: str,
                run_dir: Path, job: Job, total: float | None) -> TrialSummary:
        """Run ``alloc`` as trial ``trials/<prefix>-<key>`` (reloaded when recorded): to its end
        when the time box would cut it short of little, else as a probe. It runs under the
        baseline's memory limit (the request is sized later, from what it used); killed there,
        again under more, up to ``[resources].memory_max`` (:attr:`oom_chain` then holds the
        runs of a setting killed at the largest limit)."""
        alloc = Allocation(alloc.gpus, alloc.cpus, memory_for(alloc.cpus, self.config.resources),
                           alloc.batch_size if job.batch_settable else None,
                           alloc.workers if manager.workers_arg else None,
                           alloc.replicas if manager.launcher == "torchrun" else 1)
        chain = [self._measure_once(manager, alloc, prefix, run_dir, job, total)]
        # Killed at its limit: again only with more memory (optimizer.trials.oom_retry).
        while oom_retry.killed_for_memory(chain[-1]):
            more = oom_retry.next_memory(chain[-1], run_dir / "trials" / chain[-1].trial_id,
                                         self.config.resources.memory_max)
            if more is None:
                break
            self.say(f"{chain[-1].trial_id} was killed at its {alloc.memory_gb:g} GB limit "
                     f"(peak {chain[-1].mem_gb_peak:.2f} GB): again with {more:g} GB")
            alloc = dataclasses.replace(alloc, memory_gb=more)
            chain.append(self._measure_once(manager, alloc, prefix, run_dir, job, total))
        self.oom_chain = chain if oom_retry.killed_for_memory(chain[-1]) else []
        return chain[-1]

    def _measure_once(self, manager: TrainingModuleManager, alloc: Allocation, prefix: str,
                      run_dir: Path, job: Job, total: float | None) -> TrialSummary:
        trial_dir = run_dir / "trials" / f"{prefix}-{alloc.key()}"
        recorded = manager.recorded_trial(trial_dir)
        if recorded is not None:
            return recorded
        self.say_replaced(manager)
        run = self.config.run
        probe = job.probe_box(run.probe_seconds)
        if probe and probe >= 0.5 * run.trial_timeout_s:
            probe = None
        self.say(f"measuring {alloc.key()} ({'probe' if probe else 'whole job'})")
        target = (target_for_batch(alloc.batch_size, run_dir, job.default_batch,
                                   again=prefix.startswith(RUNOFF_PREFIX))  # a 2nd curve
                  if probe and run.goodput and alloc.batch_size is not None else None)
        request = TrialRequest(alloc, trial_dir, probe_seconds=probe, timeout_s=run.trial_timeout_s,
                               monitor_interval=run.monitor_interval, total_samples=total,
                               loss_target=target)
        # One trial at a time here: the closed loop's steps depend on each other, and a trial
        # alone measures what the job gets alone (see optimizer.trials.executors).
        return [s for _, s in self.trial_executor().run(manager, [request],
                                                        self.config.resources)][0]


__all__ = ["TrialPort"]
