"""The job's stages measured on recorded trials, as the environment's phases.

Each trial with the probe's events has its stages (:func:`optimizer.trials.live.stages.
stage_intervals`: startup, train, eval, save, pause). Joined with the monitor's samples, every
stage interval gives its duration, the cores it kept busy and its memory peak at the trial's
allocation. From those, per stage:

* the **parallel fraction** (Amdahl's ``p``): from the stage's duration at two core counts
  where both were measured (``T2 / T1 = (1 - p) + p / 2``), else from the cores it kept busy at
  ``c > 1`` cores (a stage of ``W`` single-core seconds keeps ``W / T = 1 / ((1 - p) + p / c)``
  cores busy);
* its **share** of the job's time at the reference allocation, and the order the stages came in
  (a repeated train/eval alternation stays repeated);
* its **memory** peak, relative to training's.

:func:`stage_phases` turns these into :class:`envs.workload.PhaseSpec` objects, scaled so that
the environment's job at the reference allocation takes the measured time stage by stage, and
at other core counts each stage scales by its own parallel fraction. What the agents learn on
that environment is the job's real stage structure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from optimizer.trials.live.stages import PAUSE_S, detector_intervals, stage_intervals
from optimizer.trials.records import TrialSummary

if TYPE_CHECKING:  # types only: the detector's torch loads with the detector itself
    from phases import PhaseDetector

MIN_SHARE = 0.02
"""A stage under this share of the run (all its intervals together) is folded into its
neighbours: a plan gains nothing there, and the environment would need tiny chunks."""
STAGE_IDS = {"startup": 0, "train": 1, "eval": 2, "save": 3, "pause": 4}
DETECTOR_BASE = 10
"""``phase-N`` of the phase detector is the environment's phase id ``DETECTOR_BASE + N``."""


def stage_id(stage: str) -> int:
    """The environment's phase id of a stage name (probe stage or ``phase-N``)."""
    if stage.startswith("phase-"):
        return DETECTOR_BASE + int(stage.split("-", 1)[1])
    return STAGE_IDS.get(stage, len(STAGE_IDS))


@dataclass
class StageStats:
    """One stage, pooled over the trials that went through it."""

    stage: str
    parallel: float
    parallel_source: str
    seconds: dict[int, float] = field(default_factory=dict)
    """Mean seconds per run in this stage, by cores held (completed runs only)."""
    cores_busy: dict[int, float] = field(default_factory=dict)
    mem_peak_gb: float = 0.0


@dataclass
class StageModel:
    """The stages of a job: their order, shares at the reference cores, and statistics."""

    stats: dict[str, StageStats]
    sequence: list[tuple[str, float]]
    """``(stage, share of the run's time)`` in the order of the reference run."""
    reference_cpus: int
    reference_seconds: float
    reference_trial: str

    @property
    def has_phases(self) -> bool:
        """More than one stage with a real share: something a live plan could act on."""
        return len({s for s, _ in self.sequence}) > 1


def _epoch_seconds(iso: str) -> float | None:
    try:
        return datetime.fromisoformat(iso).timestamp()
    except (TypeError, ValueError):
        return None


