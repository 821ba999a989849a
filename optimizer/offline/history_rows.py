"""Runs read from any store (:class:`~optimizer.history.History`) as the offline analysis's
canonical log rows, so traces, Prometheus or MLflow history is analysed as a CSV log is."""

from __future__ import annotations

import math

import pandas as pd

from optimizer.history import History, HistoryRun
from optimizer.history.csv_logs import LogReport, normalise_frame

_PARAMS = ("batch_size", "epochs", "cpus", "gpus", "memory_gb", "params", "width", "layers",
           "dataset_size")
_OUTCOMES = {"time_s": "wall_s", "throughput": "throughput", "total_samples": "samples",
             "mem_gb_peak": "peak_mem_gb", "cost": "cost"}
"""Canonical log column -> history name."""


def _row(run: HistoryRun) -> dict[str, str | None]:
    row: dict[str, str | None] = {"run_id": run.run_id, "model_name": run.job,
                                  "status": run.tags.get("status")}
    if "exit_code" in run.tags and run.tags["exit_code"] != "0":
        row["status"] = "failed"
    if run.started_at is not None:
        row["started_at"] = pd.Timestamp(run.started_at, unit="s", tz="UTC").isoformat()
    for name in _PARAMS:
        if name in run.params:
            row[name] = repr(float(run.params[name]))
    for col, name in _OUTCOMES.items():
        v = run.value(name)  # peak memory comes from the usage series where not logged
        if math.isfinite(v):
            row[col] = repr(v)
    return row


def history_frame(history: History, source: str) -> tuple[pd.DataFrame, LogReport]:
    """Canonical rows of the runs (:func:`~optimizer.history.csv_logs.normalise_frame`):
    the same validation, derived work and dropped rows as a CSV log."""
    raw = pd.DataFrame([_row(r) for r in history])
    return normalise_frame(raw, source)
