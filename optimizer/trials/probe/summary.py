"""What a trial's summary takes from the probe: samples, throughput, the job's size, and the
facts the report shows (steps, epochs, loss, the printed rate beside the probe's)."""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from optimizer.trials.probe.events import ProbeRecord

MIN_STEPS = 3
"""Fewer optimizer steps than this measure nothing: the figures come from other sources."""
FINAL_SHARE, FINAL_READINGS = 0.1, 5
"""A whole run's final training loss is the mean of its readings over the last tenth of its
steps, and of at least five readings."""
PRINTED_GAP = 0.05
"""A printed rate further than this from the probe's is shown beside it."""
MIN_WINDOW_S = 0.2
"""Printed windows shorter than this are not compared: the time a line was seen is known to
the runner's poll (0.1 s)."""


@dataclass
class ProbeFigures:
    samples: float | None = None
    throughput: float | None = None
    startup_s: float | None = None
    total_samples: float | None = None
    total_source: str = ""
    info: dict[str, Any] = field(default_factory=dict)


def probe_figures(record: ProbeRecord | None, tree: ast.Module | None, train_args: list[str],
                  status: str, printed: float | None, printed_source: str,
                  batch_hint: int | None = None,
                  printed_windows: Sequence[tuple[float, float, bool]] = ()) -> ProbeFigures:
    """The probe's figures of one trial (all None when it saw no training).

    ``printed_windows`` are the rates the script printed, ``(probe time the line appeared,
    samples/s, seen only after the exit)``: the probe's rate over the same windows is set
    beside them (:func:`same_windows`), so a script's rate that covers its epoch's data
    loading, or only its last epoch, is compared with what the probe counted over that
    stretch.

    Steps whose batches the probe could not see (no DataLoader, no ``OPTIMIZER_BATCH_SIZE``)
    count ``batch_hint`` samples each: the batch the trial set or the script printed.
    The job's size is the training loader's dataset length times the epochs the run makes (an
    epoch flag in the arguments, else its default in the source); a run that ended by itself
    has done the whole job, so its samples are the job's size whatever its loader.
    """
    out = ProbeFigures()
    if record is None:
        return out
    info: dict[str, Any] = {"steps": record.steps, "samples_per_step": record.samples_per_step,
                            "step_unit": record.unit,
                            "backward_passes": record.backward_passes}
    if record.errors:
        info["errors"] = [f"{e.get('hook')}: {e.get('error')}" for e in record.errors]
    if record.losses:
        info["loss_first"], info["loss_last"] = record.losses[0][2], record.losses[-1][2]
        info["loss_samples"] = len(record.losses)
        if status == "completed":
            info.update(final_training_loss(record))
    loader = record.train_loader
    if loader is not None:
        info.update(dataset_len=loader.get("dataset_len"), train_epochs=loader["train_epochs"],
                    loader_batches=loader.get("batches"))
    out.info = info
    if record.samples <= 0 and record.steps > 0 and len(record.step_points):
        # No batch seen or known: a step is the unit of work (its rate compares settings of
        # one batch size, the only ones a job whose batch cloudopt cannot set runs at).
        per_step = batch_hint or 1
        record.step_points[:, 2] = record.step_points[:, 1] * per_step
        record.samples = record.steps * per_step
        info["samples_per_step"] = batch_hint
        if not batch_hint:
            info["sample_unit"] = record.unit
    if record.steps < MIN_STEPS or record.samples <= 0:
        return out
    out.samples, out.throughput = record.samples, record.steady_throughput()
    if record.overall_throughput():
        info["overall_throughput"] = round(record.overall_throughput(), 3)
    if out.throughput:
        out.startup_s = max(record.last_step_t - record.samples / out.throughput, 0.0)
        if printed:
            info.update(printed_throughput=round(printed, 3), printed_source=printed_source,
                        printed_gap_steady=round(printed / out.throughput - 1.0, 4))
            aligned = same_windows(record, printed_windows)
            if aligned is not None:
                said, seen, n = aligned
                info.update(printed_windows=n, probe_same_windows=round(seen, 3),
                            printed_gap=round(said / seen - 1.0, 4))
            else:  # no window to align: the steady rate is the probe's only figure
                info["printed_gap"] = info["printed_gap_steady"]
    if status == "completed":
        out.total_samples, out.total_source = record.samples, "probe: completed run"
    elif tree is not None and loader is not None and loader.get("dataset_len"):
        from optimizer.trials.script_scan import epochs_of

        found = epochs_of(tree, train_args)
        if found is not None:
            info.update(epochs=found[0], epochs_source=found[1])
            out.total_samples = record.job_samples(found[0])
            out.total_source = "probe: dataset x epochs"
    return out


def final_training_loss(record: ProbeRecord) -> dict[str, float]:
    """A whole run's training loss at its end, smoothed: the mean of the loss readings over its
    last :data:`FINAL_SHARE` of steps (at least :data:`FINAL_READINGS` of them), with its
    standard error. One batch's loss is noise (a batch of 4 swings by 10%); a script that
    prints no held-out loss is judged by this (:mod:`optimizer.search.goodput.heldout`).
    Empty with fewer readings than that."""
    rows = [(s, v) for s, _, v in record.losses if np.isfinite(v)]
    if len(rows) < FINAL_READINGS:
        return {}
    last = rows[-1][0]
    tail = [v for s, v in rows if s >= (1.0 - FINAL_SHARE) * last]
    if len(tail) < FINAL_READINGS:
        tail = [v for _, v in rows[-FINAL_READINGS:]]
    values = np.asarray(tail, dtype=float)
    se = float(values.std(ddof=1) / np.sqrt(len(values)))
    return {"loss_final": round(float(values.mean()), 6), "loss_final_se": round(se, 6),
            "loss_final_readings": len(values)}


def same_windows(record: ProbeRecord, windows: Sequence[tuple[float, float, bool]]
                 ) -> tuple[float, float, int] | None:
    """``(printed mean, probe mean, windows)`` over the windows a printed rate's steady value
    is the mean of (all after the first, as :class:`~optimizer.trials.output.RateTracker`
    takes them): each from the line before it to its own, the first (when it is the only one)
    from the start of training. A line read only after the exit ends at the last training
    pass's end. None when no window is long enough to compare."""
    if not windows:
        return None
    last_pass = record.last_pass_end()
    ends = [last_pass if late and last_pass is not None else t for t, _, late in windows]
    start = record.training_start()
    spans = ([(start, ends[0], windows[0][1])] if len(windows) == 1 else
             [(ends[i - 1], ends[i], windows[i][1]) for i in range(1, len(windows))])
    said, seen = [], []
    for a, b, rate in spans:
        if a is None:
            continue
        probe = record.rate_between(a, b) if b - a >= MIN_WINDOW_S else None
        if probe:
            said.append(rate)
            seen.append(probe)
    if not seen:
        return None
    return float(np.mean(said)), float(np.mean(seen)), len(seen)


def disagreement(info: dict[str, Any]) -> str | None:
    """``"printed 123.0 samples/s (stdout), 7.1% above the probe's over the same 4
    windows"`` when beyond 5%."""
    gap = info.get("printed_gap")
    if gap is None or abs(gap) <= PRINTED_GAP:
        return None
    side = "above" if gap > 0 else "below"
    n = info.get("printed_windows")
    over = (f" over the same {n} window{'s' if n != 1 else ''}" if n else
            " (its steady rate: no printed window could be aligned)")
    return (f"printed {info['printed_throughput']:.1f} samples/s ({info['printed_source']}), "
            f"{abs(gap):.1%} {side} the probe's{over}")
