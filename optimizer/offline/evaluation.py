"""Leave-one-out evaluation of the run predictor against simple references, with the
intervals' coverage.

Each logged run is predicted from all the others by
:class:`~optimizer.offline.models.RunPredictor` and compared with three references: the mean
of the other runs, the nearest logged run's value copied, and the mean of the same model's
other runs. With ``level``, :class:`~optimizer.offline.intervals.JobPredictor` is fitted on the
others instead (the same point predictions, plus peak memory and conformal intervals calibrated
on the others alone) and each run says whether its intervals held it.
:func:`leave_one_group_out` predicts each model's runs with the model unseen (a new job).
``benchmarks/offline_prediction.py`` reports both.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from optimizer.offline.features import feature_matrix
from optimizer.offline.intervals import JobPredictor
from optimizer.offline.models import LocalScalingModel, RunPredictor

QUANTITIES = ("throughput", "time_s", "mem_gb_peak")


def nearest_run_values(model: LocalScalingModel, query: pd.DataFrame) -> np.ndarray:
    """The target of the single nearest logged run, copied (a reference for benchmarks)."""
    xq, _ = feature_matrix(query, with_work=model.target == "time_s")
    _, idx = model.neighbors_.query(query, xq)
    return np.exp(model.y_[idx[:, 0]])


def _interval_row(train: pd.DataFrame, test: pd.DataFrame, level: float) -> dict[str, float]:
    pred = JobPredictor(level=level).fit(train).predict(test).iloc[0]
    row = {}
    for q in QUANTITIES:
        truth = float(test[q].iloc[0])
        if not (np.isfinite(truth) and np.isfinite(pred[q])):
            continue
        row.update({f"pred_{q}": float(pred[q]), f"{q}_low": float(pred[f"{q}_low"]),
                    f"{q}_high": float(pred[f"{q}_high"]),
                    f"{q}_covered": float(pred[f"{q}_low"] <= truth <= pred[f"{q}_high"])})
    return row


def leave_one_out(data: pd.DataFrame, *, n_neighbors: int = 5,
                  level: float | None = None) -> pd.DataFrame:
    """Predict each run from all the others; compare with the others' global mean.

    Returns a DataFrame with one row per run that has a throughput: ``model_key``, the actual
    (``throughput``, ``time_s``), predicted (``pred_*``) and baseline (``base_*``: mean of the
    other runs) values, two more references (``copy_*``: the nearest logged run's value;
    ``modelmean_*``: the mean of the same model's other runs, NaN for a model's only run) and
    their absolute percentage errors (``*_ape``; NaN where the run has no time). With
    ``level``: also peak memory, and ``*_low``, ``*_high``, ``*_covered`` per quantity.
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
        m = float(test["mem_gb_peak"].iloc[0])
        if level is not None:
            if np.isfinite(m):
                row.update(mem_gb_peak=m, base_mem_gb_peak=float(train["mem_gb_peak"].mean()))
            row.update(_interval_row(train, test, level))
        rows.append(row)
    return _with_errors(pd.DataFrame(rows))


def leave_one_group_out(data: pd.DataFrame, *, level: float = 0.8) -> pd.DataFrame:
    """Predict every run of each model from the other models' runs only: a job never seen.

    One row per run: actual, predicted (``pred_*``), the other models' mean (``base_*``),
    interval and coverage per quantity, and the absolute percentage errors.
    """
    data = data.reset_index(drop=True)
    names = data["model_name"].fillna(data["model_key"]).astype(str)
    rows = []
    for g in sorted(set(names)):
        train, test = data[names != g], data[names == g]
        pred = JobPredictor(level=level).fit(train).predict(test)
        for (_, run), (_, p) in zip(test.iterrows(), pred.iterrows(), strict=True):
            row = {"run": run["run_id"], "model_key": run["model_key"]}
            for q in QUANTITIES:
                if np.isfinite(run[q]) and np.isfinite(p[q]):
                    row.update({q: float(run[q]), f"pred_{q}": float(p[q]),
                                f"base_{q}": float(train[q].mean()),
                                f"{q}_covered": float(p[f"{q}_low"] <= run[q] <= p[f"{q}_high"])})
            rows.append(row)
    return _with_errors(pd.DataFrame(rows))


def _with_errors(out: pd.DataFrame) -> pd.DataFrame:
    for m in QUANTITIES:
        if m in out:
            for kind in ("pred", "base", "copy", "modelmean"):
                if f"{kind}_{m}" in out:
                    out[f"{kind}_{m}_ape"] = (out[f"{kind}_{m}"] - out[m]).abs() / out[m] * 100
    return out


def loo_summary(loo: pd.DataFrame) -> dict[str, float]:
    """Mean absolute percentage errors of :func:`leave_one_out` (predictor and references)
    and, where intervals were made, the share of runs they held (``*_coverage``)."""
    def mean(col: str, scale: float = 1.0) -> float:
        return scale * float(loo[col].mean()) if col in loo and loo[col].notna().any() \
            else math.nan

    out = {"predictor_time_mape": mean("pred_time_s_ape"),
           "baseline_time_mape": mean("base_time_s_ape"),
           "predictor_throughput_mape": mean("pred_throughput_ape"),
           "baseline_throughput_mape": mean("base_throughput_ape"),
           "nearest_copy_time_mape": mean("copy_time_s_ape"),
           "nearest_copy_throughput_mape": mean("copy_throughput_ape"),
           "model_mean_time_mape": mean("modelmean_time_s_ape"),
           "model_mean_throughput_mape": mean("modelmean_throughput_ape"),
           "predictor_memory_mape": mean("pred_mem_gb_peak_ape"),
           "baseline_memory_mape": mean("base_mem_gb_peak_ape"),
           "runs": float(len(loo))}
    for q, name in (("time_s", "time"), ("throughput", "throughput"), ("mem_gb_peak", "memory")):
        out[f"{name}_coverage"] = mean(f"{q}_covered", 100.0)
    return out