def trial_stage_rows(trial_dir: str | Path, summary: TrialSummary,
                     pause_s: float = PAUSE_S, detector: PhaseDetector | None = None
                     ) -> list[dict[str, Any]]:
    """One row per stage interval of a recorded trial: ``stage, start_s, end_s, seconds,
    cores_busy, mem_peak_gb, cpus`` (times on the monitor's clock, from the launch). The
    probe's stages; with ``detector``, the detector's phases (``phase-N``) of the monitor's
    trace instead, for a job the probe saw no training step of."""
    d = Path(trial_dir)
    probe, trace = d / "probe.jsonl", d / "trace.csv"
    if summary.live:
        return []  # a live trial held several allocations: no single core count per stage
    try:
        samples = pd.read_csv(trace) if trace.is_file() and trace.stat().st_size else None
    except (ValueError, OSError):
        samples = None
    offset = 0.0
    if detector is not None:
        if samples is None or len(samples) < detector.delay + 2:
            return []
        x = samples[["cpu_cores", "mem_gb"]].to_numpy(float)
        spans = detector_intervals(samples["time_s"].to_numpy(float),
                                   detector.predict([x])[0])
    else:
        spans = stage_intervals(probe, pause_s) if probe.is_file() else []
        # The probe counts from the interpreter's start, the monitor from the launch.
        header_wall = _probe_wall(probe)
        launched = _epoch_seconds(summary.started_at)
        if header_wall is not None and launched is not None:
            offset = min(max(header_wall - launched, 0.0), 5.0)
    if not spans:
        return []
    rows = []
    cut = summary.status != "completed"  # a time-boxed probe: its last stage was cut short
    for i, (a, b, stage) in enumerate(spans):
        start, end = a + offset, b + offset
        cores = mem = float("nan")
        if samples is not None and len(samples):
            # A sample covers the interval before it: take those whose middle falls inside.
            mid = samples["time_s"].to_numpy(float) - 0.25
            inside = samples[(mid >= start) & (mid < end)]
            if len(inside):
                cores = float(inside["cpu_cores"].mean())
                mem = float(inside["mem_gb"].max())
        rows.append({"trial": summary.trial_id, "status": summary.status, "stage": stage,
                     "start_s": start, "end_s": end, "seconds": end - start,
                     "cores_busy": cores, "mem_peak_gb": mem,
                     "cpus": summary.allocation.cpus, "wall_s": summary.wall_time_s,
                     "complete": not (cut and i == len(spans) - 1),
                     "job_s": summary.predicted_total_time_s or summary.wall_time_s})
    return rows


