"""Reading the probe's event file into what a trial measured: steps, samples, throughput, the
training loader's size and epochs, the loss, gradient norms and the stages of the run."""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

WARMUP_SHARE = 0.1
"""Share of the training time (from the first step) left out of the steady rate: the first
steps pay for allocator warm-up, lazy initialisation and the first batches' loading."""


@dataclass
class ProbeRecord:
    """What the probe saw of one run. Times ``t`` are seconds since the probe started, which is
    the interpreter's start-up (before the script's first line)."""

    header: dict[str, Any]
    steps: int = 0
    samples: float = 0.0
    step_points: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)))
    """``(t, cumulative steps, cumulative samples)`` of each aggregated steps event (also where
    a training pass ends and resumes, and at exit)."""
    first_step_t: float | None = None
    batch_sizes: Counter = field(default_factory=Counter)
    loaders: dict[int, dict[str, Any]] = field(default_factory=dict)
    """Per data loader: ``dataset_len``, ``batches``, ``epochs_started``, ``epochs_completed``,
    ``first_start_t`` (when its first pass began),
    ``train_epochs`` (completed passes with optimizer steps in them: a loader also used to
    evaluate is not counted twice) and ``steps`` (optimizer steps taken while it was
    iterated)."""
    losses: list[tuple[float, float, float]] = field(default_factory=list)
    """``(step, t, value)``: a loss event is the mean of the losses since the last one, at their
    middle step (a fraction where their count is even)."""
    grads: list[tuple[int, float | None, float]] = field(default_factory=list)
    """``(step, samples, squared gradient norm)`` of single steps."""
    windows: list[dict[str, Any]] = field(default_factory=list)
    """Windows of ``k`` consecutive steps: ``samples`` (per step), ``small`` (each step's
    squared norm) and ``big`` (squared norm of their mean gradient)."""
    modes: list[tuple[float, bool]] = field(default_factory=list)
    controls: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    breaks: list[float] = field(default_factory=list)
    """Times a training pass paused: a switch to eval mode, a loader's pass ending."""
    exit_t: float | None = None
    last_t: float = 0.0
    torch_version: str | None = None
    unit: str = "optimizer step"
    """What one step is: ``optimizer step`` where the script stepped a ``torch.optim``
    optimizer, else ``backward pass`` (an update written by hand)."""
    backward_passes: int = 0
    world: int = 1
    """Data-parallel ranks whose files were read: samples are summed over them."""
    rank_samples: list[float] = field(default_factory=list)
    """Each rank's own samples, rank 0 first (empty for a single process)."""

    @property
    def global_batch(self) -> int | None:
        """The samples of one step of the whole job: each rank's batch times the ranks."""
        per = self.samples_per_step
        return per * self.world if per else None

    @property
    def samples_per_step(self) -> int | None:
        """One process's samples per step: the training loader's batch size, else the one
        seen most often (each worker's batch in a data-parallel job)."""
        loader = self.train_loader
        if loader is not None and loader.get("batch_size"):
            return int(loader["batch_size"])
        return self.batch_sizes.most_common(1)[0][0] if self.batch_sizes else None

    @property
    def train_loader(self) -> dict[str, Any] | None:
        """The loader during whose iteration the optimizer stepped (most steps)."""
        used = [v for v in self.loaders.values() if v["steps"] > 0]
        return max(used, key=lambda v: v["steps"]) if used else None

    def steady_throughput(self) -> float | None:
        """Training samples per second: the samples of the steps after the warm-up share of the
        training time over the time they took, leaving out the intervals in which training
        paused (evaluation, the turn of an epoch), as a script's own rate does; None with fewer
        than 3 points."""
        p = self.step_points
        if len(p) < 3 or p[-1, 2] <= 0:
            return None
        t0, t1 = p[0, 0], p[-1, 0]
        start = np.searchsorted(p[:, 0], t0 + WARMUP_SHARE * (t1 - t0))
        keep = p[min(start, len(p) - 3):]
        dt, ds = np.diff(keep[:, 0]), np.diff(keep[:, 2])
        breaks = np.asarray(self.breaks, dtype=float)
        # An interval without steps (a pause, or up to the exit) or across a pause is not
        # training; the probe writes a point where each pass ends and where training resumes.
        paused = ds <= 0
        if len(breaks):
            paused |= np.array([((breaks > a) & (breaks < b)).any()
                                for a, b in zip(keep[:-1, 0], keep[1:, 0], strict=True)])
        if (~paused).any():
            dt, ds = dt[~paused], ds[~paused]
        return float(ds.sum() / dt.sum()) if dt.sum() > 0 and ds.sum() > 0 else None

    def overall_throughput(self) -> float | None:
        """Samples per second from the first step to the last, pauses included."""
        p = self.step_points
        if len(p) < 2 or p[-1, 0] <= p[0, 0]:
            return None
        return float((p[-1, 2] - p[0, 2]) / (p[-1, 0] - p[0, 0]))

    def rate_between(self, a: float, b: float) -> float | None:
        """Samples per second from ``a`` to ``b`` (probe times), pauses included: the
        cumulative samples interpolated between the aggregated step events."""
        p = self.step_points
        if len(p) < 2 or b <= a:
            return None
        t, n = p[:, 0], p[:, 2]
        start = self.training_start()
        if start is not None and start < t[0]:  # nothing done before training: the first
            t, n = np.r_[start, t], np.r_[0.0, n]  # batch is loaded and stepped after it
        done = float(np.interp(b, t, n) - np.interp(a, t, n))
        return done / (b - a) if done > 0 else None

    def training_start(self) -> float | None:
        """When training began: the training loader's first pass, else the first step."""
        loader = self.train_loader
        if loader is not None and loader.get("first_start_t") is not None:
            return float(loader["first_start_t"])
        return self.first_step_t

    @property
    def last_step_t(self) -> float | None:
        """When the last step was taken: the first point at the final count (later ones mark
        pauses and the exit); None without points."""
        p = self.step_points
        return float(p[np.argmax(p[:, 1] == p[-1, 1]), 0]) if len(p) else None

    def last_pass_end(self) -> float | None:
        """When training ended: the first pause (a loader's pass ending, a switch to eval)
        after the last step, else the last step's event."""
        last = self.last_step_t
        if last is None:
            return None
        after = [b for b in self.breaks if b >= last]
        return min(after) if after else last

    def job_samples(self, epochs: int) -> float | None:
        """The samples of a whole job of ``epochs`` epochs over the training loader."""
        loader = self.train_loader
        if loader is None or not loader.get("dataset_len"):
            return None
        return float(loader["dataset_len"]) * epochs

    @property
    def training_end_t(self) -> float:
        """Where a whole run's job time stops scaling with its samples: the last step, else
        the script's last moment (what follows is :attr:`TrialSummary.exit_s`)."""
        last = self.last_step_t
        return last if last is not None else self.end_t

    @property
    def end_t(self) -> float:
        """The script's last moment on the probe's clock: its exit, else the last event."""
        return self.exit_t if self.exit_t is not None else self.last_t

    def stages(self) -> list[tuple[float, float, str]]:
        """``(start_t, end_t, stage)``: ``startup`` before the first step, then ``train`` and
        ``eval`` (a module switched to eval mode) in turn, ``teardown`` after the last step."""
        end = self.end_t
        if self.first_step_t is None:
            return [(0.0, end, "startup")] if end > 0 else []
        last_step = self.last_step_t if len(self.step_points) else self.first_step_t
        out = [(0.0, self.first_step_t, "startup")]
        cursor, stage = self.first_step_t, "train"
        for t, train in self.modes:
            if t <= cursor or t >= last_step:
                continue
            new = "train" if train else "eval"
            if new != stage:
                out.append((cursor, t, stage))
                cursor, stage = t, new
        out.append((cursor, last_step, stage))
        if end > last_step:
            out.append((last_step, end, "teardown"))
        return [(round(a, 3), round(b, 3), s) for a, b, s in out if b > a]


