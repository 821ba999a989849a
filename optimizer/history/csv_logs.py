"""CSV training logs read into canonical run records, and into :class:`History`.

A log is a table with one row per run; its columns are matched through
:mod:`optimizer.history.columns`. A file must name a model (name, family or parameter count), an
outcome (time or throughput) and a configuration (GPUs, CPUs/threads or batch size); otherwise
:class:`~optimizer.foundation.errors.TraceFormatError` names the file and the missing columns.
Rows with impossible values (non-positive time or throughput, negative counts) and failed trials
are dropped and counted per file.

Derived values: the job's ``work`` (samples of the whole job) is ``total_samples``, else
``dataset_size x epochs``, else ``samples``; ``throughput = work / time`` where no throughput
is logged; a ``probe`` trial's time is its ``predicted_total_time_s`` (its wall time is only
the probe's time box); cost is hourly cost x time where both are known (the offline analysis
fills the hourly cost from prices).

:func:`read_csv_history` gives the same rows as :class:`~optimizer.history.run.HistoryRun`
records (job = the model's name), for the analyses that read any store.
"""

from __future__ import annotations

import csv
import glob as _glob
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from optimizer.foundation.errors import CloudoptError, TraceFormatError
from optimizer.history.columns import (
    NUMERIC,
    TEXT,
    describe_missing,
    match_columns,
    missing_groups,
)
from optimizer.history.run import History, HistoryRun


def read_csv_table(path: str | os.PathLike) -> pd.DataFrame:
    """A CSV file as a DataFrame of strings, or :class:`TraceFormatError` naming the file."""
    p = Path(path)
    if not p.is_file():
        raise TraceFormatError(f"{p}: log file not found")
    try:
        frame = pd.read_csv(p, dtype=str, keep_default_na=True, skipinitialspace=True,
                            on_bad_lines="error", encoding="utf-8")
    except pd.errors.EmptyDataError:
        raise TraceFormatError(f"{p}: empty file, not a training log") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError, csv.Error) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TraceFormatError(f"{p}: not a readable CSV table ({first})") from None
    return frame


@dataclass
class LogReport:
    """What reading one log gave: rows kept and rows dropped, with the reasons."""

    path: str
    rows_read: int = 0
    rows_kept: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    dropped_rows: dict[str, list[int]] = field(default_factory=dict)
    """Reason -> the dropped data rows (1 is the first row after the header)."""
    columns: dict[str, str] = field(default_factory=dict)
    """Canonical name -> the file's column."""

    @property
    def rows_dropped(self) -> int:
        return sum(self.dropped.values())


def _to_number(series: pd.Series) -> pd.Series:
    text = series.astype(str).str.strip().str.replace(",", "", regex=False)
    return pd.to_numeric(text, errors="coerce").astype(float)


def normalise_frame(raw: pd.DataFrame, source: str) -> tuple[pd.DataFrame, LogReport]:
    """Canonical columns from a raw log table, impossible rows dropped and counted.

    Parameters
    ----------
    raw : DataFrame of shape (n_rows, n_columns)
        The file as read, any column names.
    source : str
        The file name, for messages and the ``source`` column.

    Returns
    -------
    frame : DataFrame of shape (n_kept, len(NUMERIC) + len(TEXT) + 3)
        Canonical columns (missing ones NaN), plus ``work``, ``source`` and ``model_key``.
    report : LogReport
    """
    found = match_columns(raw.columns)
    missing = missing_groups(found)
    if missing:
        raise TraceFormatError(
            f"{source}: not a training log: missing {describe_missing(missing)} "
            f"(columns found: {', '.join(map(str, raw.columns[:20])) or 'none'})"
        )
    out = pd.DataFrame(index=raw.index)
    for name in NUMERIC:
        out[name] = _to_number(raw[found[name]]) if name in found else np.nan
    for name in TEXT:
        if name in found:
            out[name] = pd.Series([_text(v) for v in raw[found[name]]], index=raw.index,
                                  dtype=object)
        else:
            out[name] = None
    out["model_name"] = out["model_name"].map(clean_model_name)
    report = LogReport(path=source, rows_read=len(raw),
                       columns={k: str(v) for k, v in found.items()})
    out = _derive(out)
    # a cloudopt run's trials.csv lists the runs it read from history (--history): copies
    copied = raw["history_source"].notna() if "history_source" in raw.columns else False
    out, report.dropped_rows = _drop_impossible(out, copied)
    report.dropped = {why: len(rows) for why, rows in report.dropped_rows.items()}
    out["source"] = source
    out["model_key"] = model_keys(out)
    report.rows_kept = len(out)
    return out.reset_index(drop=True), report


