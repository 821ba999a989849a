"""The phase profile of a measured trial: which phases its trace went through, for how long,
and how much CPU and memory each phase used relative to the whole run.

The environment needs a phase sequence as ``(phase_id, fraction)`` pairs and a
``(cpu_scale, mem_scale)`` per phase. Both come from the phase detector's labels of the
baseline trace: short runs are merged into their neighbours (a phase the job spends under
``min_fraction`` of its time in cannot be provisioned for anyway), CPU scales are normalised
so that their time-weighted mean is 1 (the fitted throughput already averages over phases), and
memory scales so that their maximum is 1 (the fitted memory is the trial's peak).

:func:`envs.workload.phases_from_labels` does the same for labels with phase statistics of a
trace set; it keeps every run and scales memory to the mean, which would make a one-trace
profile predict out-of-memory for allocations the job actually fitted in.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

FEATURES = ("cpu_cores", "mem_gb")


@dataclass
class PhaseProfile:
    """Phases of one trace. ``labels`` has one entry per trace row (-1: warm-up)."""

    labels: np.ndarray
    sequence: list[tuple[int, float]]
    """Merged ``(phase_id, fraction of the run)`` segments in time order."""
    scales: dict[int, tuple[float, float]]
    """``(cpu_scale, mem_scale)`` per phase id."""
    stats: pd.DataFrame = field(default_factory=pd.DataFrame)
    """Per phase: samples, share, mean CPU cores and memory (GB)."""
    stage_agreement: dict[str, Any] | None = None
    """Agreement with the probe's stage marks (:func:`stage_agreement`), where there are some."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "sequence": [[int(p), float(f)] for p, f in self.sequence],
            "scales": {str(k): [float(v[0]), float(v[1])] for k, v in self.scales.items()},
            "stats": self.stats.to_dict("records"),
            "stage_agreement": self.stage_agreement,
        }


def _merge_short(segments: list[list[float]], min_fraction: float) -> list[list[float]]:
    """Fold segments shorter than ``min_fraction`` into the longer neighbour, then join equals."""
    segs = [s[:] for s in segments]
    while len(segs) > 1:
        i = min(range(len(segs)), key=lambda j: segs[j][1])
        if segs[i][1] >= min_fraction:
            break
        left = segs[i - 1] if i > 0 else None
        right = segs[i + 1] if i + 1 < len(segs) else None
        target = left if right is None or (left is not None and left[1] >= right[1]) else right
        target[1] += segs[i][1]
        del segs[i]
        joined: list[list[float]] = []
        for s in segs:
            if joined and joined[-1][0] == s[0]:
                joined[-1][1] += s[1]
            else:
                joined.append(s)
        segs = joined
    return segs


def too_short(samples: int, need: int) -> str:
    return f"trace has {samples} samples; phases need at least {need}"


def profile_trace(trace: pd.DataFrame, detector: Any, min_fraction: float = 0.05) -> PhaseProfile:
    """Label a trial's trace (columns ``cpu_cores``, ``mem_gb``) with ``detector`` and profile it.

    Raises ``ValueError`` when the trace is too short for the detector's history window.
    """
    x = trace.loc[:, list(FEATURES)].to_numpy(dtype=float)
    delay = int(getattr(detector, "delay", 3))
    if len(x) < delay + 2:
        raise ValueError(too_short(len(x), delay + 2))
    labels = np.asarray(detector.predict([x])[0], dtype=int)
    known = labels >= 0
    runs: list[list[float]] = []
    for lab in labels[known]:
        if runs and runs[-1][0] == lab:
            runs[-1][1] += 1
        else:
            runs.append([int(lab), 1.0])
    total = float(known.sum())
    segments = _merge_short([[p, n / total] for p, n in runs], min_fraction)
    ids = sorted({int(p) for p, _ in segments})
    cpu = {p: float(x[labels == p, 0].mean()) for p in ids}
    mem = {p: float(x[labels == p, 1].mean()) for p in ids}
    share = {p: sum(f for q, f in segments if q == p) for p in ids}
    cpu_mean = sum(cpu[p] * share[p] for p in ids)
    mem_max = max(mem.values())
    scales = {p: (cpu[p] / cpu_mean if cpu_mean > 0 else 1.0,
                  mem[p] / mem_max if mem_max > 0 else 1.0) for p in ids}
    stats = pd.DataFrame([{"phase": p, "samples": int((labels == p).sum()), "share": share[p],
                           "cpu_cores_mean": cpu[p], "mem_gb_mean": mem[p],
                           "mem_gb_peak": float(x[labels == p, 1].max()),
                           "cpu_scale": scales[p][0], "mem_scale": scales[p][1]} for p in ids])
    return PhaseProfile(labels, [(int(p), float(f)) for p, f in segments], scales, stats)


