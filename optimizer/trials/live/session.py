"""A controller attached to one trial the runner launches, and the trial's bill afterwards.

:class:`LiveSetup` is what a caller puts in a trial's request
(:class:`~optimizer.trials.run.request.TrialRequest`'s ``live``): the decider and the decision
interval. The trial starts with the largest
allocation the decider may ask for (its cores leased for the whole run); the controller
narrows and widens it from there, and the summary's cost is billed per interval at what was
held (:func:`optimizer.trials.live.controller.billed_cost`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import ResourceConfig
from optimizer.trials.live.actuators import LiveTrial
from optimizer.trials.live.controller import (
    WATCH_S,
    Controller,
    Decider,
    billed_cost,
    held_seconds,
    watches_stages,
)
from optimizer.trials.live.plan import PhaseAllocation
from optimizer.trials.live.stages import PAUSE_S, DetectorPhases, ProbeTail
from optimizer.trials.records import TrialSummary


@dataclass
class LiveSetup:
    """How a trial is adapted while it runs."""

    decider: Decider
    interval_s: float = 1.0
    pause_s: float = PAUSE_S
    label: str = ""
    """The run's name in reports (e.g. ``live plan``, ``reactive-max``)."""
    memory_mode: str = "request"
    """See :class:`~optimizer.trials.live.controller.Controller`."""
    detector: Any = None
    """A phase detector: its ``phase-N`` on the monitor's windows is the phase (the slow
    path, for a plan made from the detector's phases); None: the probe's stages."""
    cores: list[int] | None = None
    """The cores the controller may give the job (default: the trial's)."""
    start_cpus: int | None = None
    """How many of them the job is launched on (its first phase's; default: all). A job
    launched on all and narrowed at once would be narrowed while it loads torch, whose
    OpenMP runtime counts its CPUs then; launched on its first phase's, nothing moves it
    while it loads (``_cloudopt_probe_load`` loads it on :attr:`cores`)."""


def launch_cores(setup: LiveSetup | None, cpus: list[int]) -> list[int]:
    """The cores a trial's process starts on: a live trial's first phase's, else all."""
    if setup is None or not setup.start_cpus:
        return cpus
    return cpus[:max(1, min(setup.start_cpus, len(cpus)))]


def start_controller(setup: LiveSetup, run: Any, work: Path, cpus: list[int],
                     allocation: Allocation) -> Controller:
    """A started controller on the runner's :class:`~optimizer.trials.runner.TrialRun`."""
    live = LiveTrial(run.proc.pid, work, control_file=work / "probe-control.json",
                     monitor=run.monitor, t0=run.t0)
    tail = ProbeTail(run.probe_path) if run.probe_path is not None else None
    if tail is not None:
        tail.tracker.pause_s = setup.pause_s
    source = (DetectorPhases(setup.detector, lambda: run.monitor.rows).current
              if setup.detector is not None else
              tail.current if tail is not None else (lambda: None))
    ctl = Controller(live, setup.decider, source,
                     cores=setup.cores or cpus,
                     initial=PhaseAllocation(len(launch_cores(setup, cpus)),
                                             allocation.memory_gb),
                     interval_s=setup.interval_s, usage=lambda: run.monitor.rows,
                     alive=lambda: not run.exited.is_set(), memory_mode=setup.memory_mode,
                     watch_s=WATCH_S if setup.detector is None and tail is not None
                     and watches_stages(setup.decider) else None)
    ctl.start()
    return ctl


def bill_live_trial(summary: TrialSummary, ctl: Controller, setup: LiveSetup,
                    resources: ResourceConfig) -> TrialSummary:
    """``summary`` with its cost billed at the allocations held and ``live`` filled in."""
    wall = summary.wall_time_s
    cost = billed_cost(ctl.timeline, wall, gpus=summary.allocation.gpus,
                       cost_per_cpu_hour=resources.cost_per_cpu_hour,
                       cost_per_gb_hour=resources.cost_per_gb_hour,
                       cost_per_gpu_hour=resources.cost_per_gpu_hour)
    cpu_s, gb_s = held_seconds(ctl.timeline, wall)
    summary.cost = cost
    summary.hourly_cost = cost * 3600 / wall if wall > 0 else summary.hourly_cost
    if summary.predicted_total_time_s:
        # A probe's job beyond what it ran is billed at its average rate so far.
        summary.predicted_total_cost = summary.hourly_cost * summary.predicted_total_time_s / 3600
    summary.live = {
        "decider": setup.label or setup.decider.name, "interval_s": setup.interval_s,
        "changes": len(ctl.timeline) - 1, "phases_seen": dict(ctl.phases_seen),
        "timeline": [[round(t, 3), c, m] for t, c, m in ctl.timeline],
        "cpu_seconds": round(cpu_s, 3), "gb_seconds": round(gb_s, 3), "error": ctl.error,
    }
    return summary


__all__ = ["LiveSetup", "bill_live_trial", "launch_cores", "start_controller"]
