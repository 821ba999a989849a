"""A log-linear model per job with slopes shared across jobs, and conformal bounds from its
held-out residuals.

For a quantity ``y`` of a run (peak memory, CPU at the p95, time) and its configuration's log
features ``x`` (``ln`` dataset size, batch, width, CPUs...), job ``g`` is modelled as::

    ln y = a_g + b_g . x

The slopes are first fitted within jobs and pooled (a fixed-effects regression: each job's runs
are centred, so a heavy job does not pass for a heavy configuration), with a ridge towards 0;
each job's slopes are then shrunk towards the pooled ones, so two runs of a job borrow the
shape of the others and twenty runs speak for themselves. A job the model has not seen takes
the pooled slopes and the mean of the jobs' intercepts.

Bounds are split-conformal (Vovk et al. 2005; Lei et al. 2018, "Distribution-free predictive
inference for regression"): the model is refitted without each run in turn (``within``: the
run's own job keeps its other runs) and without each job in turn (``new_job``: the job is
unseen), and a bound at level ``1 - alpha`` adds the ``ceil((n + 1)(1 - alpha))``-th smallest
of the ``n`` held-out log residuals. With too few residuals for that rank the bound is
infinite and the caller decides (:func:`conformal_quantile`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def conformal_quantile(residuals: np.ndarray, level: float) -> float:
    """The split-conformal quantile at ``level`` of held-out residuals; inf with too few."""
    res = np.sort(np.asarray(residuals, dtype=float)[np.isfinite(residuals)])
    n = len(res)
    rank = math.ceil((n + 1) * level)
    return float(res[rank - 1]) if 0 < rank <= n else math.inf


@dataclass
class GroupedLogLinear:
    """``ln y = a_g + b_g . x`` per group with slopes shrunk to the pooled within-group slopes.

    Parameters
    ----------
    pooled_ridge : float
        Ridge of the pooled slopes towards ``prior`` (units of centred squared log features).
    group_ridge : float
        Ridge of each group's slopes towards the pooled slopes.

    Attributes
    ----------
    slopes_ : ndarray of shape (n_features,)
        Pooled within-group slopes.
    groups_ : dict[str, tuple[float, ndarray]]
        Per group: intercept and slopes.
    intercept_ : float
        Intercept of an unseen group (with the pooled slopes): the mean over groups.
    fill_ : ndarray of shape (n_features,)
        Value of a feature a run does not give (the median of the runs that do; 0 where none
        does, which makes the feature inert).
    """

    pooled_ridge: float = 1.0
    group_ridge: float = 1.0
    prior: tuple[float, ...] | None = None
    """Slopes the pooled ones are shrunk towards (0 for every feature when None)."""

    def fit(self, x: np.ndarray, y: np.ndarray, groups: np.ndarray) -> GroupedLogLinear:
        """Fit on log features ``x`` (n_runs, n_features; NaN = unknown), ``y`` (n_runs,)
        log targets and ``groups`` (n_runs,) job names."""
        x = np.asarray(x, dtype=float)
        y = np.asarray(y, dtype=float)
        groups = np.asarray(groups).astype(str)
        assert x.ndim == 2 and len(x) == len(y) == len(groups), "x, y, groups disagree"
        med = np.array([np.nanmedian(c) if np.isfinite(c).any() else 0.0 for c in x.T])
        self.fill_ = med if x.shape[1] else np.zeros(0)
        x = self._filled(x)
        xc, yc = x.copy(), y.copy()
        for g in np.unique(groups):
            m = groups == g
            xc[m] -= x[m].mean(axis=0)
            yc[m] -= y[m].mean()
        d = x.shape[1]
        prior = np.zeros(d) if self.prior is None else np.asarray(self.prior, dtype=float)
        assert prior.shape == (d,), f"prior has {prior.shape} slopes for {d} features"
        self.slopes_ = np.linalg.solve(xc.T @ xc + self.pooled_ridge * np.eye(d),
                                       xc.T @ yc + self.pooled_ridge * prior)
        self.groups_ = {}
        pooled_intercepts = []
        for g in np.unique(groups):
            m = groups == g
            b = np.linalg.solve(xc[m].T @ xc[m] + self.group_ridge * np.eye(d),
                                xc[m].T @ yc[m] + self.group_ridge * self.slopes_)
            self.groups_[g] = (float(y[m].mean() - x[m].mean(axis=0) @ b), b)
            pooled_intercepts.append(float(y[m].mean() - x[m].mean(axis=0) @ self.slopes_))
        # An unseen job: the pooled slopes through the typical job's level.
        self.intercept_ = float(np.mean(pooled_intercepts))
        return self

    def _filled(self, x: np.ndarray) -> np.ndarray:
        return np.where(np.isfinite(x), x, self.fill_)

    def predict(self, x: np.ndarray, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Log predictions (n_queries,) and whether each query's group was seen."""
        x = self._filled(np.asarray(x, dtype=float))
        out, known = np.empty(len(x)), np.zeros(len(x), dtype=bool)
        for i, g in enumerate(np.asarray(groups).astype(str)):
            if g in self.groups_:
                a, b = self.groups_[g]
                known[i] = True
            else:
                a, b = self.intercept_, self.slopes_
            out[i] = a + x[i] @ b
        return out, known


