"""Offline analysis of training logs: per-model statistics and resource prediction from history.

Teams keep logs of earlier training runs. :class:`OfflineDataAnalyzer` reads them (the
``trials.csv`` run records this tool writes, and plain per-run CSVs from elsewhere), summarises
each model, and predicts what a new job needs before anything runs.

Reading
    Column names are matched leniently through :data:`COLUMN_ALIASES` after normalisation
    (lower case; spaces, dots, dashes and slashes become ``_``; brackets dropped; the record
    prefixes ``allocation_`` and ``model_info_`` stripped), so ``Time (s)``, ``wall_s`` and
    ``wall_time_s`` are all the run's wall time. A file must name a model (name, family or
    parameter count), an outcome (time or throughput) and a configuration (GPUs, CPUs/threads or
    batch size); otherwise :class:`~optimizer.errors.TraceFormatError` names the file and the
    missing columns. Rows with impossible values (non-positive time or throughput, negative
    counts) and failed trials are dropped and counted per file.

    Derived values: the job's ``work`` (samples of the whole job) is ``total_samples``, else
    ``dataset_size x epochs``, else ``samples``; ``throughput = work / time`` where no
    throughput is logged; a ``probe`` trial's time is its ``predicted_total_time_s`` (its wall
    time is only the probe's time box); cost is hourly cost x time, the hourly cost coming from
    the allocation and the prices when not logged.

Prediction (:meth:`OfflineDataAnalyzer.predict_resources`)
    Throughput and time are modelled in log space, ``ln y = a_model + beta . x``, with
    ``x = (ln cpus, ln batch, ln(1 + gpus), ln params)`` (and ``ln work`` for time). The slopes
    ``beta`` are fitted within each model (a fixed-effects regression: each model's runs are
    centred, so a fast model does not pass for a good configuration), pooled over models and
    shrunk per model towards the pooled slopes (ridge towards a prior; the prior is 0 for the
    configuration, -0.7 for size following the ~6 x params FLOPs of a training sample
    [Kaplan et al. 2020, eq. 2.1] damped for overheads, and 1 for work). A query is predicted
    from its k nearest logged runs (scikit-learn ``NearestNeighbors`` on standardised model
    characteristics and configuration), each neighbour's measured value moved along its
    model's slopes to the queried configuration and averaged with inverse-distance weights.
    The uncertainty is the residual spread of the fit combined with the disagreement of the
    neighbours (a log-space standard deviation; ``x exp(+-sigma)`` is a ~68 % band).

    A configuration is then chosen among the configurations seen for similar models (never
    beyond what was measured: the scaling is only trusted inside the history) by the
    preference's (cost, time, resource) weights from :class:`~optimizer.config.MultiObjectiveConfig`.
    With no similar model, :meth:`OfflineDataAnalyzer._default_prediction` applies the sizing
    heuristics documented there (the FfDL "T-shirt" table of CPU and memory per GPU).
"""

from __future__ import annotations

import csv
import glob as _glob
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from optimizer.config import MultiObjectiveConfig, ResourceConfig, SLAConfig
from optimizer.errors import CloudoptError, TraceFormatError
from optimizer.records import Allocation, TrialSummary

PREFERENCES = ("cost", "time", "balanced", "resource")

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
CONFIG_FEATURES = ("cpus", "batch_size", "gpus")
CHAR_FEATURES = ("params", "layers", "width")

# FfDL "T-shirt" sizes (Boag et al., dl-platforms lecture, Table 5): CPU cores and memory (GB)
# recommended per learner with 1 or 2 GPUs of each type. Per GPU this is 4 cores/24 GB on K80,
# 8/24 on P100 and 21-26/24 on V100; newer types use the V100 row (the most CPU-hungry).
TSHIRT_SIZES: dict[str, dict[int, tuple[int, int]]] = {
    "K80": {1: (4, 24), 2: (8, 48), 4: (16, 96)},
    "P100": {1: (8, 24), 2: (16, 48)},
    "V100": {1: (26, 24), 2: (42, 48)},
}
BYTES_PER_PARAM_TRAINING = 16
"""fp32 weights, gradients and two Adam moments: 4 x 4 bytes per parameter."""
FRAMEWORK_MEMORY_GB = 1.0
"""Resident memory of a Python process with torch loaded and a small in-memory data set."""
CPU_FLOPS_PER_CORE = 2e9
"""Sustained FLOP/s of one core on small eager-mode PyTorch models (well below peak)."""
GPU_FLOPS = 2e12
"""Sustained FLOP/s of one data-centre GPU on small models (~10 % of a V100's fp32 peak)."""


# ------------------------------------------------------------------------------------------
# Reading and normalising logs
# ------------------------------------------------------------------------------------------


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
    out, report.dropped = _drop_impossible(out)
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


