"""``python -m optimizer run --plan RUN -- COMMAND ...``: run a job under a recorded live plan.

A wrapper fit to be a container's entrypoint: it starts ``COMMAND`` with the in-process probe
(the job is not changed), watches its stages and, every interval, moves it to the allocation
the plan (``RUN/live-plan.json``, written by the main command) names for the stage: the CPU
affinity of every thread and the job's intra-op threads, and the memory request. Inside a
Kubernetes pod (``POD_NAME`` set, or ``--kubernetes on``) the pod is also resized in place
through its ``resize`` subresource (:mod:`optimizer.trials.live.pod_resize`).

The job's output, exit status and signals pass through: SIGTERM and SIGINT are forwarded to
it, and the wrapper exits with its status. If the controller fails, the job keeps running at
its last allocation. What was done is in ``--log-dir``: ``changes.jsonl`` (every change, its
cause and stage), ``trace.csv`` (the monitor's samples), ``probe.jsonl`` and
``live-summary.json`` (the allocation held over time and its bill).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from optimizer.foundation.atomic_files import atomic_write_json
from optimizer.foundation.config import load_config
from optimizer.foundation.errors import CloudoptError
from optimizer.trials.live.actuators import LiveTrial
from optimizer.trials.live.controller import Controller, PlanDecider, billed_cost, held_seconds
from optimizer.trials.live.plan import LivePlan, PhaseAllocation
from optimizer.trials.live.stages import PAUSE_S, DetectorPhases, ProbeTail
from optimizer.trials.monitor import ProcessMonitor
from optimizer.trials.probe import probe_environment


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
    prices = load_config(args.config).resources
    interval = args.interval or plan.interval_s
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        list(range(os.cpu_count() or 1))
    out = _log_dir(args)
    out.mkdir(parents=True, exist_ok=True)
    events, control = out / "probe.jsonl", out / "probe-control.json"
    env = probe_environment(os.environ, events, control)
    first = plan.allocation_for(plan.schedule[0] if plan.schedule else None)
    start_cores = cores[:max(1, min(first.cpus, len(cores)))]
    env.setdefault("OMP_NUM_THREADS", str(len(start_cores)))
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(command, env=env, preexec_fn=_pin(start_cores))
    except OSError as exc:
        raise CloudoptError(f"run --plan: cannot start {command[0]!r}: {exc}") from None
    forward = _forward_signals(proc)
    monitor = ProcessMonitor(proc.pid, out / "trace.csv", exec_id="live", interval=0.5,
                             start_time=t0)
    monitor.start()
    live = _actuator(args, proc.pid, out, control, monitor, t0)
    tail = ProbeTail(events)
    tail.tracker.pause_s = args.pause_s
    source = tail.current
    if plan.phase_source == "detector":  # a job the probe cannot see into
        from optimizer.trials.phase_profile import load_detector

        source = DetectorPhases(load_detector(None), lambda: monitor.rows).current
    initial = PhaseAllocation(len(start_cores), first.memory_gb)
    ctl = Controller(live, PlanDecider(plan), source, cores=cores, initial=initial,
                     interval_s=interval, usage=lambda: monitor.rows,
                     alive=lambda: proc.poll() is None)
    ctl.start()
    try:
        code = proc.wait()
    finally:
        ctl.stop()
        monitor.stop()
        for sig, handler in forward.items():
            signal.signal(sig, handler)
    wall = time.monotonic() - t0
    _summarise(out, plan, ctl, wall, code, command, prices, quiet=args.quiet)
    return code if code >= 0 else 128 - code


def _pin(cores: list[int]):
    def setup() -> None:
        if hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, cores)
    return setup


def _forward_signals(proc: subprocess.Popen) -> dict[int, Any]:
    """SIGTERM and SIGINT go to the job (the wrapper waits for it to exit)."""
    previous = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        previous[sig] = signal.getsignal(sig)
        signal.signal(sig, lambda s, f: proc.send_signal(s))
    return previous


def _actuator(args: argparse.Namespace, pid: int, out: Path, control: Path, monitor: Any,
              t0: float) -> Any:
    live = LiveTrial(pid, out, control_file=control, monitor=monitor, t0=t0)
    pod = os.environ.get("POD_NAME")
    if args.kubernetes == "off" or (args.kubernetes == "auto" and not pod):
        return live
    if not pod:
        raise CloudoptError("run --plan --kubernetes on: POD_NAME is not set (the Job's pod "
                            "passes it through the downward API; see k8s-job.yaml)")
    from optimizer.trials.live.pod_resize import PodResizer, ResizingTrial

    resizer = PodResizer(pod, os.environ.get("POD_NAMESPACE", "default"),
                         os.environ.get("CONTAINER_NAME", "training"), trial_dir=out,
                         control_file=control, interval_s=args.interval or 1.0)
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
