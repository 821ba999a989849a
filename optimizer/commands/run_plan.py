"""``python -m optimizer run --plan RUN -- COMMAND ...``: run a job under a recorded live plan.

A wrapper fit to be a container's entrypoint: it starts ``COMMAND`` with the in-process probe
(the job is not changed), watches its stages and, every interval, moves it to the allocation
the plan (``RUN/live-plan.json``, written by the main command) names for the stage: the CPU
affinity of every thread and the job's intra-op threads, and the memory request. Inside a
Kubernetes pod (``POD_NAME`` set, or ``--kubernetes on``) the pod is also resized in place
through its ``resize`` subresource (:mod:`optimizer.trials.live.pod_resize`).

The job's output, exit status and signals pass through: SIGTERM and SIGINT are forwarded to
it, and the wrapper exits with its status. If the controller fails, the job keeps running at
the largest allocation of its plan (:mod:`optimizer.trials.live.watchdog`). What was done is in ``--log-dir``: ``changes.jsonl`` (every change, its
cause and stage), ``trace.csv`` (the monitor's samples), ``probe.jsonl`` and
``live-summary.json`` (the allocation held over time and its bill). A folder that holds an
earlier run's log has it moved to ``earlier/<time>/`` first: the probe appends to its events
and obeys the control file it finds, so a new job would otherwise replay the old stages.

The job dies with the wrapper (:mod:`optimizer.trials.guard`): it asks for SIGKILL when the
wrapper dies, and, unless the wrapper is a terminal's foreground job (where the shell's job
control owns the process group, and Ctrl-C, Ctrl-Z and reading the terminal must reach the job
as before), it runs in its own process group, which a watchdog ends when the wrapper dies.

With ``--executor ray`` the same wrapper runs as one Ray task that asks for the plan's largest
phase (CPUs, memory, the plan's GPUs), on cores leased on its node
(:mod:`optimizer.trials.core_lease`); the job's output streams to the driver, and the log's
files come back into ``--log-dir``. On a cluster (``--ray-address``) the current folder is
shipped as the task's working directory, so the command's relative paths hold there.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from optimizer.foundation.atomic_files import atomic_write_bytes, atomic_write_json
from optimizer.foundation.config import load_config
from optimizer.foundation.errors import CloudoptError
from optimizer.trials.guard import Watchdog, die_with_parent
from optimizer.trials.live.actuators import CHANGES_FILE, LiveTrial
from optimizer.trials.live.controller import (
    WATCH_S,
    Controller,
    PlanDecider,
    billed_cost,
    held_seconds,
)
from optimizer.trials.live.plan import LivePlan, PhaseAllocation
from optimizer.trials.live.stages import PAUSE_S, DetectorPhases, ProbeTail
from optimizer.trials.monitor import ProcessMonitor
from optimizer.trials.probe import EVENTS_FILE, probe_environment

CONTROL_FILE = "probe-control.json"
TRACE_FILE = "trace.csv"
SUMMARY_FILE = "live-summary.json"
LOG_FILES = (EVENTS_FILE, CONTROL_FILE, CHANGES_FILE, TRACE_FILE, SUMMARY_FILE)
"""What one run writes into its log folder (all moved aside before the next run there)."""


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog, description="Run a job under a recorded live plan (per-stage CPU and "
        "memory), changing its allocation while it runs.",
        epilog="example: python -m optimizer run --plan runs/my-run -- python train.py --bs 64")
    p.add_argument("--plan", required=True, type=Path,
                   help="run folder (its live-plan.json) or the plan file itself")
    p.add_argument("--log-dir", type=Path, default=None,
                   help="where changes.jsonl, trace.csv and live-summary.json go (default: "
                   "live/<time> in the plan's folder)")
    p.add_argument("--interval", type=float, default=None,
                   help="seconds between decisions (default: the plan's)")
    p.add_argument("--pause-s", type=float, default=PAUSE_S,
                   help="seconds without a step before a training job counts as pausing")
    p.add_argument("--config", type=Path, default=None, help="TOML config (prices)")
    p.add_argument("--kubernetes", choices=("auto", "on", "off"), default="auto",
                   help="resize the pod in place (auto: when POD_NAME is set)")
    p.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="where the job runs: here, or as a Ray task sized to the plan's "
                   "largest phase (pip install 'cloudopt[ray]')")
    p.add_argument("--ray-address", default=None,
                   help="with --executor ray: a cluster (auto, HEAD:6379, ray://HEAD:10001); "
                   "default a local Ray")
    p.add_argument("--quiet", action="store_true", help="say nothing of the changes")
    p.add_argument("command", nargs=argparse.REMAINDER,
                   help="the job's command, after --")
    return p


def _log_dir(args: argparse.Namespace) -> Path:
    if args.log_dir is not None:
        return args.log_dir
    base = args.plan if args.plan.is_dir() else args.plan.parent
    return base / "live" / datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")


def run(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise CloudoptError("run --plan: give the job's command after --, e.g. "
                            "python -m optimizer run --plan runs/NAME -- python train.py")
    plan = LivePlan.load(args.plan)
    out = _log_dir(args)
    options = {"interval": args.interval or plan.interval_s, "pause_s": args.pause_s,
               "config": str(args.config) if args.config else None,
               "kubernetes": args.kubernetes, "quiet": args.quiet}
    if args.executor == "ray":
        return _run_on_ray(command, plan, out, options, args.ray_address)
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        list(range(os.cpu_count() or 1))
    return supervise(command, plan, out, cores, **options)


def supervise(command: list[str], plan: LivePlan, out: Path, cores: list[int], *,
              interval: float, pause_s: float, config: str | None, kubernetes: str,
              quiet: bool, cwd: str | None = None) -> int:
    """Run ``command`` under ``plan`` on ``cores`` (the most any phase may hold) until it
    exits; its log goes to ``out``. Returns the job's exit status (128 + N for signal N)."""
    prices = load_config(Path(config) if config else None).resources
    out.mkdir(parents=True, exist_ok=True)
    _set_aside(out, quiet)
    events, control = out / EVENTS_FILE, out / CONTROL_FILE
    env = probe_environment(os.environ, events, control)
    first = plan.allocation_for(plan.schedule[0] if plan.schedule else None)
    start_cores = cores[:max(1, min(first.cpus, len(cores)))]
    env.setdefault("OMP_NUM_THREADS", str(len(start_cores)))
    own_group = not _terminal_foreground()
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(command, env=env, cwd=cwd,
                                preexec_fn=_child_setup(start_cores, os.getpid(), own_group))
    except OSError as exc:
        raise CloudoptError(f"run --plan: cannot start {command[0]!r}: {exc}") from None
    watchdog = Watchdog(proc.pid) if own_group else None
    forward = _forward_signals(proc)
    monitor = ProcessMonitor(proc.pid, out / TRACE_FILE, exec_id="live", interval=0.5,
                             start_time=t0)
    monitor.start()
    live = _actuator(kubernetes, interval, proc.pid, out, control, monitor, t0)
    tail = ProbeTail(events)
    tail.tracker.pause_s = pause_s
    source, watch = tail.current, WATCH_S
    if plan.phase_source == "detector":  # a job the probe cannot see into
        from optimizer.trials.phase_profile import load_detector

        source, watch = DetectorPhases(load_detector(None), lambda: monitor.rows).current, None
    initial = PhaseAllocation(len(start_cores), first.memory_gb)
    ctl = Controller(live, PlanDecider(plan), source, cores=cores, initial=initial,
                     interval_s=interval, usage=lambda: monitor.rows,
                     alive=lambda: proc.poll() is None, watch_s=watch)
    ctl.start()
    try:
        code = proc.wait()
    except BaseException:  # interrupted (a cancelled Ray task): the job does not outlive us
        _stop(proc)
        if own_group:  # its children too (the group is the job's alone)
            _kill_group(proc.pid)
        raise
    finally:
        if watchdog is not None:  # the job ended under our control: nothing left to guard
            watchdog.release()
        ctl.stop()
        monitor.stop()
        for sig, handler in forward.items():
            signal.signal(sig, handler)
    wall = time.monotonic() - t0
    _summarise(out, plan, ctl, wall, code, command, prices, quiet=quiet)
    return code if code >= 0 else 128 - code


