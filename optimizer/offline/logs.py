"""Reading training logs into canonical run records: column matching, validation, derivation.

Column names are matched leniently through :data:`COLUMN_ALIASES` after normalisation (lower
case; spaces, dots, dashes and slashes become ``_``; brackets dropped; the record prefixes
``allocation_`` and ``model_info_`` stripped), so ``Time (s)``, ``wall_s`` and ``wall_time_s``
are all the run's wall time. A file must name a model (name, family or parameter count), an
outcome (time or throughput) and a configuration (GPUs, CPUs/threads or batch size); otherwise
:class:`~optimizer.foundation.errors.TraceFormatError` names the file and the missing columns. Rows with
impossible values (non-positive time or throughput, negative counts) and failed trials are
dropped and counted per file.

Derived values: the job's ``work`` (samples of the whole job) is ``total_samples``, else
``dataset_size x epochs``, else ``samples``; ``throughput = work / time`` where no throughput
is logged; a ``probe`` trial's time is its ``predicted_total_time_s`` (its wall time is only
the probe's time box); cost is hourly cost x time, the hourly cost coming from the allocation
and the prices when not logged (the latter in :class:`~optimizer.offline.analyzer.OfflineDataAnalyzer`,
which knows the prices).

The same canonical columns describe a job to predict: :func:`characteristics_frame`.
"""

from __future__ import annotations

import csv
import glob as _glob
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from optimizer.foundation.errors import CloudoptError, TraceFormatError
from optimizer.trials.records import TrialSummary

COLUMN_ALIASES: dict[str, tuple[str, ...]] = {
    "run_id": ("trial_id", "run_id", "exec_id", "execution_id", "job_id", "id", "run"),
    "status": ("status", "state", "outcome"),
    "model_name": ("model_name", "model", "workload", "model_id", "name", "job_name",
                   "architecture", "train_file", "script"),
    "model_family": ("model_family", "family", "model_type", "arch", "model_class"),
    "params": ("params", "parameters", "num_params", "n_params", "param_count",
               "parameter_count", "model_params", "nparams", "num_parameters", "params_m"),
    "layers": ("layers", "num_layers", "n_layers", "depth", "layer_count"),
    "width": ("width", "hidden", "hidden_size", "hidden_dim", "d_model", "channels"),
    "dataset": ("dataset", "dataset_name", "dataset_type", "data"),
    "dataset_size": ("dataset_size", "n", "n_samples", "num_samples", "train_size",
                     "num_examples"),
    "epochs": ("epochs", "num_epochs", "n_epochs"),
    "gpus": ("gpus", "gpu", "num_gpus", "n_gpus", "gpu_count"),
    "cpus": ("cpus", "cpu", "num_cpus", "n_cpus", "cpu_count", "threads", "num_threads",
             "n_threads", "cores", "vcpus", "cpu_cores"),
    "memory_gb": ("memory_gb", "memory", "mem_gb", "ram_gb", "memory_limit_gb", "mem"),
    "batch_size": ("batch_size", "batch", "bs", "batchsize", "per_device_batch_size"),
    "time_s": ("wall_time_s", "time_s", "wall_s", "time", "duration_s", "duration",
               "training_time_s", "training_time", "train_time", "runtime_s", "runtime",
               "elapsed_s", "elapsed"),
    "predicted_time_s": ("predicted_total_time_s",),
    "samples": ("samples", "samples_processed", "samples_seen"),
    "total_samples": ("total_samples", "job_samples", "work_samples"),
    "throughput": ("throughput", "samples_per_s", "samples_per_sec", "samples_s",
                   "throughput_samples_s", "throughput_samples_per_s", "images_per_sec",
                   "images_per_s", "examples_per_sec"),
    "cost": ("cost", "total_cost", "cost_usd", "cost_dollars", "price"),
    "hourly_cost": ("hourly_cost", "cost_per_hour", "price_per_hour", "usd_per_hour"),
    "cpu_util": ("cpu_util_mean", "cpu_util", "cpu_utilization", "cpu_util_pct",
                 "cpu_usage_pct", "cpu_percent"),
    "gpu_util": ("gpu_util_mean", "gpu_util", "gpu_utilization", "gpu_util_pct"),
    "mem_gb_peak": ("mem_gb_peak", "peak_memory_gb", "memory_peak_gb", "max_memory_gb",
                    "mem_peak_gb", "peak_mem_gb"),
    "started_at": ("started_at", "start_time", "timestamp", "date"),
}
"""Canonical column -> accepted names (after normalisation), first match wins."""

REQUIRED_GROUPS: dict[str, tuple[str, ...]] = {
    "model": ("model_name", "model_family", "params"),
    "outcome": ("time_s", "throughput"),
    "configuration": ("gpus", "cpus", "batch_size"),
}
"""A log must have at least one canonical column of each group."""

NUMERIC = ("params", "layers", "width", "dataset_size", "epochs", "gpus", "cpus", "memory_gb",
           "batch_size", "time_s", "predicted_time_s", "samples", "total_samples", "throughput",
           "cost", "hourly_cost", "cpu_util", "gpu_util", "mem_gb_peak")
TEXT = ("run_id", "status", "model_name", "model_family", "dataset", "started_at")


def normalise_name(name: Any) -> str:
    """``'Time (s)'`` -> ``'time_s'``; ``'allocation.gpus'`` -> ``'gpus'``."""
    text = str(name).strip().lower()
    text = re.sub(r"[\s./\-:]+", "_", text)
    text = re.sub(r"[()\[\]{}#%$]", "", text).strip("_")
    for prefix in ("allocation_", "model_info_", "summary_"):
        if text.startswith(prefix) and len(text) > len(prefix):
            text = text[len(prefix):]
    return text


def match_columns(columns: Iterable[Any]) -> dict[str, Any]:
    """Map canonical names to the original column names they were found under.

    Each original column is used once; canonical names are resolved in the order of
    :data:`COLUMN_ALIASES` and, within one, in the order of its aliases.
    """
    by_norm: dict[str, Any] = {}
    for col in columns:
        by_norm.setdefault(normalise_name(col), col)
    used: set[str] = set()
    found: dict[str, Any] = {}
    for canonical, aliases in COLUMN_ALIASES.items():
        for alias in aliases:
            if alias in by_norm and alias not in used:
                found[canonical] = by_norm[alias]
                used.add(alias)
                break
    return found


def missing_groups(found: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """The required column groups (see :data:`REQUIRED_GROUPS`) that no column satisfies."""
    return {g: cols for g, cols in REQUIRED_GROUPS.items() if not any(c in found for c in cols)}


def _describe_missing(missing: Mapping[str, tuple[str, ...]]) -> str:
    parts = []
    for group, cols in missing.items():
        names = ", ".join(a for c in cols for a in COLUMN_ALIASES[c][:3])
        parts.append(f"{group} (one of: {names})")
    return "; ".join(parts)


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
            f"{source}: not a training log: missing {_describe_missing(missing)} "
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
    out["model_name"] = out["model_name"].map(_clean_model_name)
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


def _clean_model_name(value: Any) -> Any:
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
    row["model_name"] = row["model_name"].map(_clean_model_name)
    row["model_name"] = row["model_name"].where(row["model_name"].notna(), row["model_family"])
    job_work = row["dataset_size"] * row["epochs"]
    work = row["total_samples"].where(row["total_samples"] > 0, job_work)
    row["work"] = work.where(work > 0, row["samples"])
    row["model_key"] = model_keys(row)
    return row
