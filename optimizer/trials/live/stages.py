"""The stage a job is in, from the probe's events, online (a file being written) or offline.

One tracker serves both, so a plan learned from the stages of recorded trials names the same
stages the controller will see in a running job:

* ``startup``: before the first optimizer step (imports, data preparation, model building);
* ``train``: optimizer steps coming;
* ``eval``: the model switched to eval mode;
* ``save``: from ``torch.save`` until training resumes (the next optimizer step, in a live
  trial the first forward pass after it, or a change of mode), so what a script does after
  serialising (compress, hash, write) counts too;
* ``pause``: in training mode, but no optimizer step for ``pause_s`` (a checkpoint written
  some other way, logging, evaluation without ``model.eval()``, the end of the job).

Online, ``pause`` is known only ``pause_s`` after the last step (the detection delay); offline
the whole gap is labelled, since a plan is fitted to what the stage costs, not to when the
controller can tell.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

PAUSE_S = 2.0
"""A training job without a step for this long is pausing (a step of a CPU job on these
scripts takes milliseconds to a few hundred)."""


class StageTracker:
    """Folds probe events into the job's stage; :meth:`stage_at` answers for any later time."""

    def __init__(self, pause_s: float = PAUSE_S) -> None:
        self.pause_s = float(pause_s)
        self.mode = "startup"  # startup, then train or eval
        self.saving = False
        self.last_step_t: float | None = None
        self.wall0: float | None = None
        """The probe's start in ``time.time()`` (its events' ``t`` counts from there)."""
        self.ended = False
        self.last_t = 0.0
        self.intervals: list[list[Any]] = []
        """``[start_t, end_t, stage]``, the stages seen so far (the last one still open)."""

    # -- events -----------------------------------------------------------------------
    def feed(self, ev: dict[str, Any]) -> None:
        kind = ev.get("e")
        try:
            t = float(ev.get("t", 0.0))
        except (TypeError, ValueError):
            return
        self.last_t = max(self.last_t, t)
        if kind == "header":
            self.wall0 = float(ev.get("wall") or 0.0) or None
            self._enter(0.0, "startup")
        elif kind in ("first_step", "steps"):
            if kind == "steps" and not ev.get("n"):
                return  # an anchor where training resumes, not a step
            # A job that steps its optimizer is training, whatever mode its model was left in.
            self.mode = "train"
            if not self.saving:
                if (self.last_step_t is not None and t - self.last_step_t > self.pause_s
                        and self._open_stage() == "train"):
                    self._enter(self.last_step_t, "pause")
                self._enter(t, "train")
            self.last_step_t = t
        elif kind == "mode":
            if self.mode == "startup" and not ev.get("train"):
                return  # a model built in eval mode before training: still starting up
            self.mode = "train" if ev.get("train") else "eval"
            if not self.saving:
                self._enter(t, self.mode)
            if self.mode == "train":
                self.last_step_t = t  # the pause clock starts again when training resumes
        elif kind == "save":
            self.saving = True
            self._enter(t, "save")
        elif kind == "save_end":
            self.saving = False
            if self.mode == "train":
                # The checkpoint lasts until training resumes: what a script does after
                # torch.save (compress, hash, fsync, upload) is checkpointing too, and on
                # one thread (checkpoint_heavy: 0.03 s in torch.save, 0.8 s after it).
                self.last_step_t = t
            else:
                self._enter(t, self.mode)
        elif kind == "resume":
            # The first forward pass after a checkpoint (a live trial's probe): the work
            # resumes now, before its first step is counted.
            if not self.saving and self._open_stage() == "save":
                self._enter(t, self.mode)
                self.last_step_t = t
        elif kind == "exit":
            self._close(t)
            self.ended = True

    def _open_stage(self) -> str | None:
        return self.intervals[-1][2] if self.intervals else None

    def _enter(self, t: float, stage: str) -> None:
        if self.intervals and self.intervals[-1][2] == stage:
            return
        if self.intervals:
            self.intervals[-1][1] = max(t, self.intervals[-1][0])
        self.intervals.append([t, None, stage])

    def _close(self, t: float) -> None:
        if self.intervals and self.intervals[-1][1] is None:
            # A job that ends some time after its last step ended in a pause (teardown).
            if (self.intervals[-1][2] == "train" and self.last_step_t is not None
                    and t - self.last_step_t > self.pause_s):
                self._enter(self.last_step_t, "pause")
            self.intervals[-1][1] = max(t, self.intervals[-1][0])

    # -- answers ----------------------------------------------------------------------
    def stage_at(self, t: float) -> str | None:
        """The stage at probe time ``t`` (None before the probe's header)."""
        stage = self._open_stage()
        if (stage == "train" and self.last_step_t is not None
                and t - self.last_step_t > self.pause_s):
            return "pause"
        return stage

    def probe_time(self, wall: float | None = None) -> float | None:
        """``time.time()`` (or ``wall``) as the probe's clock."""
        if self.wall0 is None:
            return None
        return (time.time() if wall is None else wall) - self.wall0

    def closed_intervals(self, end_t: float | None = None) -> list[tuple[float, float, str]]:
        """Every stage interval, the open one closed at ``end_t`` (or dropped without it)."""
        out: list[tuple[float, float, str]] = []
        for a, b, s in self.intervals:
            b = b if b is not None else end_t
            if b is None or b <= a:
                continue
            if out and out[-1][2] == s:  # a stage that lasted no time between two of another
                out[-1] = (out[-1][0], round(b, 3), s)
            else:
                out.append((round(a, 3), round(b, 3), s))
        return out


