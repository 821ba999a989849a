"""How long the recommended job runs, so that a claim "to the same training progress" is one
the user can cash.

A batch's statistical efficiency says how many of its samples reach the loss the script's own
batch ends at. A job of fixed length does not stop there: a more sample-efficient batch runs
on past it (and costs its whole job), a less efficient one stops short of it (and trains
worse). A job measured in steps (``max_iters``, ``--max_steps``) differs once more: at the same
steps a batch of ``k`` times the script's trains on ``k`` times its samples, so its whole job
makes ``efficiency x k`` of the own batch's progress (batch 4 against 64 at an efficiency of
7.8 makes less than half). So a batch is judged by one of two rules, and the report says
which:

* **a shorter (or longer) job** where the job's length can be set (an epochs or steps setting
  the script reads, found in its arguments or source, or ``--epochs-arg``/``--steps-arg``):
  the batch runs the whole epochs or steps that reach the own batch's final loss,
  ``ceil(L0 / progress)`` (a fractional count where the flag's default is a float, as Hugging
  Face's ``--num_train_epochs``), and the recommendation carries that count;
* **its whole job** otherwise: a batch whose whole job makes about as much progress as the
  script's own (:data:`TRAINS_AS_WELL`) costs its whole job, and one that makes less, whose
  whole job ends at a worse loss, is not recommended.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from optimizer.search.goodput.length_knob import length_args, read_knob
from optimizer.trials.script_scan import ScriptInfo

TRAINS_AS_WELL = 0.98
"""A batch this efficient relative to the script's own reaches about the same final loss in the
same epochs (a probe's efficiency is known to a few percent at best)."""


@dataclass(frozen=True)
class JobLength:
    """The job's length knob: ``flag`` (``--epochs``, or a template such as ``--max_iters={}``;
    None when it cannot be set), ``length`` (what the script's own run makes, in ``unit``),
    ``fractional`` (the flag takes a float), ``source`` (where ``length`` was read) and
    ``unit``: ``epochs`` (every batch size trains on the same samples) or ``steps`` (a batch
    of ``k`` times the script's trains on ``k`` times its samples in the same steps)."""

    flag: str | None = None
    length: float | None = None
    fractional: bool = False
    source: str = ""
    unit: str = "epochs"

    @property
    def epochs(self) -> float | None:
        """The script's own length in epochs (None for a job measured in steps)."""
        return self.length if self.unit == "epochs" else None

    @property
    def settable(self) -> bool:
        return bool(self.flag) and bool(self.length)

    @property
    def rule(self) -> str:
        """``shorter job`` or ``whole job``: how a batch other than the script's is judged."""
        return "shorter job" if self.settable else "whole job"

    def progress(self, efficiency: float, batch_ratio: float) -> float:
        """The training progress of a batch's whole job relative to the script's own batch's
        whole job: its samples' worth (``efficiency``) times how many more samples the job
        makes at that batch (``batch_ratio``, its samples per step over the own batch's, for a
        job of steps; a job of epochs makes the same samples at every batch)."""
        return float(efficiency) * (float(batch_ratio) if self.unit == "steps" else 1.0)

    def length_for(self, progress: float) -> float:
        """The length (in ``unit``) at which a batch whose whole job makes ``progress`` of the
        own batch's reaches the own batch's final loss: whole epochs or steps, rounded up."""
        need = float(self.length) / max(progress, 1e-9)  # type: ignore[arg-type]
        if self.fractional:
            return max(round(math.ceil(need * 10 - 1e-9) / 10, 1), 0.1)
        return float(max(1, math.ceil(need - 1e-9)))

    epochs_for = length_for

    def job_seconds(self, raw: float, fixed: float, progress: float, own: bool
                    ) -> tuple[float, float | None]:
        """``(seconds, length)`` of the job a batch is judged by: ``raw`` is its whole job at
        the script's length, ``fixed`` the part that does not scale with it (start-up, exit),
        ``progress`` what its whole job makes of the own batch's (:meth:`progress`);
        ``length`` is None where the script's own stands. ``inf`` seconds: the batch is not
        recommendable (its whole job trains less and cannot be lengthened)."""
        if own or progress == 1.0:
            return raw, None
        if self.settable:
            n = self.length_for(progress)
            fixed = min(max(fixed, 0.0), raw)
            seconds = fixed + (raw - fixed) * n / float(self.length)  # type: ignore[arg-type]
            return seconds, (None if math.isclose(n, float(self.length)) else n)  # type: ignore[arg-type]
        if progress >= TRAINS_AS_WELL:
            return raw, None
        return math.inf, None

    def describe(self) -> str:
        """One sentence for the report: which rule judged the batches, and why."""
        steps = self.unit == "steps"
        per = (" (a job of steps: at the same steps a larger batch trains on more samples, a "
               "smaller one on fewer)") if steps else ""
        if self.settable:
            return (f"Batch sizes are judged by the job that reaches the script's own final "
                    f"loss{per}: the {self.unit} set through {_flag_words(self.flag)} (the "
                    f"script's own run makes {self.length:g}, {self.source}), and the "
                    "recommendation carries that count.")
        hint = "--steps-arg" if steps else "--epochs-arg"
        return (f"Batch sizes are judged by their whole job{per} (the job's length cannot be "
                f"set: give {hint} FLAG where the script has one); a batch whose whole job "
                "trains less than the script's own is not recommended.")

    def to_dict(self) -> dict[str, Any]:
        return {"flag": self.flag, "unit": self.unit, "length": self.length,
                "epochs": self.epochs, "fractional": self.fractional, "source": self.source,
                "rule": self.rule}


def _flag_words(flag: str | None) -> str:
    return str(flag or "").replace("={}", "").replace("{}", "")


def job_length(tree: ast.Module | None, args: Sequence[str], flag: str | None = None, *,
               steps_flag: str | None = None, batch_flag: str | None = None,
               script: ScriptInfo | None = None) -> JobLength:
    """The job's length knob from the script's arguments and source
    (:func:`optimizer.search.goodput.length_knob.read_knob`): ``steps_flag`` or ``flag`` (an
    epochs flag) where given, else the first setting of epochs or steps the arguments or the
    source name. A knob without a known value cannot be scaled, so the job is judged whole."""
    knob = read_knob(tree, args, epochs_flag=flag, steps_flag=steps_flag, batch_flag=batch_flag,
                     script=script)
    if knob is None:
        return JobLength(source="no epochs or steps setting found")
    return JobLength(knob.flag, knob.value, knob.fractional, knob.source, knob.unit)


def job_length_decision(job: JobLength | None, row: dict[str, Any], efficiency: Any
                        ) -> dict[str, Any] | None:
    """What ``recommendation.json`` says of the chosen row's job length: the rule, the length
    the recommended job runs (``recommended_length``, in ``unit``; ``recommended_epochs`` for
    a job of epochs), the arguments that set it (``args``, empty where the script's own count
    stands) and what decided (``judged_by``); None when statistical efficiency is off, but
    for nothing having measured how the script trains, where whole runs alone judge."""
    if job is None or efficiency is None or not (efficiency.on or efficiency.untried_batches):
        return None
    length = row.get("length")
    length = None if length is None or (isinstance(length, float) and math.isnan(length)) \
        else float(length)
    note = job.describe() if efficiency.on else (
        "Batch sizes other than the script's own are judged only by the final loss their "
        "whole runs ended at, at the script's own length"
        + (f" ({job.length:g} {job.unit})" if job.length else "")
        + ": nothing else measured how the script trains.")
    out = {**job.to_dict(), "note": note, "recommended_length": length,
           "recommended_epochs": length if job.unit == "epochs" else None, "args": [],
           "judged_by": row.get("judged_by") or ""}
    if length is not None and job.flag:
        out["args"] = length_args(job.flag, length, job.fractional)
        text = " ".join(out["args"])
        change = "fewer" if length < float(job.length) else "more"  # type: ignore[arg-type]
        out["note"] += (f" The recommended batch runs {length:g} {job.unit} ({text}), {change} "
                        f"than the script's {job.length:g}: that many reach the loss the "
                        f"script's own batch ends at ({_progress_words(row, job)}).")
    return out


def _efficiency_words(row: dict[str, Any]) -> str:
    """The efficiency a row was judged by, and the estimate where that was the interval's
    low end (:func:`optimizer.search.choice.assured_efficiency`)."""
    eff = float(row.get("efficiency", 1.0))
    estimate = row.get("efficiency_estimate")
    if row.get("heldout_confirmed") is True and estimate is not None:
        return (f"{eff:.2f}: its whole runs ended at a loss as low as the script's own "
                f"batch's; its training curve read {float(estimate):.2f}")
    if estimate is None or estimate != estimate or math.isclose(float(estimate), eff):
        return f"{eff:.2f}"
    return f"{eff:.2f}, the low end of its 90% interval; estimate {float(estimate):.2f}"


def _progress_words(row: dict[str, Any], job: JobLength | None) -> str:
    """The efficiency, and for a job of steps the samples ratio it is multiplied by."""
    words = f"efficiency {_efficiency_words(row)}"
    ratio = row.get("batch_ratio")
    if job is not None and job.unit == "steps" and ratio is not None and ratio == ratio \
            and not math.isclose(float(ratio), 1.0):
        words += (f", times {float(ratio):.3g} the samples per step: "
                  f"{float(row.get('progress', 1.0)):.2f} of the own batch's training")
    return words


def figures_words(row: dict[str, Any], whole: str, progress: str,
                  job: JobLength | None = None) -> str:
    """The chosen row's dollars and seconds in words, saying what job they are for: ``whole``
    and ``progress`` are the figures as "a job" and as "to a point of training". A claim "to
    the own batch's progress" is made only where no job length judged the row (a caller
    without one): the main job's claims are for a command the user can run."""
    eff = float(row.get("efficiency", 1.0))
    raw = float(row.get("raw_job_time_s", row["job_time_s"]))
    length = row.get("length")
    unit = job.unit if job is not None else "epochs"
    if length is not None and length == length:  # not NaN: a job of its own length
        return (f"{whole} for a job of {float(length):g} {unit}, which reaches the loss the "
                f"script's own batch ends at ({_progress_words(row, job)}; the whole job at "
                f"this batch: {raw:.3g} s)")
    moved = abs(float(row.get("progress", eff)) - 1.0) > 1e-6 or abs(eff - 1.0) > 1e-6
    if not moved:
        return whole
    if job is not None or math.isclose(raw, float(row["job_time_s"])):
        return (f"{whole} for its whole job, which trains at least as well "
                f"({_progress_words(row, job)}; judged by {row.get('judged_by') or 'its efficiency'})")
    return (f"{progress} to the training progress of the script's own batch size's whole job "
            f"(efficiency {_efficiency_words(row)}; the whole job at this batch: {raw:.3g} s)")