def _apply(rec: ProbeRecord, ev: dict[str, Any], points: list) -> None:
    kind, t = ev.get("e"), float(ev.get("t", 0.0))
    rec.last_t = max(rec.last_t, t)
    if kind == "steps":
        rec.steps, rec.samples = int(ev["step"]), float(ev["samples"])
        points.append((t, rec.steps, rec.samples))
    elif kind == "first_step":
        rec.first_step_t = t
        if ev.get("samples"):
            rec.batch_sizes[int(ev["samples"])] += 1
    elif kind in ("epoch_start", "epoch_end"):
        lo = rec.loaders.setdefault(int(ev["loader"]), {
            "dataset_len": ev.get("dataset_len"), "batches": ev.get("batches"),
            "batch_size": ev.get("batch_size"), "workers": ev.get("workers"),
            "epochs_started": 0, "epochs_completed": 0, "train_epochs": 0, "steps": 0,
            "start_step": 0})
        step = int(ev.get("step") or 0)
        if kind == "epoch_start" and lo.get("open"):
            # A framework that stops at the loader's length (Lightning's fetcher) never meets
            # its StopIteration: a new pass of the same loader ends the one before it.
            _close_pass(lo, step)
        if kind == "epoch_start":
            lo["epochs_started"] += 1
        elif lo.get("open"):
            lo["epochs_completed"] += 1
        lo.setdefault("first_start_t", t)
        if kind == "epoch_end":
            rec.breaks.append(t)
        if kind == "epoch_start":
            lo["start_step"], lo["open"] = step, True
        elif lo.get("open"):
            lo["open"] = False
            if step > lo["start_step"]:
                lo["train_epochs"] += 1  # a pass with optimizer steps; the others evaluated
        lo["steps"] = max(lo["steps"], int(ev.get("steps_in_loader") or 0))
        if ev.get("batch_size"):
            rec.batch_sizes[int(ev["batch_size"])] += 1
    elif kind == "loss":
        rec.losses.append((float(ev["step"]), t, float(ev["value"])))
    elif kind == "grad":
        rec.grads.append((int(ev["step"]), ev.get("samples"), float(ev["value"])))
    elif kind == "gradwin":
        # A window over every stride-th gradient element: its norms times the stride
        # estimate the full ones (the single steps' norms beside them are full).
        stride = float(ev.get("stride") or 1)
        if stride != 1:
            ev = {**ev, "small": [float(v) * stride for v in ev["small"]],
                  "big": float(ev["big"]) * stride}
        rec.windows.append(ev)
        rec.grads.extend((int(ev["step"]) + i, b, float(v)) for i, (b, v)
                         in enumerate(zip(ev["samples"], ev["small"], strict=False)))
    elif kind == "mode":
        rec.modes.append((t, bool(ev["train"])))
        if not ev["train"]:
            rec.breaks.append(t)
    elif kind == "control":
        rec.controls.append(ev)
    elif kind in ("probe_error", "probe_off"):  # probe_off: it could not write, and stopped
        rec.errors.append(ev)
    elif kind == "torch":
        rec.torch_version = ev.get("version")
    elif kind == "exit":
        rec.exit_t = t
        rec.steps, rec.samples = int(ev["step"]), float(ev["samples"])
        points.append((t, rec.steps, rec.samples))
        for lo in rec.loaders.values():  # a last pass that took all its batches ended
            if lo.get("open") and lo.get("batches") and \
                    rec.steps - lo["start_step"] >= int(lo["batches"]):
                _close_pass(lo, rec.steps)


