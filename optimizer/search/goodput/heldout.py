"""Whole runs judged by the loss they ended at: the held-out loss the script printed, else the
training loss at their end, smoothed.

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

A script that prints only a training loss (a character GPT printing ``iter 290: loss 2.51``)
is judged the same way by the training loss the probe read over each whole run's last tenth of
steps (:func:`optimizer.trials.probe.summary.final_training_loss`), never by one batch's value;
since that mean is noisier than a held-out loss, a batch counts as training as well only when
it does by more than twice the standard error of the difference.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from statistics import median
from typing import Any

TOLERANCE = 0.01
"""How much worse (relative) a final loss may end and still count as training as well."""
Z = 2.0
"""Standard errors a smoothed training loss must clear to count as training as well."""
HELDOUT, TRAINING = "held-out loss", "training loss over the last tenth of steps"


def final_losses(trials: Iterable[Any], ref_batch: int | None = None
                 ) -> tuple[str, dict[int, tuple[float, float]]]:
    """``(kind, {batch: (median final loss, its standard error)})`` over the completed runs
    of each global batch size: their held-out losses where the script printed one (the own
    batch's runs decide, ``ref_batch``), else their smoothed training losses (standard error
    0 for a held-out loss, which is one figure of a fixed set)."""
    done = [t for t in trials if t.status == "completed" and t.allocation.global_batch]
    held: dict[int, list[float]] = {}
    train: dict[int, list[tuple[float, float]]] = {}
    for t in done:
        b = int(t.allocation.global_batch)
        value = (t.model_info or {}).get("heldout_loss")
        if isinstance(value, (int, float)) and math.isfinite(value):
            held.setdefault(b, []).append(float(value))
        probe = t.probe or {}
        mean, se = probe.get("loss_final"), probe.get("loss_final_se")
        if isinstance(mean, (int, float)) and math.isfinite(mean):
            train.setdefault(b, []).append((float(mean), float(se or 0.0)))
    if held and (ref_batch is None or int(ref_batch) in held):
        return HELDOUT, {b: (median(v), 0.0) for b, v in held.items()}
    return TRAINING, {b: (median(m for m, _ in v),
                          math.sqrt(sum(s * s for _, s in v)) / len(v))
                      for b, v in train.items()}


def heldout_by_batch(trials: Iterable[Any]) -> dict[int, float]:
    """The median held-out loss the completed runs of each batch size printed at their end."""
    kind, losses = final_losses(trials)
    return {b: v for b, (v, _) in losses.items()} if kind == HELDOUT else {}


def _compared(trials: Iterable[Any], ref_batch: int | None
              ) -> tuple[str, float | None, float, dict[int, tuple[float, float]]]:
    kind, losses = final_losses(trials, ref_batch)
    own = losses.get(int(ref_batch)) if ref_batch else None
    if own is None:
        return kind, None, 0.0, {}
    return kind, own[0], own[1], losses


def trains_worse(trials: Iterable[Any], ref_batch: int | None) -> dict[int, tuple[float, float]]:
    """Batch sizes whose whole runs ended at a final loss more than :data:`TOLERANCE` above
    the script's own batch's: ``{batch: (its loss, the own batch's)}``; empty when the own
    batch has no such run."""
    _, own, _, losses = _compared(trials, ref_batch)
    if own is None:
        return {}
    return {b: (v, own) for b, (v, _) in losses.items()
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
    """Batch sizes other than the script's own whose whole runs (at the script's length) ended
    at a final loss no more than :data:`TOLERANCE` above the own batch's, a smoothed training
    loss by more than :data:`Z` standard errors of the difference: ``{batch: (its loss, the
    own batch's)}``; empty when the own batch has no such run."""
    _, own, own_se, losses = _compared(trials, ref_batch)
    if own is None:
        return {}
    return {b: (v, own) for b, (v, se) in losses.items()
            if b != ref_batch and v + Z * math.hypot(se, own_se) - own
            <= TOLERANCE * abs(own)}


def loss_kind(trials: Iterable[Any], ref_batch: int | None) -> str:
    """Which final loss judges the whole runs: :data:`HELDOUT` or :data:`TRAINING`."""
    return final_losses(trials, ref_batch)[0]


def heldout_words(worse: dict[int, tuple[float, float]], kind: str = HELDOUT) -> str:
    """One sentence for the report, empty when nothing was set aside."""
    if not worse:
        return ""
    shown = ", ".join(f"batch {b} ({v:.4g} against {own:.4g})"
                      for b, (v, own) in sorted(worse.items()))
    return (f"Set aside by the {kind} their whole runs ended at, worse than the script's own "
            f"batch's by more than {TOLERANCE:.0%}: {shown}.")
