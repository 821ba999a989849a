"""One trial from an empty folder to its recorded summary.

:func:`run_trial` reads as its steps: a clean work folder; the command line, environment and
cores (:func:`~optimizer.trials.run.launch.trial_launch`), recorded in ``config.json`` before
anything runs; the script started, pinned and monitored
(:func:`~optimizer.trials.runner.start_trial`); watched until it ends, its rate is steady or
its time box or hard limit passes, a live controller beside it where the request has one;
what it amounts to (:func:`~optimizer.trials.run.summary.summarize`), billed at what a
controller held; its files moved into the trial folder, ``summary.json`` last. A crash, an
out-of-memory kill or a timeout is a recorded failed trial, never an exception.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from optimizer.foundation.atomic_files import atomic_write_json
from optimizer.foundation.config import ResourceConfig
from optimizer.trials.launchers.plan import LaunchPlan
from optimizer.trials.live.controller import Controller
from optimizer.trials.live.session import bill_live_trial, launch_cores, start_controller
from optimizer.trials.probe.loss_target import LossWatch
from optimizer.trials.probe.poll import write_loss_watch
from optimizer.trials.records import TrialSummary
from optimizer.trials.run.launch import TrialLaunch, launch_record, trial_launch
from optimizer.trials.run.request import TrialRequest
from optimizer.trials.run.summary import summarize
from optimizer.trials.runner import (
    TrialRun,
    finalize_trial,
    poll_outputs,
    prepare_trial_dir,
    start_trial,
    stop_trial,
    wait_trial,
)


def run_trial(plan: LaunchPlan, request: TrialRequest, resource_config: ResourceConfig, *,
              analysis: dict[str, Any],
              on_start: Callable[[TrialRun], None] | None = None) -> TrialSummary:
    """Run ``plan``'s script once as ``request`` asks and record it in ``request.trial_dir``.

    ``analysis``: what the script's source shows
    (:func:`~optimizer.trials.script_scan.analyze_source`), under what the script reports of
    its model. ``on_start`` is called with the running trial (the manager keeps its process,
    which a Ray Train rank's watch stops).
    """
    work = prepare_trial_dir(request.trial_dir)
    launch = trial_launch(plan, request, resource_config, work)
    atomic_write_json(request.trial_dir / "config.json", launch_record(plan, request, launch))
    run = _start(launch, request)
    if on_start is not None:
        on_start(run)
    wall, controller = _watch(run, launch, request)
    poll_outputs(run, time.monotonic() - run.t0, request.quiet)
    write_loss_watch(run, work)
    summary = summarize(run, plan, request, launch, wall, resource_config, analysis)
    if controller is not None:
        bill_live_trial(summary, controller, request.live, resource_config)
    finalize_trial(request.trial_dir, work, summary)
    return summary


def _start(launch: TrialLaunch, request: TrialRequest) -> TrialRun:
    """The script started on its cores (a live trial's first phase's), monitored."""
    alloc = request.allocation
    run = start_trial(launch.command, launch.env, launch_cores(request.live, launch.cpus),
                      launch.work, launch.trial_id, alloc, request.monitor_interval,
                      launch.metrics_path)
    run.probe_path, run.probe_batch = launch.probe_events, launch.probe_batch
    run.job_samples, run.probe_world = request.total_samples, launch.world
    if (request.loss_target is not None and launch.probe_events is not None
            and request.probe_seconds is not None):
        run.loss_watch = LossWatch(request.loss_target)
    return run


def _watch(run: TrialRun, launch: TrialLaunch, request: TrialRequest
           ) -> tuple[float, Controller | None]:
    """Wait for the trial to end (a live controller adapting it meanwhile); its wall time and
    the controller, stopped. The script's process tree is gone afterwards, whatever happens."""
    live = request.live
    controller = start_controller(live, run, launch.work, launch.cpus, request.allocation) \
        if live is not None else None
    steady = sys.maxsize if request.until_box else request.steady_windows
    try:
        wall = wait_trial(run, request.probe_seconds, request.timeout_s,
                          request.monitor_interval, request.quiet, steady, request.steady_tol)
    finally:
        if controller is not None:
            controller.stop()
        stop_trial(run)
    return wall, controller


__all__ = ["run_trial"]
