"""Column names of training logs, matched leniently onto the canonical names of a run.

Names are normalised (lower case; spaces, dots, dashes and slashes become ``_``; brackets
dropped; the record prefixes ``allocation_``, ``model_info_`` and ``summary_`` stripped) and then
looked up in :data:`COLUMN_ALIASES`, so ``Time (s)``, ``wall_s`` and ``wall_time_s`` are all the
run's wall time. Every reader of tables (CSV logs here, the offline analysis, exports of other
stores) maps its columns through :func:`match_columns`, so one spelling table serves them all.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from optimizer.foundation.errors import TraceFormatError

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


def describe_missing(missing: Mapping[str, tuple[str, ...]]) -> str:
    parts = []
    for group, cols in missing.items():
        names = ", ".join(a for c in cols for a in COLUMN_ALIASES[c][:3])
        parts.append(f"{group} (one of: {names})")
    return "; ".join(parts)


def require_columns(path: object, columns: Iterable[Any], needed: Iterable[str]) -> None:
    """Raise :class:`TraceFormatError` naming ``path`` and every needed column it lacks."""
    have = {str(c) for c in columns}
    missing = [c for c in needed if c not in have]
    if missing:
        raise TraceFormatError(f"{path}: missing column(s) {', '.join(missing)} "
                               f"(columns found: {', '.join(sorted(have)) or 'none'})")
