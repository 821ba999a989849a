"""The regret benchmark's second ruler: time and cost to reach the default allocation's loss.

The samples/s ruler (``regret_score``) prices a cell's whole job. A larger batch runs more
samples a second, but at the same epochs and learning rate it takes fewer optimizer steps and
may end at a worse loss than the user's own job. This ruler prices *training as well as the
default does* instead:

1. a run's loss curve is the probe's sampled mini-batch losses, each placed at the training
   samples seen so far and at the seconds since the trial started (start-up included);
2. the curve is smoothed by an exponential moving average over training samples whose decay
   length is ``EMA_SHARE`` of the default job's samples: every cell averages over the same
   amount of data, whatever its batch size or the probe's sampling rate;
3. the target is the default cell's smoothed loss at the end of its job, averaged over its
   repetitions;
4. a run's time to target is the first time its smoothed loss reaches the target. A run that
   never does is run again for ``LONG_FACTOR`` times the job's epochs (``regret_truth``); one
   that still does not has an infinite time to target;
5. a cell's time to target is the median over its repetitions. Cost, time and balanced score
   follow from it exactly as ``GroundTruth`` computes them from job times (cost = time to
   target at the cell's hourly price, memory at its measured peak), and so does regret against
   the grid's best cell under this ruler.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from regret_score import Cell, CellTruth, GroundTruth, Pick

EMA_SHARE = 0.1
"""Decay length of the smoothing, as a share of the default job's training samples."""
LONG_FACTOR = 3
"""A run that misses the target is run again for this many times the job's epochs."""


def _finite(x: float) -> float | None:
    """JSON holds no infinity: an infinite figure is written as None."""
    return x if math.isfinite(x) else None


@dataclass
class LossCurve:
    """Sampled mini-batch losses of one run, in the order they were taken."""

    samples: np.ndarray
    """Training samples seen when each loss was taken."""
    t: np.ndarray
    """Seconds since the trial started."""
    loss: np.ndarray

    def __post_init__(self) -> None:
        self.samples = np.asarray(self.samples, dtype=float)
        self.t = np.asarray(self.t, dtype=float)
        self.loss = np.asarray(self.loss, dtype=float)
        if not len(self.loss) == len(self.t) == len(self.samples):
            raise ValueError("samples, t and loss differ in length")

    def __len__(self) -> int:
        return len(self.loss)


def smooth(curve: LossCurve, tau: float) -> np.ndarray:
    """The curve's exponential moving average over training samples.

    Parameters
    ----------
    curve : LossCurve
        The sampled losses.
    tau : float
        Decay length in training samples: a loss taken ``tau`` samples ago weighs ``1/e`` of
        one taken now.

    Returns
    -------
    numpy.ndarray
        The average at each sampled point.
    """
    out = np.empty(len(curve))
    if not len(curve):
        return out
    # Weights follow the samples between points, not the point count: the probe samples the
    # loss at most 10 times a second, so points are sparse on fast cells and dense on slow ones.
    keep = np.exp(-np.maximum(np.diff(curve.samples), 0.0) / tau)
    s = out[0] = curve.loss[0]
    for i, k in enumerate(keep, start=1):
        s = k * s + (1.0 - k) * curve.loss[i]
        out[i] = s
    return out


def end_loss(curve: LossCurve, tau: float) -> float:
    """The smoothed loss at the end of the run (nan for an empty curve)."""
    return float(smooth(curve, tau)[-1]) if len(curve) else math.nan


def target_loss(curves: Sequence[LossCurve], tau: float) -> float:
    """The loss to reach: the mean end loss of the default cell's repetitions."""
    return float(np.mean([end_loss(c, tau) for c in curves]))


def time_to_target(curve: LossCurve, target: float, tau: float) -> float:
    """Seconds from the trial's start until the smoothed loss first reaches ``target``.

    Between two sampled points the time is interpolated linearly. A smoothed value that
    averages less than ``tau`` samples of training is mostly its first few losses' noise and
    does not count, so a curve that starts at the target reaches it one decay length in.

    Returns
    -------
    float
        The time, or ``inf`` when the curve never reaches the target.
    """
    if not len(curve):
        return math.inf
    s = smooth(curve, tau)
    counts = curve.samples - curve.samples[0] >= tau
    hits = np.flatnonzero(counts & (s <= target))
    if not len(hits):
        return math.inf
    i = int(hits[0])
    if i == 0 or s[i - 1] <= target:
        return float(curve.t[i])
    share = (s[i - 1] - target) / (s[i - 1] - s[i])
    return float(curve.t[i - 1] + share * (curve.t[i] - curve.t[i - 1]))


