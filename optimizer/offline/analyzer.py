"""Offline analysis of training logs: per-model statistics and resource prediction from history.

Teams keep logs of earlier training runs. :class:`OfflineDataAnalyzer` reads them (the
``trials.csv`` run records this tool writes, plain per-run CSVs from elsewhere, and resource
traces: ``dl-traces`` and AI4DL tables, or any :class:`~optimizer.history.History`), summarises
each model, predicts what a new job needs before anything runs, and right-sizes the next run of
each recurring job; :func:`predict_start_allocation` is the optimizer's one-call entry to it.

The pieces live beside this module, imported one way into it:

- :mod:`optimizer.offline.logs`, :mod:`optimizer.offline.history_rows`: logs and history into
  canonical run records;
- :mod:`optimizer.offline.features`: log-space covariates and the neighbour search over runs;
- :mod:`optimizer.offline.models`: the throughput and time models (the prediction's maths);
  :mod:`optimizer.offline.intervals`: their conformal intervals, and peak memory;
- :mod:`optimizer.offline.candidates`: the configurations a job may start with;
- :mod:`optimizer.offline.scoring`: hourly cost, footprint and preference scores;
- :mod:`optimizer.offline.sizing`, :mod:`optimizer.offline.prediction`: heuristics for a job
  nothing in the history resembles, and the prediction's record;
- :mod:`optimizer.offline.evaluation`: leave-one-out evaluation of the predictor;
- :mod:`optimizer.offline.requests`: right-sized requests beside KRR's and the VPA's.

Prediction (:meth:`OfflineDataAnalyzer.predict_resources`)
    Throughput, time and peak memory of candidate configurations, with intervals, come from
    :class:`~optimizer.offline.intervals.JobPredictor`. A configuration is then chosen among the
    configurations seen for similar models (never beyond what was measured: the scaling is
    only trusted inside the history) by the preference's (cost, time, resource) weights from
    :class:`~optimizer.foundation.config.MultiObjectiveConfig`. With no similar model,
    :meth:`OfflineDataAnalyzer._default_prediction` applies the sizing heuristics of
    :mod:`optimizer.offline.sizing` (the FfDL "T-shirt" table of CPU and memory per GPU).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import ResourceConfig, SLAConfig
from optimizer.foundation.errors import CloudoptError, TraceFormatError
from optimizer.history import History
from optimizer.history.csv_logs import frame_to_history
from optimizer.history.traces import is_trace_source, read_trace_history
from optimizer.offline.candidates import candidate_runs
from optimizer.offline.evaluation import leave_one_out, loo_summary
from optimizer.offline.features import CHAR_FEATURES, CONFIG_FEATURES, feature_matrix
from optimizer.offline.history_rows import history_frame
from optimizer.offline.intervals import JobPredictor
from optimizer.offline.logs import (
    LogReport,
    characteristics_frame,
    discover_logs,
    empty_history,
    flatten_result,
    match_columns,
    model_characteristics,
    normalise_frame,
    normalise_name,
    read_csv_table,
)
from optimizer.offline.models import LocalScalingModel, RunPredictor
from optimizer.offline.prediction import (
    ResourcePrediction,
    default_prediction,
    history_prediction,
)
from optimizer.offline.requests import JobSizing, right_size
from optimizer.offline.scoring import (
    PREFERENCES,
    config_dict,
    hourly_cost,
    preference_scores,
    preference_weights,
    resource_footprint,
)
from optimizer.trials.records import TrialSummary

__all__ = [
    "PREFERENCES", "JobSizing", "LocalScalingModel", "LogReport", "OfflineDataAnalyzer",
    "ResourcePrediction", "RunPredictor", "discover_logs", "leave_one_out", "loo_summary",
    "match_columns", "normalise_frame", "normalise_name", "predict_start_allocation",
    "read_csv_table",
]


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
    interval_level : float
        Coverage of the predictions' intervals.

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
    history : History
        Every run read, with its usage series where the source has one (for right-sizing).
    """

    def __init__(self, log_paths: Iterable[str | os.PathLike] | None = None, *,
                 resources: ResourceConfig | None = None, n_neighbors: int = 5,
                 max_distance: float = 4.0, interval_level: float = 0.8) -> None:
        self.resources = resources
        self.n_neighbors = n_neighbors
        self.max_distance = max_distance
        self.interval_level = interval_level
        self.history = History(())
        self.dataframes: dict[str, pd.DataFrame] = {}
        self.combined_data = empty_history()
        self.model_characteristics: dict[str, dict[str, Any]] = {}
        self.reports: dict[str, LogReport] = {}
        self.rejected: dict[str, str] = {}
        self._models: JobPredictor | None = None
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

    def add_history(self, history: History, source: str) -> LogReport:
        """Add runs read from any store (traces, Prometheus, MLflow...) under a name."""
        frame, report = history_frame(history, source)
        self.history = self.history.merged(history)
        return self._add(frame, report, with_history=False)

    def add_logs(self, spec: str | os.PathLike, strict: bool = False) -> list[LogReport]:
        """Read every log that a file, directory or glob names (see :func:`discover_logs`);
        a folder or table of resource traces (``traces.csv``/``executions.csv``, AI4DL's
        ``pod.id`` tables) is read as traces (:func:`~optimizer.history.traces.
        read_trace_history`), with the usage that right-sizing needs.

        A file that is not a usable log is recorded in :attr:`rejected` (or raised with
        ``strict``); if no file at all is usable the error lists every file and why.
        """
        if is_trace_source(spec):
            return [self.add_history(read_trace_history(spec), str(spec))]
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

    def _add(self, frame: pd.DataFrame, report: LogReport,
             with_history: bool = True) -> LogReport:
        if with_history:
            self.history = self.history.merged(frame_to_history(frame))
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
        data = pd.concat(frames, ignore_index=True) if frames else empty_history()
        prices = self._resources().prices()
        hourly = pd.Series(hourly_cost(data["gpus"], data["cpus"], data["memory_gb"], prices),
                           index=data.index)
        data["hourly_cost"] = data["hourly_cost"].where(data["hourly_cost"].notna(), hourly)
        data["cost"] = data["cost"].where(data["cost"].notna(),
                                          data["hourly_cost"] * data["time_s"] / 3600.0)
        self.combined_data = data
        self.model_characteristics = model_characteristics(data)
        self._models = None

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
            out[pref] = {"configuration": config_dict(row), "throughput": row["throughput"],
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
        seconds = (started - pd.Timestamp(0, tz="UTC")).dt.total_seconds().to_numpy()
        order = np.argsort(np.where(np.isfinite(seconds), seconds, np.inf), kind="stable")
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
    def _fitted(self) -> JobPredictor:
        if self._models is None:
            self._models = JobPredictor(self.interval_level, self.n_neighbors).fit(
                self.combined_data)
        return self._models

    def predict_runs(self, runs: pd.DataFrame) -> pd.DataFrame:
        """Predicted throughput, time and peak memory of runs described by canonical rows,
        with intervals (:meth:`JobPredictor.predict`) and the scaling model's ``sigma``,
        ``distance`` and ``time_sigma`` (:meth:`RunPredictor.predict`)."""
        model = self._fitted()
        base = model.predictor_.predict(runs)[["sigma", "distance", "time_sigma"]]
        return pd.concat([model.predict(runs), base], axis=1)

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
        weights = preference_weights(preference)  # validates early
        query = characteristics_frame(model_characteristics)
        pref_name = preference if isinstance(preference, str) else \
            ",".join(f"{w:g}" for w in weights)
        if self.combined_data.empty:
            return self._default_prediction(model_characteristics, pref_name,
                                            "no training logs loaded")
        tp_model = self._fitted().predictor_.throughput_
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

    def _predict_from_history(self, query: pd.DataFrame, similar: pd.DataFrame,
                              preference: str) -> ResourcePrediction:
        rows = candidate_runs(self.combined_data, query, similar, self._resources())
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
        row = rows.iloc[i]
        notes = []
        if not np.isfinite(query["work"].iloc[0]):
            notes.append("job size not given: time and cost assume the work of the most "
                         f"similar model's runs ({row['work']:.0f} samples)")
        return history_prediction(
            row, pred.iloc[i], float(hourly[i]), preference=preference,
            level=self.interval_level, similar=list(dict.fromkeys(similar["model_key"])),
            candidates=len(rows), notes=notes)

    def _default_prediction(self, model_characteristics: Mapping[str, Any],
                            preference: str | Sequence[float] = "balanced",
                            reason: str = "no similar model in the history") -> ResourcePrediction:
        pref = preference if isinstance(preference, str) else "balanced"
        return default_prediction(self._resources(), model_characteristics, pref, reason)

    # ---------------------------------------------------------------- right-sizing
    def right_size(self, next_params: Mapping[str, Mapping[str, float]] | None = None
                   ) -> list[JobSizing]:
        """Requests for each recurring job's next run: cloudopt's beside KRR simple and the
        VPA's (:func:`optimizer.offline.requests.right_size`), from :attr:`history`."""
        return right_size(self.history, next_params)


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
