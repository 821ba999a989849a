"""What a probe of another batch size than the script's own trains to.

The efficiency of a batch size is the samples the script's own batch needed to reach a loss
over the samples the other needed (:mod:`optimizer.search.goodput.common_loss`). Compared early in
training, a smaller batch's edge reads high: two curves cut at a steady rate, a few seconds in,
compare that edge, not the loss the job ends at. So the script's own batch probes its whole time
box, and a probe of another batch is given the smoothed loss it ended at
(:class:`~optimizer.trials.probe.loss_target.LossTarget`) and trains on until it gets there
(:class:`~optimizer.trials.probe.loss_target.LossWatch`). ``benchmarks/efficiency_truth.py
--steady-seconds 8 --ref-whole-box`` checks this against whole runs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path

from optimizer.search.goodput.common_loss import end_reached
from optimizer.search.goodput.efficiency import best_records, loss_points, probe_records
from optimizer.trials.batch import label_batch
from optimizer.trials.probe import EVENTS_FILE, ProbeRecord, read_probe
from optimizer.trials.probe.loss_target import FILE as LOSS_TARGET_FILE
from optimizer.trials.probe.loss_target import LossTarget
from optimizer.trials.records import HISTORY_DIR, TrialSummary, iter_trials, trial_files


def loss_target(records: Mapping[int, list[ProbeRecord]], ref_batch: int
                ) -> LossTarget | None:
    """The loss a probe of another batch size trains to: the smoothed loss at the end of the
    script's own batch's record with the most losses (the one the efficiency will compare
    against). None when there is none, or its loss did not measurably fall."""
    recs = records.get(ref_batch)
    if not recs:
        return None
    ref = best_records({ref_batch: recs})[ref_batch]
    found = end_reached(*loss_points(ref, ref_batch))
    if found is None:
        return None
    level, tau, need = found
    return LossTarget(level, tau, need, ref_batch)


def loss_target_from_trials(trials: Iterable[TrialSummary], run_dir: str | Path,
                            ref_batch: int | None) -> LossTarget | None:
    """:func:`loss_target` of a run's trials so far; the script's own batch is ``ref_batch``,
    else the batch its first usable trial at the script's default ran with."""
    trials = list(trials)
    first = next((t for t in trials if t.ok and t.allocation.batch_size is None), None)
    if ref_batch is None and first is not None:  # the batch it printed, else the probe's
        folder = trial_files(run_dir, first)
        ref_batch = label_batch(first, folder, None, True).allocation.batch_size
        rec = read_probe(folder / EVENTS_FILE) if ref_batch is None else None
        ref_batch = ref_batch or (rec.samples_per_step if rec is not None else None)
    if not ref_batch:
        return None
    # Trials at the script's default ran its batch, though a script that slices its own
    # batches shows the probe none (mem_heavy.py): they are the reference's records.
    own = [replace(t, allocation=replace(t.allocation, batch_size=ref_batch))
           if t.allocation.batch_size is None else t for t in trials]
    return loss_target(probe_records(own, run_dir), int(ref_batch))


def target_for_batch(batch: int, run_dir: str | Path, ref_batch: int | None,
                     again: bool = False) -> LossTarget | None:
    """The loss a new probe at ``batch`` of the run in ``run_dir`` trains to (its trials so
    far hold the script's own batch's curve): None at the script's own batch, and where
    a probe at ``batch`` has trained to it already or a whole run has been made there (one
    curve that far is what the efficiency needs; a workers sweep at that batch measures
    samples/s).

    ``again`` (a run-off's runs): a second curve is wanted even where one was taken, since
    one probe's efficiency scatters widely (tab's batch 16 read 1.09, 1.53 and 1.80 in three
    runs of one code) and the run-off decides by time to the same progress; none where a
    probe at ``batch`` gave up (it stalls short of the loss: a second try would too)."""
    # measurements read from history hold curves too (--history: records.trial_files)
    trials = [t for t in (*iter_trials(run_dir), *iter_trials(run_dir, HISTORY_DIR)) if t.ok]
    target = loss_target_from_trials(trials, run_dir, ref_batch)
    if target is None or target.ref_batch == batch:
        return None
    for t in trials:
        if t.allocation.batch_size != batch:
            continue
        seen = trial_files(run_dir, t) / LOSS_TARGET_FILE
        if again:
            if seen.is_file() and (_seen(seen) or {}).get("gave_up"):
                return None
        elif t.status == "completed" or (seen.is_file() and _trained_to(seen)):
            return None
    return target


