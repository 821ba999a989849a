"""Training logs as the offline analysis reads them: canonical run tables, a finished trial's
record as one more row, and a new job's characteristics in the same columns.

Reading and validating CSV logs (column matching, impossible rows, derived work, throughput and
cost) lives in :mod:`optimizer.history.csv_logs` and :mod:`optimizer.history.columns`, shared
with the other readers of run history; its names are re-exported here for the analysis.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from optimizer.foundation.errors import CloudoptError
from optimizer.history.columns import (
    COLUMN_ALIASES,
    NUMERIC,
    REQUIRED_GROUPS,
    TEXT,
    match_columns,
    missing_groups,
    normalise_name,
)
from optimizer.history.csv_logs import (
    LogReport,
    clean_model_name,
    discover_logs,
    model_keys,
    normalise_frame,
    read_csv_table,
)
from optimizer.trials.records import TrialSummary

__all__ = ["CHARACTERISTIC_KEYS", "COLUMN_ALIASES", "NUMERIC", "REQUIRED_GROUPS", "TEXT",
           "LogReport", "characteristics_frame", "discover_logs", "empty_history",
           "flatten_result", "match_columns", "missing_groups", "model_characteristics",
           "model_keys", "normalise_frame",
           "normalise_name", "read_csv_table"]


def flatten_result(result: TrialSummary | Mapping[str, Any]) -> dict[str, Any]:
    """One flat record from a :class:`TrialSummary` or a (possibly nested) dict."""
    data = result.to_dict() if isinstance(result, TrialSummary) else dict(result)
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, Mapping):
            for k, v in value.items():
                flat.setdefault(str(k), v)
        elif not isinstance(value, (list, tuple)):
            flat[str(key)] = value
    return flat


def empty_history() -> pd.DataFrame:
    """A run table with no rows and every canonical column, typed."""
    cols = list(NUMERIC) + list(TEXT) + ["work", "source", "model_key"]
    return pd.DataFrame({c: pd.Series(dtype=float if c in NUMERIC or c == "work" else object)
                         for c in cols})


CHARACTERISTIC_KEYS = ("model_name", "model_family", "params", "layers", "width", "dataset",
                       "dataset_size", "epochs", "total_samples", "samples")


def characteristics_frame(model_characteristics: Mapping[str, Any]) -> pd.DataFrame:
    """One canonical row from user-given characteristics (aliases accepted, e.g. ``model``).

    Returns a DataFrame of shape (1, n_canonical) with NaN/None where nothing was given.
    """
    found = match_columns(model_characteristics.keys())
    row = empty_history().iloc[:0].copy()
    values: dict[str, Any] = {}
    for canonical, original in found.items():
        v = model_characteristics[original]
        if canonical in NUMERIC:
            try:
                values[canonical] = float(v) if v is not None else np.nan
            except (TypeError, ValueError):
                raise CloudoptError(
                    f"model characteristic {original!r} must be a number (got {v!r})") from None
        else:
            values[canonical] = None if v is None else str(v)
    row = pd.concat([row, pd.DataFrame([values])], ignore_index=True)
    for c in NUMERIC:
        row[c] = pd.to_numeric(row[c], errors="coerce").astype(float)
    row["model_name"] = row["model_name"].map(clean_model_name)
    row["model_name"] = row["model_name"].where(row["model_name"].notna(), row["model_family"])
    job_work = row["dataset_size"] * row["epochs"]
    work = row["total_samples"].where(row["total_samples"] > 0, job_work)
    row["work"] = work.where(work > 0, row["samples"])
    row["model_key"] = model_keys(row)
    return row


def model_characteristics(data: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Per model key: name, family, parameters, layers, width, data set, runs and sources
    (each the first value the runs log)."""
    def first(g: pd.DataFrame, c: str) -> Any:
        return next((v for v in g[c] if v is not None and v == v), None)

    out: dict[str, dict[str, Any]] = {}
    for key, g in data.groupby("model_key", sort=True):
        out[str(key)] = {
            "model_name": first(g, "model_name"),
            "model_family": first(g, "model_family"), "params": first(g, "params"),
            "layers": first(g, "layers"), "width": first(g, "width"),
            "dataset": first(g, "dataset"), "runs": int(len(g)),
            "sources": sorted(set(g["source"])),
        }
    return out
