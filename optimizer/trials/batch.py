"""The batch size a trial ran with, so that every trial can feed the workload model.

A trial's batch is the one its allocation set; else the one the script reported (its metrics,
or a ``batch_size=N`` line of its output) unless that differs from a settable flag's default
and is not what the loader served (a printed effective batch: the label stays in the flag's
units); else the script's own default, read from its source
(:meth:`optimizer.trials.training.TrainingModuleManager.default_batch_size`); else, for a
batch cloudopt cannot set, the samples per optimizer step the in-process probe saw. A script
whose batch is neither known nor settable is labelled with a nominal 1: its throughput is
samples per second all the same, and the workload model then keeps the batch fixed.
"""

from __future__ import annotations

from pathlib import Path

from optimizer.trials.output import BATCH_SIZE_PATTERN
from optimizer.trials.records import TrialSummary


def _effective_batch(t: TrialSummary, trial_dir: Path | None = None) -> int | None:
    """The batch size a trial ran with: the allocation's, or what the script reported (its
    metrics/model info, else a ``batch_size=N`` line of its output)."""
    if t.allocation.batch_size is not None:
        return int(t.allocation.batch_size)
    value = (t.model_info or {}).get("batch_size")
    if value is None and trial_dir is not None and (trial_dir / "stdout.log").exists():
        with open(trial_dir / "stdout.log", encoding="utf-8", errors="replace") as fh:
            m = BATCH_SIZE_PATTERN.search(fh.read(20_000))
        value = m.group(1) if m else None
    return _positive_int(value)


def _positive_int(value: object) -> int | None:
    try:
        return int(round(float(value))) if value is not None and float(value) > 0 else None
    except (TypeError, ValueError):
        return None


def _with_batch(t: TrialSummary, trial_dir: Path | None = None,
                default_batch: int | None = None) -> TrialSummary:
    b = _effective_batch(t, trial_dir)
    seen = _positive_int((t.probe or {}).get("samples_per_step"))
    if t.allocation.batch_size is None and default_batch and b not in (None, default_batch) \
            and seen != b:
        # A printed batch that is not the flag's default and not what the loader served is
        # another batch (grad_accum.py prints its effective batch, 16 x 4 micro-batches): the
        # other trials are labelled in the flag's units, so the default is this one's label.
        b = default_batch
    if b is None or t.allocation.batch_size == b:
        return t
    copy = TrialSummary.from_dict(t.to_dict())
    copy.allocation.batch_size = b
    return copy


def label_batch(t: TrialSummary, trial_dir: Path | None, default_batch: int | None,
                settable: bool) -> TrialSummary:
    """``t`` with the batch size it ran with (see the module docstring)."""
    t = _with_batch(t, trial_dir, default_batch if settable else None)
    if t.allocation.batch_size is None:
        # The probe's samples per optimizer step only for a batch cloudopt cannot set (every
        # trial then runs the same one): with gradient accumulation it is a multiple of the
        # batch that settable trials are labelled with. Before it, such a script was "batch 1"
        # in every table and note.
        seen = None if settable else _positive_int((t.probe or {}).get("samples_per_step"))
        label = default_batch or (None if settable else seen or 1)
        if label is not None:
            t = TrialSummary.from_dict(t.to_dict())
            t.allocation.batch_size = int(label)
    return t
