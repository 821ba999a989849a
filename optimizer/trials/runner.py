"""One monitored trial of a training script: launch, time box, outcome, files.

The steps :func:`optimizer.trials.run.trial.run_trial` strings together:

1. :func:`prepare_trial_dir` and :func:`trial_environment`: a clean work folder and the
   script's environment (the allocation from :class:`~optimizer.trials.resources.ResourceManager`,
   plus where to write metrics).
2. :func:`start_trial` launches the trial's command line (:mod:`optimizer.trials.run.launch`)
   in its own session, pinned to the allocation's cores (so that 2 CPUs means two cores), under
   a :class:`~optimizer.trials.monitor.ProcessMonitor` that samples it and enforces the memory
   limit.
3. :func:`wait_trial` polls its metrics rows and output lines into rate trackers
   (:mod:`optimizer.trials.output`) until it ends, the probe's rate is steady or its time box
   ends (``probe``), or the hard limit passes (``timeout``).
4. :func:`classify` and :func:`measured_throughput` turn the finished run into status and
   throughput; its whole-job time is :func:`optimizer.trials.records.predict_time` (a probe's
   prediction is ``startup + total_samples / steady_throughput``).
5. :func:`finalize_trial` moves its files into the trial folder (see :mod:`optimizer.trials.records`);
   :func:`load_trial_files` reads them back.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import ResourceConfig
from optimizer.trials.guard import Watchdog, die_with_parent, record_owner
from optimizer.trials.monitor import CSVMonitor, ProcessMonitor, kill_tree
from optimizer.trials.output import BATCH_SIZE_PATTERN, RateTracker, parse_rate, to_number
from optimizer.trials.probe import probe_environment
from optimizer.trials.probe.loss_target import FILE as LOSS_TARGET_FILE
from optimizer.trials.probe.loss_target import LossWatch
from optimizer.trials.probe.poll import poll_probe
from optimizer.trials.probe.stop import box_end, near_end
from optimizer.trials.records import SUMMARY_FILE, TrialSummary, write_trials_csv
from optimizer.trials.resources import ResourceManager
from optimizer.trials.settings.config_args import with_setting

STDERR_TAIL_CHARS = 4000  # a torchrun failure report alone is about 1,700
TRIAL_FILES = ("trace.csv", "metrics.csv", "stdout.log", "stderr.log", "probe.jsonl",
               "stages.csv", "changes.jsonl", LOSS_TARGET_FILE)
RECORDED_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                        "NUMEXPR_NUM_THREADS")
COMPILE_CACHE_VARS = (("TORCHINDUCTOR_CACHE_DIR", "inductor"), ("TRITON_CACHE_DIR", "triton"))
# The compile caches the user chose, read before anything in this process runs torch: a plain
# torch.optim step here (the agents' training) sets TORCHINDUCTOR_CACHE_DIR in os.environ to
# the shared default, and every later trial read that warm cache (compiled's whole runs 11.4 s
# against 31 s cold, its claim 52% short).
USER_COMPILE_CACHES = {var: os.environ.get(var) for var, _ in COMPILE_CACHE_VARS}


# --------------------------------------------------------------------------------------------
# Before the run
# --------------------------------------------------------------------------------------------


def with_flag(args: list[str], flag: str, value: int | str, copies: Path | None = None
              ) -> list[str]:
    """``args`` with ``flag`` set to ``value``, replacing a value already there. ``flag`` is
    ``--batch-size`` (``--batch-size 128``), a template (``--bs={}`` gives ``--bs=128``), a
    Hydra key (``data.bs={}``) or a key of a config file among ``args`` (``cfg.yaml:train.bs``:
    a copy with it set, written into ``copies``); see :mod:`optimizer.trials.settings.config_args`."""
    return with_setting(args, flag, value, copies)


def prepare_trial_dir(trial_dir: Path) -> Path:
    """An empty work folder inside ``trial_dir`` for the run's files; returns it."""
    work = trial_dir / ".work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    # A summary left by an earlier attempt would mark this folder complete while it runs.
    (trial_dir / SUMMARY_FILE).unlink(missing_ok=True)
    return work


