"""One form for the history of training runs, wherever it was kept.

Prometheus (container usage by pod), MLflow (params, metrics, system metrics), TensorBoard event
files (scalars), the project's CSV logs and the ``dl-traces`` set are each read into
:class:`HistoryRun` records, so that the analysis (right-sized requests, predictions for a new
job, a search that starts from what ran before) never knows where a run came from.

A run has three kinds of facts, any of which may be missing:

- ``params``: how it was configured (batch size, epochs, learning rate, CPUs, GPUs, memory
  limit, model size, dataset size), canonical names of :data:`PARAM_KEYS`;
- ``outcome``: what it achieved as a whole (wall time, throughput, samples, final loss, peak
  memory), canonical names of :data:`OUTCOME_KEYS`;
- ``usage``: how it used the machine over time (:class:`UsageSeries`), and ``curves``: the
  scalars it logged by step (``loss``, ``throughput``, ...).

``job`` names the recurring job a run belongs to (a workload, a script, a pod's owner), so the
runs of one job can be told from another's.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

PARAM_KEYS = ("batch_size", "epochs", "steps", "lr", "cpus", "gpus", "memory_gb", "params",
              "width", "layers", "dataset_size", "workers", "total_samples")
"""Canonical configuration names; a reader maps its source's names onto these.
``total_samples`` is the whole job's samples (dataset × epochs) where the source knew it."""

OUTCOME_KEYS = ("wall_s", "throughput", "samples", "final_loss", "peak_mem_gb", "cpu_p95_cores",
                "cost", "startup_s")
"""Canonical outcome names: a whole run's figures (throughput in samples/s; ``startup_s`` the
seconds before its steady rate began, which a job pays once whatever its length)."""


@dataclass(frozen=True)
class UsageSeries:
    """A run's container or process usage over time, samples in time order.

    ``time_s`` is seconds since the run's first sample; ``cpu_cores`` the CPU in use (cores,
    summed over the run's processes or containers); ``mem_gb`` memory in use (GiB, working set
    where the source has it, else resident). ``stage`` is what the run itself reported it was
    doing at each sample where the source knows it (``dl-traces``), else empty.
    """

    time_s: np.ndarray
    cpu_cores: np.ndarray
    mem_gb: np.ndarray
    stage: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        n = len(self.time_s)
        for name in ("cpu_cores", "mem_gb"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"UsageSeries: {name} has {len(getattr(self, name))} samples, "
                                 f"time_s has {n}")
        if self.stage and len(self.stage) != n:
            raise ValueError(f"UsageSeries: stage has {len(self.stage)} labels, time_s has {n}")
        if n > 1 and np.any(np.diff(self.time_s) < 0):
            raise ValueError("UsageSeries: time_s must not go backwards")

    def __len__(self) -> int:
        return len(self.time_s)

    @property
    def hours(self) -> float:
        """Hours the series spans."""
        return float(self.time_s[-1] - self.time_s[0]) / 3600.0 if len(self) > 1 else 0.0

    def peak_mem_gb(self) -> float:
        return float(np.max(self.mem_gb)) if len(self) else float("nan")

    def cpu_quantile(self, q: float) -> float:
        return float(np.quantile(self.cpu_cores, q)) if len(self) else float("nan")


@dataclass(frozen=True)
class HistoryRun:
    """One training run from history, in the form every reader produces."""

    run_id: str
    job: str
    source: str
    """Where it was read: ``prometheus``, ``mlflow``, ``tensorboard``, ``csv`` or ``traces``,
    with the address after a colon (``prometheus:http://127.0.0.1:9090``)."""
    started_at: float | None = None
    """Unix seconds of the run's start, where the source knows it (orders runs in time)."""
    params: Mapping[str, float] = field(default_factory=dict)
    outcome: Mapping[str, float] = field(default_factory=dict)
    usage: UsageSeries | None = None
    curves: Mapping[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    """Scalar name -> (steps, values), as logged."""
    tags: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for kind, values, known in (("param", self.params, PARAM_KEYS),
                                    ("outcome", self.outcome, OUTCOME_KEYS)):
            unknown = sorted(set(values) - set(known))
            if unknown:
                raise ValueError(f"run {self.run_id!r} from {self.source}: unknown {kind} "
                                 f"name(s) {unknown}; known: {', '.join(known)}")

    def value(self, name: str) -> float:
        """A param or outcome by canonical name; NaN where the run does not have it.

        Outcomes a usage series implies (peak memory, CPU p95, wall time) come from it where the
        source logged no figure.
        """
        if name in self.outcome:
            return float(self.outcome[name])
        if name in self.params:
            return float(self.params[name])
        if self.usage is not None and len(self.usage):
            if name == "peak_mem_gb":
                return self.usage.peak_mem_gb()
            if name == "cpu_p95_cores":
                return self.usage.cpu_quantile(0.95)
            if name == "wall_s" and len(self.usage) > 1:
                return float(self.usage.time_s[-1] - self.usage.time_s[0])
        return float("nan")


@dataclass(frozen=True)
class History:
    """Runs read from one or more sources, in start order where known."""

    runs: tuple[HistoryRun, ...]

    @classmethod
    def of(cls, runs: Iterable[HistoryRun]) -> History:
        ordered = sorted(runs, key=lambda r: (r.started_at is None, r.started_at or 0.0, r.run_id))
        return cls(tuple(ordered))

    def __iter__(self) -> Iterator[HistoryRun]:
        return iter(self.runs)

    def __len__(self) -> int:
        return len(self.runs)

    def jobs(self) -> list[str]:
        return sorted({r.job for r in self.runs})

    def of_job(self, job: str) -> History:
        return History(tuple(r for r in self.runs if r.job == job))

    def merged(self, other: History) -> History:
        return History.of(self.runs + other.runs)
