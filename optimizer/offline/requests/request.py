"""A recommended request and limit for a job's next run, and what a run used.

Units: CPU in cores, memory in GiB. NaN means no recommendation (the strategy's note says why);
``None`` for a limit means no limit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from optimizer.history import HistoryRun


@dataclass(frozen=True)
class Request:
    """One strategy's requests (and limits) for a job's next run, or one stage of it."""

    strategy: str
    """``cloudopt``, ``krr-simple`` or ``vpa-style``."""
    cpu_request: float
    cpu_limit: float | None
    mem_request_gb: float
    mem_limit_gb: float | None
    runs: int
    """Runs of the job the recommendation rests on."""
    hours: float
    """Hours of usage those runs span."""
    stage: str = ""
    """The stage it is for (``train``, ``load``...); empty for the whole run."""
    note: str = ""

    @property
    def defined(self) -> bool:
        """Both requests were made."""
        return math.isfinite(self.cpu_request) and math.isfinite(self.mem_request_gb)

    @property
    def any_defined(self) -> bool:
        """At least one request was made (a log without CPU usage still sizes memory)."""
        return math.isfinite(self.cpu_request) or math.isfinite(self.mem_request_gb)


def undefined(strategy: str, runs: int, hours: float, note: str) -> Request:
    return Request(strategy, math.nan, None, math.nan, None, runs, hours, note=note)


@dataclass(frozen=True)
class RunUse:
    """What one run (or one stage of it) used: its peak memory and CPU at the p95."""

    peak_mem_gb: float
    cpu_p95: float
    samples: int
    hours: float


def run_use(run: HistoryRun, stage: str = "") -> RunUse | None:
    """The run's use from its usage series (the stage's samples only, for a stage), else from
    its logged outcome (whole run only); None where neither says."""
    usage = run.usage
    if usage is not None and len(usage):
        keep = np.ones(len(usage), dtype=bool)
        if stage:
            if not usage.stage:
                return None
            keep = np.array([s == stage for s in usage.stage])
            if keep.sum() < 2:  # one sample of a stage is no figure of it
                return None
        cpu, mem = usage.cpu_cores[keep], usage.mem_gb[keep]
        return RunUse(float(mem.max()), float(np.quantile(cpu, 0.95)), int(keep.sum()),
                      usage.hours)
    if stage:
        return None
    peak, cpu = run.value("peak_mem_gb"), run.value("cpu_p95_cores")
    if not (math.isfinite(peak) or math.isfinite(cpu)):
        return None
    wall = run.value("wall_s")
    return RunUse(peak, cpu, 1, wall / 3600.0 if math.isfinite(wall) else 0.0)
