"""Replaying a history: each run's requests from the runs before it, checked against what it
used.

Runs are taken in the history's order (start time, else the reader's order: ``exec_id`` for
``dl-traces``). For each run with usage and at least ``min_prior`` earlier runs of its job, each
strategy recommends from the earlier runs only (cloudopt also sees the earlier runs of other
jobs, as a platform's history holds them; KRR and the VPA look at one workload by design), and
the run then shows whether the request **held**:

- memory held: the run's peak memory <= the memory request;
- CPU held: the run's CPU at its p95 <= the CPU request (CPU is compressible: above the
  request a run competes for spare cycles, so a request at the p95 of use is what it needs);

and its **slack**, the request above what was used as a fraction of the use,
``max(request - use, 0) / use``, 0 when the request fell short (a shortfall is counted by
``held``, not netted against the waste of other runs).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from optimizer.history import History
from optimizer.offline.requests.cloudopt import cloudopt_request
from optimizer.offline.requests.peers import krr_simple, vpa_style
from optimizer.offline.requests.request import run_use

STRATEGIES = ("cloudopt", "krr-simple", "vpa-style")


def backtest(history: History, *, min_prior: int = 2, krr_points: int = 100) -> pd.DataFrame:
    """One row per (run, strategy): requests, the run's use, held and slack.

    ``krr_points`` is KRR's ``points_required`` (its default 100); with fewer points in a
    job's earlier runs KRR recommends nothing and the row says so (``defined`` False).
    """
    runs = [r for r in history if r.usage is not None and len(r.usage)]
    rows = []
    for i, run in enumerate(runs):
        earlier = runs[:i]
        own = [r for r in earlier if r.job == run.job]
        use = run_use(run)
        if len(own) < min_prior or use is None:
            continue
        requests = (cloudopt_request(earlier, run.job, run.params),
                    krr_simple(own, points_required=krr_points), vpa_style(own))
        for req in requests:
            rows.append({"run": run.run_id, "job": run.job, "strategy": req.strategy,
                         "prior_runs": len(own), "defined": req.defined,
                         "mem_request_gb": req.mem_request_gb, "mem_used_gb": use.peak_mem_gb,
                         "cpu_request": req.cpu_request, "cpu_used_p95": use.cpu_p95})
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    out["mem_held"] = out["mem_used_gb"] <= out["mem_request_gb"]
    out["cpu_held"] = out["cpu_used_p95"] <= out["cpu_request"]
    out["mem_slack"] = _slack(out["mem_request_gb"], out["mem_used_gb"])
    out["cpu_slack"] = _slack(out["cpu_request"], out["cpu_used_p95"])
    return out


def _slack(request: pd.Series, used: pd.Series) -> pd.Series:
    return (request - used).clip(lower=0) / used


def summarise(rows: pd.DataFrame) -> pd.DataFrame:
    """Per strategy: runs judged, share held (memory, CPU, both) and mean slack (%).

    Runs where a strategy recommended nothing count as not held for it.
    """
    out = []
    for name in STRATEGIES:
        s = rows[rows["strategy"] == name]
        if s.empty:
            continue
        d = s["defined"].to_numpy()
        out.append({
            "strategy": name, "runs": len(s), "recommended": int(d.sum()),
            "mem_held_%": 100 * float((s["mem_held"] & d).mean()),
            "mem_slack_%": 100 * float(np.nanmean(s["mem_slack"][d])),
            "cpu_held_%": 100 * float((s["cpu_held"] & d).mean()),
            "cpu_slack_%": 100 * float(np.nanmean(s["cpu_slack"][d])),
            "both_held_%": 100 * float((s["mem_held"] & s["cpu_held"] & d).mean()),
        })
    return pd.DataFrame(out)