def _set_aside(out: Path, quiet: bool) -> Path | None:
    """Move an earlier run's log files in ``out`` to ``out/earlier/<time>/`` (the time its
    files were last written); returns that folder, None when there was nothing to move."""
    stale = [out / name for name in LOG_FILES if os.path.lexists(out / name)]
    if not stale:
        return None
    last = max(p.lstat().st_mtime for p in stale)
    stamp = datetime.fromtimestamp(last, timezone.utc).strftime("%Y%m%d-%H%M%S")
    keep, n = out / "earlier" / stamp, 1
    while True:
        try:
            keep.mkdir(parents=True)
            break
        except FileExistsError:  # two runs ended within the same second
            keep, n = out / "earlier" / f"{stamp}-{n}", n + 1
    for path in stale:
        os.replace(path, keep / path.name)
    if not quiet:
        print(f"cloudopt: the earlier run's log in {out} moved to {keep}", file=sys.stderr)
    return keep


def _terminal_foreground() -> bool:
    """Whether this process is the foreground job of a terminal on its standard input, output
    or error (``cmd < data`` typed in a shell is one: Ctrl-C reaches its whole job)."""
    for fd in (0, 1, 2):
        try:
            return os.tcgetpgrp(fd) == os.getpgrp()
        except OSError:  # not a terminal (a container, a pipe, a file, a Ray worker)
            continue
    return False


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # already gone
        pass


