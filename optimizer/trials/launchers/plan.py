"""How a script is started for an allocation: its command line and the settings a trial sets.

A :class:`LaunchPlan` is what :class:`~optimizer.trials.training.TrainingModuleManager` knows
about starting its script, taken when it is needed (the manager's launcher and copies folder
are set after it is made): the script read and compiled, its arguments, how a trial's batch
size and data-loader workers reach it (a flag, a Hydra override, a config file's key, an
environment variable), whether its workers run under torchrun, and whether the in-process
probe rides along. From it come a run's arguments (what a Kubernetes Job's ``args`` holds),
its command line and the batch's environment variable, the same for a trial, for a recorded
trial checked on ``--resume`` and for the report.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from optimizer.foundation.allocation import Allocation
from optimizer.trials.batch import script_default_batch
from optimizer.trials.launchers import torchrun
from optimizer.trials.script_scan import ScriptInfo, batch_knobs
from optimizer.trials.settings.config_args import SettingValue, arg_or_default, with_setting

# The runner that calls an entry function of a script without a __main__ block.
_BOOT = (
    "import os, runpy, sys\n"
    "path, entry = sys.argv[1], sys.argv[2]\n"
    "sys.argv = [path] + sys.argv[3:]\n"
    "sys.path.insert(0, os.path.dirname(os.path.abspath(path)))\n"
    "result = runpy.run_path(path, run_name='__cloudopt__')[entry]()\n"
    "sys.exit(result if isinstance(result, int) else 0)\n"
)


def build_command(info: ScriptInfo, args: Sequence[str]) -> list[str]:
    """The command line of a run: the interpreter, the script (or its entry function) and
    ``args``, the run's arguments with the allocation's flags already set."""
    script = str(info.path)
    if info.entry in (None, "__main__"):
        return [sys.executable, script, *args]
    return [sys.executable, "-c", _BOOT, script, info.entry, *args]


def batch_variable(name: str | None, batch_size: int | None) -> dict[str, str]:
    """``{name: batch_size}``, the script's own batch-size variable set for a trial; empty
    without the variable or the batch (the script's default)."""
    if name and batch_size is not None:
        return {name: str(int(batch_size))}
    return {}


@dataclass(frozen=True)
class LaunchPlan:
    """One script's way of being started (see the module docstring)."""

    script: ScriptInfo
    train_args: tuple[str, ...] = ()
    batch_size_arg: str | None = None
    """The setting that takes a trial's batch size (a flag, a template, a file's key)."""
    batch_size_env: str | None = None
    """The script's own environment variable for its batch size."""
    reads_batch_env: bool = False
    """The script reads ``OPTIMIZER_BATCH_SIZE`` (asked only without the two above)."""
    workers_arg: str | None = None
    launcher: str = "python"
    launch_required: bool = False
    """The script cannot run without torchrun, even as one worker."""
    in_process_probe: bool = True
    config_copies: Path | None = None
    """Where copies of config files with a trial's setting go (a ``cfg.yaml:key`` form)."""

    def batch_control(self) -> str | None:
        """How a trial's batch size reaches the script: ``flag`` (``batch_size_arg``), ``env``
        (``batch_size_env``, or it reads ``OPTIMIZER_BATCH_SIZE``) or None: it cannot be set,
        so it is not varied."""
        if self.batch_size_arg:
            return "flag"
        if self.batch_size_env:
            return "env"
        return "env" if self.reads_batch_env else None

    def batch_environment(self, batch_size: int | None) -> dict[str, str]:
        """The variable that sets a trial's batch size in the script's own environment
        variable (``batch_size_env``); empty otherwise, or at the script's default."""
        return batch_variable(self.batch_size_env, batch_size)

    def batch_knob_hint(self) -> str | None:
        """For a script whose batch size cloudopt cannot set: the option that would let it,
        named from the flags and variables the source reads (None when it names none)."""
        if self.batch_control() is not None:
            return None
        knobs = batch_knobs(self.script.tree)
        if knobs["flags"]:
            return f"--batch-size-arg {knobs['flags'][0]}"
        if knobs["env"]:
            return f"--batch-size-env {knobs['env'][0]}"
        return None

    def default_batch_setting(self) -> SettingValue | None:
        """The batch size the script runs with when no trial sets one, and where it comes from
        (its arguments, a config file, its source: :func:`script_default_batch`)."""
        return script_default_batch(self.script, self.train_args, self.batch_size_arg,
                                    self.batch_size_env)

    def default_batch_size(self) -> int | None:
        """:meth:`default_batch_setting`'s number, or None."""
        found = self.default_batch_setting()
        return None if found is None else found.value

    def default_workers(self) -> int | None:
        """The data-loader workers the script runs with when no trial sets them (the flag's
        value among its arguments, else the flag's literal default in the source; 0 counts),
        or None: no ``workers_arg``, or a default not written as a literal."""
        if not self.workers_arg:
            return None
        return arg_or_default(self.train_args, self.script, self.workers_arg, 0)

    def ranked(self, replicas: int) -> bool:
        """Whether a trial of ``replicas`` workers starts its ranks under torchrun."""
        return torchrun.under_torchrun(self.launcher, replicas, self.launch_required)

    def run_args(self, allocation: Allocation) -> list[str]:
        """The script's arguments for ``allocation``: :meth:`command` without the interpreter
        and the script (what a Kubernetes Job's ``args`` holds)."""
        args = list(self.train_args)
        if self.batch_control() == "flag" and allocation.batch_size is not None:
            args = with_setting(args, self.batch_size_arg, allocation.batch_size,
                                self.config_copies)
        if self.workers_arg and allocation.workers is not None:
            args = with_setting(args, self.workers_arg, allocation.workers, self.config_copies)
        return args

    def command(self, allocation: Allocation) -> list[str]:
        """The command line of a run: the script, its arguments, the batch-size flag and the
        workers' flag (where the allocation sets them), under torchrun where its ranks start
        there."""
        cmd = build_command(self.script, self.run_args(allocation))
        ranked = self.ranked(allocation.replicas)
        return torchrun.launch_command(cmd, allocation.replicas) if ranked else cmd

    def script_digest(self) -> str:
        """SHA-256 of the script's source: a trial of another version is not reused."""
        return hashlib.sha256(self.script.source.encode("utf-8")).hexdigest()


__all__ = ["LaunchPlan", "batch_variable", "build_command"]