class ProbeTail:
    """Reads the complete lines a running probe has added since the last call."""

    def __init__(self, path: str | os.PathLike, tracker: StageTracker | None = None) -> None:
        self.path = Path(path)
        self.pos = 0
        self.tracker = tracker or StageTracker()

    def poll(self) -> StageTracker:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.pos)
                chunk = fh.read()
        except OSError:
            return self.tracker
        end = chunk.rfind(b"\n") + 1  # a line still being written waits for the next poll
        self.pos += end
        for line in chunk[:end].splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if isinstance(ev, dict):
                self.tracker.feed(ev)
        return self.tracker

    def current(self) -> str | None:
        """The stage now (None until the probe has written its header)."""
        tracker = self.poll()
        t = tracker.probe_time()
        return None if t is None else tracker.stage_at(t)


class DetectorPhases:
    """The slow path, for a job the probe cannot see into: the phase detector on the monitor's
    windows (``cpu_cores``, ``mem_gb``), named ``phase-N``. A sample's phase is known once the
    detector's history window (``delay`` samples) is full, so it trails the job by that much;
    only the last ``WINDOW`` samples are labelled each time (the cost stays flat in a long run).
    """

    WINDOW = 240

    def __init__(self, detector: Any, usage: Any) -> None:
        self.detector = detector
        self.usage = usage
        self.delay = int(getattr(detector, "delay", 3))

    def current(self) -> str | None:
        rows = list(self.usage())[-self.WINDOW:]
        if len(rows) < self.delay + 2:
            return None
        import numpy as np

        x = np.array([[float(r["cpu_cores"]), float(r["mem_gb"])] for r in rows])
        label = int(self.detector.predict([x])[0][-1])
        return f"phase-{label}" if label >= 0 else None


def detector_intervals(times: Any, labels: Any) -> list[tuple[float, float, str]]:
    """Runs of one detector label as ``(start_s, end_s, "phase-N")`` (warm-up samples, label
    -1, join the first phase): each sample covers the interval since the one before."""
    out: list[tuple[float, float, str]] = []
    prev_t = 0.0
    first = next((int(lab) for lab in labels if int(lab) >= 0), None)
    if first is None:
        return []
    for t, lab in zip(times, labels, strict=True):
        name = f"phase-{int(lab) if int(lab) >= 0 else first}"
        if out and out[-1][2] == name:
            out[-1] = (out[-1][0], float(t), name)
        else:
            out.append((prev_t if not out else out[-1][1], float(t), name))
        prev_t = float(t)
    return [(round(a, 3), round(b, 3), s) for a, b, s in out if b > a]


def stage_intervals(events_path: str | os.PathLike,
                    pause_s: float = PAUSE_S) -> list[tuple[float, float, str]]:
    """The stages of a recorded run's probe events (probe time, seconds from its start)."""
    tail = ProbeTail(events_path, StageTracker(pause_s))
    tracker = tail.poll()
    return tracker.closed_intervals(end_t=tracker.last_t)


__all__ = ["PAUSE_S", "DetectorPhases", "ProbeTail", "StageTracker", "detector_intervals",
           "stage_intervals"]