def _stop(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()


def plan_task(command: list[str], plan: dict[str, Any], options: dict[str, Any],
              cwd: str | None) -> dict[str, Any]:
    """The body of the Ray task (runs on a worker): the wrapper on leased cores, in a
    temporary log folder whose files come back as bytes with the job's exit status."""
    import tempfile

    from optimizer.trials.core_lease import CoreLease

    live_plan = LivePlan.from_dict(plan)
    here = cwd if cwd and Path(cwd).is_dir() else None  # else the shipped copy (the task's cwd)
    with tempfile.TemporaryDirectory(prefix="cloudopt-plan-") as tmp, \
            CoreLease(live_plan.largest().cpus) as cores:
        out = Path(tmp)
        code = supervise(command, live_plan, out, cores, cwd=here, **options)
        files = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    return {"exit_code": code, "files": files}


def _run_on_ray(command: list[str], plan: LivePlan, out: Path, options: dict[str, Any],
                address: str | None) -> int:
    from optimizer.trials.executors.ray_executor import (
        GIB,
        OBJECT_STORE_BYTES,
        _ray,
        shipped_folder,
    )

    ray = _ray()
    biggest = plan.largest()
    started = not ray.is_initialized()
    if started:
        try:
            if address:
                ray.init(address=address, runtime_env=shipped_folder(Path.cwd(), [out]),
                         include_dashboard=False)
            else:
                ray.init(num_cpus=len(os.sched_getaffinity(0)), include_dashboard=False,
                         object_store_memory=OBJECT_STORE_BYTES)
        except (ConnectionError, RuntimeError, ValueError, OSError) as exc:
            raise CloudoptError(f"run --plan --executor ray: could not start or reach "
                                f"{address or 'a local Ray'}: {exc}") from None
    resources: dict[str, Any] = {"num_cpus": biggest.cpus,
                                 "num_gpus": int(plan.static.get("gpus") or 0),
                                 "name": "cloudopt-run-plan"}
    if biggest.memory_gb:
        resources["memory"] = int(biggest.memory_gb * GIB)
    task = ray.remote(max_retries=0)(plan_task).options(**resources)
    ref = task.remote(command, plan.to_dict(), options, None if address else os.getcwd())
    try:
        result = ray.get(ref)
    except KeyboardInterrupt:
        ray.cancel(ref)  # the task's wrapper stops the job
        raise
    except ray.exceptions.RayError as exc:
        raise CloudoptError(f"run --plan --executor ray: the job's task failed: "
                            f"{str(exc).strip().splitlines()[-1]}") from None
    finally:
        if started:
            ray.shutdown()
    out.mkdir(parents=True, exist_ok=True)
    _set_aside(out, options["quiet"])
    for name, data in result["files"].items():
        atomic_write_bytes(out / name, data)
    if not options["quiet"]:
        print(f"cloudopt: the job ran on Ray; its log is in {out}", file=sys.stderr)
    return int(result["exit_code"])


def _child_setup(cores: list[int], parent_pid: int, own_group: bool):
    affinity = hasattr(os, "sched_setaffinity")

    def setup() -> None:  # runs in the child between fork and exec
        if own_group:  # a group of its own, which the watchdog can end whole
            os.setpgid(0, 0)
        die_with_parent(parent_pid)
        if affinity:
            os.sched_setaffinity(0, cores)

    return setup


def _forward_signals(proc: subprocess.Popen) -> dict[int, Any]:
    """SIGTERM and SIGINT go to the job (the wrapper waits for it to exit); not from a
    thread other than the main one (a Ray worker's), where Python cannot take signals."""
    previous: dict[int, Any] = {}
    if threading.current_thread() is not threading.main_thread():
        return previous
    for sig in (signal.SIGTERM, signal.SIGINT):
        previous[sig] = signal.getsignal(sig)
        signal.signal(sig, lambda s, f: proc.send_signal(s))
    return previous


def _actuator(kubernetes: str, interval: float, pid: int, out: Path, control: Path,
              monitor: Any, t0: float) -> Any:
    live = LiveTrial(pid, out, control_file=control, monitor=monitor, t0=t0)
    pod = os.environ.get("POD_NAME")
    if kubernetes == "off" or (kubernetes == "auto" and not pod):
        return live
    if not pod:
        raise CloudoptError("run --plan --kubernetes on: POD_NAME is not set (the Job's pod "
                            "passes it through the downward API; see k8s-job.yaml)")
    from optimizer.trials.live.pod_resize import PodResizer, ResizingTrial

    resizer = PodResizer(pod, os.environ.get("POD_NAMESPACE", "default"),
                         os.environ.get("CONTAINER_NAME", "training"), trial_dir=out,
                         control_file=control, interval_s=interval)
    return ResizingTrial(live, resizer)


def _summarise(out: Path, plan: LivePlan, ctl: Controller, wall: float, code: int,
               command: list[str], prices: Any, quiet: bool) -> None:
    cost = billed_cost(ctl.timeline, wall, gpus=int(plan.static.get("gpus") or 0),
                       cost_per_cpu_hour=prices.cost_per_cpu_hour,
                       cost_per_gb_hour=prices.cost_per_gb_hour,
                       cost_per_gpu_hour=prices.cost_per_gpu_hour)
    cpu_s, gb_s = held_seconds(ctl.timeline, wall)
    atomic_write_json(out / "live-summary.json", {
        "command": command, "exit_code": code, "wall_time_s": round(wall, 3),
        "cost": cost, "cpu_seconds": round(cpu_s, 3), "gb_seconds": round(gb_s, 3),
        "phases_seen": ctl.phases_seen, "changes": len(ctl.timeline) - 1,
        "timeline": [[round(t, 3), c, m] for t, c, m in ctl.timeline],
        "controller_error": ctl.error, "plan_source": plan.source})
    if not quiet:
        stages = ", ".join(f"{k} ×{v}" for k, v in ctl.phases_seen.items()) or "none seen"
        print(f"cloudopt: {len(ctl.timeline) - 1} changes over {wall:.1f} s (stages: "
              f"{stages}); billed ${cost:.6f}; log in {out}"
              + (f"; the controller stopped: {ctl.error}" if ctl.error else ""),
              file=sys.stderr)
