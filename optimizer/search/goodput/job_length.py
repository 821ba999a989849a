"""How long the recommended job runs, so that a claim "to the same training progress" is one
the user can cash.

A batch's statistical efficiency says how many of its samples reach the loss the script's own
batch ends at. A job of fixed epochs does not stop there: a more sample-efficient batch runs
on past it (and costs its whole job), a less efficient one stops short of it (and trains
worse). So a batch is judged by one of two rules, and the report says which:

* **a shorter (or longer) job** where the job's length can be set (an epochs flag the script
  reads, found in its arguments or source, or ``--epochs-arg``): the batch runs the whole
  epochs that reach the own batch's final loss, ``ceil(E0 / efficiency)`` (a fractional count
  where the flag's default is a float, as Hugging Face's ``--num_train_epochs``), and the
  recommendation carries that count;
* **its whole job** otherwise: a batch at least about as efficient as the script's own
  (:data:`TRAINS_AS_WELL`) costs its whole job, and a less efficient one, whose whole job ends
  at a worse loss, is not recommended.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from optimizer.trials.script_scan import flag_number_default

TRAINS_AS_WELL = 0.98
"""A batch this efficient relative to the script's own reaches about the same final loss in the
same epochs (a probe's efficiency is known to a few percent at best)."""


@dataclass(frozen=True)
class JobLength:
    """The job's length knob: ``flag`` (e.g. ``--epochs``; None when it cannot be set),
    ``epochs`` (what the script's own run makes), ``fractional`` (the flag takes a float),
    ``source`` (where ``epochs`` was read)."""

    flag: str | None = None
    epochs: float | None = None
    fractional: bool = False
    source: str = ""

    @property
    def settable(self) -> bool:
        return bool(self.flag) and bool(self.epochs)

    @property
    def rule(self) -> str:
        """``shorter job`` or ``whole job``: how a batch other than the script's is judged."""
        return "shorter job" if self.settable else "whole job"

    def epochs_for(self, efficiency: float) -> float:
        """The epochs at a batch of this ``efficiency`` that reach the own batch's final loss."""
        need = float(self.epochs) / max(efficiency, 1e-9)  # type: ignore[arg-type]
        if self.fractional:
            return max(round(math.ceil(need * 10 - 1e-9) / 10, 1), 0.1)
        return float(max(1, math.ceil(need - 1e-9)))

    def job_seconds(self, raw: float, fixed: float, efficiency: float, own: bool
                    ) -> tuple[float, float | None]:
        """``(seconds, epochs)`` of the job a batch is judged by: ``raw`` is its whole job at
        the script's epochs, ``fixed`` the part that does not scale with them (start-up,
        exit); ``epochs`` is None where the script's own count stands. ``inf`` seconds: the
        batch is not recommendable (its whole job trains worse and cannot be lengthened)."""
        if own or efficiency == 1.0:
            return raw, None
        if self.settable:
            n = self.epochs_for(efficiency)
            fixed = min(max(fixed, 0.0), raw)
            seconds = fixed + (raw - fixed) * n / float(self.epochs)  # type: ignore[arg-type]
            return seconds, (None if math.isclose(n, float(self.epochs)) else n)  # type: ignore[arg-type]
        if efficiency >= TRAINS_AS_WELL:
            return raw, None
        return math.inf, None

    def describe(self) -> str:
        """One sentence for the report: which rule judged the batches, and why."""
        if self.settable:
            return (f"Batch sizes are judged by the job that reaches the script's own final "
                    f"loss: the epochs set through {self.flag} (the script's own run makes "
                    f"{self.epochs:g}, {self.source}), and the recommendation carries that "
                    "count.")
        return ("Batch sizes are judged by their whole job (the job's length cannot be set: "
                "give --epochs-arg FLAG where the script has one); a batch whose whole job "
                "trains worse than the script's own is not recommended.")

    def to_dict(self) -> dict[str, Any]:
        return {"flag": self.flag, "epochs": self.epochs, "fractional": self.fractional,
                "source": self.source, "rule": self.rule}


EPOCH_FLAGS = ("--epochs", "--num-epochs", "--num_epochs", "--n-epochs", "--n_epochs",
               "--max-epochs", "--max_epochs", "--epoch", "--nepochs",
               "--num-train-epochs", "--num_train_epochs")


def job_length(tree: ast.Module | None, args: Sequence[str], flag: str | None = None
               ) -> JobLength:
    """The job's length knob from the script's arguments and source: ``flag`` where given
    (``--epochs-arg``), else the first of :data:`EPOCH_FLAGS` the arguments or the source set.
    Its value: the arguments' (``--epochs 3``, ``--epochs=3``), else the source's literal
    default; a flag without a known value cannot be scaled, so the job is judged whole."""
    flags = [flag.split("=", 1)[0]] if flag else list(EPOCH_FLAGS)
    given = list(args)
    for name in flags:
        for i, a in enumerate(given):
            key, eq, value = a.partition("=")
            if key != name:
                continue
            value = value if eq else (given[i + 1] if i + 1 < len(given) else "")
            number = _number(value)
            if number is not None:
                return JobLength(name, number, "." in value, f"{name} in the script's arguments")
    if tree is not None:
        for name in flags:
            node = flag_number_default(tree, name)
            if node is not None:
                return JobLength(name, float(node), isinstance(node, float),
                                 f"the default of {name} in the script's source")
    return JobLength(source="no epochs flag found")


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value > 0 and math.isfinite(value) else None


def job_length_decision(job: JobLength | None, row: dict[str, Any], efficiency: Any
                        ) -> dict[str, Any] | None:
    """What ``recommendation.json`` says of the chosen row's job length: the rule, the epochs
    the recommended job runs and the arguments that set them (``args``, empty where the
    script's own count stands); None when statistical efficiency is off."""
    if job is None or efficiency is None or not getattr(efficiency, "on", False):
        return None
    epochs = row.get("epochs")
    epochs = None if epochs is None or (isinstance(epochs, float) and math.isnan(epochs)) \
        else float(epochs)
    out = {**job.to_dict(), "note": job.describe(), "recommended_epochs": epochs, "args": []}
    if epochs is not None and job.flag:
        text = f"{epochs:g}" if job.fractional else str(int(epochs))
        out["args"] = [job.flag, text]
        change = "fewer" if epochs < float(job.epochs) else "more"  # type: ignore[arg-type]
        out["note"] += (f" The recommended batch runs {text} epochs, {change} than the "
                        f"script's {job.epochs:g}: that many reach the loss the script's own "
                        f"batch ends at (efficiency {_efficiency_words(row)}).")
    return out


def _efficiency_words(row: dict[str, Any]) -> str:
    """The efficiency a row was judged by, and the estimate where that was the interval's
    low end (:func:`optimizer.search.choice.assured_efficiency`)."""
    eff = float(row.get("efficiency", 1.0))
    estimate = row.get("efficiency_estimate")
    if row.get("heldout_confirmed") is True and estimate is not None:
        return (f"{eff:.2f}: its whole runs ended at a held-out loss as low as the script's "
                f"own batch's; its training curve read {float(estimate):.2f}")
    if estimate is None or estimate != estimate or math.isclose(float(estimate), eff):
        return f"{eff:.2f}"
    return f"{eff:.2f}, the low end of its 90% interval; estimate {float(estimate):.2f}"


def figures_words(row: dict[str, Any], whole: str, progress: str) -> str:
    """The chosen row's dollars and seconds in words, saying what job they are for: ``whole``
    and ``progress`` are the figures as "a job" and as "to a point of training"."""
    eff = float(row.get("efficiency", 1.0))
    raw = float(row.get("raw_job_time_s", row["job_time_s"]))
    epochs = row.get("epochs")
    if epochs is not None and epochs == epochs:  # not NaN: a job of its own length
        return (f"{whole} for a job of {float(epochs):g} epochs, which reaches the loss the "
                f"script's own batch ends at (efficiency {_efficiency_words(row)}; the whole "
                f"job at this "
                f"batch: {raw:.3g} s)")
    if abs(eff - 1.0) <= 1e-6:
        return whole
    if math.isclose(raw, float(row["job_time_s"])):
        return (f"{whole} for its whole job, which trains at least as well (efficiency "
                f"{_efficiency_words(row)})")
    return (f"{progress} to the training progress of the script's own batch size's whole job "
            f"(efficiency {_efficiency_words(row)}; the whole job at this batch: {raw:.3g} s)")
