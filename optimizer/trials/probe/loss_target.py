"""A probe that trains as far as the script's own batch did: the loss to reach, and its watch.

A probe stops once its throughput is steady, often a few seconds into training. That is enough
for samples/s, not for statistical efficiency: early in training a smaller batch falls fastest
per sample, and two curves cut that early compare that edge, not the loss the job ends at
(``benchmarks/efficiency_truth.py``: probes cut at 8 s read tab's batch 16 at 2.45x the
script's, whole runs at 1.06x). So a probe of another batch size than the script's own is given
the loss the script's own batch reached (:class:`LossTarget`) and runs on until its own
smoothed loss reaches it (and one decay length past, so that the crossing has losses on both
sides), gives up (``GIVE_UP`` times the samples the script's batch needed) or runs out of time
(``BOX_FACTOR`` times the time box). :class:`LossWatch` follows the losses the in-process probe
writes while the script runs; what it saw is filed as ``loss_target.json`` in the trial folder.

The smoothing is the one :mod:`optimizer.search.goodput.common_loss` compares curves with: an
exponential moving average over training samples.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

GIVE_UP = 2.0
"""A probe that has trained on this many times the samples the script's own batch needed, and
not reached its loss, stops: its efficiency is below about ``1 / GIVE_UP``, which is all the
search needs to know."""
BOX_FACTOR = 3.0
"""At most this many times the probe's time box (the trial's hard limit still applies)."""
FILE = "loss_target.json"


@dataclass(frozen=True)
class LossTarget:
    """The smoothed loss the script's own batch ended at, and after how many samples it first
    got there."""

    level: float
    """Smoothed loss the script's own batch ended its probe at (its job's end where the probe
    ran the whole job)."""
    decay_samples: float
    """Decay length of the smoothing, in training samples."""
    ref_samples: float
    """Training samples the script's own batch needed to reach ``level``."""
    ref_batch: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> LossTarget | None:
        return None if d is None else cls(float(d["level"]), float(d["decay_samples"]),
                                          float(d["ref_samples"]), int(d["ref_batch"]))

    def time_box(self, probe_seconds: float, timeout_s: float) -> float:
        """Seconds a probe with this target may run: ``BOX_FACTOR`` time boxes, kept under
        the hard limit (a probe stopped by its box is a probe; at the limit it has failed)."""
        return max(probe_seconds, min(BOX_FACTOR * probe_seconds, 0.8 * timeout_s))


class LossWatch:
    """The smoothed loss of a running probe against a :class:`LossTarget`."""

    def __init__(self, target: LossTarget) -> None:
        self.target = target
        self.first: float | None = None
        self.last = 0.0
        self.smoothed = math.nan
        self.reached_at: float | None = None
        self.losses = 0

    def add(self, samples: float, loss: float) -> None:
        """One mini-batch loss taken after ``samples`` training samples (in step order)."""
        if not (math.isfinite(samples) and math.isfinite(loss)):
            return
        tau = self.target.decay_samples
        if self.first is None:
            self.first, self.smoothed = samples, loss
        else:
            keep = math.exp(-max(samples - self.last, 0.0) / tau)
            self.smoothed = keep * self.smoothed + (1.0 - keep) * loss
        self.last, self.losses = samples, self.losses + 1
        if (self.reached_at is None and samples - self.first >= tau
                and self.smoothed <= self.target.level):
            self.reached_at = samples

    @property
    def gave_up(self) -> bool:
        return bool(self.reached_at is None and self.last >= GIVE_UP * self.target.ref_samples)

    @property
    def done(self) -> bool:
        """Reached and one decay length past it, or given up."""
        if self.reached_at is not None:
            return self.last >= self.reached_at + self.target.decay_samples
        return self.gave_up

    def record(self) -> dict[str, Any]:
        return {**self.target.to_dict(), "reached_at_samples": self.reached_at,
                "samples_seen": self.last, "first_samples": self.first,
                "losses_seen": self.losses,
                "smoothed_at_end": self.smoothed if math.isfinite(self.smoothed) else None,
                "gave_up": self.gave_up}
