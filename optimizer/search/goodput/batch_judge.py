"""Each measured batch judged by the training its job makes, at the length the user will run.

A batch other than the script's own is judged, in this order, by:

1. **whole runs' final losses** where both it and the own batch ran whole (a held-out loss,
   else the training loss smoothed over the last readings,
   :mod:`optimizer.search.goodput.heldout`): ending worse sets it aside, ending as well makes
   its whole job the claim;
2. else **the efficiency's low end** (:func:`optimizer.search.choice.assured_efficiency`)
   applied to the samples its whole job processes at the script's length
   (:meth:`~optimizer.search.goodput.job_length.JobLength.progress`): a job of steps at a
   smaller batch processes fewer samples.

A batch whose whole job makes less progress and whose length cannot be set is set aside,
whatever it costs; where the length can be set, it is given the length that makes up the
difference, and the claim is for that job. :class:`Judgement` says which rule decided, so the
report can say it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from optimizer.search.goodput.heldout import HELDOUT
from optimizer.search.goodput.job_length import TRAINS_AS_WELL, JobLength


@dataclass(frozen=True)
class Judgement:
    """How one trial's batch is judged: ``seconds`` of the job claimed (``inf``: set aside,
    ``why`` says so), ``length`` (None: the script's own), ``progress`` of its whole job
    relative to the own batch's, ``batch_ratio`` (samples per step over the own batch's),
    ``raw`` (its whole job at the script's length) and ``judged_by``."""

    seconds: float
    raw: float
    length: float | None = None
    progress: float = 1.0
    batch_ratio: float = 1.0
    judged_by: str = "the script's own batch"
    why: str = ""

    @property
    def kept(self) -> bool:
        return math.isfinite(self.seconds)


def whole_job_seconds(t: Any, raw: float, job: JobLength | None) -> float:
    """A trial's whole job at the script's length. A probe of a job of steps predicts it from
    the steps and its own samples per step: the job's size learned from another batch's run
    counts that batch's samples, not this one's."""
    if job is None or job.unit != "steps" or not job.length or t.status != "probe" \
            or not t.throughput:
        return raw
    per_step = (t.probe or {}).get("samples_per_step") or t.allocation.global_batch
    if not per_step:
        return raw
    return ((t.startup_s or 0.0) + float(job.length) * float(per_step) / float(t.throughput)
            + (t.exit_s or 0.0))


def judge(t: Any, raw: float, ref_batch: int | None, eff: float, job: JobLength | None,
          worse: dict[int, Any], as_well: dict[int, Any], kind: str) -> Judgement:
    """The judgement of trial ``t`` (its whole job ``raw`` seconds at the script's length,
    judged at efficiency ``eff``) given the batches whose whole runs ended worse or as well
    (``worse``, ``as_well``, by the loss ``kind``)."""
    gb = t.allocation.global_batch
    own = gb is None or ref_batch is None or int(gb) == int(ref_batch)
    if own:
        return Judgement(raw, raw)
    ratio = float(gb) / float(ref_batch)
    losses = "whole runs' " + ("held-out loss" if kind == HELDOUT else
                               "training loss over their last tenth of steps")
    if int(gb) in worse:
        v, o = worse[int(gb)]
        return Judgement(math.inf, raw, batch_ratio=ratio, judged_by=losses,
                         why=f"its whole runs ended at {v:.4g} against the own batch's "
                         f"{o:.4g} ({losses})")
    if int(gb) in as_well:
        return Judgement(raw, raw, None, 1.0, ratio, losses)
    if job is None:
        progress = float(eff)
        return Judgement(raw / max(progress, 1e-9), raw, None, progress, ratio,
                         "the efficiency estimate")
    progress = job.progress(eff, ratio)
    bound = "the efficiency's low end" + (
        " times the samples its steps process" if job.unit == "steps" else "")
    fixed = (t.startup_s or 0.0) + (t.exit_s or 0.0)
    seconds, length = job.job_seconds(raw, fixed, progress, False)
    if not math.isfinite(seconds):
        return Judgement(math.inf, raw, None, progress, ratio, bound,
                         why=f"its whole job makes {progress:.2f} of the own batch's training "
                         f"({bound}: efficiency {eff:.2f}"
                         + (f" x {ratio:.3g} the samples" if job.unit == "steps" else "")
                         + f", below {TRAINS_AS_WELL}) and the job's length cannot be set")
    return Judgement(seconds, raw, length, progress, ratio, bound)
