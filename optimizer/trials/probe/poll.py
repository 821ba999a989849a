"""The probe's events read while a trial runs: rate windows of its steps (the runner's time box
stops a probe once they are steady) and its losses into the watch of a probe that trains on to
a target loss (:mod:`optimizer.trials.probe.loss_target`).

``run`` is the runner's :class:`~optimizer.trials.runner.TrialRun`: its ``probe_path`` and
read position, ``probe_batch``, ``by_backward``, ``probe_last``, ``probe_steps``,
``rates_probe``, ``loss_watch`` and ``t0``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from optimizer.foundation.atomic_files import atomic_write_json
from optimizer.trials.probe.loss_target import FILE as LOSS_TARGET_FILE

PROBE_WINDOW_S = 1.0
"""Probe rate windows: the samples of the steps of each second (the probe writes a cumulative
count ten times a second)."""


def poll_probe(run: Any) -> None:
    """New aggregated step events of the probe, as rate windows of ``PROBE_WINDOW_S``. Steps
    are backward passes until an optimizer step is seen, as the reader decides
    (:func:`optimizer.trials.probe.events.read_probe`); a loop without a DataLoader counts
    the trial's batch a step."""
    try:
        with open(run.probe_path, "rb") as fh:
            fh.seek(run.probe_pos)
            chunk = fh.read()
    except (FileNotFoundError, TypeError):
        return
    end = chunk.rfind(b"\n") + 1  # a line still being written waits for the next poll
    run.probe_pos += end
    for line in chunk[:end].splitlines():
        if run.loss_watch is not None and b'"e":"loss"' in line:
            _watch_loss(run, line)
            continue
        if b'"e":"torch"' in line:
            run.probe_torch = True
            continue
        if b'"e":"first_step"' in line:
            run.probe_first_step_s = time.monotonic() - run.t0
            continue
        if b'"e":"steps"' not in line:
            continue
        try:
            ev = json.loads(line)
            t, samples = float(ev["t"]), float(ev["samples"])
            if ev.get("step"):
                run.by_backward = False
            step = ev.get("bw" if run.by_backward else "step", 0) or 0
            if not samples and run.probe_batch:
                samples = float(step) * run.probe_batch
            samples *= getattr(run, "probe_world", 1)  # ranks step together
            run.probe_steps = (float(step), samples)
        except (ValueError, KeyError, TypeError):
            continue
        if run.probe_last is None:
            run.probe_last = (t, samples)
        elif t - run.probe_last[0] >= PROBE_WINDOW_S:
            rate = (samples - run.probe_last[1]) / (t - run.probe_last[0])
            run.rates_probe.add(time.monotonic() - run.t0, rate, samples)
            run.probe_last = (t, samples)


def _watch_loss(run: Any, line: bytes) -> None:
    """A loss event into the watch, at the samples seen before its step: the last step
    event's count, carried on at its samples per step when the loss is ahead of it (as
    :func:`optimizer.search.goodput.efficiency.loss_points` places losses, without the history)."""
    try:
        ev = json.loads(line)
        step = float(ev["bw"] if run.by_backward and "bw" in ev else ev["step"])
        value = float(ev["value"])
    except (ValueError, KeyError, TypeError):
        return
    known_step, known = run.probe_steps
    per_step = known / known_step if known_step > 0 else 0.0
    run.loss_watch.add(known + per_step * (step - 1 - known_step), value)


def write_loss_watch(run: Any, work: Path) -> None:
    """What the watch saw, filed with the trial (``loss_target.json``)."""
    if run.loss_watch is not None:
        atomic_write_json(work / LOSS_TARGET_FILE, run.loss_watch.record())