def trained_records(trials: Iterable[TrialSummary], run_dir: str | Path
                    ) -> dict[int, list[ProbeRecord]]:
    """The probe records of the trials whose loss watch saw them reach the own batch's loss,
    by batch size: the curves that trained as far, which
    :func:`~optimizer.search.goodput.efficiency.efficiency_from_trials` pools."""
    out: dict[int, list[ProbeRecord]] = {}
    for t in trials:
        folder = trial_files(run_dir, t)
        seen = _seen(folder / LOSS_TARGET_FILE) if t.ok and t.allocation.batch_size else None
        rec = read_probe(folder / EVENTS_FILE) if seen and seen.get(
            "reached_at_samples") is not None else None
        if rec is not None and rec.losses:
            out.setdefault(int(t.allocation.batch_size), []).append(rec)
    return out


def _seen(path: Path) -> dict | None:
    """What a probe's loss watch filed (``loss_target.json``); None where it is missing or
    garbled (no target, no bound: never an error)."""
    try:
        seen = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return seen if isinstance(seen, dict) else None


def _trained_to(path: Path) -> bool:
    seen = _seen(path)
    return seen is not None and (seen.get("reached_at_samples") is not None
                                 or bool(seen.get("gave_up")))


def training_depth(trials: Iterable[TrialSummary], run_dir: str | Path
                   ) -> tuple[float | None, set[int], dict[int, float]]:
    """What the probes given a target saw: the target loss, the batches whose probe reached
    it, and for each batch whose probes all stopped short of it, the bound that puts on its
    efficiency: the samples the script's own batch needed to get there over the most samples
    one of them trained on without getting there, less its smoothing's lag.

    The own batch's samples are where its moving average crossed the level less that average's
    lag (:func:`~optimizer.search.goodput.common_loss.end_reached`); a stopped probe's average
    at its last loss stands for its curve about one decay length earlier, so its crossing is
    only known to lie past that point. Without the lag taken off both sides, a probe that ran
    the whole job and ended level with the own batch read "at most 0.90" (mlp: 0.77 at batch
    256, where whole runs need 0.82 times the samples; benchmarks/README.md)."""
    reached: set[int] = set()
    short: dict[int, float] = {}
    level = None
    for t in trials:
        path = trial_files(run_dir, t) / LOSS_TARGET_FILE
        if not (t.allocation.batch_size and path.is_file()):
            continue
        seen = _seen(path)
        try:
            level, need = float(seen["level"]), float(seen["ref_samples"])
            trained = float(seen["samples_seen"])
            tau = float(seen.get("decay_samples") or 0.0)
            first = float(seen.get("first_samples") or 0.0)  # files before it: from the start
        except (ValueError, KeyError, TypeError):
            continue
        b = int(t.allocation.batch_size)
        if seen.get("reached_at_samples") is not None:
            reached.add(b)
        elif trained > first:
            lag = tau * (1.0 - math.exp(-(trained - first) / tau)) if tau > 0 else 0.0
            short[b] = min(short.get(b, math.inf), need / max(trained - lag, first, 1.0))
    return level, reached, {b: v for b, v in short.items() if b not in reached}


def depth_note(trials: Iterable[TrialSummary], run_dir: str | Path,
               depth: tuple[float | None, set[int], dict[int, float]] | None = None) -> str:
    """One sentence for the report: which probes trained on to the script's own batch's loss
    before their curves were compared, and which stopped short of it (empty: none was given
    a target). ``depth``: :func:`training_depth` of the same trials, where already read."""
    level, reached, short = depth if depth is not None else training_depth(trials, run_dir)
    if level is None:
        return ""
    text = (f"The probes at batch {_sizes(reached)} trained on until their smoothed loss reached "
            f"the one the script's own batch ended its probe at ({level:.4g}) before their "
            "curves were compared"
            if reached else "No probe of another batch reached the smoothed loss the script's own "
            f"batch ended its probe at ({level:.4g})")
    if short:
        text += (f"; the probes at batch {_sizes(set(short))} stopped short of it (after twice "
                 "the own batch's samples, or three time boxes), which bounds their efficiency: "
                 + ", ".join(f"at most {v:.2f} at batch {b}" for b, v in sorted(short.items())))
    return text + "."


def _sizes(batches: set[int]) -> str:
    return ", ".join(str(b) for b in sorted(batches))