def trial_environment(allocation: Allocation, resource_config: ResourceConfig,
                      visible_devices: Sequence[int] | None, metrics_path: Path,
                      trial_id: str, probe_events: Path | None = None) -> dict[str, str]:
    """The script's environment: the allocation's variables, the metrics file, the trial id,
    and the in-process probe when ``probe_events`` names its event file."""
    env = ResourceManager.apply_configuration(allocation, resource_config=resource_config,
                                              visible_devices=visible_devices)
    # Unbuffered output: rates printed by the script reach the poller while it runs.
    env.update(OPTIMIZER_METRICS_CSV=str(metrics_path.resolve()), PYTHONUNBUFFERED="1",
               OPTIMIZER_TRIAL_ID=trial_id)
    # Each trial compiles as a fresh pod does: with the user's shared Inductor/Triton cache
    # the first trial paid a 20-26 s compile and later ones read it warm, so a compiled
    # script's settings were ranked, and its job time claimed, by cache state (issue 61).
    # A cache the user chose on purpose is theirs to keep.
    cache = metrics_path.resolve().parent / "compile-cache"
    for var, sub in COMPILE_CACHE_VARS:
        env[var] = USER_COMPILE_CACHES[var] or str(cache / sub)
    if probe_events is not None:
        env = probe_environment(env, probe_events, probe_events.with_name("probe-control.json"))
    return env


def recorded_env(env: dict[str, str], batch_var: str | None = None) -> dict[str, str]:
    """The variables of ``env`` worth keeping in ``config.json`` (ours, prices, GPUs, threads,
    and ``batch_var``, the script's own batch-size variable)."""
    return {k: env[k] for k in sorted(env)
            if k.startswith(("OPTIMIZER_", "COST_PER_", "CUDA_VISIBLE"))
            or k in RECORDED_THREAD_VARS or k == batch_var}


# --------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------


@dataclass
class TrialRun:
    """State of one running trial."""

    proc: subprocess.Popen
    t0: float
    monitor: ProcessMonitor
    csv_monitor: CSVMonitor
    stdout_path: Path
    batch_size: int | None
    rates_csv: RateTracker = field(default_factory=RateTracker)
    rates_stdout: RateTracker = field(default_factory=RateTracker)
    stdout_pos: int = 0
    stdout_buf: str = ""
    stdout_text: list[str] = field(default_factory=list)
    first_output_s: float | None = None
    last_samples: tuple[float, float] | None = None
    """(t_s, cumulative samples) of the last metrics row."""
    csv_total: float | None = None
    stop_reason: str | None = None
    stopped_at: float | None = None
    """``time.monotonic()`` when cloudopt signalled the script to stop (a probe's end or the
    timeout), set before the signal: a script that traps SIGTERM and exits 0 (Lightning's
    signal connector does) was still stopped, and its run is not a whole job."""
    watchdog: Watchdog | None = None
    exited: threading.Event = field(default_factory=threading.Event)
    """Set by :func:`_note_exit` once the script's process has ended."""
    ended_at: float | None = None
    """``time.monotonic()`` when it ended."""
    probe_path: Path | None = None
    probe_pos: int = 0
    probe_last: tuple[float, float] | None = None
    """(probe t, cumulative samples) at the end of the last probe rate window."""
    rates_probe: RateTracker = field(default_factory=RateTracker)
    t0_wall: float = 0.0
    """``time.time()`` at ``t0``: the probe's events are timed from its own start."""
    loss_watch: LossWatch | None = None
    """A probe of another batch than the script's runs on until this says it is done."""
    job_samples: float | None = None
    """The whole job's samples where an earlier run counted them: a probe near its end runs to
    it (:func:`optimizer.trials.probe.stop.near_end`)."""
    probe_torch: bool = False
    """The in-process probe saw the script import torch."""
    probe_first_step_s: float | None = None
    """When the in-process probe's first training step was read (its start-up is over)."""
    probe_steps: tuple[float, float] = (0.0, 0.0)
    """(step, cumulative samples) of the last step event: where a loss is placed."""
    probe_batch: int | None = None
    """The batch a step of a loop without a DataLoader counts (``CLOUDOPT_PROBE_BATCH``)."""
    probe_world: int = 1
    """Data-parallel ranks: rank 0's events are read as they come, its samples times this."""
    by_backward: bool = True
    """Steps are backward passes until the probe reports an optimizer step (as its reader
    decides, :func:`optimizer.trials.probe.events.read_probe`)."""


