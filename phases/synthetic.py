"""Synthetic resource traces with known, planted phases (for tests and demos).

Each execution follows a training script's life: ``load`` (one busy core, memory ramping up
by 0.8 GiB), then ``train``/``eval`` cycles (train: CPU near 2 cores with small noise, memory
flat; eval: CPU alternating between 1.3 and 1.5 cores every sample, memory 0.4 GiB higher), and
``save`` at the end (CPU near 0.2 cores, memory partly released). Every sample carries the label of the phase it was drawn
from, so a detector's phases can be scored with the adjusted Rand index. Phase lengths,
cycle counts and noise come from one seeded ``np.random.default_rng``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from phases.traces import TraceSet

__all__ = ["PHASE_NAMES", "SyntheticTraces", "make_synthetic_traces"]

PHASE_NAMES = ("load", "train", "eval", "save")
FEATURES = ("cpu_cores", "mem_gb")


@dataclass
class SyntheticTraces:
    """Traces and their planted phases.

    Attributes
    ----------
    traces : TraceSet
        Executions with features ``cpu_cores, mem_gb`` (0.5 s sampling).
    labels : list of ndarray of shape (n_samples_i,), int64
        Planted phase of each sample, an index into :data:`PHASE_NAMES`.
    """

    traces: TraceSet
    labels: list[np.ndarray]

    def to_frame(self) -> pd.DataFrame:
        """One row per sample: ``exec_id, time_s, cpu_cores, mem_gb, phase`` (the label)."""
        parts = []
        for eid, t, x, y in zip(
            self.traces.exec_ids, self.traces.times, self.traces.arrays, self.labels, strict=True
        ):
            parts.append(
                pd.DataFrame(
                    {
                        "exec_id": eid,
                        "time_s": t,
                        "cpu_cores": x[:, 0],
                        "mem_gb": x[:, 1],
                        "phase": y,
                    }
                )
            )
        return pd.concat(parts, ignore_index=True)


def _segment(phase: int, n: int, mem0: float, rng: np.random.Generator) -> np.ndarray:
    noise = rng.normal(0.0, 1.0, size=(n, 2))
    if phase == 0:  # load: one busy core, memory ramps up by 0.8 GiB
        cpu = 1.0 + 0.05 * noise[:, 0]
        mem = mem0 + np.linspace(0.0, 0.8, n) + 0.01 * noise[:, 1]
    elif phase == 1:  # train: saturated CPU, flat memory
        cpu = 1.9 + 0.05 * noise[:, 0]
        mem = np.full(n, mem0 + 0.8) + 0.01 * noise[:, 1]
    elif phase == 2:  # eval: CPU alternates sample by sample, slightly more memory
        cpu = np.where(np.arange(n) % 2 == 0, 1.3, 1.5) + 0.03 * noise[:, 0]
        mem = np.full(n, mem0 + 1.2) + 0.01 * noise[:, 1]
    else:  # save: nearly idle, memory partly released
        cpu = 0.2 + 0.03 * noise[:, 0]
        mem = np.full(n, mem0 + 0.3) + 0.01 * noise[:, 1]
    return np.column_stack([cpu, mem])


def make_synthetic_traces(
    n_executions: int = 12,
    *,
    min_phase_len: int = 30,
    max_phase_len: int = 60,
    max_cycles: int = 3,
    random_state: int | None = None,
) -> SyntheticTraces:
    """Generate executions with planted phases.

    Parameters
    ----------
    n_executions : int, default=12
    min_phase_len, max_phase_len : int
        Samples per phase segment, drawn uniformly.
    max_cycles : int, default=3
        Train/eval cycles per execution, drawn from ``1..max_cycles``.
    random_state : int or None

    Returns
    -------
    SyntheticTraces
    """
    rng = np.random.default_rng(random_state)
    arrays, labels = [], []
    for _ in range(n_executions):
        plan = [0] + [1, 2] * int(rng.integers(1, max_cycles + 1)) + [3]
        mem0 = 0.2 + 0.05 * rng.random()
        segs, labs = [], []
        for phase in plan:
            n = int(rng.integers(min_phase_len, max_phase_len + 1))
            segs.append(_segment(phase, n, mem0, rng))
            labs.append(np.full(n, phase, dtype=np.int64))
        arrays.append(np.clip(np.concatenate(segs), 0.0, None))
        labels.append(np.concatenate(labs))
    traces = TraceSet(
        arrays=arrays,
        exec_ids=[f"s{i:03d}" for i in range(n_executions)],
        times=[0.5 * np.arange(1, len(a) + 1) for a in arrays],
        rows=[],
        features=list(FEATURES),
        exec_id_col="exec_id",
        time_col="time_s",
        source="synthetic",
    )
    offsets = np.cumsum([0] + [len(a) for a in arrays])
    traces.rows = [np.arange(offsets[i], offsets[i + 1]) for i in range(n_executions)]
    traces.n_rows = int(offsets[-1])
    return SyntheticTraces(traces, labels)
