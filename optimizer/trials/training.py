"""Running a user's training script for real under an allocation, and measuring it.

:class:`TrainingModuleManager` is the runner every other part calls (the design's facade):

1. :meth:`~TrainingModuleManager.load_module` reads and compiles the script *without running
   it* (a missing file or a syntax error is a :class:`~optimizer.foundation.errors.TrainingScriptError`
   naming the file and line) and finds its entry: a ``__main__`` block, else a function
   ``train``, ``train_model`` or ``main``, else its top-level code.
2. :meth:`~TrainingModuleManager.analyze_module` scans the source with :mod:`ast` for GPU use,
   the model family, dataset hints and, when layer sizes are literals, the parameter count.
3. :meth:`~TrainingModuleManager.run_training` runs one
   :class:`~optimizer.trials.run.request.TrialRequest` in a subprocess with the allocation
   applied (environment from :class:`~optimizer.trials.resources.ResourceManager`, CPU
   affinity so that 2 CPUs means two cores, memory limit enforced by the
   :class:`~optimizer.trials.monitor.ProcessMonitor`) and records the trial in its folder
   (config, trace, metrics, logs, summary; see :mod:`optimizer.trials.records`). A crash, an
   out-of-memory kill or a timeout is a recorded failed trial, never an exception.

Throughput comes from the first source available, and the summary names it:
``metrics_csv`` (rows the script appends to ``$OPTIMIZER_METRICS_CSV``), ``stdout`` (printed
rates: ``samples/s``, ``images/sec``, ``it/s`` × batch size) or ``wall_time`` (work / time).
With ``probe_seconds`` a trial is a probe: it runs until the rate is steady (the mean of the
windows after warm-up known to a few percent) or the time box ends, and the whole job's time
is predicted as ``startup + total_samples / steady_throughput + exit`` (``exit_s``: what a
whole run beside it took past the script's end).

The parts live in their own modules: static analysis of the script in
:mod:`optimizer.trials.script_scan`; its command line and the settings a trial sets in
:mod:`optimizer.trials.launchers.plan` (:meth:`TrainingModuleManager.plan`); one trial end to
end in :mod:`optimizer.trials.run` (the request, the launch, the steps, the summary); the
process itself (launch, time box, files) in :mod:`optimizer.trials.runner`; parsing what the
script reports in :mod:`optimizer.trials.output`.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from optimizer.foundation.allocation import Allocation, describe_allocation
from optimizer.foundation.atomic_files import read_json
from optimizer.foundation.config import ResourceConfig
from optimizer.foundation.errors import CloudoptError
from optimizer.trials.launchers.plan import LaunchPlan, batch_variable
from optimizer.trials.monitor import CSVMonitor
from optimizer.trials.output import (
    BATCH_SIZE_PATTERN,
    RateTracker,
    parse_key_values,
    parse_rate,
    total_samples_from_args,
)
from optimizer.trials.records import SUMMARY_FILE, TrialSummary, set_aside
from optimizer.trials.run.request import TrialRequest
from optimizer.trials.run.summary import model_info
from optimizer.trials.run.trial import run_trial
from optimizer.trials.runner import STDERR_TAIL_CHARS, TrialRun, load_trial_files
from optimizer.trials.script_scan import ENTRY_NAMES, ScriptInfo, analyze_source, load_script
from optimizer.trials.settings.config_args import SettingValue

__all__ = ["BATCH_SIZE_PATTERN", "ENTRY_NAMES", "STDERR_TAIL_CHARS", "RateTracker", "ScriptInfo",
           "TrainingModuleManager", "TrialRequest", "analyze_source", "describe_allocation",
           "load_trial_files", "parse_key_values", "parse_rate", "total_samples_from_args"]

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class TrainingModuleManager:
    """Load, analyse and run one training script.

    Parameters
    ----------
    train_file : path
        The script.
    train_args : str or sequence of str, optional
        Arguments passed through to it (a string is split like a shell would).
    batch_size_arg : str, optional
        For scripts that do not read ``OPTIMIZER_BATCH_SIZE``: the flag that sets their batch
        size (``--batch_size`` gives ``--batch_size 128``; ``--bs={}`` gives ``--bs=128``; Hydra
        keys, config files: :mod:`optimizer.trials.settings.config_args`).
    batch_size_env : str, optional
        For scripts that take their batch size from their own environment variable (cluster
        launchers often set ``BATCH_SIZE``): its name. Each trial sets it.
    workers_arg : str, optional
        The flag that sets the script's data-loader workers (``--workers``, ``--num-workers={}``):
        with it the closed loop ends by measuring the chosen setting at other worker counts.

    Raises
    ------
    CloudoptError
        Both ``batch_size_arg`` and ``batch_size_env``, or a name that is not a variable name.
    """

    def __init__(self, train_file: str | os.PathLike,
                 train_args: str | Sequence[str] | None = None,
                 batch_size_arg: str | None = None, batch_size_env: str | None = None,
                 workers_arg: str | None = None):
        self.module_path = Path(train_file)
        if isinstance(train_args, str):
            train_args = shlex.split(train_args)
        self.train_args = [str(a) for a in (train_args or [])]
        if batch_size_arg and batch_size_env:
            raise CloudoptError(f"--batch-size-arg {batch_size_arg} and --batch-size-env "
                                f"{batch_size_env}: give one way to set the batch size, not both")
        if batch_size_env is not None and not _ENV_NAME.fullmatch(batch_size_env):
            raise CloudoptError(f"--batch-size-env {batch_size_env!r}: not an environment "
                                "variable name (letters, digits and _, e.g. BATCH_SIZE)")
        self.batch_size_arg = batch_size_arg
        self.batch_size_env = batch_size_env or None
        self.workers_arg = workers_arg or None
        self.in_process_probe = True
        """Load the in-process probe into each trial (:mod:`optimizer.trials.probe`);
        ``[run].in_process_probe``."""
        self.launcher, self.launch_required = "python", False
        """``torchrun``: a trial of 2+ workers runs its ranks under it
        (:mod:`~optimizer.trials.launchers.torchrun`); of 1, only where ``launch_required``."""
        self.config_copies: Path | None = None
        """Where copies of config files with a trial's setting go (a ``cfg.yaml:key`` form)."""
        self.module: ScriptInfo | None = None
        self.training_process: subprocess.Popen | None = None
        self.replaced: list[str] = []
        """Recorded trials found stale by :meth:`recorded_trial`, one line each."""
        self.csv_monitor: CSVMonitor | None = None
        self.output_csv_path: Path | None = None
        self.resource_config: ResourceConfig | None = None
        self._analysis: dict[str, Any] | None = None

    def with_train_args(self, train_args: Sequence[str]) -> TrainingModuleManager:
        """The same script, set and launched the same way, run with ``train_args``."""
        twin = TrainingModuleManager(self.module_path, list(train_args), self.batch_size_arg,
                                     self.batch_size_env, self.workers_arg)
        twin.in_process_probe = self.in_process_probe
        twin.launcher, twin.launch_required = self.launcher, self.launch_required
        twin.config_copies, twin.module = self.config_copies, self.module
        twin.resource_config = self.resource_config
        return twin

    # -- loading and analysis ------------------------------------------------------------
    def load_module(self) -> ScriptInfo:
        """Read and compile the script without running it, and find its entry point.

        Raises
        ------
        TrainingScriptError
            Missing or unreadable file, or a syntax error (message names file and line).
        """
        self.module = load_script(self.module_path)
        return self.module

    def analyze_module(self) -> dict[str, Any]:
        """Static facts about the script (see :func:`analyze_source`) plus its entry."""
        if self._analysis is None:
            info = self.module or self.load_module()
            self._analysis = {"entry": info.entry, **analyze_source(info.tree)}
        return dict(self._analysis)

    def plan(self) -> LaunchPlan:
        """How the script is started now (its launcher, probe and copies folder as set on this
        manager): the source of :meth:`command`, :meth:`run_args` and the batch settings."""
        info = self.module or self.load_module()
        reads_env = not (self.batch_size_arg or self.batch_size_env) and bool(
            self.analyze_module().get("reads_batch_size_env"))
        return LaunchPlan(info, tuple(self.train_args), self.batch_size_arg,
                          self.batch_size_env, reads_env, self.workers_arg, self.launcher,
                          self.launch_required, self.in_process_probe, self.config_copies)

    def batch_control(self) -> str | None:
        """How a trial's batch size reaches the script: ``flag``, ``env`` or None (it cannot
        be set, so it is not varied); see :meth:`LaunchPlan.batch_control`."""
        return self.plan().batch_control()

    def batch_environment(self, batch_size: int | None) -> dict[str, str]:
        """The variable that sets a trial's batch size in the script's own environment
        variable (``batch_size_env``); empty otherwise, or at the script's default."""
        return batch_variable(self.batch_size_env, batch_size)

    def batch_knob_hint(self) -> str | None:
        """For a script whose batch size cloudopt cannot set: the option that would let it,
        named from the flags and variables the source reads (None when it names none)."""
        return self.plan().batch_knob_hint()

    def default_batch_setting(self) -> SettingValue | None:
        """The batch size the script runs with when no trial sets one, and where it comes from
        (its arguments, a config file, its source)."""
        return self.plan().default_batch_setting()

    def default_batch_size(self) -> int | None:
        """:meth:`default_batch_setting`'s number, or None."""
        return self.plan().default_batch_size()

    def default_workers(self) -> int | None:
        """The data-loader workers the script runs with when no trial sets them (the flag's
        value among its arguments, else the flag's literal default in the source; 0 counts),
        or None: no ``workers_arg``, or a default not written as a literal."""
        return self.plan().default_workers()

    def script_digest(self) -> str:
        """SHA-256 of the script's source: a trial of another version is not reused."""
        return self.plan().script_digest()

    def recorded_trial(self, trial_dir: str | os.PathLike) -> TrialSummary | None:
        """The trial recorded in ``trial_dir`` when it still applies: same script source and
        same command line (arguments, batch flag), and not lost with an executor's worker. A
        record that no longer applies is moved to ``<run>/replaced/`` (kept, not lost) and None
        is returned, so the trial runs again."""
        trial_dir = Path(trial_dir)
        if not (trial_dir / SUMMARY_FILE).exists():
            return None
        summary = TrialSummary.load(trial_dir)
        try:
            recorded = read_json(trial_dir / "config.json")
        except CloudoptError:
            recorded = {}
        recorded = recorded if isinstance(recorded, dict) else {}
        try:  # the allocation as run, before any batch label was added to the summary
            as_run = Allocation(**recorded["allocation"])
            command_now = self.command(as_run)
            batch_env_now = self.batch_environment(as_run.batch_size)
        except (KeyError, TypeError):
            command_now, batch_env_now = None, None
        why = None
        digest = recorded.get("script_sha256")
        if summary.reason == "worker-lost":  # the executor's failure, not the job's
            why = "it was lost with its Ray worker"
        elif digest is not None and digest != self.script_digest():
            why = "the script changed since it was measured"
        elif command_now is not None and recorded.get("command") not in (None, command_now):
            why = "the script's arguments changed since it was measured"
        elif batch_env_now is not None and recorded.get("batch_env", {}) != batch_env_now:
            why = "the batch size's environment variable changed since it was measured"
        if why is None:
            return summary
        keep = set_aside(trial_dir)
        self.replaced.append(f"trial {trial_dir.name}: {why}; measuring it again (the old "
                             f"record is in {keep})")
        return None

    def command(self, allocation: Allocation) -> list[str]:
        """The command line of a run: the script, its arguments, the batch-size flag and the
        workers' flag (where the allocation sets them), under torchrun where it runs ranks."""
        return self.plan().command(allocation)

    def run_args(self, allocation: Allocation) -> list[str]:
        """The script's arguments for ``allocation``: :meth:`command` without the interpreter
        and the script (what a Kubernetes Job's ``args`` holds)."""
        return self.plan().run_args(allocation)

    # -- running -------------------------------------------------------------------------
    def run_training(self, request: TrialRequest,
                     resource_config: ResourceConfig) -> TrialSummary:
        """Run the script once as ``request`` asks (its allocation, folder, time box, ...) and
        record it in ``request.trial_dir``; ``resource_config``'s prices are exported to the
        script and make the cost. Returns the summary, also saved as ``summary.json``:
        failures are recorded, not raised (:func:`~optimizer.trials.run.trial.run_trial`)."""
        self.resource_config = resource_config
        return run_trial(self.plan(), request, resource_config,
                         analysis=self.analyze_module(), on_start=self._started)

    def _started(self, run: TrialRun) -> None:
        self.training_process, self.csv_monitor = run.proc, run.csv_monitor
        self.output_csv_path = run.csv_monitor.csv_path

    # -- results -------------------------------------------------------------------------
    def get_model_info(self, metrics: pd.DataFrame | str | os.PathLike | None = None,
                       stdout_text: str = "") -> dict[str, Any]:
        """What the script tells about its model and data, over what its source shows.

        Reads ``model_name, model_family, params, layers, dataset`` from columns of the
        metrics CSV (a frame or a path) and from ``key=value`` tokens in its output.
        """
        return model_info(self.analyze_module(), metrics, stdout_text)