def _close_pass(lo: dict[str, Any], step: int) -> None:
    """A loader's pass that ended without an ``epoch_end`` event, at ``step``."""
    lo["open"] = False
    lo["epochs_completed"] += 1
    if step > lo["start_step"]:
        lo["train_epochs"] += 1


def read_probe(path: str | os.PathLike, *, ranks: bool = True) -> ProbeRecord | None:
    """The record of a probe's event file; None when it is missing or has no header. A last
    line cut short (the process was killed mid-write) is ignored.

    Beside rank 0's file of a data-parallel trial, the other ranks' files (``ranks``) add their
    samples: at each of rank 0's step events, the samples every rank had done by that step
    (steps, the loss and stages stay rank 0's)."""
    try:
        lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    rec: ProbeRecord | None = None
    points: list[tuple[float, float, float]] = []
    events = []
    for line in lines:
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if isinstance(ev, dict):
            events.append(ev)
    by_backward = _by_backward(events)
    for ev in events:
        if ev.get("e") == "header":
            rec = ProbeRecord(header=ev)
            if by_backward:
                rec.unit = "backward pass"
        elif rec is not None:
            if by_backward and "bw" in ev:
                ev = {**ev, "step": ev["bw"], "steps_in_loader": ev.get("bw_in_loader", 0)}
            try:
                _apply(rec, ev, points)
            except (KeyError, TypeError, ValueError):
                continue
    if rec is None:
        return None
    rec.losses.sort(key=lambda row: row[0])  # a device's first losses ripen after later bins
    rec.backward_passes = max((int(ev.get("bw") or 0) for ev in events
                               if isinstance(ev.get("bw"), (int, float))), default=0)
    if points:
        rec.step_points = np.array(points, dtype=float)
    batch = rec.header.get("batch")
    if rec.samples <= 0 and isinstance(batch, int) and batch > 0 and len(rec.step_points):
        # no loader showed a batch: each step is the batch the trial set
        rec.step_points[:, 2] = rec.step_points[:, 1] * batch
        rec.samples = float(rec.steps * batch)
        rec.batch_sizes[batch] += 0 if rec.batch_sizes else 1
    if ranks:
        _add_ranks(rec, path)
    return rec