def loss_truth(truth: GroundTruth, times: Mapping[Cell, Sequence[float]]) -> GroundTruth | None:
    """The ground truth under this ruler: each cell's repetitions last until the target.

    Parameters
    ----------
    truth : GroundTruth
        The samples/s ruler's truth: the cells, their peaks, the prices and the default.
    times : Mapping[Cell, Sequence[float]]
        Time to target of each repetition of each cell (``inf`` where never reached).

    Returns
    -------
    GroundTruth or None
        None when no grid cell reaches the target (no best cell to measure regret against).
    """
    cells = [CellTruth(c, [float(x) for x in times[c]], list(t.peak_gb), on_grid=t.on_grid)
             for c, t in truth.cells.items() if c in times and len(times[c])]
    if not any(math.isfinite(c.time_s) for c in cells if c.on_grid):
        return None
    return GroundTruth(cells, truth.prices, truth.default, truth.memory_levels)


def never_reaches(lt: GroundTruth, cell: Cell | None) -> bool:
    """Whether ``cell`` has an infinite time to target (unknown cells count as never)."""
    return cell is not None and (cell not in lt.cells or math.isinf(lt.cells[cell].time_s))


def pick_regret(lt: GroundTruth, pick: Pick, preference: str) -> float:
    """A pick's regret under this ruler; ``inf`` for no pick, too little memory or a cell that
    never reaches the target."""
    if pick.cell is None or pick.cell not in lt.cells:
        return math.inf
    value = lt.objective(pick.cell, pick.memory_gb, preference)
    return value / lt.optimum(preference)[1] - 1.0


def loss_fields(lt: GroundTruth | None, picks: Sequence[Pick], preference: str) -> dict[str, Any]:
    """The JSON fields this ruler adds to a row: one pick, or a randomised peer's picks (one per
    seed: their mean regret, infinite when any seed's is, and the share that never reach).

    ``regret_loss`` and ``time_to_target_s`` are None where infinite; ``loss_never`` is 0 or 1
    for one pick and the share of seeds for several.
    """
    if lt is None:
        return {"regret_loss": None, "loss_never": None, "time_to_target_s": None}
    best_cell, best = lt.optimum(preference)
    regrets = [pick_regret(lt, p, preference) for p in picks]
    never = [never_reaches(lt, p.cell) for p in picks]
    out: dict[str, Any] = {
        "regret_loss": _finite(float(np.mean(regrets))),
        "loss_never": int(never[0]) if len(picks) == 1 else float(np.mean(never)),
        "loss_optimum": {**best_cell.as_dict(), "time_to_target_s": lt.cells[best_cell].time_s,
                         "objective": float(best)},
        "time_to_target_s": None,
    }
    if len(picks) == 1:
        cell = picks[0].cell
        if cell is not None and cell in lt.cells:
            out["time_to_target_s"] = _finite(lt.cells[cell].time_s)
    else:
        out["seeds_loss"] = {"median_regret": _finite(float(np.median(regrets))),
                             "worst_regret": _finite(float(np.max(regrets)))}
    return out


def add_loss_summary(summary: Sequence[dict[str, Any]], rows: Sequence[dict[str, Any]]) -> None:
    """Add this ruler's figures to ``summarize``'s per-method entries: median and worst regret
    (infinite ones included) and how many recommendations never reach the target (a randomised
    peer's rows add their share of seeds)."""
    for s in summary:
        mine = [r for r in rows if r["method"] == s["method"] and "regret_loss" in r]
        if not mine:
            continue
        regrets = [math.inf if r["regret_loss"] is None else r["regret_loss"] for r in mine]
        s["median_regret_loss"] = _finite(float(np.median(regrets)))
        s["worst_regret_loss"] = _finite(float(np.max(regrets)))
        s["never_reached"] = float(sum(r["loss_never"] or 0 for r in mine))


def describe_cells(times: Mapping[Cell, Sequence[float]]) -> dict[str, dict[str, Any]]:
    """Per cell key: each repetition's time to target and the cell's (None where infinite)."""
    return {c.key(): {"reps": [_finite(float(x)) for x in ts],
                      "time_to_target_s": _finite(float(statistics.median(ts)))}
            for c, ts in sorted(times.items()) if len(ts)}
