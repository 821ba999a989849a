"""Leave-one-out evaluation of the run predictor against simple references.

Each logged run is predicted from all the others by
:class:`~optimizer.offline.models.RunPredictor` and compared with three references: the mean
of the other runs, the nearest logged run's value copied, and the mean of the same model's
other runs. ``benchmarks/offline_prediction.py`` reports the result.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from optimizer.offline.features import feature_matrix
from optimizer.offline.models import LocalScalingModel, RunPredictor


def nearest_run_values(model: LocalScalingModel, query: pd.DataFrame) -> np.ndarray:
    """The target of the single nearest logged run, copied (a reference for benchmarks)."""
    xq, _ = feature_matrix(query, with_work=model.target == "time_s")
    _, idx = model.neighbors_.query(query, xq)
    return np.exp(model.y_[idx[:, 0]])


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