def _probe_wall(path: Path) -> float | None:
    import json

    try:
        with open(path, encoding="utf-8") as fh:
            head = json.loads(fh.readline())
        return float(head["wall"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _parallel(seconds: dict[int, float], cores_busy: dict[int, float]) -> tuple[float, str]:
    """A stage's parallel fraction and where it came from."""
    ks = sorted(c for c, t in seconds.items() if t > 0)
    if len(ks) >= 2:
        lo, hi = ks[0], ks[-1]
        p = _solve_ratio(seconds[hi] / seconds[lo], lo, hi)
        return float(min(max(p, 0.0), 1.0)), f"durations at {lo} and {hi} cores"
    multi = {c: u for c, u in cores_busy.items() if c > 1 and math.isfinite(u) and u > 0}
    if multi:
        c = max(multi)
        u = min(multi[c], c)
        p = (1 - 1 / u) / (1 - 1 / c) if u > 1 else 0.0
        return float(min(max(p, 0.0), 1.0)), f"cores kept busy at {c} cores"
    return 0.0, "not measured above one core: taken as serial"


def _solve_ratio(ratio: float, lo: int, hi: int) -> float:
    """``p`` with ``((1-p) + p/hi) / ((1-p) + p/lo) = ratio``."""
    # (1 - p + p/hi) = ratio (1 - p + p/lo)  ->  1 - ratio = p [(1 - 1/hi) - ratio (1 - 1/lo)]
    k = (1 - 1 / hi) - ratio * (1 - 1 / lo)
    return (1 - ratio) / k if k > 0 else 0.0


def build_stage_model(rows: Sequence[dict[str, Any]],
                      reference_cpus: int | None = None) -> StageModel | None:
    """Pool the stage rows of several trials (``trial_stage_rows``). The order and shares of
    the stages come from a whole run at ``reference_cpus`` (else the most cores), or, with
    none, from a probe whose cut training stage is extended to the job's predicted time;
    None without either."""
    frame = pd.DataFrame(list(rows))
    if frame.empty:
        return None
    frame["complete"] = (frame["complete"].fillna(True).astype(bool)
                         if "complete" in frame else True)
    if "job_s" not in frame:
        frame["job_s"] = frame["wall_s"]
    frame = frame[frame.status.isin(("completed", "probe"))]
    # Whole runs give the order and shares of every stage; without one, a probe gives its
    # start-up whole and its training up to the job's predicted end.
    done = frame[frame.status == "completed"]
    runs = done if not done.empty else frame
    if runs.empty:
        return None
    whole = frame[frame.complete]
    stats: dict[str, StageStats] = {}
    for stage, g in frame.groupby("stage"):
        per_run = whole[whole.stage == stage].groupby(["trial", "cpus"])["seconds"].sum()
        seconds = {int(c): float(s.mean()) for c, s in per_run.groupby(level="cpus")}
        busy = {int(c): float(x["cores_busy"].mean()) for c, x in g.groupby("cpus")}
        p, why = _parallel(seconds, busy)
        stats[str(stage)] = StageStats(str(stage), p, why, seconds, busy,
                                       float(np.nanmax(g["mem_peak_gb"].to_numpy(float)))
                                       if g["mem_peak_gb"].notna().any() else 0.0)
    cpus = sorted(runs.cpus.unique())
    ref_cpus = int(reference_cpus if reference_cpus in cpus else max(cpus))
    ref_runs = runs[runs.cpus == ref_cpus]
    ref_trial = str(ref_runs.groupby("trial")["wall_s"].first().idxmax())
    run = ref_runs[ref_runs.trial == ref_trial].sort_values("start_s")
    spans = list(zip(run.stage, run.seconds, run.complete, strict=True))
    total = float(run["job_s"].iloc[0]) if done.empty else float(run["seconds"].sum())
    if done.empty:  # the cut stage runs on to the job's predicted end
        known = sum(x for _, x, ok in spans if ok)
        spans = [(s, x if ok else max(total - known, x), ok) for s, x, ok in spans]
        total = sum(x for _, x, _ in spans)
    sequence = _fold([(str(s), float(x) / total) for s, x, _ in spans])
    return StageModel(stats, sequence, ref_cpus, total, ref_trial)


def _fold(sequence: Iterable[tuple[str, float]]) -> list[tuple[str, float]]:
    """Short intervals join the one before (or after, at the start); equal neighbours merge.

    A stage is folded by its total, not by each interval: twenty checkpoints of 1% each are a
    fifth of the run. Such a stage's short intervals become one block of their summed share,
    placed where the last of them was; the plan is per stage, so the controller acts at every
    one of them while the environment sees a block it can give its own allocation."""
    seq = [(str(s), float(x)) for s, x in sequence]
    totals: dict[str, float] = {}
    for stage, share in seq:
        totals[stage] = totals.get(stage, 0.0) + share
    out: list[list[Any]] = []
    blocks: dict[str, list[float]] = {}  # stage -> [summed share, position in out]
    pending = 0.0
    for stage, share in seq:
        if share < MIN_SHARE and totals[stage] >= MIN_SHARE:
            block = blocks.setdefault(stage, [0.0, 0.0])
            block[0] += share
            block[1] = len(out)
            continue
        if share < MIN_SHARE:
            if out:
                out[-1][1] += share
            else:
                pending += share
            continue
        if out and out[-1][0] == stage:
            out[-1][1] += share
        else:
            out.append([stage, share + pending])
            pending = 0.0
    for stage, (share, pos) in sorted(blocks.items(), key=lambda kv: -kv[1][1]):
        at = int(pos)
        if at > 0 and out[at - 1][0] == stage:
            out[at - 1][1] += share
        elif at < len(out) and out[at][0] == stage:
            out[at][1] += share
        else:
            out.insert(at, [stage, share + (pending if at == 0 else 0.0)])
            pending = 0.0 if at == 0 else pending
    if not out:
        return []
    return [(s, float(x)) for s, x in out]


def stage_phases(model: StageModel, train_parallel: float) -> list[Any]:
    """The environment's phases: one :class:`envs.workload.PhaseSpec` per stage interval, its
    fraction the interval's share of the reference run. ``cpu_scale`` makes each stage's work
    take its measured time at the reference cores (relative to training, whose parallel
    fraction is ``train_parallel``); ``mem_scale`` is its memory peak over training's."""
    from envs.workload import PhaseSpec

    c0 = model.reference_cpus
    train_amdahl = (1 - train_parallel) + train_parallel / c0
    # Training's parallel fraction is the fitted model's; the detector's phases have no
    # "train" (the phase with most of the run stands in for it).
    main = "train" if "train" in model.stats else max(
        model.stats, key=lambda k: sum(x for s, x in model.sequence if s == k))
    train_mem = model.stats[main].mem_peak_gb
    out = []
    for stage, share in model.sequence:
        st = model.stats[stage]
        par = train_parallel if stage == main else st.parallel
        amdahl = (1 - par) + par / c0
        mem = st.mem_peak_gb / train_mem if train_mem > 0 and st.mem_peak_gb > 0 else 1.0
        out.append(PhaseSpec(stage_id(stage), share,
                             cpu_scale=train_amdahl / amdahl, mem_scale=min(mem, 4.0),
                             name=stage, parallel=par))
    return out


__all__ = ["DETECTOR_BASE", "STAGE_IDS", "stage_id", "StageModel", "StageStats", "build_stage_model", "stage_phases",
           "trial_stage_rows"]
