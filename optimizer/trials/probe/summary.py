"""What a trial's summary takes from the probe: samples, throughput, the job's size, and the
facts the report shows (steps, epochs, loss, the printed rate beside the probe's)."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from optimizer.trials.probe.events import ProbeRecord

MIN_STEPS = 3
"""Fewer optimizer steps than this measure nothing: the figures come from other sources."""
PRINTED_GAP = 0.05
"""A printed rate further than this from the probe's is shown beside it."""


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
                  batch_hint: int | None = None) -> ProbeFigures:
    """The probe's figures of one trial (all None when it saw no training).

    Steps whose batches the probe could not see (no DataLoader, no ``OPTIMIZER_BATCH_SIZE``)
    count ``batch_hint`` samples each: the batch the trial set or the script printed.
    The job's size is the training loader's dataset length times the epochs the run makes (an
    epoch flag in the arguments, else its default in the source); a run that ended by itself
    has done the whole job, so its samples are the job's size whatever its loader.
    """
    out = ProbeFigures()
    if record is None:
        return out
    info: dict[str, Any] = {"steps": record.steps, "samples_per_step": record.samples_per_step}
    if record.errors:
        info["errors"] = [f"{e.get('hook')}: {e.get('error')}" for e in record.errors]
    if record.losses:
        info["loss_first"], info["loss_last"] = record.losses[0][2], record.losses[-1][2]
        info["loss_samples"] = len(record.losses)
    loader = record.train_loader
    if loader is not None:
        info.update(dataset_len=loader.get("dataset_len"), train_epochs=loader["train_epochs"],
                    loader_batches=loader.get("batches"))
    out.info = info
    if record.samples <= 0 and batch_hint and len(record.step_points):
        record.step_points[:, 2] = record.step_points[:, 1] * batch_hint
        record.samples = record.steps * batch_hint
        info["samples_per_step"] = batch_hint
    if record.steps < MIN_STEPS or record.samples <= 0:
        return out
    out.samples, out.throughput = record.samples, record.steady_throughput()
    if record.overall_throughput():
        info["overall_throughput"] = round(record.overall_throughput(), 3)
    if out.throughput:
        pts = record.step_points
        last_t = float(pts[np.argmax(pts[:, 1] == pts[-1, 1]), 0])
        out.startup_s = max(last_t - record.samples / out.throughput, 0.0)
        if printed:
            gap = printed / out.throughput - 1.0
            info.update(printed_throughput=round(printed, 3), printed_source=printed_source,
                        printed_gap=round(gap, 4))
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


def disagreement(info: dict[str, Any]) -> str | None:
    """``"printed 123.0 samples/s (stdout), 7.1% above the probe's"`` when beyond 5%."""
    gap = info.get("printed_gap")
    if gap is None or abs(gap) <= PRINTED_GAP:
        return None
    side = "above" if gap > 0 else "below"
    return (f"printed {info['printed_throughput']:.1f} samples/s ({info['printed_source']}), "
            f"{abs(gap):.1%} {side} the probe's")
