"""A new job's time, throughput and peak memory, each with a conformal interval.

:class:`JobPredictor` wraps :class:`~optimizer.offline.models.RunPredictor` (throughput and
time) and a peak-memory model (:class:`~optimizer.offline.loglinear.GroupedLogLinear` on ``ln``
peak memory against ``ln`` size, batch, CPUs and data set size, per model with shared slopes),
and gives each prediction an interval from the history's own held-out errors (split-conformal,
two-sided at ``level``):

- a model the history has runs of: the log errors of runs predicted without them
  (``folds``-fold cross-fitting; a run whose model has no other run is left out);
- a model the history has never seen: the log errors of each model's runs predicted without
  any run of that model (leave-one-model-out), which are wider, as they should be.

For a model never seen, the scaling model's answer is kept only where it beats the history's
geometric mean on those leave-one-model-out errors. It often does not: how long a sample takes
differs a hundredfold between workloads, and jobs are sized to take a similar time (the
workloads of ``dl-traces`` with the most samples have the cheapest ones), so within-model slopes
such as time ~ samples do not carry across models.

With too few held-out errors for the level (``2 / (1 - level) - 1``: 9 at 80 %) the interval
is unbounded on that side and says so (``inf``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from optimizer.offline.features import feature_matrix, log_positive
from optimizer.offline.loglinear import GroupedLogLinear, conformal_quantile, held_out_residuals
from optimizer.offline.models import RunPredictor

TARGETS = ("throughput", "time_s")


def _names(frame: pd.DataFrame) -> np.ndarray:
    return frame["model_name"].fillna(frame["model_key"]).astype(str).to_numpy()


def _memory_features(frame: pd.DataFrame) -> np.ndarray:
    x, _ = feature_matrix(frame, with_work=False)
    return np.column_stack([x, log_positive(frame["dataset_size"])])


def two_sided(residuals: np.ndarray, level: float) -> tuple[float, float]:
    """Log offsets (low, high) holding the truth with probability ``level``."""
    tail = (1 + level) / 2
    return -conformal_quantile(-residuals, tail), conformal_quantile(residuals, tail)


@dataclass
class JobPredictor:
    """Point predictions of :class:`RunPredictor` with conformal intervals, and peak memory.

    Parameters
    ----------
    level : float
        Coverage of the intervals (two-sided).
    n_neighbors : int
    folds : int
        Cross-fitting folds for the errors of known models.
    """

    level: float = 0.8
    n_neighbors: int = 5
    folds: int = 10

    def fit(self, frame: pd.DataFrame) -> JobPredictor:
        data = frame.reset_index(drop=True)
        self.predictor_ = RunPredictor(self.n_neighbors).fit(data)
        self.known_models_ = set(_names(data))
        self.residuals_ = self._cross_residuals(data)
        mem = data[data["mem_gb_peak"] > 0]
        self.memory_ = None
        if len(mem) >= 2:
            x, y, g = _memory_features(mem), np.log(mem["mem_gb_peak"].to_numpy()), _names(mem)
            self.memory_ = GroupedLogLinear().fit(x, y, g)
            self.residuals_["mem_gb_peak"] = held_out_residuals(self.memory_, x, y, g)
            self.residuals_["mem_gb_peak"]["new_job_mean"] = _finite(
                [y[g == k] - y[g != k].mean() for k in np.unique(g) if (g != k).any()])
        self._new_job_rules(data)
        return self

    def _cross_residuals(self, data: pd.DataFrame) -> dict[str, dict[str, np.ndarray]]:
        names = _names(data)
        fold = np.arange(len(data)) % min(self.folds, len(data))
        out = {t: {"within": [], "new_job": [], "new_job_mean": []} for t in TARGETS}
        splits = [("within", fold == f) for f in np.unique(fold)]
        if len(set(names)) > 1:
            splits += [("new_job", names == g) for g in sorted(set(names))]
        for kind, test in splits:
            train = data[~test]
            if train.empty or not (train["throughput"] > 0).any():
                continue
            if kind == "within":
                test = test & np.isin(names, list(set(_names(train))))
                if not test.any():
                    continue
            pred = RunPredictor(self.n_neighbors).fit(train).predict(data[test])
            for t in TARGETS:
                truth = log_positive(data.loc[test, t])
                out[t][kind].append(truth - np.log(pred[t].to_numpy()))
                if kind == "new_job":
                    out[t]["new_job_mean"].append(truth - _log_mean(train[t]))
        return {t: {k: _finite(v) for k, v in kinds.items()} for t, kinds in out.items()}

    def _new_job_rules(self, data: pd.DataFrame) -> None:
        """Per quantity: the fitted model, or the history's geometric mean, for new models."""
        self.log_means_ = {t: _log_mean(data[t]) for t in (*TARGETS, "mem_gb_peak")}
        self.new_job_rule_ = {}
        for t in (*TARGETS, "mem_gb_peak"):
            res = self.residuals_.get(t)
            if res is None:
                continue
            mean_wins = len(res["new_job"]) and \
                np.mean(np.abs(res["new_job_mean"])) < np.mean(np.abs(res["new_job"]))
            self.new_job_rule_[t] = "mean" if mean_wins else "scaling"
            if mean_wins:
                res["new_job"] = res["new_job_mean"]

    def predict(self, runs: pd.DataFrame) -> pd.DataFrame:
        """Per run: ``throughput``, ``time_s``, ``mem_gb_peak``, each with ``_low`` and
        ``_high`` at :attr:`level`, and ``seen`` (its model is in the history)."""
        pred = self.predictor_.predict(runs)
        seen = np.isin(_names(runs), list(self.known_models_))
        out = pd.DataFrame({"seen": seen})
        for t in TARGETS:
            mean = math.exp(self.log_means_[t]) if self.new_job_rule_[t] == "mean" else math.nan
            out[t] = np.where(seen | np.isnan(mean), pred[t].to_numpy(), mean)
        if self.memory_ is not None:
            mu, _ = self.memory_.predict(_memory_features(runs), _names(runs))
            mean = self.log_means_["mem_gb_peak"] \
                if self.new_job_rule_["mem_gb_peak"] == "mean" else math.nan
            out["mem_gb_peak"] = np.exp(np.where(seen | np.isnan(mean), mu, mean))
        else:
            out["mem_gb_peak"] = math.nan
        for t in (*TARGETS, "mem_gb_peak"):
            res = self.residuals_.get(t, {})
            for kind, mask in (("within", seen), ("new_job", ~seen)):
                lo, hi = two_sided(res.get(kind, np.zeros(0)), self.level)
                out.loc[mask, f"{t}_low"] = out.loc[mask, t] * math.exp(lo)
                out.loc[mask, f"{t}_high"] = out.loc[mask, t] * math.exp(hi)
        return out


def _finite(parts: list[np.ndarray]) -> np.ndarray:
    values = np.concatenate(parts) if parts else np.zeros(0)
    return values[np.isfinite(values)]


def _log_mean(values: pd.Series) -> float:
    logs = log_positive(values)
    return float(np.mean(logs[np.isfinite(logs)])) if np.isfinite(logs).any() else math.nan
