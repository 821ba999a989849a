"""The optimization a command line asks for, described once: :class:`Job`.

The main command parses its arguments into one frozen :class:`Job` per training script
(``optimizer/commands/optimize.py``); what the script's source says about how its trials start
(the launcher, whether its batch size can be set and its own batch) is read once and added
(:func:`optimizer.search.job_setup.prepare`, which also builds the one manager that runs its
trials). The pipeline, every stage of the search, the report and the Kubernetes writers read
this object; ``run.json`` is written from it (:meth:`Job.record`) and ``--resume`` reads its
options back (:data:`RECORDED`). The SLA limits, the budget and the bounds given on the command
line are here as given (None: the configuration's); the resolved configuration, prices
included, is :class:`~optimizer.foundation.config.OptimizerConfig`, built once from
:meth:`Job.overrides`.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

Preference = str | tuple[float, float, float]
"""A named preference (``cost``, ``time``, ``balanced``, ``resource``) or three weights."""

RECORDED = ("train_file", "preference", "config", "baseline_samples", "time_max", "cost_max",
            "throughput_min", "train_args", "batch_size_arg", "batch_size_env",
            "batch_size_max", "memory_max", "workers_arg", "lr_arg", "epochs_arg", "steps_arg",
            "launcher", "workers_max", "probe_seconds", "total_samples", "dataset_path",
            "offline_logs", "agent_seconds", "refine_rounds", "runoff_rounds", "runoff_size",
            "budget", "phase_model", "image", "executor", "ray_address", "history",
            "history_job", "live_plan")
"""The options a run records in ``run.json`` and a resume reads back (not ``output``,
``resume`` nor ``quiet``)."""

@dataclass(frozen=True)
class Launch:
    """How a trial starts the script, decided once from its source
    (:func:`optimizer.trials.launchers.launch_rule.decide_launch`)."""

    launcher: str = "python"
    """``python``, or ``torchrun``: one process per data-parallel worker."""
    required: bool = False
    """The script cannot run without torchrun: a 1-worker trial runs under it too."""
    workers_max: int = 1
    """The most data-parallel workers a trial runs (1: the workers are not varied)."""
    note: str | None = None
    """Why the script is measured single-process where it has a distributed path."""


@dataclass(frozen=True)
class Job:
    """One optimization of one training script, as the command line describes it."""

    train_file: Path
    train_args: tuple[str, ...] = ()
    preference: Preference = "balanced"
    config: str | None = None
    """The TOML file the configuration is read from (None: ``configs/default.toml``)."""
    batch_size_arg: str | None = None
    batch_size_env: str | None = None
    workers_arg: str | None = None
    """The flag that sets the script's data-loader workers (None: they are not varied)."""
    lr_arg: str | None = None
    """The flag that sets the script's learning rate (None: it is never changed)."""
    epochs_arg: str | None = None
    steps_arg: str | None = None
    launcher: str = "auto"
    """The launcher asked for (``auto``, ``python``, ``torchrun``); :attr:`launch` is the one
    decided."""
    workers_max: int | None = None
    """``--workers-max`` as given (None: the GPUs, else 2, for a torchrun script)."""
    probe_seconds: float | None = None
    """None: the configuration's; 0: every trial runs to its end."""
    total_samples: float | None = None
    dataset_path: str | None = None
    offline_logs: str | None = None
    history: tuple[str, ...] = ()
    """``--history``: the specs of earlier runs of this script to start from (read and matched
    by the pipeline, :mod:`optimizer.search.prior`); empty: a search from scratch."""
    history_job: str | None = None
    """``--history-job``: the history's name for this job (None: the script's name)."""
    phase_model: str | None = None
    agent_seconds: float | None = None
    """Training budget of each agent (None: the configuration's)."""
    image: str | None = None
    """Container image of the Kubernetes Job (None: a placeholder)."""
    live_plan: str = "measure"
    """``measure``: the per-stage live plan written and run beside the static one; ``write``:
    written only; ``off``."""
    time_max: float | None = None
    cost_max: float | None = None
    throughput_min: float | None = None
    budget: int | str | None = None
    baseline_samples: int | None = None
    refine_rounds: int | None = None
    runoff_rounds: int | None = None
    runoff_size: int | None = None
    batch_size_max: int | None = None
    memory_max: float | None = None
    executor: str | None = None
    ray_address: str | None = None
    scripts: tuple[str, ...] = ()
    """Every script of the command line as given (a resume of their parent folder resumes
    them all); empty: this one."""
    launch: Launch = field(default_factory=Launch)
    """How its trials start, read from the script (:func:`~optimizer.search.job_setup.prepare`)."""
    batch_control: str | None = None
    """How a trial's batch size reaches the script: ``flag``, ``env``, or None (it cannot be
    set, so it is not varied)."""
    default_batch: int | None = None
    """The script's own batch size, read from its source and arguments (None: not known)."""

    @classmethod
    def from_options(cls, options: Mapping[str, Any], train_file: str | Path) -> Job:
        """The job of ``train_file`` under ``options`` (the command line's, by option name;
        names that are no option of a job are ignored)."""
        names = {f.name for f in fields(cls)} - {"train_file", "scripts", "launch",
                                                 "batch_control", "default_batch"}
        given = {k: v for k, v in options.items() if k in names and v is not None}
        args = given.pop("train_args", "")
        given["train_args"] = tuple(shlex.split(args) if isinstance(args, str)
                                    else map(str, args))
        if isinstance(given.get("history"), (list, tuple)):  # repeatable; a list from JSON
            given["history"] = tuple(map(str, given["history"]))
        if isinstance(given.get("preference"), list):  # weights read back from JSON
            given["preference"] = tuple(float(w) for w in given["preference"])
        files = options.get("train_file")
        scripts = tuple(map(str, files)) if isinstance(files, (list, tuple)) else ()
        return cls(train_file=Path(train_file), scripts=scripts, **given)

    @property
    def batch_settable(self) -> bool:
        """Whether trials can set the batch size."""
        return self.batch_control is not None

    @property
    def sla_given(self) -> frozenset[str]:
        """The SLA limits given explicitly; the others may be derived from the baseline."""
        limits = {"time_max": self.time_max, "cost_max": self.cost_max,
                  "throughput_min": self.throughput_min}
        return frozenset(k for k, v in limits.items() if v is not None)

    def probe_box(self, configured: float) -> float | None:
        """The time box of a trial: ``--probe-seconds``, else ``configured``; None: every
        trial runs to its end (``--probe-seconds 0``)."""
        return None if self.probe_seconds == 0 else (self.probe_seconds or configured)

    def overrides(self) -> dict[str, dict[str, Any]]:
        """What the command line sets in the configuration, by section (None: not set)."""
        return {
            "sla": {"time_max": self.time_max, "cost_max": self.cost_max,
                    "throughput_min": self.throughput_min},
            "resources": {"batch_size_max": self.batch_size_max, "memory_max": self.memory_max},
            "run": {"baseline_samples": self.baseline_samples,
                    "refine_rounds": self.refine_rounds, "runoff_rounds": self.runoff_rounds,
                    "runoff_size": self.runoff_size,
                    "probe_seconds": self.probe_seconds if self.probe_seconds else None,
                    "executor": self.executor, "ray_address": self.ray_address,
                    "budget": self.budget},
        }

    def options(self) -> dict[str, Any]:
        """The options ``run.json`` records (:data:`RECORDED`), as the command line gives them."""
        out = dict(vars(self))
        out["train_file"] = list(self.scripts) or [str(self.train_file)]
        out["train_args"] = shlex.join(self.train_args)
        out["budget"] = None if self.budget is None else str(self.budget)  # as typed
        return {k: out[k] for k in RECORDED}

    def record(self) -> dict[str, Any]:
        """``run.json``: the script, how it is run, and every option (:meth:`options`)."""
        return {"train_file": str(self.train_file), "train_args": list(self.train_args),
                "batch_size_arg": self.batch_size_arg, "batch_size_env": self.batch_size_env,
                "workers_arg": self.workers_arg, "preference": self.preference,
                "probe_seconds": self.probe_seconds, "total_samples": self.total_samples,
                "dataset_path": self.dataset_path, "offline_logs": self.offline_logs,
                "phase_model": self.phase_model, "options": self.options()}


__all__ = ["RECORDED", "Job", "Launch", "Preference"]