def start_trial(cmd: list[str], env: dict[str, str], cpus: list[int], work: Path,
                trial_id: str, allocation: Allocation, interval: float,
                metrics_path: Path) -> TrialRun:
    """Launch ``cmd`` pinned to ``cpus``, output into ``work``, and start monitoring it."""
    gpu_indices = ([int(i) for i in env["CUDA_VISIBLE_DEVICES"].split(",")]
                   if allocation.gpus else [])
    stdout_path, stderr_path = work / "stdout.log", work / "stderr.log"
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        # Own session: kill_tree can then take the script's children with it; the guards of
        # optimizer.trials.guard end it when this process dies without doing so.
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True, preexec_fn=_child_setup(cpus, os.getpid()),
        )
    watchdog = Watchdog(proc.pid)
    record_owner(work, proc.pid)
    t0, t0_wall = time.monotonic(), time.time()
    if not hasattr(os, "sched_setaffinity"):  # pragma: no cover - macOS/Windows
        _set_affinity_psutil(proc.pid, cpus)
    monitor = ProcessMonitor(proc.pid, work / "trace.csv", exec_id=trial_id,
                             interval=interval, memory_limit_gb=allocation.memory_gb,
                             gpu_indices=gpu_indices, start_time=t0)
    monitor.start()
    run = TrialRun(proc, t0, monitor, CSVMonitor(metrics_path), stdout_path,
                   allocation.batch_size, watchdog=watchdog, t0_wall=t0_wall)
    threading.Thread(target=_note_exit, args=(run,), name=f"exit-{proc.pid}", daemon=True).start()
    return run


def _note_exit(run: TrialRun) -> None:
    # A thread blocked in wait() sees the exit within a millisecond. The poll loop alone
    # rounded the wall time up to its next pass, about 0.2 s on a busy 2-core machine: 6% of
    # a 3 s job, which is the gap between neighbouring settings.
    run.proc.wait()
    run.ended_at = time.monotonic()
    run.exited.set()


def _child_setup(cpus: list[int], parent_pid: int):
    affinity = hasattr(os, "sched_setaffinity")

    def setup() -> None:  # runs in the child between fork and exec: two syscalls
        die_with_parent(parent_pid)
        if affinity:
            os.sched_setaffinity(0, cpus)

    return setup


def _set_affinity_psutil(pid: int, cpus: list[int]) -> None:  # pragma: no cover
    import psutil

    try:
        psutil.Process(pid).cpu_affinity(cpus)
    except (AttributeError, psutil.Error):
        pass  # the platform has no affinity (macOS): the thread variables are all we have


