"""The job made ready to run, once: :func:`prepare`.

From the command line's :class:`~optimizer.foundation.job.Job` and the script, the one
:class:`~optimizer.trials.training.TrainingModuleManager` that runs its trials, and the job with
what the script's source says about them: the launcher (and the workers a trial may run), how
a batch size reaches it and its own batch. The command line prepares every script before any
trial runs; :meth:`optimizer.pipeline.CloudResourceOptimizer.optimize_training` prepares one.
With ``--history``, :func:`history_seed` turns the runs its specs gave into the prior
measurements the search starts from (the frozen job carries the specs, the pipeline the seed).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from optimizer.foundation.config import OptimizerConfig
from optimizer.foundation.errors import CloudoptError
from optimizer.foundation.job import Job, Launch
from optimizer.history.run import History
from optimizer.search.prior.match import Script
from optimizer.search.prior.seed import HISTORY_ROUNDS, HistorySeed, seed_from_history
from optimizer.trials.launchers.launch_rule import LaunchDecision, decide_launch
from optimizer.trials.settings.config_args import setting_value
from optimizer.trials.training import TrainingModuleManager


def prepare(job: Job, config: OptimizerConfig) -> tuple[Job, TrainingModuleManager]:
    """``job`` with its launch, batch control and own batch read from the script, and the
    manager that runs its trials (the script loaded, the launcher set).

    Raises
    ------
    CloudoptError
        A script that cannot be read; a ``--workers-max`` under 1; a learning-rate or workers
        setting in a config file that is missing or lacks the key: said now, before any trial.
    """
    manager = TrainingModuleManager(job.train_file, list(job.train_args), job.batch_size_arg,
                                    job.batch_size_env, job.workers_arg)
    script = manager.load_module()
    decision = decide_launch(job.launcher, script.source)
    manager.launcher, manager.launch_required = decision.launcher, decision.required
    for flag in (job.lr_arg, manager.workers_arg):
        if flag:
            setting_value(list(manager.train_args), script, flag)
    launch = Launch(decision.launcher, decision.required, _workers_max(job, decision, config),
                    decision.note)
    return dataclasses.replace(job, launch=launch, batch_control=manager.batch_control(),
                               default_batch=manager.default_batch_size()), manager


def _workers_max(job: Job, decision: LaunchDecision, config: OptimizerConfig) -> int:
    """The most data-parallel workers a trial runs: ``--workers-max``, else the GPUs (on a GPU
    machine) or 2; 1 for a script whose workers are not varied here."""
    if not decision.workers or decision.launcher != "torchrun":
        return 1
    if job.workers_max is not None:
        if job.workers_max < 1:
            raise CloudoptError(f"--workers-max {job.workers_max}: give 1 or more workers")
        return int(job.workers_max)
    return max(int(config.resources.gpu_count_max or 0), 2)


def history_seed(job: Job, manager: TrainingModuleManager, config: OptimizerConfig,
                 run_dir: Path, histories: Sequence[tuple[str, History]]) -> HistorySeed:
    """``--history``: the runs of this script among ``histories`` (``(spec, runs read)``, as
    the caller read them: the search reads no store) made prior measurements
    (:func:`seed_from_history`, recorded in ``run_dir``); a search from history then makes
    :data:`HISTORY_ROUNDS` rounds of the closed loop unless ``--refine-rounds`` says otherwise
    (``config`` is this optimization's own). No specs: an empty seed, and any recorded priors
    of the folder forgotten."""
    script = Script(Path(manager.module_path), tuple(manager.train_args), config.resources,
                    manager.script_digest(), job.history_job)
    seed = seed_from_history(histories, script, job.default_batch, run_dir,
                             bool(manager.workers_arg), config.run.baseline_samples)
    if seed.on and job.refine_rounds is None:
        config.run.refine_rounds = HISTORY_ROUNDS
    return seed


__all__ = ["history_seed", "prepare"]