def _text(value: Any) -> str | None:
    """A stripped string, or None for missing and empty cells."""
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return None
    text = str(value).strip()
    return text or None


def clean_model_name(value: Any) -> Any:
    # A script path (train_file) names the model by its stem: examples/train_cnn.py -> train_cnn.
    text = _text(value)
    if text is None:
        return None
    if text.endswith(".py") or "/" in text:
        text = Path(text).stem
    return text or None


def _derive(out: pd.DataFrame) -> pd.DataFrame:
    # dl-traces' executions.csv has a `samples` column that counts monitor samples; the job's
    # size (rows x epochs) takes precedence over it.
    job_work = out["dataset_size"] * out["epochs"]
    work = out["total_samples"].where(out["total_samples"] > 0, job_work)
    out["work"] = work.where(work > 0, out["samples"])
    probe = out["status"].astype(str).str.lower().eq("probe")
    # A probe's wall time is the time box; the job's time is the runner's extrapolation.
    out.loc[probe, "time_s"] = out.loc[probe, "predicted_time_s"]
    derived_tp = out["work"] / out["time_s"]
    out["throughput"] = out["throughput"].where(out["throughput"].notna(), derived_tp)
    derived_cost = out["hourly_cost"] * out["time_s"] / 3600.0
    out["cost"] = out["cost"].where(out["cost"].notna() & ~probe, derived_cost)
    out["model_name"] = out["model_name"].where(out["model_name"].notna(), out["model_family"])
    return out


def _drop_impossible(out: pd.DataFrame, copied: Any = False
                     ) -> tuple[pd.DataFrame, dict[str, list[int]]]:
    """Remove failed trials, rows no real run can produce and ``copied`` ones (another run's
    record, read from history); the data rows (1-based) dropped for each reason."""
    rules = {
        "read from history (another run's record)": copied,
        "failed trial": out["status"].astype(str).str.lower().isin(
            ["failed", "error", "crashed", "killed", "oom", "timeout"]),
        "no model name or size": out["model_name"].isna() & ~(out["params"] > 0),
        "time <= 0 or not finite": out["time_s"].notna() & ~(
            (out["time_s"] > 0) & np.isfinite(out["time_s"])),
        "throughput <= 0 or not finite": out["throughput"].notna() & ~(
            (out["throughput"] > 0) & np.isfinite(out["throughput"])),
        "no time and no throughput": out["time_s"].isna() & out["throughput"].isna(),
        "negative GPUs": out["gpus"] < 0,
        "CPUs < 1": out["cpus"] < 1,
        "batch size < 1": out["batch_size"] < 1,
        "memory <= 0": out["memory_gb"] <= 0,
        "parameters <= 0": out["params"] <= 0,
        "negative cost": (out["cost"] < 0) | (out["hourly_cost"] < 0),
        "infinite value": np.isinf(out[list(NUMERIC)].to_numpy(dtype=float)).any(axis=1),
    }
    bad = pd.Series(False, index=out.index)
    rows: dict[str, list[int]] = {}
    for reason, mask in rules.items():
        new = pd.Series(mask, index=out.index).fillna(False).astype(bool) & ~bad
        if new.any():
            rows[reason] = [int(i) + 1 for i in np.flatnonzero(new.to_numpy())]
        bad |= new
    return out[~bad].copy(), rows


def _size_tag(params: float, width: float) -> str:
    if np.isfinite(params):
        for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
            if params >= scale:
                return f"{params / scale:.3g}{unit}"
        return f"{params:.0f}"
    if np.isfinite(width):
        return f"w{width:.0f}"
    return ""