def wait_trial(run: TrialRun, probe_seconds: float | None, timeout_s: float,
               interval: float, quiet: bool, k: int, tol: float) -> float:
    """Poll until the script ends, is stopped (probe, timeout) or killed (OOM).

    Returns the wall time in seconds, from launch to the moment the process ended.
    """
    poll = min(0.1, interval)
    while True:
        elapsed = time.monotonic() - run.t0
        if run.exited.is_set() or run.monitor.oom:
            kill_tree(run.proc.pid, popen=run.proc)  # orphans left by the script
            break
        poll_outputs(run, elapsed, quiet)
        if elapsed >= timeout_s:
            run.stop_reason = "timeout"
        elif probe_seconds is not None:
            tracker = next((r for r in (run.rates_csv, run.rates_probe) if r.windows),
                           run.rates_stdout)
            watch = run.loss_watch
            if (elapsed >= box_end(run, probe_seconds, timeout_s)
                    or tracker.is_steady(k, tol)) and (
                    watch is None or watch.done
                    or elapsed >= watch.target.time_box(probe_seconds, timeout_s)):
                run.stop_reason = "probe"
        if run.stop_reason == "probe" and near_end(run, elapsed):
            run.stop_reason = None
        if run.stop_reason:
            if run.exited.is_set():  # it ended on its own between the checks: not stopped
                run.stop_reason = None
            else:
                run.stopped_at = time.monotonic()
            kill_tree(run.proc.pid, popen=run.proc)
            break
        run.exited.wait(poll)
    run.proc.wait()
    run.exited.wait(5.0)
    return (run.ended_at or time.monotonic()) - run.t0


def stop_trial(run: TrialRun) -> None:
    """Make sure the script's process tree is gone and stop monitoring it."""
    if run.proc.poll() is None:  # e.g. KeyboardInterrupt: never leave a tree behind
        kill_tree(run.proc.pid, popen=run.proc)
        run.proc.wait()
    if run.watchdog is not None:
        run.watchdog.release()
    run.monitor.stop()


def poll_outputs(run: TrialRun, elapsed: float, quiet: bool) -> None:
    """Read new probe events, metrics rows and output lines into the rate trackers."""
    if run.probe_path is not None:
        poll_probe(run)
    if run.csv_monitor.check_for_updates():
        try:
            rows = run.csv_monitor.get_new_rows()
        except Exception:  # a half-written or odd file: try again at the next poll
            rows = pd.DataFrame()
        _add_metric_rows(run, rows, elapsed)
    try:
        with open(run.stdout_path, "rb") as fh:
            fh.seek(run.stdout_pos)
            chunk = fh.read()
    except FileNotFoundError:
        return
    if not chunk:
        return
    run.stdout_pos += len(chunk)
    text = run.stdout_buf + chunk.decode("utf-8", errors="replace")
    # Progress bars redraw with \r: each redraw is a line with its own rate.
    lines = text.replace("\r", "\n").split("\n")
    run.stdout_buf = lines.pop()
    for line in lines:
        if not line.strip():
            continue
        if run.first_output_s is None:
            run.first_output_s = elapsed
        run.stdout_text.append(line)
        if run.batch_size is None and (m := BATCH_SIZE_PATTERN.search(line)):
            run.batch_size = int(m.group(1))
        rate = parse_rate(line, run.batch_size)
        if rate is not None:
            run.rates_stdout.add(elapsed, rate)
        if not quiet:
            print(f"  | {line}", flush=True)


def _add_metric_rows(run: TrialRun, rows: pd.DataFrame, elapsed: float) -> None:
    if rows.empty:
        return
    if "samples" not in rows:
        if "step" not in rows or not run.batch_size:
            return
        # Steps without a sample count: samples = steps × the batch size in use.
        rows = rows.assign(samples=pd.to_numeric(rows["step"], errors="coerce")
                           * run.batch_size)
    for _, row in rows.iterrows():
        samples = to_number(row.get("samples"))
        if samples is None:
            continue
        if "total_samples" in row and to_number(row["total_samples"]):
            run.csv_total = float(to_number(row["total_samples"]))
        rate = to_number(row.get("samples_per_s"))
        if rate is None and run.last_samples is not None:
            dt = elapsed - run.last_samples[0]
            rate = (samples - run.last_samples[1]) / dt if dt > 0 else None
        if rate is not None:
            run.rates_csv.add(elapsed, float(rate), float(samples))
        run.last_samples = (elapsed, float(samples))


# --------------------------------------------------------------------------------------------
# What a finished run amounts to
# --------------------------------------------------------------------------------------------


