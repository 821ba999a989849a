"""Each recurring job's requests for its next run, by every strategy, as the report shows them."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from optimizer.history import History
from optimizer.offline.requests.cloudopt import cloudopt_request, stage_requests
from optimizer.offline.requests.peers import krr_simple, vpa_style
from optimizer.offline.requests.request import Request


@dataclass(frozen=True)
class JobSizing:
    """A job's next run sized three ways, and what cloudopt's stages need apart."""

    job: str
    params: Mapping[str, float]
    """The configuration sized for (the job's latest run's, unless given)."""
    requests: tuple[Request, ...]
    """cloudopt, KRR simple, VPA-style, for the whole run."""
    stages: tuple[Request, ...]
    """cloudopt per stage, where a stage's needs differ from the whole run's."""


def right_size(history: History, next_params: Mapping[str, Mapping[str, float]] | None = None,
               *, krr_points: int = 100) -> list[JobSizing]:
    """Requests for the next run of every job with runs that carry usage or peaks.

    ``next_params`` gives a job's next configuration by job name; a job not named there is
    sized for its latest run's configuration (the next run repeats the last, as a cron job
    does).
    """
    out = []
    for job in history.jobs():
        own = list(history.of_job(job))
        params = dict((next_params or {}).get(job) or own[-1].params)
        whole = cloudopt_request(list(history), job, params)
        if not whole.any_defined:
            continue
        requests = (whole, krr_simple(own, points_required=krr_points), vpa_style(own))
        stages = tuple(stage_requests(list(history), job, params, whole=whole))
        out.append(JobSizing(job, params, requests, stages))
    return out


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "none"
    return f"{value:.3g} {unit}" if math.isfinite(value) else "n/a"


def sizing_table(sizings: list[JobSizing]) -> pd.DataFrame:
    """One row per job, strategy and stage: requests, limits, runs and hours, note."""
    rows = []
    for s in sizings:
        for r in (*s.requests, *s.stages):
            rows.append({"job": s.job, "strategy": r.strategy, "stage": r.stage or "whole run",
                         "cpu_request": _fmt(r.cpu_request, "cores"),
                         "cpu_limit": _fmt(r.cpu_limit, "cores"),
                         "mem_request": _fmt(r.mem_request_gb, "GiB"),
                         "mem_limit": _fmt(r.mem_limit_gb, "GiB"), "runs": r.runs,
                         "hours": round(r.hours, 3), "note": r.note})
    return pd.DataFrame(rows)