PHASES_DIFFER = 0.25
"""Phases call for their own resources when their mean CPU differs by more than this share of
the run's mean, or their peak memory by more than this share of the run's peak."""


def phase_needs(profile: PhaseProfile, cores_mean: float, mem_peak_gb: float,
                cpus: float | None = None) -> pd.DataFrame:
    """What each phase needs at a run of ``cores_mean`` cores and ``mem_peak_gb`` peak: the
    phases' CPU scales and peak-memory shares (measured on the profiled trace) applied to it,
    and no more cores than the run's ``cpus`` (a phase cannot use cores it was not given).

    Returns one row per phase (``phase, share, cpu_cores, mem_gb``), the heaviest CPU phase
    first; empty when the phases do not differ (:data:`PHASES_DIFFER`).
    """
    st = profile.stats
    if st.empty or "mem_gb_peak" not in st:
        return pd.DataFrame(columns=["phase", "share", "cpu_cores", "mem_gb"])
    peak = float(st["mem_gb_peak"].max()) or 1.0
    cpu_spread = float(st["cpu_scale"].max() - st["cpu_scale"].min())
    mem_spread = float((st["mem_gb_peak"].max() - st["mem_gb_peak"].min()) / peak)
    if max(cpu_spread, mem_spread) <= PHASES_DIFFER:
        return pd.DataFrame(columns=["phase", "share", "cpu_cores", "mem_gb"])
    out = pd.DataFrame({"phase": st["phase"].astype(int), "share": st["share"],
                        "cpu_cores": (cores_mean * st["cpu_scale"]).clip(
                            upper=cpus if cpus else None),
                        "mem_gb": mem_peak_gb * st["mem_gb_peak"] / peak})
    return out.sort_values("cpu_cores", ascending=False).reset_index(drop=True)


def samples_needed(model_dir: str | os.PathLike | None = None) -> int | None:
    """The shortest trace the phase model at ``model_dir`` (or the shipped one) can label,
    read from its ``meta.json`` without loading it (loading imports scikit-learn and the
    CRBM, seconds on a small machine, wasted on a trace of a few samples); None where the
    file does not say."""
    import importlib.util
    import json

    if model_dir is None:
        spec = importlib.util.find_spec("phases")
        if spec is None or not spec.submodule_search_locations:
            return None
        model_dir = Path(list(spec.submodule_search_locations)[0]) / "models" / "default"
    try:
        delay = json.loads((Path(model_dir) / "meta.json").read_text())["delay"]
        return int(delay) + 2
    except (OSError, ValueError, KeyError, TypeError):
        return None


def detector_for(trace: pd.DataFrame, model_dir: str | os.PathLike | None = None) -> Any:
    """The phase model for ``trace``; ``ValueError`` without loading it where the trace is
    too short for its history window."""
    need = samples_needed(model_dir)
    if need is not None and len(trace) < need:
        raise ValueError(too_short(len(trace), need))
    return load_detector(model_dir)


def load_detector(model_dir: str | os.PathLike | None = None) -> Any:
    """The phase model at ``model_dir``, or the shipped default one."""
    from phases import PhaseDetector, load_default_detector

    if model_dir is None:
        return load_default_detector(device="cpu")
    return PhaseDetector.load(Path(model_dir), device="cpu")


def stage_agreement(trace: pd.DataFrame, labels: np.ndarray, stages_csv: str | os.PathLike
                    ) -> dict[str, Any] | None:
    """How well detected phases match the stages the in-process probe marked (start-up, train,
    eval, teardown): the adjusted Rand index over the trace's samples past the warm-up (1: the
    same partition, 0: chance), and the stages seen. None without marks, a ``time_s`` column or
    two labelled samples."""
    from sklearn.metrics import adjusted_rand_score

    try:
        marks = pd.read_csv(stages_csv)
    except (OSError, ValueError):
        return None
    if marks.empty or "time_s" not in trace or len(trace) != len(labels):
        return None
    t = trace["time_s"].to_numpy(dtype=float)
    stage = np.full(len(t), "", dtype=object)
    for row in marks.itertuples():
        stage[(t >= row.start_s) & (t < row.end_s)] = row.stage
    keep = (labels >= 0) & (stage != "")
    if keep.sum() < 2:
        return None
    return {"adjusted_rand": round(float(adjusted_rand_score(stage[keep], labels[keep])), 3),
            "samples": int(keep.sum()), "stages": sorted(set(stage[keep]))}
