"""Running a user's training script for real under an allocation, and measuring it.

:class:`TrainingModuleManager` is the runner every other part calls:

1. :meth:`~TrainingModuleManager.load_module` reads and compiles the script *without running
   it* (a missing file or a syntax error is a :class:`~optimizer.foundation.errors.TrainingScriptError`
   naming the file and line) and finds its entry: a ``__main__`` block, else a function
   ``train``, ``train_model`` or ``main``, else its top-level code.
2. :meth:`~TrainingModuleManager.analyze_module` scans the source with :mod:`ast` for GPU use,
   the model family, dataset hints and, when layer sizes are literals, the parameter count.
3. :meth:`~TrainingModuleManager.run_training` runs it in a subprocess with the allocation
   applied (environment from :class:`~optimizer.trials.resources.ResourceManager`, CPU affinity so that
   2 CPUs means two cores, memory limit enforced by the :class:`~optimizer.trials.monitor.ProcessMonitor`)
   and records the trial in ``trial_dir`` (config, trace, metrics, logs, summary; see
   :mod:`optimizer.trials.records`). A crash, an out-of-memory kill or a timeout is a recorded failed
   trial, never an exception.

Throughput comes from the first source available, and the summary names it:
``metrics_csv`` (rows the script appends to ``$OPTIMIZER_METRICS_CSV``), ``stdout`` (printed
rates: ``samples/s``, ``images/sec``, ``it/s`` × batch size) or ``wall_time`` (work / time).
With ``probe_seconds`` a trial is a probe: it runs until the rate is steady (the mean of the
windows after warm-up known to a few percent) or the time box ends, and the whole job's time
is predicted as ``startup + total_samples / steady_throughput + exit`` (``exit_s``: what a
whole run beside it took past the script's end).

The parts live in their own modules, re-exported here: static analysis of the script in
:mod:`optimizer.trials.script_scan`, parsing what it reports in :mod:`optimizer.trials.output`,
and launching, time-boxing and filing one trial in :mod:`optimizer.trials.runner`.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from optimizer.foundation.allocation import Allocation, describe_allocation
from optimizer.foundation.atomic_files import atomic_write_json, read_json
from optimizer.foundation.config import ResourceConfig
from optimizer.foundation.errors import CloudoptError
from optimizer.trials.batch import script_default_batch
from optimizer.trials.cost import ResourceCostCalculator
from optimizer.trials.launchers import torchrun
from optimizer.trials.live.session import bill_live_trial, launch_cores, start_controller
from optimizer.trials.monitor import CSVMonitor
from optimizer.trials.output import (
    BATCH_SIZE_PATTERN,
    RateTracker,
    final_heldout_loss,
    parse_key_values,
    parse_rate,
    reported_model_info,
    to_number,
    total_samples_from_args,
)
from optimizer.trials.probe import EVENTS_FILE, read_probe, write_stage_marks
from optimizer.trials.probe.loss_target import LossTarget, LossWatch
from optimizer.trials.probe.poll import write_loss_watch
from optimizer.trials.probe.summary import probe_figures
from optimizer.trials.records import (
    SUMMARY_FILE,
    TrialSummary,
    choose_job_size,
    exit_seconds,
    predict_time,
    set_aside,
)
from optimizer.trials.resources import cpu_affinity_set
from optimizer.trials.runner import (
    STDERR_TAIL_CHARS,
    TrialRun,
    build_command,
    classify,
    finalize_trial,
    load_trial_files,
    measured_throughput,
    poll_outputs,
    prepare_trial_dir,
    printed_windows,
    recorded_env,
    start_trial,
    stop_trial,
    tail,
    trial_environment,
    wait_trial,
    with_flag,
)
from optimizer.trials.script_scan import (
    ENTRY_NAMES,
    ScriptInfo,
    analyze_source,
    batch_knobs,
    load_script,
)
from optimizer.trials.settings.config_args import SettingValue, arg_or_default

__all__ = ["BATCH_SIZE_PATTERN", "ENTRY_NAMES", "STDERR_TAIL_CHARS", "RateTracker", "ScriptInfo",
           "TrainingModuleManager", "analyze_source", "describe_allocation", "load_trial_files",
           "parse_key_values", "parse_rate", "total_samples_from_args"]

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
        self.launcher, self.launch_required = "python", False
        """``torchrun``: a trial of 2+ workers runs its ranks under it (:mod:`~optimizer.trials.launchers.torchrun`); of 1, only where ``launch_required``."""
        """Load the in-process probe into each trial (:mod:`optimizer.trials.probe`);
        ``[run].in_process_probe``."""
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

    def batch_control(self) -> str | None:
        """How a trial's batch size reaches the script: ``flag`` (``batch_size_arg``), ``env``
        (``batch_size_env``, or it reads ``OPTIMIZER_BATCH_SIZE``) or None: it cannot be set,
        so it is not varied."""
        if self.batch_size_arg:
            return "flag"
        if self.batch_size_env:
            return "env"
        return "env" if self.analyze_module().get("reads_batch_size_env") else None

    def batch_environment(self, batch_size: int | None) -> dict[str, str]:
        """The variable that sets a trial's batch size in the script's own environment
        variable (``batch_size_env``); empty otherwise, or at the script's default."""
        if self.batch_size_env and batch_size is not None:
            return {self.batch_size_env: str(int(batch_size))}
        return {}

    def batch_knob_hint(self) -> str | None:
        """For a script whose batch size cloudopt cannot set: the option that would let it,
        named from the flags and variables the source reads (None when it names none)."""
        if self.batch_control() is not None:
            return None
        knobs = batch_knobs((self.module or self.load_module()).tree)
        if knobs["flags"]:
            return f"--batch-size-arg {knobs['flags'][0]}"
        if knobs["env"]:
            return f"--batch-size-env {knobs['env'][0]}"
        return None

    def default_batch_setting(self) -> SettingValue | None:
        """The batch size the script runs with when no trial sets one, and where it comes from
        (its arguments, a config file, its source: :func:`script_default_batch`)."""
        return script_default_batch(self.module or self.load_module(), self.train_args,
                                    self.batch_size_arg, self.batch_size_env)

    def default_batch_size(self) -> int | None:
        """:meth:`default_batch_setting`'s number, or None."""
        found = self.default_batch_setting()
        return None if found is None else found.value

    def default_workers(self) -> int | None:
        """The data-loader workers the script runs with when no trial sets them (the flag's
        value among its arguments, else the flag's literal default in the source; 0 counts),
        or None: no ``workers_arg``, or a default not written as a literal."""
        return self._flag_default(self.workers_arg, minimum=0) if self.workers_arg else None

    def _flag_default(self, flag: str, minimum: int) -> int | None:
        return arg_or_default(self.train_args, self.module or self.load_module(), flag, minimum)

    def script_digest(self) -> str:
        """SHA-256 of the script's source: a trial of another version is not reused."""
        info = self.module or self.load_module()
        return hashlib.sha256(info.source.encode("utf-8")).hexdigest()

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
        workers' flag (where the allocation sets them)."""
        cmd = build_command(self.module or self.load_module(), self.run_args(allocation))
        ranked = torchrun.under_torchrun(self.launcher, allocation.replicas, self.launch_required)
        return torchrun.launch_command(cmd, allocation.replicas) if ranked else cmd

    def run_args(self, allocation: Allocation) -> list[str]:
        """The script's arguments for ``allocation``: :meth:`command` without the interpreter
        and the script (what a Kubernetes Job's ``args`` holds)."""
        args = list(self.train_args)
        if self.batch_control() == "flag" and allocation.batch_size is not None:
            args = with_flag(args, self.batch_size_arg, allocation.batch_size, self.config_copies)
        if self.workers_arg and allocation.workers is not None:
            args = with_flag(args, self.workers_arg, allocation.workers, self.config_copies)
        return args

    # -- running -------------------------------------------------------------------------
    def run_training(
        self,
        allocation: Allocation,
        trial_dir: str | os.PathLike,
        *,
        resource_config: ResourceConfig,
        probe_seconds: float | None = None,
        timeout_s: float = 600,
        monitor_interval: float = 0.5,
        total_samples: float | None = None,
        quiet: bool = True,
        trial_id: str | None = None,
        visible_devices: Sequence[int] | None = None,
        steady_windows: int = 4,
        steady_tol: float = 0.03,
        cpu_ids: Sequence[int] | None = None,
        live: Any = None,
        loss_target: LossTarget | None = None,
        until_box: bool = False,
        rank_env: Mapping[str, str] | None = None,
    ) -> TrialSummary:
        """Run the script once under ``allocation`` and record it in ``trial_dir``.

        Parameters
        ----------
        allocation : Allocation
            GPUs, CPUs (pinned cores), memory limit (GiB, enforced) and batch size.
        trial_dir : path
            Folder of this trial (created; files replaced atomically; ``summary.json`` last).
        resource_config : ResourceConfig
            Prices, exported to the script and used for the cost.
        probe_seconds : float, optional
            Time box: stop once throughput is steady or this many seconds pass, and record a
            ``probe`` with the predicted whole-job time. None: run to the end.
        timeout_s : float
            Hard limit; a script still running then is a failed trial (``timeout``).
        monitor_interval : float
            Seconds between resource samples.
        total_samples : float, optional
            Work of the whole job; otherwise taken from the script's metrics, output
            (``total_samples=N``) or arguments (``--samples`` × ``--epochs``).
        quiet : bool
            False: echo the script's output lines.
        trial_id : str, optional
            Default: the folder name.
        visible_devices : sequence of int, optional
            GPUs to choose from (default: those NVML sees).
        steady_windows, steady_tol : int, float
            A probe is steady once at least ``steady_windows`` rate windows after the first
            give their mean a relative standard error of at most ``steady_tol``.
        cpu_ids : sequence of int, optional
            The cores to pin to (an executor running trials side by side leases them, see
            :mod:`optimizer.trials.core_lease`); default: the first ``allocation.cpus`` of this
            process's affinity mask.
        live : LiveSetup, optional
            A controller that changes the allocation while the script runs
            (:mod:`optimizer.trials.live`); the cost is then billed at what it held.
        loss_target, until_box : LossTarget, bool
            A probe that trains on to ``loss_target`` (:mod:`optimizer.trials.probe.loss_target`),
            or runs its whole time box (the script's own batch, whose loss the others train to).
        rank_env : mapping, optional
            This run is one rank of a data-parallel job whose ranks another launcher starts
            (a Ray Train worker): torchrun's variables for it
            (:func:`~optimizer.trials.launchers.torchrun.rank_environment`).

        Returns
        -------
        TrialSummary
            Also saved as ``trial_dir/summary.json``. Failures are recorded, not raised.
        """
        info = self.module or self.load_module()
        trial_dir = Path(trial_dir)
        trial_id, self.resource_config = trial_id or trial_dir.name, resource_config
        work = prepare_trial_dir(trial_dir)
        metrics_part = work / "metrics.csv"
        probe_events = work / EVENTS_FILE if self.in_process_probe else None
        env = trial_environment(allocation, resource_config, visible_devices, metrics_part,
                                trial_id, probe_events)
        env.update(self.batch_environment(allocation.batch_size))
        probe_batch = allocation.batch_size or self.default_batch_size()
        if probe_events is not None and probe_batch:
            # a loop without a DataLoader shows the probe no batch: this one counts a step
            env["CLOUDOPT_PROBE_BATCH"] = str(int(probe_batch))
        cpus = sorted(cpu_ids) if cpu_ids is not None else cpu_affinity_set(allocation.cpus)
        ranked = torchrun.under_torchrun(self.launcher, allocation.replicas, self.launch_required)
        env = torchrun.launch_environment(env, cpus, allocation.replicas) if ranked else env
        env.update(rank_env or {})
        if live is not None and not ranked:  # see _cloudopt_probe_load
            env["CLOUDOPT_LOAD_CORES"] = ",".join(str(c) for c in (live.cores or cpus))
        cmd = self.command(allocation)
        started_at = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
        atomic_write_json(trial_dir / "config.json", {
            "trial_id": trial_id, "allocation": allocation, "train_file": str(info.path),
            "train_args": self.train_args, "command": cmd, "cpu_affinity": cpus,
            "script_sha256": self.script_digest(),
            "env": recorded_env(env, self.batch_size_env),
            "batch_env": self.batch_environment(allocation.batch_size),
            "probe_seconds": probe_seconds, "timeout_s": timeout_s,
            "monitor_interval": monitor_interval, "started_at": started_at,
            "loss_target": loss_target.to_dict() if loss_target is not None else None,
            "until_box": until_box,
        })
        run = start_trial(cmd, env, launch_cores(live, cpus), work, trial_id, allocation,
                          monitor_interval, metrics_part)
        run.probe_path, run.probe_batch, run.job_samples = probe_events, probe_batch, total_samples
        run.probe_world = allocation.replicas if ranked else \
            int((rank_env or {}).get("WORLD_SIZE", 1))
        if loss_target is not None and probe_events is not None and probe_seconds is not None:
            run.loss_watch = LossWatch(loss_target)
        self.training_process, self.csv_monitor, self.output_csv_path = (
            run.proc, run.csv_monitor, metrics_part)
        ctl = start_controller(live, run, work, cpus, allocation) if live is not None else None
        try:
            wall = wait_trial(run, probe_seconds, timeout_s, monitor_interval, quiet,
                              sys.maxsize if until_box else steady_windows, steady_tol)
        finally:
            if ctl is not None:
                ctl.stop()
            stop_trial(run)
        poll_outputs(run, time.monotonic() - run.t0, quiet)
        write_loss_watch(run, work)
        summary = self.generate_summary(run, allocation, trial_id, wall, resource_config,
                                        total_samples, work, started_at)
        if ctl is not None:
            bill_live_trial(summary, ctl, live, resource_config)
        finalize_trial(trial_dir, work, summary)
        return summary

    # -- results -------------------------------------------------------------------------
    def get_model_info(self, metrics: pd.DataFrame | str | os.PathLike | None = None,
                       stdout_text: str = "") -> dict[str, Any]:
        """What the script tells about its model and data, over what its source shows.

        Reads ``model_name, model_family, params, layers, dataset`` from columns of the
        metrics CSV (a frame or a path) and from ``key=value`` tokens in its output.
        """
        if metrics is not None and not isinstance(metrics, pd.DataFrame):
            metrics = CSVMonitor(metrics).load_latest_data()
        return reported_model_info(self.analyze_module(), metrics, stdout_text)

    def generate_summary(self, run: TrialRun, allocation: Allocation, trial_id: str,
                         wall: float, resource_config: ResourceConfig,
                         total_samples: float | None, work: Path,
                         started_at: str = "") -> TrialSummary:
        """Status, time, throughput (and its source), cost and resource use of a finished run."""
        code = run.proc.returncode
        status, reason = classify(run, code)
        stdout_text = "\n".join(run.stdout_text)
        samples, thr, source, startup = measured_throughput(run)
        record = read_probe(run.probe_path) if run.probe_path is not None else None
        if record is not None:
            write_stage_marks(record, work / "stages.csv")
        info = self.module
        fig = probe_figures(record, info.tree if info is not None else None, self.train_args,
                            status, thr if source != "wall_time" else None, source,
                            run.batch_size or self.default_batch_size(),
                            printed_windows(run, record, source))
        # Rows the script wrote for cloudopt (OPTIMIZER_METRICS_CSV) are its own exact account;
        # otherwise the probe's steps come before rates the script printed.
        if fig.throughput and source != "metrics_csv":
            samples, thr, source, startup = fig.samples, fig.throughput, "probe", fig.startup_s
        sizes = [("given", total_samples), ("metrics", run.csv_total),
                 ("printed", to_number(parse_key_values(stdout_text).get("total_samples"))),
                 ("arguments", total_samples_from_args(self.train_args)),
                 (fig.total_source, fig.total_samples)]
        size_source, total = choose_job_size(sizes, status, thr, source, wall, startup)
        if source == "wall_time" and total is not None and status == "completed":
            samples, thr = total, total / wall if wall > 0 else None
        hourly = ResourceCostCalculator.from_config(resource_config).calculate_hourly_cost(
            allocation)
        end = None if record is None else record.training_end_t  # trial_dir/.work below
        exit_s = exit_seconds(status, wall, end, work.parent.parent, allocation.cpus)
        predicted = predict_time(status, wall, samples, total, thr, startup, exit_s)
        stats, stderr = run.monitor.stats(startup), tail(work / "stderr.log")
        if status == "probe" and thr is None:
            reason = "no throughput measured before the time box ended"
        if reason.startswith("crash") and (rank := torchrun.rank_failure(stderr, run.probe_world)):
            reason = f"crash ({rank})"
        model_info = self.get_model_info(work / "metrics.csv", stdout_text)
        if run.batch_size is not None:  # the allocation's, else what the script printed
            model_info["batch_size"] = run.batch_size
        if status == "completed":  # the held-out loss the whole job ends at, where printed
            model_info["heldout_loss"] = final_heldout_loss(stdout_text)
        return TrialSummary(
            trial_id=trial_id, status=status, allocation=allocation, reason=reason,
            exit_code=code, wall_time_s=round(wall, 3), samples=samples, throughput=thr,
            throughput_source=source, hourly_cost=hourly, cost=hourly * wall / 3600,
            total_samples=total, predicted_total_time_s=predicted,
            predicted_total_cost=None if predicted is None else hourly * predicted / 3600,
            startup_s=None if startup is None else round(float(startup), 3), exit_s=exit_s,
            cpu_util_mean=100 * stats["cpu_cores_mean"] / max(allocation.cpus, 1),
            **stats, train_file=str(self.module_path), train_args=list(self.train_args),
            model_info=model_info,
            stderr_tail=stderr if status == "failed" else "", started_at=started_at,
            finished_at=datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
            node=socket.gethostname(), job_size_source=size_source, probe=fig.info,
        )