def classify(run: TrialRun, code: int | None) -> tuple[str, str]:
    """(status, reason): ``completed``, ``probe`` or ``failed`` (oom, timeout, crash).

    A run counts as ``completed`` only when it ended on its own with exit 0: one that cloudopt
    stopped is a ``probe`` (or a ``timeout``) whatever its exit code, since a framework that
    traps SIGTERM ends cleanly, exit 0, after a fraction of the job."""
    if run.monitor.oom:
        return "failed", "oom"
    if run.stop_reason == "timeout":
        return "failed", "timeout"
    if run.stop_reason == "probe" or run.stopped_at is not None:
        return "probe", ""
    if code == 0:
        return "completed", ""
    if code is not None and code < 0:
        return "failed", f"crash (killed by signal {-code})"
    return "failed", "crash"


def measured_throughput(run: TrialRun) -> tuple[float | None, float | None, str, float | None]:
    """(samples done, samples/s, source, startup seconds) from the best source available.

    Startup is the time not explained by the steady rate: for metrics, the time of the last
    row minus its cumulative samples over the rate; for stdout, the first output line.
    """
    if run.rates_csv.windows:
        thr = run.rates_csv.throughput()
        t_last, samples = run.last_samples  # type: ignore[misc]
        startup = max(t_last - samples / thr, 0.0)
        return samples, thr, "metrics_csv", startup
    if run.rates_stdout.windows:
        thr = run.rates_stdout.throughput()
        return None, thr, "stdout", run.first_output_s or 0.0
    return None, None, "wall_time", None


LINE_LAG_S = 0.05
"""A line is seen at the poll after it was printed: half the 0.1 s poll on average."""


def printed_windows(run: TrialRun, record: Any, source: str
                    ) -> list[tuple[float, float, bool]]:
    """The windows of the rate ``source`` (``stdout`` or ``metrics_csv``) as ``(probe time,
    samples/s, seen only after the exit)``, for
    :func:`optimizer.trials.probe.summary.same_windows`; empty without a probe record or its
    start time. A line first read after the process ended was printed at an unknown time
    before; the comparison places it at the end of the last training pass."""
    tracker = {"stdout": run.rates_stdout, "metrics_csv": run.rates_csv}.get(source)
    started = record.header.get("wall") if record is not None else None
    if tracker is None or not isinstance(started, (int, float)) or not run.t0_wall:
        return []
    offset = float(started) - run.t0_wall  # the probe's zero, in seconds after launch
    ended = run.ended_at - run.t0 if run.ended_at is not None else float("inf")
    return [(t - offset - LINE_LAG_S, rate, t >= ended) for t, rate, _ in tracker.windows]


def tail(path: Path, chars: int = STDERR_TAIL_CHARS) -> str:
    """The last ``chars`` characters of a file ("" when it does not exist)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(size - chars, 0))
            return fh.read().decode("utf-8", errors="replace").strip()
    except FileNotFoundError:
        return ""


# --------------------------------------------------------------------------------------------
# The trial folder
# --------------------------------------------------------------------------------------------


def finalize_trial(trial_dir: Path, work: Path, summary: TrialSummary) -> None:
    """Move the run's files into place (renames are atomic), then write the summary."""
    for name in TRIAL_FILES:
        src = work / name
        if src.exists():
            os.replace(src, trial_dir / name)
    for src in work.glob("probe.rank*.jsonl"):  # a data-parallel trial's other ranks
        os.replace(src, trial_dir / src.name)
    shutil.rmtree(work, ignore_errors=True)
    summary.save(trial_dir)
    if trial_dir.parent.name == "trials":
        write_trials_csv(trial_dir.parent.parent)


def load_trial_files(trial_dir: str | os.PathLike) -> dict[str, Any]:
    """The files of a recorded trial: ``summary`` (dict), ``trace`` and ``metrics`` frames."""
    d = Path(trial_dir)
    out: dict[str, Any] = {"summary": TrialSummary.load(d).to_dict()}
    for name in ("trace", "metrics"):
        p = d / f"{name}.csv"
        out[name] = pd.read_csv(p) if p.exists() and p.stat().st_size else pd.DataFrame()
    return out