def _add_ranks(rec: ProbeRecord, path: str | os.PathLike) -> None:
    from optimizer.trials.launchers.torchrun import rank_files

    others = [r for r in (read_probe(f, ranks=False) for f in rank_files(path)) if r is not None]
    if not others:
        return
    rec.world = 1 + len(others)
    rec.rank_samples = [rec.samples] + [o.samples for o in others]
    p = rec.step_points
    if len(p):
        total = p[:, 2].copy()
        for o in others:
            q = o.step_points
            if len(q):  # a rank's samples by the step count rank 0 had reached
                total += np.interp(p[:, 1], q[:, 1], q[:, 2])
        rec.step_points = np.column_stack([p[:, 0], p[:, 1], total])
    rec.samples = float(sum(rec.rank_samples))


def _by_backward(events: list[dict[str, Any]]) -> bool:
    """Whether backward passes are the steps: the script never stepped a ``torch.optim``
    optimizer but ran backward passes (a hand-written update)."""
    stepped = backward = 0
    for ev in events:
        if ev.get("e") in ("steps", "exit"):
            try:
                stepped = max(stepped, int(ev.get("step") or 0))
                backward = max(backward, int(ev.get("bw") or 0))
            except (TypeError, ValueError):
                continue
    return stepped == 0 and backward > 0


def write_stage_marks(record: ProbeRecord, path: str | os.PathLike) -> Path:
    """The stage intervals as CSV (``start_s,end_s,stage``), written atomically."""
    from optimizer.foundation.atomic_files import atomic_write_text

    rows = ["start_s,end_s,stage"] + [f"{a},{b},{s}" for a, b, s in record.stages()]
    path = Path(path)
    atomic_write_text(path, "\n".join(rows) + "\n")
    return path
