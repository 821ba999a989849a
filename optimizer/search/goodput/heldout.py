"""Whole runs judged by the held-out loss the script printed at their end.

Statistical efficiency is read from the training loss (the tensor ``backward`` is called on),
and a batch that trains faster on it can still end at a worse held-out loss: on a hand-written
SGD loop, batch 32 read 1.6x as efficient as the script's 64 from its training curve, yet its
whole run ended at test loss 0.341 against 0.312. Where whole runs of both printed a
held-out loss (``val_loss=``, ``test loss``, ``'eval_loss':``, parsed by
:func:`optimizer.trials.output.final_heldout_loss`), that is what the user reads at the end of
the job, and it decides: a batch whose whole runs end more than :data:`TOLERANCE` worse than
the script's own is not recommended, at any job length (a shorter job ends worse still); and a
batch whose whole runs end at least as well (:func:`trains_as_well`) needs no longer job than
the script's, whatever its training curve read: on ``examples/train_ddp.py`` batch 512 read
0.75 as efficient (0.53 at the low end of its interval) and was given 6 epochs instead of 3,
while its whole runs of 3 ended at test loss 1.210 against the own batch's 1.252.
"""

from __future__ import annotations

from collections.abc import Iterable
from statistics import median
from typing import Any

TOLERANCE = 0.01
"""How much worse (relative) a held-out loss may end and still count as training as well."""


def heldout_by_batch(trials: Iterable[Any]) -> dict[int, float]:
    """The median held-out loss the completed runs of each batch size printed at their end."""
    found: dict[int, list[float]] = {}
    for t in trials:
        value = (t.model_info or {}).get("heldout_loss")
        if t.status == "completed" and t.allocation.global_batch is not None and \
                isinstance(value, (int, float)):
            found.setdefault(int(t.allocation.global_batch), []).append(float(value))
    return {b: median(v) for b, v in found.items()}


def trains_worse(trials: Iterable[Any], ref_batch: int | None) -> dict[int, tuple[float, float]]:
    """Batch sizes whose whole runs ended at a held-out loss more than :data:`TOLERANCE` above
    the script's own batch's: ``{batch: (its loss, the own batch's)}``; empty when the own
    batch has no such run."""
    losses = heldout_by_batch(trials)
    own = losses.get(int(ref_batch)) if ref_batch else None
    if own is None:
        return {}
    return {b: (v, own) for b, v in losses.items()
            if b != ref_batch and v - own > TOLERANCE * abs(own)}


def beyond_worse(batch: int | None, worse: dict[int, Any], ref_batch: int | None) -> bool:
    """Whether ``batch``, with no whole run of its own, lies beyond a batch that ends worse, on
    the same side of the script's own: sgd_no_loader's batch 32 ended at 0.341 against 64's
    0.312, and batch 16, only probed, was recommended with a shorter job and ended at 0.356.
    How a batch ends moves one way as it leaves the script's own, so a batch further out is
    set aside with the nearer one."""
    if batch is None or not ref_batch or int(batch) in worse:
        return False
    b, ref = int(batch), int(ref_batch)
    return any((w - ref) * (b - ref) > 0 and abs(b - ref) > abs(w - ref) for w in worse)


def trains_as_well(trials: Iterable[Any], ref_batch: int | None
                   ) -> dict[int, tuple[float, float]]:
    """Batch sizes other than the script's own whose whole runs (at the script's epochs) ended
    at a held-out loss no more than :data:`TOLERANCE` above the own batch's: ``{batch: (its
    loss, the own batch's)}``; empty when the own batch has no such run."""
    losses = heldout_by_batch(trials)
    own = losses.get(int(ref_batch)) if ref_batch else None
    if own is None:
        return {}
    return {b: (v, own) for b, v in losses.items()
            if b != ref_batch and v - own <= TOLERANCE * abs(own)}


def heldout_words(worse: dict[int, tuple[float, float]]) -> str:
    """One sentence for the report, empty when nothing was set aside."""
    if not worse:
        return ""
    shown = ", ".join(f"batch {b} ({v:.4g} against {own:.4g})"
                      for b, (v, own) in sorted(worse.items()))
    return ("Set aside by the held-out loss their whole runs printed at the end, worse than "
            f"the script's own batch's by more than {TOLERANCE:.0%}: {shown}.")