def _drop_impossible(out: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, int]]:
    """Remove failed trials and rows no real run can produce; count each reason."""
    rules = {
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
    counts: dict[str, int] = {}
    for reason, mask in rules.items():
        new = pd.Series(mask, index=out.index).fillna(False).astype(bool) & ~bad
        if new.any():
            counts[reason] = int(new.sum())
        bad |= new
    return out[~bad].copy(), counts


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


# ------------------------------------------------------------------------------------------
# Scaling model
# ------------------------------------------------------------------------------------------


def _log(values: Any) -> np.ndarray:
    v = np.asarray(values, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(v > 0, np.log(v), np.nan)


def feature_matrix(frame: pd.DataFrame, with_work: bool) -> tuple[np.ndarray, list[str]]:
    """Log features of runs: (n_runs, n_features) with NaN where a value is unknown.

    Columns: ``ln cpus``, ``ln batch``, ``ln(1 + gpus)``, ``ln size`` (parameters, else
    ``2 ln width`` as parameters grow with width squared) and, for time, ``ln work``.
    """
    size = _log(frame["params"])
    width_size = 2 * _log(frame["width"])
    size = np.where(np.isfinite(size), size, width_size)
    cols = [_log(frame["cpus"]), _log(frame["batch_size"]),
            np.log1p(np.clip(frame["gpus"].to_numpy(dtype=float), 0, None)), size]
    names = ["ln_cpus", "ln_batch", "ln_1p_gpus", "ln_size"]
    if with_work:
        cols.append(_log(frame["work"]))
        names.append("ln_work")
    return np.column_stack(cols), names


PRIOR_SLOPES = {"ln_cpus": 0.0, "ln_batch": 0.0, "ln_1p_gpus": 0.0, "ln_size": -0.7,
                "ln_work": 1.0}


@dataclass
class LocalScalingModel:
    """k nearest logged runs, each moved along its model's fitted log-log slopes to the query.

    Parameters
    ----------
    target : {"throughput", "time_s"}
    n_neighbors : int
        Runs averaged per prediction.
    pooled_ridge, group_ridge : float
        Ridge strength of the pooled within-model slopes (towards :data:`PRIOR_SLOPES`) and of
        each model's slopes (towards the pooled ones), in units of centred squared log features.
    """

    target: str = "throughput"
    n_neighbors: int = 5
    pooled_ridge: float = 0.5
    group_ridge: float = 2.0

    def fit(self, frame: pd.DataFrame) -> LocalScalingModel:
        y = _log(frame[self.target])
        keep = np.isfinite(y)
        data = frame.loc[keep].reset_index(drop=True)
        if data.empty:
            raise CloudoptError(f"no run in the history has a positive {self.target}")
        self.y_ = y[keep]
        x, self.feature_names_ = feature_matrix(data, with_work=self.target == "time_s")
        self.groups_ = data["model_name"].fillna(data["model_key"]).astype(str).to_numpy()
        self.x_ = self._impute(x, self.groups_)
        self.prior_ = np.array([PRIOR_SLOPES[n] for n in self.feature_names_])
        self.slopes_, self.group_slopes_, self.sigma_ = self._fit_slopes()
        self.neighbors_ = _Neighbours(data, self.x_, max(1, min(self.n_neighbors, len(data))))
        self.data_ = data
        return self

    @staticmethod
    def _impute(x: np.ndarray, groups: np.ndarray) -> np.ndarray:
        # Unknown features take their model's median, else the history's, else 0 (no effect:
        # a feature unknown for every run never enters a slope).
        x = x.copy()
        for j in range(x.shape[1]):
            col = x[:, j]
            for g in np.unique(groups):
                m = groups == g
                if np.isnan(col[m]).any() and np.isfinite(col[m]).any():
                    col[m & np.isnan(col)] = np.nanmedian(col[m])
            col[np.isnan(col)] = np.nanmedian(col) if np.isfinite(col).any() else 0.0
        return x

    def _centred(self) -> tuple[np.ndarray, np.ndarray]:
        xc, yc = np.empty_like(self.x_), np.empty_like(self.y_)
        for g in np.unique(self.groups_):
            m = self.groups_ == g
            xc[m] = self.x_[m] - self.x_[m].mean(axis=0)
            yc[m] = self.y_[m] - self.y_[m].mean()
        return xc, yc

    def _fit_slopes(self) -> tuple[np.ndarray, dict[str, np.ndarray], float]:
        xc, yc = self._centred()
        d = xc.shape[1]
        pooled = np.linalg.solve(xc.T @ xc + self.pooled_ridge * np.eye(d),
                                 xc.T @ yc + self.pooled_ridge * self.prior_)
        per_group: dict[str, np.ndarray] = {}
        sq, dof = 0.0, 0
        for g in np.unique(self.groups_):
            m = self.groups_ == g
            a, b = xc[m], yc[m]
            beta = np.linalg.solve(a.T @ a + self.group_ridge * np.eye(d),
                                   a.T @ b + self.group_ridge * pooled)
            per_group[g] = beta
            sq += float(np.sum((b - a @ beta) ** 2))
            dof += max(int(m.sum()) - 1, 0)
        sigma = math.sqrt(sq / dof) if dof > 0 else 0.5
        return pooled, per_group, max(sigma, 0.02)

    def slopes_for(self, group: str) -> np.ndarray:
        return self.group_slopes_.get(group, self.slopes_)

    def predict_log(self, query: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Log-space predictions for query rows.

        Returns
        -------
        mean : ndarray of shape (n_queries,)
        sigma : ndarray of shape (n_queries,)
            Standard deviation in log space.
        nearest : ndarray of shape (n_queries,)
            Distance to the nearest logged run (standardised units).
        """
        xq, _ = feature_matrix(query, with_work=self.target == "time_s")
        dist, idx = self.neighbors_.query(query, xq)
        means, sigmas = np.empty(len(query)), np.empty(len(query))
        for i in range(len(query)):
            preds = []
            for j in idx[i]:
                delta = np.where(np.isfinite(xq[i]), xq[i] - self.x_[j], 0.0)
                preds.append(self.y_[j] + self.slopes_for(self.groups_[j]) @ delta)
            w = 1.0 / (dist[i] + 0.05) ** 2
            preds = np.asarray(preds)
            means[i] = float(np.average(preds, weights=w))
            spread = float(np.average((preds - means[i]) ** 2, weights=w))
            # Far from every logged run, the answer is less certain than the fit's residuals.
            sigmas[i] = math.sqrt(self.sigma_**2 + spread + (0.25 * dist[i].min()) ** 2)
        return means, sigmas, dist.min(axis=1)


class RunPredictor:
    """Throughput and wall time of runs from the history.

    Throughput is :class:`LocalScalingModel` on ``ln throughput``. Time combines two estimates
    by their geometric mean: the same model on ``ln time`` (which learns start-up costs along
    with the scaling) and ``overhead + work / throughput``, the overhead being the median of
    ``time - work / throughput`` over the model's logged runs (start-up, data generation,
    evaluation; 0 where throughput was itself derived from time). On the shipped logs and on
    dl-traces the combination is within a point of the better of the two, where each alone
    is 6 (direct) or 4 (decomposed) points worse on one of them.
    """

    def __init__(self, n_neighbors: int = 5) -> None:
        self.n_neighbors = n_neighbors

    def fit(self, frame: pd.DataFrame) -> RunPredictor:
        self.throughput_ = LocalScalingModel("throughput", self.n_neighbors).fit(frame)
        self.time_ = LocalScalingModel("time_s", self.n_neighbors).fit(frame) \
            if (frame["time_s"] > 0).sum() >= 1 else None
        overhead = (frame["time_s"] - frame["work"] / frame["throughput"]).clip(lower=0)
        names = frame["model_name"].fillna(frame["model_key"]).astype(str)
        self.overhead_ = overhead.groupby(names).median().dropna().to_dict()
        self.overhead_all_ = float(overhead.median()) if overhead.notna().any() else 0.0
        return self

    def predict(self, runs: pd.DataFrame) -> pd.DataFrame:
        """Predictions for canonical rows (characteristics, configuration, ``work``).

        Returns
        -------
        DataFrame of shape (n_runs, 5)
            ``throughput``, ``sigma`` (its log-space sd), ``distance`` (standardised, to the
            nearest logged run), ``time_s`` and ``time_sigma``.
        """
        mu, sigma, dist = self.throughput_.predict_log(runs)
        out = pd.DataFrame({"throughput": np.exp(mu), "sigma": sigma, "distance": dist})
        work = runs["work"].to_numpy(dtype=float)
        names = runs["model_name"].fillna(runs["model_key"]).astype(str)
        overhead = np.array([self.overhead_.get(n, self.overhead_all_) for n in names])
        decomposed = overhead + work / out["throughput"].to_numpy()
        if self.time_ is None:
            out["time_s"], out["time_sigma"] = decomposed, sigma
            return out
        tmu, tsig, _ = self.time_.predict_log(runs)
        both = np.isfinite(decomposed) & (decomposed > 0)
        log_time = np.where(both, 0.5 * (tmu + np.log(np.where(both, decomposed, 1.0))), tmu)
        out["time_s"], out["time_sigma"] = np.exp(log_time), tsig
        return out


def nearest_run_values(model: LocalScalingModel, query: pd.DataFrame) -> np.ndarray:
    """The target of the single nearest logged run, copied (a reference for benchmarks)."""
    xq, _ = feature_matrix(query, with_work=model.target == "time_s")
    _, idx = model.neighbors_.query(query, xq)
    return np.exp(model.y_[idx[:, 0]])


class _Neighbours:
    """Standardised characteristics + configuration space over the logged runs (sklearn)."""

    CONFIG_WEIGHT = 0.5
    """Configuration differences count half as much as model differences."""

    def __init__(self, data: pd.DataFrame, x: np.ndarray, k: int) -> None:
        from sklearn.neighbors import NearestNeighbors

        # Names compare case-insensitively: "MLP" from a source scan is the logs' "mlp".
        self.categories = {c: sorted({str(v).lower() for v in data[c].dropna()})
                           for c in ("model_name", "model_family", "dataset")}
        self.char_cols = [c for c in CHAR_FEATURES if data[c].notna().any()]
        char = np.column_stack([_log(data[c]) for c in self.char_cols]) if self.char_cols \
            else np.zeros((len(data), 0))
        self.char_fill = np.array([np.nanmedian(char[:, j]) if np.isfinite(char[:, j]).any()
                                   else 0.0 for j in range(char.shape[1])])
        raw = np.column_stack([self._fill(char), x[:, :3]])
        self.mean = raw.mean(axis=0)
        self.scale = raw.std(axis=0)
        self.scale[self.scale < 1e-9] = 1.0
        self.n_char = char.shape[1]
        z = self._embed(data, raw)
        self.nn = NearestNeighbors(n_neighbors=k).fit(z)

    def _fill(self, char: np.ndarray) -> np.ndarray:
        return np.where(np.isfinite(char), char, self.char_fill)

    def _embed(self, data: pd.DataFrame, raw: np.ndarray) -> np.ndarray:
        z = (raw - self.mean) / self.scale
        z[:, self.n_char:] *= self.CONFIG_WEIGHT
        onehots = []
        for col, cats in self.categories.items():
            values = data[col].astype(object).where(data[col].notna(), None).to_numpy()
            # A name mismatch costs sqrt(2) * 1.5: more than two standard deviations of size.
            weight = 1.5 if col == "model_name" else 1.0
            onehots.append(np.array([[weight * (str(v).lower() == c) for c in cats]
                                     for v in values],
                                    dtype=float).reshape(len(data), len(cats)))
        return np.column_stack([z, *onehots])

    def query(self, query: pd.DataFrame, xq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        char = np.column_stack([_log(query[c]) for c in self.char_cols]) if self.char_cols \
            else np.zeros((len(query), 0))
        cfg = np.where(np.isfinite(xq[:, :3]), xq[:, :3], self.mean[self.n_char:])
        raw = np.column_stack([self._fill(char), cfg])
        return self.nn.kneighbors(self._embed(query, raw))


# ------------------------------------------------------------------------------------------
# Predictions
# ------------------------------------------------------------------------------------------


@dataclass
class ResourcePrediction:
    """A predicted configuration for a job and what it should give.

    ``uncertainty`` is the log-space standard deviation of the throughput prediction: the
    truth lies within ``x exp(+-uncertainty)`` about two times in three.
    """

    allocation: Allocation
    preference: str
    expected_throughput: float
    expected_time_s: float
    expected_cost: float
    hourly_cost: float
    uncertainty: float
    throughput_range: tuple[float, float]
    time_range_s: tuple[float, float]
    source: str
    """``history`` (similar models were logged) or ``default`` (sizing heuristics)."""
    similar_models: list[str] = field(default_factory=list)
    candidates_considered: int = 0
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _preference_weights(preference: str | Sequence[float]) -> np.ndarray:
    return MultiObjectiveConfig().vector(preference)


def hourly_cost(gpus: Any, cpus: Any, memory_gb: Any, prices: Mapping[str, float]) -> np.ndarray:
    """Price of an allocation per hour (unknown resources count as none)."""
    parts = [np.nan_to_num(np.asarray(v, dtype=float)) * prices[k]
             for v, k in ((gpus, "gpu"), (cpus, "cpu"), (memory_gb, "memory"))]
    return parts[0] + parts[1] + parts[2]


def preference_scores(cost: np.ndarray, time_s: np.ndarray, resource: np.ndarray,
                      preference: str | Sequence[float]) -> np.ndarray:
    """Weighted sum of each objective relative to its best value (lower is better).

    Each of ``cost``, ``time_s`` and ``resource`` (shape (n,)) is divided by its minimum over
    the candidates, so a weight trades relative, not absolute, differences.
    """
    w = _preference_weights(preference)
    total = np.zeros(len(cost))
    for weight, values in zip(w, (cost, time_s, resource), strict=True):
        v = np.asarray(values, dtype=float)
        finite = np.isfinite(v) & (v > 0)
        if weight == 0 or not finite.any():
            continue
        rel = np.where(finite, v / v[finite].min(), np.inf)
        total = total + weight * rel
    return total


def resource_footprint(gpus: Any, cpus: Any, memory_gb: Any,
                       bounds: tuple[float, float, float]) -> np.ndarray:
    """Share of the available GPUs, CPUs and memory an allocation takes (mean of the shares)."""
    shares = []
    for v, b in zip((gpus, cpus, memory_gb), bounds, strict=True):
        if b > 0:
            shares.append(np.nan_to_num(np.asarray(v, dtype=float)) / b)
    return np.mean(shares, axis=0) if shares else np.zeros(len(np.atleast_1d(cpus)))


# ------------------------------------------------------------------------------------------
# The analyzer
# ------------------------------------------------------------------------------------------


def _empty_history() -> pd.DataFrame:
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
    row = _empty_history().iloc[:0].copy()
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


class OfflineDataAnalyzer:
    """Per-model statistics and resource predictions from training logs.

    Parameters
    ----------
    log_paths : iterable of paths, directories or globs, optional
        Logs to read now (see :meth:`add_logs`).
    resources : ResourceConfig, optional
        Prices (for costs not logged) and the bounds a prediction must respect; default:
        :class:`ResourceConfig` detected on this machine.
    n_neighbors : int
        Logged runs averaged per prediction.
    max_distance : float
        Standardised distance beyond which no logged model counts as similar, and
        :meth:`_default_prediction` answers instead.

    Attributes
    ----------
    dataframes : dict[str, DataFrame]
        Each log read, normalised to canonical columns (``source`` -> frame).
    combined_data : DataFrame of shape (n_runs, n_columns)
        All runs, in the order they were added (the order SLA forecasts use).
    model_characteristics : dict[str, dict]
        Per model key: name, family, parameters, layers, width, dataset, runs and sources.
    reports : dict[str, LogReport]
        Rows read, kept and dropped (with reasons) per log.
    rejected : dict[str, str]
        Logs found by :meth:`add_logs` that could not be used, with the reason.
    """

    def __init__(self, log_paths: Iterable[str | os.PathLike] | None = None, *,
                 resources: ResourceConfig | None = None, n_neighbors: int = 5,
                 max_distance: float = 4.0) -> None:
        self.resources = resources
        self.n_neighbors = n_neighbors
        self.max_distance = max_distance
        self.dataframes: dict[str, pd.DataFrame] = {}
        self.combined_data = _empty_history()
        self.model_characteristics: dict[str, dict[str, Any]] = {}
        self.reports: dict[str, LogReport] = {}
        self.rejected: dict[str, str] = {}
        self._models: RunPredictor | None = None
        self._n_updates = 0
        for spec in log_paths or []:
            self.add_logs(spec)

    # ---------------------------------------------------------------- loading
    def _resources(self) -> ResourceConfig:
        if self.resources is None:
            self.resources = ResourceConfig()
        return self.resources

    def add_log(self, path: str | os.PathLike) -> LogReport:
        """Read one CSV log; raise :class:`TraceFormatError` naming the file if it is unusable."""
        source = str(path)
        frame, report = normalise_frame(read_csv_table(path), source)
        return self._add(frame, report)

    def add_frame(self, frame: pd.DataFrame, source: str) -> LogReport:
        """Add an in-memory log table (e.g. ``summaries_to_frame`` output) under a name."""
        normalised, report = normalise_frame(frame.astype(str).where(frame.notna()), source)
        return self._add(normalised, report)

    def add_logs(self, spec: str | os.PathLike, strict: bool = False) -> list[LogReport]:
        """Read every log that a file, directory or glob names (see :func:`discover_logs`).

        A file that is not a usable log is recorded in :attr:`rejected` (or raised with
        ``strict``); if no file at all is usable the error lists every file and why.
        """
        reports, errors = [], {}
        for path in discover_logs(spec):
            try:
                reports.append(self.add_log(path))
            except TraceFormatError as exc:
                if strict:
                    raise
                errors[str(path)] = str(exc)
        self.rejected.update(errors)
        if not reports:
            detail = "; ".join(errors.values()) or "no CSV file"
            raise TraceFormatError(f"{spec}: no usable training log ({detail})")
        return reports

    def _add(self, frame: pd.DataFrame, report: LogReport) -> LogReport:
        self.dataframes[report.path] = frame
        self.reports[report.path] = report
        self._rebuild()
        return report

    def update_with_result(self, result: TrialSummary | Mapping[str, Any]) -> bool:
        """Add a finished run so that the next prediction uses it.

        ``result`` is a :class:`TrialSummary` or a dict (nested like ``TrialSummary.to_dict()``
        or flat with log column names). Returns False, adding nothing, for a failed trial or a
        record without a usable model, configuration and outcome.
        """
        flat = flatten_result(result)
        self._n_updates += 1
        source = f"<result {self._n_updates}: {flat.get('trial_id', 'run')}>"
        raw = pd.DataFrame([{k: (None if v is None else str(v)) for k, v in flat.items()}])
        try:
            frame, report = normalise_frame(raw, source)
        except TraceFormatError:
            return False
        if frame.empty:
            return False
        self._add(frame, report)
        return True

    def _rebuild(self) -> None:
        frames = [f for f in self.dataframes.values() if not f.empty]
        data = pd.concat(frames, ignore_index=True) if frames else _empty_history()
        prices = self._resources().prices()
        hourly = pd.Series(hourly_cost(data["gpus"], data["cpus"], data["memory_gb"], prices),
                           index=data.index)
        data["hourly_cost"] = data["hourly_cost"].where(data["hourly_cost"].notna(), hourly)
        data["cost"] = data["cost"].where(data["cost"].notna(),
                                          data["hourly_cost"] * data["time_s"] / 3600.0)
        self.combined_data = data
        self.model_characteristics = self._characteristics(data)
        self._models = None

    @staticmethod
    def _characteristics(data: pd.DataFrame) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        def first(g: pd.DataFrame, c: str) -> Any:
            return next((v for v in g[c] if v is not None and v == v), None)

        for key, g in data.groupby("model_key", sort=True):
            out[str(key)] = {
                "model_name": first(g, "model_name"),
                "model_family": first(g, "model_family"), "params": first(g, "params"),
                "layers": first(g, "layers"), "width": first(g, "width"),
                "dataset": first(g, "dataset"), "runs": int(len(g)),
                "sources": sorted(set(g["source"])),
            }
        return out

    # ---------------------------------------------------------------- statistics
    def analyze_all_logs(self) -> dict[str, Any]:
        """Per-model statistics and the best measured configuration per preference.

        Returns
        -------
        dict with
            ``models``: DataFrame, one row per model key (runs, configurations, mean/min time,
            mean cost, mean/max throughput, peak memory);
            ``best``: ``{model_key: {preference: {configuration, throughput, time_s, cost}}}``,
            configurations ranked per sample (``1/throughput`` for time, hourly cost /
            throughput for cost), so jobs of different sizes compare fairly;
            ``runs``, ``logs``, ``rows_dropped``, ``rejected``.
        """
        data = self.combined_data
        if data.empty:
            raise CloudoptError("no training runs loaded: add logs before analysing them")
        rows = []
        for key, g in data.groupby("model_key", sort=True):
            rows.append({
                "model": key, "family": self.model_characteristics[key]["model_family"],
                "params": self.model_characteristics[key]["params"],
                "dataset": self.model_characteristics[key]["dataset"], "runs": len(g),
                "configs": int(g[list(CONFIG_FEATURES)].drop_duplicates().shape[0]),
                "mean_time_s": g["time_s"].mean(), "min_time_s": g["time_s"].min(),
                "mean_cost": g["cost"].mean(), "mean_throughput": g["throughput"].mean(),
                "max_throughput": g["throughput"].max(), "peak_mem_gb": g["mem_gb_peak"].max(),
            })
        models = pd.DataFrame(rows)
        best = {str(k): self._best_configs(g) for k, g in data.groupby("model_key", sort=True)}
        dropped: dict[str, int] = {}
        for rep in self.reports.values():
            for reason, n in rep.dropped.items():
                dropped[reason] = dropped.get(reason, 0) + n
        return {"models": models, "best": best, "runs": len(data),
                "logs": len(self.dataframes), "rows_dropped": dropped,
                "rejected": dict(self.rejected)}

    def _best_configs(self, runs: pd.DataFrame) -> dict[str, dict[str, Any]]:
        keys = ["gpus", "cpus", "memory_gb", "batch_size"]
        cfg = runs[keys + ["throughput", "time_s", "cost", "hourly_cost"]].copy()
        cfg[keys] = cfg[keys].fillna(-1)  # groupby drops NaN keys; -1 marks "not logged"
        agg = cfg.groupby(keys, as_index=False).mean()
        agg[keys] = agg[keys].replace(-1, np.nan)
        time_per = 1.0 / agg["throughput"].to_numpy()
        cost_per = agg["hourly_cost"].to_numpy() * time_per
        foot = resource_footprint(agg["gpus"], agg["cpus"], agg["memory_gb"],
                                  self._bounds(runs))
        out = {}
        for pref in PREFERENCES:
            score = preference_scores(cost_per, time_per, foot, pref)
            i = int(np.argmin(score))
            row = agg.iloc[i]
            out[pref] = {"configuration": _config_dict(row), "throughput": row["throughput"],
                         "time_s": row["time_s"], "cost": row["cost"]}
        return out

    def _bounds(self, runs: pd.DataFrame | None = None) -> tuple[float, float, float]:
        r = self._resources()
        data = self.combined_data if runs is None else runs
        hist = [float(np.nanmax(data[c])) if data[c].notna().any() else 0.0
                for c in ("gpus", "cpus", "memory_gb")]
        return (max(r.gpu_count_max or 0, hist[0]), max(r.cpu_count_max or 1, hist[1]),
                max(r.memory_max or 1.0, hist[2]))

    # ---------------------------------------------------------------- SLA history
    def sla_history(self, model: str | None = None) -> pd.DataFrame:
        """Run records for :meth:`SLAConfig.forecast_sla_values`, oldest first.

        Columns ``wall_time_s``, ``cost``, ``throughput`` (one row per run; runs with a start
        time are ordered by it, the others keep the order they were added). ``model`` keeps
        the runs whose model key or name equals it.
        """
        data = self.combined_data
        if model is not None:
            data = data[(data["model_key"] == model) | (data["model_name"] == model)]
        if data.empty:
            raise CloudoptError(f"no logged run of model {model!r}" if model else
                                "no training runs loaded")
        started = pd.to_datetime(data["started_at"], errors="coerce", utc=True)
        order = np.argsort(started.fillna(pd.Timestamp.max.tz_localize("UTC")).to_numpy(),
                           kind="stable")
        data = data.iloc[order]
        return pd.DataFrame({"wall_time_s": data["time_s"].to_numpy(dtype=float),
                             "cost": data["cost"].to_numpy(dtype=float),
                             "throughput": data["throughput"].to_numpy(dtype=float)})

    def forecast_sla(self, model: str | None = None,
                     sla: SLAConfig | None = None) -> dict[str, float]:
        """The next run's time, cost and throughput forecast from :meth:`sla_history`.

        :meth:`SLAConfig.forecast_sla_values` extrapolates a linear trend; where that trend
        crosses zero (a few runs whose configurations got slower), the forecast of a quantity
        that cannot be <= 0 is returned as NaN rather than as a negative number.
        """
        sla = sla if sla is not None else SLAConfig(memory_max=self._bounds()[2])
        forecast = sla.forecast_sla_values(self.sla_history(model))
        for name in ("time", "cost", "throughput"):
            if forecast.get(name, 1.0) <= 0:
                forecast[name] = math.nan
        return forecast

    # ---------------------------------------------------------------- prediction
    def _fitted(self) -> RunPredictor:
        if self._models is None:
            self._models = RunPredictor(self.n_neighbors).fit(self.combined_data)
        return self._models

    def predict_runs(self, runs: pd.DataFrame) -> pd.DataFrame:
        """Predicted throughput and time of runs described by canonical rows (see
        :meth:`RunPredictor.predict`)."""
        return self._fitted().predict(runs)

    def predict_resources(self, model_characteristics: Mapping[str, Any],
                          preference: str | Sequence[float] = "balanced") -> ResourcePrediction:
        """The configuration to start a job with, and its expected time, cost and throughput.

        Parameters
        ----------
        model_characteristics : mapping
            What is known of the job: ``model_name``, ``model_family``, ``params``, ``layers``,
            ``width``, ``dataset``, and its size as ``total_samples`` or ``dataset_size`` and
            ``epochs`` (aliases of :data:`COLUMN_ALIASES` accepted).
        preference : str or (cost, time, resource) weights
            ``cost``, ``time``, ``balanced``, ``resource`` or an explicit weight vector.
        """
        weights = _preference_weights(preference)  # validates early
        query = characteristics_frame(model_characteristics)
        pref_name = preference if isinstance(preference, str) else \
            ",".join(f"{w:g}" for w in weights)
        if self.combined_data.empty:
            return self._default_prediction(model_characteristics, pref_name,
                                            "no training logs loaded")
        tp_model = self._fitted().throughput_
        dist, idx = tp_model.neighbors_.query(query, feature_matrix(query, False)[0])
        similar = tp_model.data_.iloc[idx[0]]
        ok = [self._is_similar(query.iloc[0], run, d) for (_, run), d in
              zip(similar.iterrows(), dist[0], strict=True)]
        if not any(ok):
            return self._default_prediction(
                model_characteristics, pref_name,
                f"no logged model is similar (nearest: {similar['model_key'].iloc[0]} at "
                f"distance {dist.min():.2f}; similar means the same name or family, or a "
                f"shared size characteristic within distance {self.max_distance:g})")
        return self._predict_from_history(query, similar[ok], pref_name)

    def _is_similar(self, query: pd.Series, run: pd.Series, distance: float) -> bool:
        """Same model name or family, or a size characteristic both know, close enough."""
        for col in ("model_name", "model_family"):
            if isinstance(query[col], str) and isinstance(run[col], str) and \
                    query[col].lower() == run[col].lower():
                return True
        shared = any(np.isfinite(query[c]) and np.isfinite(run[c]) for c in CHAR_FEATURES)
        return shared and distance <= self.max_distance

    def _candidates(self, query: pd.DataFrame, similar: pd.DataFrame) -> pd.DataFrame:
        r = self._resources()
        names = set(similar["model_name"].dropna())
        pool = self.combined_data[self.combined_data["model_name"].isin(names)] \
            if names else similar
        values = {}
        for c in CONFIG_FEATURES:
            v = sorted({float(x) for x in pool[c].dropna()})
            values[c] = v or [np.nan]
        values["gpus"] = [g for g in values["gpus"] if not g > (r.gpu_count_max or 0)] or \
            [float(min(r.gpu_count_max or 0, min(values["gpus"])))]
        values["cpus"] = [c for c in values["cpus"] if not c > (r.cpu_count_max or 1)] or \
            [float(r.cpu_count_max or 1)]
        grid = pd.MultiIndex.from_product([values[c] for c in CONFIG_FEATURES],
                                          names=list(CONFIG_FEATURES)).to_frame(index=False)
        rows = pd.concat([query] * len(grid), ignore_index=True)
        for c in CONFIG_FEATURES:
            rows[c] = grid[c].to_numpy(dtype=float)
        if not np.isfinite(rows["work"]).any():
            # The job's size is unknown: assume the work of the most similar model's runs.
            rows["work"] = float(pool["work"].median()) if pool["work"].notna().any() \
                else np.nan
        rows["memory_gb"] = [self._memory_for(pool, b) for b in rows["batch_size"]]
        return rows

    def _memory_for(self, pool: pd.DataFrame, batch: float) -> float:
        r = self._resources()
        same = pool[pool["batch_size"] == batch] if np.isfinite(batch) else pool
        peaks = (same if same["mem_gb_peak"].notna().any() else pool)["mem_gb_peak"].dropna()
        if peaks.empty:
            limits = pool["memory_gb"].dropna()
            params = pool["params"].dropna()
            gb = float(limits.median()) if not limits.empty else heuristic_memory_gb(
                float(params.max()) if not params.empty else math.nan)
        else:
            # The new job's data may be larger than the logged runs': 50 % (at least 0.5 GB)
            # over the largest peak measured, since a limit hit is an OOM-killed trial.
            gb = max(1.5 * float(peaks.max()), float(peaks.max()) + 0.5)
        step = float(r.memory_step)
        gb = max(math.ceil(gb / step - 1e-9) * step, float(r.memory_min))
        return min(gb, float(r.memory_max or gb))

    def _predict_from_history(self, query: pd.DataFrame, similar: pd.DataFrame,
                              preference: str) -> ResourcePrediction:
        rows = self._candidates(query, similar)
        pred = self.predict_runs(rows)
        prices = self._resources().prices()
        hourly = hourly_cost(rows["gpus"], rows["cpus"], rows["memory_gb"], prices)
        time_s = pred["time_s"].to_numpy()
        # Rank by time and cost per sample when the job's size is unknown: the start-up time
        # of small logged runs would otherwise decide.
        known_work = np.isfinite(query["work"].iloc[0])
        rank_time = time_s if known_work and np.isfinite(time_s).all() \
            else 1 / pred["throughput"].to_numpy()
        foot = resource_footprint(rows["gpus"], rows["cpus"], rows["memory_gb"], self._bounds())
        weights = preference if preference in PREFERENCES else \
            [float(w) for w in preference.split(",")]
        i = int(np.argmin(preference_scores(hourly * rank_time, rank_time, foot, weights)))
        row, p = rows.iloc[i], pred.iloc[i]
        sig = float(p["sigma"])
        tsig = float(p["time_sigma"])
        alloc = Allocation(gpus=int(np.nan_to_num(row["gpus"])),
                           cpus=int(row["cpus"]) if np.isfinite(row["cpus"]) else 1,
                           memory_gb=float(row["memory_gb"]),
                           batch_size=int(row["batch_size"]) if np.isfinite(row["batch_size"])
                           else None)
        notes = []
        if not np.isfinite(query["work"].iloc[0]):
            notes.append("job size not given: time and cost assume the work of the most "
                         f"similar model's runs ({row['work']:.0f} samples)")
        return ResourcePrediction(
            allocation=alloc, preference=preference,
            expected_throughput=float(p["throughput"]), expected_time_s=float(p["time_s"]),
            expected_cost=float(hourly[i] * p["time_s"] / 3600.0), hourly_cost=float(hourly[i]),
            uncertainty=sig,
            throughput_range=(float(p["throughput"] * math.exp(-sig)),
                              float(p["throughput"] * math.exp(sig))),
            time_range_s=(float(p["time_s"] * math.exp(-tsig)),
                          float(p["time_s"] * math.exp(tsig))),
            source="history", similar_models=list(dict.fromkeys(similar["model_key"])),
            candidates_considered=len(rows), notes=notes)

    def _default_prediction(self, model_characteristics: Mapping[str, Any],
                            preference: str | Sequence[float] = "balanced",
                            reason: str = "no similar model in the history") -> ResourcePrediction:
        """Sizing heuristics for a job nothing in the history resembles.

        - GPUs: one when the machine has any and the model is not tiny (>= 1 M parameters or
          unknown): the smallest learner of the FfDL T-shirt table (:data:`TSHIRT_SIZES`).
        - CPUs: with a GPU, the T-shirt cores per GPU of its type (V100's row for unknown
          types; the lecture's Table 4 shows throughput flat beyond that); CPU-only, all cores
          for ``time``, one for ``cost``/``resource``, half for ``balanced``.
        - Memory: with a GPU, the T-shirt 24 GB per GPU; CPU-only, 16 bytes per parameter
          (fp32 weights, gradients, Adam moments) plus 1 GB for the framework and data, with
          50 % headroom. Everything is clipped to the resource bounds.
        - Throughput: ~6 x params FLOPs per sample [Kaplan et al. 2020] at
          :data:`CPU_FLOPS_PER_CORE` per core or :data:`GPU_FLOPS` per GPU, with an
          uncertainty of a factor of ten (convolutions reuse weights and sequences multiply
          the work, so the estimate is rough); unknown without a parameter count.
        """
        r = self._resources()
        query = characteristics_frame(model_characteristics)
        params = float(query["params"].iloc[0])
        work = float(query["work"].iloc[0])
        pref = preference if isinstance(preference, str) else "balanced"
        use_gpu = (r.gpu_count_max or 0) >= 1 and not (params < 1e6)
        if use_gpu:
            gpu_type = _gpu_type()
            cores, mem = TSHIRT_SIZES.get(gpu_type, TSHIRT_SIZES["V100"])[1]
            gpus = 1
        else:
            gpus = 0
            n = r.cpu_count_max or 1
            cores = {"time": n, "cost": 1, "resource": 1}.get(pref, max(1, n // 2))
            mem = heuristic_memory_gb(params)
        cores = int(min(max(cores, r.cpu_count_min), r.cpu_count_max or cores))
        mem = float(min(max(math.ceil(mem * 2) / 2, r.memory_min), r.memory_max or mem))
        flops = GPU_FLOPS * gpus if gpus else CPU_FLOPS_PER_CORE * cores
        tp = flops / (6 * params) if np.isfinite(params) and params > 0 else math.nan
        time_s = work / tp if np.isfinite(work) and tp > 0 else math.nan
        hourly = float(hourly_cost(gpus, cores, mem, r.prices()))
        sig = math.log(10.0)
        return ResourcePrediction(
            allocation=Allocation(gpus=gpus, cpus=cores, memory_gb=mem, batch_size=None),
            preference=pref, expected_throughput=tp, expected_time_s=time_s,
            expected_cost=hourly * time_s / 3600.0, hourly_cost=hourly, uncertainty=sig,
            throughput_range=(tp / 10, tp * 10), time_range_s=(time_s / 10, time_s * 10),
            source="default", notes=[reason])


def heuristic_memory_gb(params: float) -> float:
    """CPU-job memory: 16 bytes per parameter plus 1 GB of framework and data, +50 %."""
    param_gb = (params if np.isfinite(params) else 0.0) * BYTES_PER_PARAM_TRAINING / 1e9
    return 1.5 * (param_gb + FRAMEWORK_MEMORY_GB)


def _gpu_type() -> str:
    """The T-shirt row for the first visible GPU: K80, P100 or V100 (V100 for others)."""
    try:
        from optimizer.gpu import _nvml

        nvml = _nvml()
        if nvml is None:
            return "V100"
        name = nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(0))
        name = name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # noqa: BLE001 - no NVML, no device: the default row is the answer
        return "V100"
    return next((t for t in TSHIRT_SIZES if t in name.upper()), "V100")


def _config_dict(row: Mapping[str, Any]) -> dict[str, Any]:
    def num(v: Any, cast: type) -> Any:
        return None if v is None or not np.isfinite(v) else cast(v)

    return {"gpus": num(row["gpus"], int), "cpus": num(row["cpus"], int),
            "memory_gb": num(row["memory_gb"], float), "batch_size": num(row["batch_size"], int)}


# ------------------------------------------------------------------------------------------
# Evaluation and the optimizer's entry point
# ------------------------------------------------------------------------------------------


def leave_one_out(data: pd.DataFrame, *, n_neighbors: int = 5) -> pd.DataFrame:
    """Predict each run from all the others; compare with the others' global mean.

    Returns a DataFrame with one row per run that has a throughput: ``model_key``, the actual
    (``throughput``, ``time_s``), predicted (``pred_*``) and baseline (``base_*``: mean of the
    other runs) values, two more references (``copy_*``: the nearest logged run's value;
    ``modelmean_*``: the mean of the same model's other runs, NaN for a model's only run) and
    their absolute percentage errors (``*_ape``; NaN where the run has no time).
    """
    rows = []
    data = data.reset_index(drop=True)
    for i in range(len(data)):
        train, test = data.drop(index=i), data.iloc[[i]]
        if not np.isfinite(test["throughput"].iloc[0]):
            continue
        predictor = RunPredictor(n_neighbors).fit(train)
        pred = predictor.predict(test).iloc[0]
        same = train[train["model_key"] == test["model_key"].iloc[0]]
        row = {"run": test["run_id"].iloc[0], "model_key": test["model_key"].iloc[0],
               "throughput": float(test["throughput"].iloc[0]),
               "pred_throughput": float(pred["throughput"]),
               "base_throughput": float(train["throughput"].mean()),
               "copy_throughput": float(nearest_run_values(predictor.throughput_, test)[0]),
               "modelmean_throughput": float(same["throughput"].mean())}
        t = float(test["time_s"].iloc[0])
        if np.isfinite(t) and predictor.time_ is not None:
            row.update(time_s=t, pred_time_s=float(pred["time_s"]),
                       base_time_s=float(train["time_s"].mean()),
                       copy_time_s=float(nearest_run_values(predictor.time_, test)[0]),
                       modelmean_time_s=float(same["time_s"].mean()))
        rows.append(row)
    out = pd.DataFrame(rows)
    for m in ("throughput", "time_s"):
        if m in out:
            for kind in ("pred", "base", "copy", "modelmean"):
                out[f"{kind}_{m}_ape"] = (out[f"{kind}_{m}"] - out[m]).abs() / out[m] * 100
    return out


def loo_summary(loo: pd.DataFrame) -> dict[str, float]:
    """Mean absolute percentage errors of :func:`leave_one_out` (predictor and baseline)."""
    def mape(col: str) -> float:
        return float(loo[col].mean()) if col in loo and loo[col].notna().any() else math.nan

    return {"predictor_time_mape": mape("pred_time_s_ape"),
            "baseline_time_mape": mape("base_time_s_ape"),
            "predictor_throughput_mape": mape("pred_throughput_ape"),
            "baseline_throughput_mape": mape("base_throughput_ape"),
            "nearest_copy_time_mape": mape("copy_time_s_ape"),
            "nearest_copy_throughput_mape": mape("copy_throughput_ape"),
            "model_mean_time_mape": mape("modelmean_time_s_ape"),
            "model_mean_throughput_mape": mape("modelmean_throughput_ape"),
            "runs": float(len(loo))}


def predict_start_allocation(logs: str | os.PathLike | Sequence[str | os.PathLike],
                             train_file_info: Mapping[str, Any],
                             preference: str | Sequence[float] = "balanced",
                             resources: ResourceConfig | None = None) -> Allocation:
    """The configuration the optimizer's baseline sampling should start from.

    Parameters
    ----------
    logs : path, directory or glob (or several)
        Earlier training logs (``--offline-logs``).
    train_file_info : mapping
        What is known of the script: ``TrialSummary.model_info`` or the training manager's scan
        (``model_name``/``model_family``, ``params``, ``dataset``, ``total_samples``...).
    preference : str or weights
    resources : ResourceConfig
        Bounds the allocation must respect (the optimizer's own configuration).
    """
    specs = [logs] if isinstance(logs, (str, os.PathLike)) else list(logs)
    analyzer = OfflineDataAnalyzer(specs, resources=resources)
    return analyzer.predict_resources(train_file_info, preference).allocation
