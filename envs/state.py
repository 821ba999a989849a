"""Observation of :class:`envs.CloudEnvironment`: the design's ``CloudEnvironmentState``.

The state keeps raw metrics (``state_components``) and turns them into a normalised ``float32``
vector. The same vectorised normaliser (:meth:`CloudEnvironmentState.vectorize`) serves a single
update from measured metrics and the environment's precomputed tables, so both agree exactly.

SLA compliance is judged per adjustment interval against the pro-rata budget of the whole job:
one of ``n_steps`` chunks should take at most ``time_max / n_steps`` seconds and
``cost_max / n_steps`` dollars; throughput, memory and utilisation minima are checked as given.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from envs.actions import ResourceGrid
from optimizer.foundation.config import ResourceConfig, SLAConfig

SLA_NAMES = ("time", "cost", "throughput", "memory", "gpu_util", "cpu_util")
FRACTION_HIGH = 4.0
"""Upper clip of elapsed time and spent cost relative to the SLA limits in the observation."""


def vector_fields(max_phases: int) -> list[str]:
    """Names of the observation entries, in order."""
    return (
        [
            "gpus",
            "cpus",
            "memory_gb",
            "batch_size",
            "gpu_util",
            "cpu_util",
            "mem_util",
            "throughput",
            "progress",
            "time_used",
            "cost_used",
        ]
        + [f"phase_{i}" for i in range(max_phases)]
        + [f"sla_{n}" for n in SLA_NAMES]
        + ["sla_overall"]
    )


class CloudEnvironmentState:
    """Resource allocation, utilisation, progress, spend and SLA compliance of a job.

    Parameters
    ----------
    resource_config : ResourceConfig
    sla_config : SLAConfig
    grid : ResourceGrid
        Allocation levels; allocations are normalised by the largest level.
    n_steps : int
        Adjustment intervals per job (for the pro-rata SLA budget).
    max_phases : int
        Length of the phase one-hot.
    throughput_scale : float
        Throughput that maps to 1.0 (the best over the grid).

    Attributes
    ----------
    state_components : dict
        Raw metrics of the last update.
    state_dim : int
        Length of :meth:`get_vector`.
    """

    def __init__(
        self,
        resource_config: ResourceConfig,
        sla_config: SLAConfig,
        *,
        grid: ResourceGrid,
        n_steps: int,
        max_phases: int = 4,
        throughput_scale: float = 1.0,
    ) -> None:
        self.resource_config = resource_config
        self.sla_config = sla_config
        self.grid = grid
        self.n_steps = int(n_steps)
        self.max_phases = int(max_phases)
        self.throughput_scale = float(throughput_scale)
        self.fields = vector_fields(self.max_phases)
        self.index = {name: i for i, name in enumerate(self.fields)}
        self.state_dim = len(self.fields)
        self.high = np.ones(self.state_dim, dtype=np.float32)
        for name in ("time_used", "cost_used", "throughput"):
            self.high[self.index[name]] = FRACTION_HIGH
        self.state_components: dict[str, Any] = {}
        self._vector = np.zeros(self.state_dim, dtype=np.float32)
        self.checked = self._checked_slas()

    def _checked_slas(self) -> np.ndarray:
        s = self.sla_config
        return np.array(
            [True, True, s.throughput_min > 0, True, s.gpu_util_min > 0, s.cpu_util_min > 0]
        )

    # ------------------------------------------------------------ vectorised core
    def sla_arrays(self, m: Mapping[str, Any]) -> np.ndarray:
        """Per-SLA compliance, bool array of shape ``(..., 6)`` in ``SLA_NAMES`` order."""
        s = self.sla_config
        gpus = np.asarray(m["gpus"])
        status = [
            np.asarray(m["step_time_s"]) <= s.time_max / self.n_steps + 1e-9,
            np.asarray(m["step_cost"]) <= s.cost_max / self.n_steps + 1e-12,
            np.asarray(m["throughput"]) >= s.throughput_min,
            np.asarray(m["mem_gb"]) <= s.memory_max,
            (gpus == 0) | (100 * np.asarray(m["gpu_util"]) >= s.gpu_util_min),
            100 * np.asarray(m["cpu_util"]) >= s.cpu_util_min,
        ]
        shape = np.broadcast(*status).shape
        out = np.stack([np.broadcast_to(x, shape) for x in status], axis=-1)
        return out | ~self.checked

    def compliance_rate(self, status: np.ndarray) -> np.ndarray:
        """Share of the checked SLAs met, shape ``status.shape[:-1]``."""
        return status[..., self.checked].mean(axis=-1)

    def vectorize(self, m: Mapping[str, Any]) -> np.ndarray:
        """Normalised observation(s) from metrics arrays, shape ``(..., state_dim)`` float32.

        ``m`` needs ``gpus, cpus, memory_gb, batch_size`` (the allocation), ``gpu_util,
        cpu_util, mem_util`` (fractions in [0, 1]), ``throughput`` (samples/s), ``progress``
        (fraction of the job done), ``elapsed_s, cost`` (job so far), ``phase`` (one-hot slot,
        -1 for none), ``step_time_s, step_cost`` (last interval) and ``mem_gb`` (footprint).
        """
        g = self.grid
        s = self.sla_config
        bmin, bmax = float(g.batch_size.min()), float(g.batch_size.max())
        bpos = (
            np.log2(np.asarray(m["batch_size"], float) / bmin) / np.log2(bmax / bmin)
            if bmax > bmin
            else np.ones_like(np.asarray(m["batch_size"], float))
        )
        cols = [
            np.asarray(m["gpus"], float) / max(float(g.gpus.max()), 1.0),
            np.asarray(m["cpus"], float) / float(g.cpus.max()),
            np.asarray(m["memory_gb"], float) / float(g.memory_gb.max()),
            bpos,
            np.asarray(m["gpu_util"], float),
            np.asarray(m["cpu_util"], float),
            np.asarray(m["mem_util"], float),
            np.asarray(m["throughput"], float) / self.throughput_scale,
            np.asarray(m["progress"], float),
            np.asarray(m["elapsed_s"], float) / s.time_max,
            np.asarray(m["cost"], float) / s.cost_max,
        ]
        phase = np.asarray(m["phase"])
        cols += [(phase == i).astype(float) for i in range(self.max_phases)]
        status = self.sla_arrays(m)
        cols += [status[..., i].astype(float) for i in range(len(SLA_NAMES))]
        cols.append(self.compliance_rate(status))
        shape = np.broadcast(*cols).shape
        vec = np.stack([np.broadcast_to(c, shape) for c in cols], axis=-1)
        return np.clip(vec, 0.0, self.high).astype(np.float32)

    # ------------------------------------------------------------ the design's methods
    def update_from_metrics(self, metrics: Mapping[str, Any]) -> np.ndarray:
        """Update from measured metrics (missing keys keep their previous value).

        Returns the new observation vector, shape ``(state_dim,)``.
        """
        defaults = {
            "gpus": 0,
            "cpus": 1,
            "memory_gb": 1.0,
            "batch_size": int(self.grid.batch_size[0]),
            "gpu_util": 0.0,
            "cpu_util": 0.0,
            "mem_util": 0.0,
            "throughput": 0.0,
            "progress": 0.0,
            "elapsed_s": 0.0,
            "cost": 0.0,
            "phase": 0,
            "step_time_s": 0.0,
            "step_cost": 0.0,
            "mem_gb": 0.0,
        }
        comp = {**defaults, **self.state_components, **dict(metrics)}
        self.state_components = comp
        self._vector = self.vectorize(comp)
        return self._vector.copy()

    def set_vector(self, vector: np.ndarray) -> None:
        """Fast path for the environment: adopt a vector built from its tables."""
        self._vector = vector

    def get_vector(self) -> np.ndarray:
        """The normalised observation, float32 of shape ``(state_dim,)``."""
        return self._vector.copy()

    def get_sla_status(self) -> dict[str, bool]:
        """Compliance of each SLA in the last interval (unchecked SLAs count as met)."""
        base = self.index["sla_time"]
        return {n: bool(self._vector[base + i] >= 0.5) for i, n in enumerate(SLA_NAMES)}

    def get_overall_sla_compliance(self) -> float:
        """Share of the checked SLAs met in the last interval, in [0, 1]."""
        status = np.array(list(self.get_sla_status().values()))
        return float(self.compliance_rate(status))


def metrics_from_trial(
    trial: Any, *, progress: float = 0.0, phase: int = 0, n_steps: int = 1
) -> dict[str, Any]:
    """Metrics for :meth:`CloudEnvironmentState.update_from_metrics` from a measured
    :class:`optimizer.trials.records.TrialSummary` (percentages become fractions).

    The trial stands for one adjustment interval of a job ``n_steps`` intervals long, so its
    wall time and cost are the interval's, and ``progress`` says how much of the job is done.
    """
    a = trial.allocation
    mem = float(a.memory_gb) if a.memory_gb else 1.0
    return {
        "gpus": a.gpus,
        "cpus": a.cpus,
        "memory_gb": a.memory_gb,
        "batch_size": a.batch_size or 1,
        "gpu_util": (trial.gpu_util_mean or 0.0) / 100.0,
        "cpu_util": trial.cpu_util_mean / 100.0,
        "mem_util": min(1.0, trial.mem_gb_peak / mem),
        "throughput": trial.throughput or 0.0,
        "progress": progress,
        "elapsed_s": trial.wall_time_s * progress * n_steps,
        "cost": trial.cost * progress * n_steps,
        "phase": phase,
        "step_time_s": trial.wall_time_s,
        "step_cost": trial.cost,
        "mem_gb": trial.mem_gb_peak,
    }