def held_out_residuals(model: GroupedLogLinear, x: np.ndarray, y: np.ndarray,
                       groups: np.ndarray, *, max_refits: int = 200) -> dict[str, np.ndarray]:
    """Log residuals (truth - prediction) of each run predicted without itself (``within``,
    with its job in ``within_group``; only runs whose job has another run) and of each job's
    runs predicted without the job (``new_job``; only with two jobs or more).

    Beyond ``max_refits`` runs, ``within`` holds out ten interleaved folds instead of each run.
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    groups = np.asarray(groups).astype(str)
    counts = {g: int((groups == g).sum()) for g in np.unique(groups)}
    n = len(y)
    fold = np.arange(n) % 10 if n > max_refits else np.arange(n)
    within = np.full(n, np.nan)
    # ``within_group`` names each ``within`` residual's group (for per-group scales).
    for f in np.unique(fold):
        test = (fold == f) & np.array([counts[g] > 1 for g in groups])
        if not test.any():
            continue
        fitted = _refit(model, x[~test], y[~test], groups[~test])
        pred, known = fitted.predict(x[test], groups[test])
        within[np.flatnonzero(test)[known]] = y[test][known] - pred[known]
    new_job = []
    if len(counts) > 1:
        for g in counts:
            test = groups == g
            fitted = _refit(model, x[~test], y[~test], groups[~test])
            pred, _ = fitted.predict(x[test], groups[test])
            new_job.append(y[test] - pred)
    seen = np.isfinite(within)
    return {"within": within[seen], "within_group": groups[seen],
            "new_job": np.concatenate(new_job) if new_job else np.zeros(0)}


def _refit(model: GroupedLogLinear, x: np.ndarray, y: np.ndarray,
           groups: np.ndarray) -> GroupedLogLinear:
    return GroupedLogLinear(model.pooled_ridge, model.group_ridge, model.prior).fit(x, y, groups)


def group_scales(residuals: np.ndarray, groups: np.ndarray, *,
                 prior_runs: float = 2.0) -> tuple[dict[str, float], float]:
    """Each group's residual scale (root mean square), shrunk towards the pooled scale as if
    ``prior_runs`` pooled residuals were added to its own; and the pooled scale.

    A job whose memory barely moves gets a tight bound, a noisy one a wide bound, instead of
    both the pooled width (normalised conformal scores, Lei et al. 2018, section 5.2).
    """
    residuals = np.asarray(residuals, dtype=float)
    pooled = float(np.sqrt(np.mean(residuals**2))) if len(residuals) else math.nan
    scales = {}
    for g in np.unique(groups):
        r = residuals[groups == g]
        scales[str(g)] = math.sqrt((np.sum(r**2) + prior_runs * pooled**2) /
                                   (len(r) + prior_runs))
    return scales, pooled
