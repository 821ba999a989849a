"""What the command line says about one optimization besides the configuration (``opts``), and
the training job described once from it and the script (:class:`JobSpec`: the script, its
arguments, how its batch size and workers are set, its size where given), which the stages and
the report receive instead of asking the script's manager again."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from optimizer.search.prior.seed import HistorySeed
from optimizer.trials.settings.config_args import setting_value


@dataclass
class JobOptions:
    """What the command line says about one optimization besides the configuration."""

    train_args: str | Sequence[str] = ""
    batch_size_arg: str | None = None
    batch_size_env: str | None = None
    workers_arg: str | None = None
    """The flag that sets the script's data-loader workers (None: they are not varied)."""
    lr_arg: str | None = None
    """The flag that sets the script's learning rate (None: it is never changed)."""
    epochs_arg: str | None = None
    """The flag that sets the job's epochs (None: the usual names; see ``job_length``)."""
    steps_arg: str | None = None
    """The flag that sets the job's optimizer steps, for a job measured in steps."""
    probe_seconds: float | None = None
    """None: the configuration's; 0: every trial runs to its end."""
    total_samples: float | None = None
    dataset_path: str | None = None
    offline_logs: str | None = None
    phase_model: str | None = None
    sla_given: frozenset[str] = frozenset()
    """SLA limits the user set explicitly; the others may be derived from the baseline."""
    agent_seconds: float | None = None
    """Training budget of each agent (default: the configuration's)."""
    image: str | None = None
    """Container image of the Kubernetes Job (default: a placeholder)."""
    launcher: str | None = None
    """``torchrun``: a data-parallel script, one process per worker; ``python``; None: found
    from the script (:func:`optimizer.trials.launchers.launch_rule.decide_launch`)."""
    launch_note: str | None = None
    """Why the script is measured single-process where it has a distributed path (one line
    for the report's notes; None otherwise)."""
    workers_max: int = 1
    """The most data-parallel workers a torchrun trial runs (``--workers-max``)."""
    live_plan: str = "measure"
    """``measure``: the per-stage live plan written and run beside the static one; ``write``:
    written only; ``off``."""
    history: HistorySeed = field(default_factory=HistorySeed)
    """``--history``: the earlier runs of this script its specs named, as prior measurements
    (:mod:`optimizer.search.prior.seed`; empty: a search from scratch)."""


@dataclass(frozen=True)
class JobSpec:
    """The training job, described once (by :meth:`describe`, before the first trial)."""

    train_file: Path
    train_args: tuple[str, ...]
    batch_control: str | None
    """How a trial's batch size reaches the script: ``flag``, ``env``, or None (it cannot be
    set, so it is not varied)."""
    batch_size_arg: str | None
    batch_size_env: str | None
    default_batch: int | None
    """The script's own batch size, read from its source and arguments (None: not known)."""
    workers_arg: str | None
    launcher: str
    """``python``, or ``torchrun``: one process per data-parallel worker."""
    workers_max: int
    lr_arg: str | None
    epochs_arg: str | None
    steps_arg: str | None
    total_samples: float | None
    """The job's size where given (``--total-samples``); else learned from the trials."""

    @property
    def batch_settable(self) -> bool:
        """Whether trials can set the batch size."""
        return self.batch_control is not None

    @classmethod
    def describe(cls, manager: Any, opts: JobOptions) -> JobSpec:
        """The job of ``manager`` (a :class:`~optimizer.trials.training.TrainingModuleManager`
        whose script is loaded) under the command line's ``opts``.

        Raises
        ------
        CloudoptError
            A learning-rate or workers setting in a config file that is missing or lacks the
            key: said now, not when the setting is first used."""
        for flag in (opts.lr_arg, manager.workers_arg):
            if flag:
                setting_value(list(manager.train_args), getattr(manager, "module", None), flag)
        return cls(train_file=Path(manager.module_path), train_args=tuple(manager.train_args),
                   batch_control=manager.batch_control(),
                   batch_size_arg=manager.batch_size_arg,
                   batch_size_env=manager.batch_size_env,
                   default_batch=manager.default_batch_size(), workers_arg=manager.workers_arg,
                   launcher=manager.launcher, workers_max=int(opts.workers_max or 1),
                   lr_arg=opts.lr_arg, epochs_arg=opts.epochs_arg, steps_arg=opts.steps_arg,
                   total_samples=opts.total_samples)