def model_keys(frame: pd.DataFrame) -> pd.Series:
    """One key per model and size: ``name[size]`` (``cnn[19.6k]``, ``mlp_tabular[w256]``)."""
    keys = []
    for name, fam, params, width in zip(frame["model_name"], frame["model_family"],
                                        frame["params"], frame["width"], strict=True):
        base = name if isinstance(name, str) else (fam if isinstance(fam, str) else "model")
        tag = _size_tag(float(params), float(width))
        keys.append(f"{base}[{tag}]" if tag else base)
    return pd.Series(keys, index=frame.index, dtype=object)


def discover_logs(spec: str | os.PathLike) -> list[Path]:
    """Log files named by a file, a directory or a glob pattern.

    A directory gives its ``*.csv`` files and the ``trials.csv`` of each run folder below it
    (``runs/<run>/trials.csv``); per-trial files (``trace.csv``, ``metrics.csv``) are not logs.
    """
    p = Path(spec)
    if p.is_file():
        return [p]
    if p.is_dir():
        files = sorted(p.glob("*.csv")) + sorted(p.glob("*/trials.csv"))
        return list(dict.fromkeys(files))
    matches = [Path(m) for m in sorted(_glob.glob(str(spec), recursive=True))]
    files = [m for m in matches if m.is_file()]
    if not files:
        raise CloudoptError(f"{spec}: no log file, directory or matching file found")
    return files


_PARAM_COLUMNS = {"batch_size": "batch_size", "epochs": "epochs", "cpus": "cpus", "gpus": "gpus",
                  "memory_gb": "memory_gb", "params": "params", "width": "width",
                  "layers": "layers", "dataset_size": "dataset_size"}
_OUTCOME_COLUMNS = {"wall_s": "time_s", "throughput": "throughput", "samples": "work",
                    "peak_mem_gb": "mem_gb_peak", "cost": "cost"}
"""History name -> canonical log column (see :func:`normalise_frame`)."""


def _unix_seconds(value: Any) -> float | None:
    if value is None:
        return None
    stamp = pd.to_datetime(value, errors="coerce", utc=True)
    return None if pd.isna(stamp) else float(stamp.timestamp())


def _numbers(row: pd.Series, columns: dict[str, str]) -> dict[str, float]:
    values = {}
    for name, col in columns.items():
        v = float(row[col]) if col in row.index and row[col] is not None else float("nan")
        if np.isfinite(v):
            values[name] = v
    return values


def frame_to_history(frame: pd.DataFrame) -> History:
    """Canonical log rows (:func:`normalise_frame`) as :class:`HistoryRun` records.

    The job is the model's name (a script's stem, a workload), so the runs of one script at
    several sizes stay one recurring job; the size is a param (``params``, ``width``).
    """
    runs = []
    for i, row in frame.reset_index(drop=True).iterrows():
        source = str(row.get("source") or "csv")
        job = row["model_name"] if isinstance(row["model_name"], str) else row["model_key"]
        run_id = row["run_id"] if isinstance(row["run_id"], str) else f"{Path(source).name}:{i + 1}"
        tags = {k: str(row[k]) for k in ("model_key", "model_family", "dataset", "status")
                if isinstance(row.get(k), str)}
        runs.append(HistoryRun(run_id=run_id, job=str(job), source=f"csv:{source}",
                               started_at=_unix_seconds(row["started_at"]),
                               params=_numbers(row, _PARAM_COLUMNS),
                               outcome=_numbers(row, _OUTCOME_COLUMNS), tags=tags))
    return History.of(runs)


def read_csv_history(path: str | os.PathLike) -> History:
    """The runs of the CSV logs a file, folder or glob names (:func:`discover_logs`).

    Raises :class:`TraceFormatError` naming a file that is not a training log (with the
    columns it lacks) or that cannot be parsed.
    """
    history = History(())
    for log in discover_logs(path):
        frame, _ = normalise_frame(read_csv_table(log), str(log))
        history = history.merged(frame_to_history(frame))
    return history
