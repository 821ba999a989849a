"""Features of runs for prediction: log-space covariates and the neighbour search over runs.

:func:`feature_matrix` gives the covariates the scaling model regresses on,
``x = (ln cpus, ln batch, ln(1 + gpus), ln size)`` (and ``ln work`` for time).
:class:`RunNeighbours` finds the logged runs nearest a query (scikit-learn ``NearestNeighbors``
on standardised model characteristics and configuration, with model names, families and data
sets one-hot).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

CONFIG_FEATURES = ("cpus", "batch_size", "gpus")
CHAR_FEATURES = ("params", "layers", "width")


def log_positive(values: Any) -> np.ndarray:
    """Natural log of the positive values, NaN for the others."""
    v = np.asarray(values, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(v > 0, np.log(v), np.nan)


def feature_matrix(frame: pd.DataFrame, with_work: bool) -> tuple[np.ndarray, list[str]]:
    """Log features of runs: (n_runs, n_features) with NaN where a value is unknown.

    Columns: ``ln cpus``, ``ln batch``, ``ln(1 + gpus)``, ``ln size`` (parameters, else
    ``2 ln width`` as parameters grow with width squared) and, for time, ``ln work``.
    """
    size = log_positive(frame["params"])
    width_size = 2 * log_positive(frame["width"])
    size = np.where(np.isfinite(size), size, width_size)
    cols = [log_positive(frame["cpus"]), log_positive(frame["batch_size"]),
            np.log1p(np.clip(frame["gpus"].to_numpy(dtype=float), 0, None)), size]
    names = ["ln_cpus", "ln_batch", "ln_1p_gpus", "ln_size"]
    if with_work:
        cols.append(log_positive(frame["work"]))
        names.append("ln_work")
    return np.column_stack(cols), names


class RunNeighbours:
    """Standardised characteristics + configuration space over the logged runs (sklearn)."""

    CONFIG_WEIGHT = 0.5
    """Configuration differences count half as much as model differences."""

    def __init__(self, data: pd.DataFrame, x: np.ndarray, k: int) -> None:
        from sklearn.neighbors import NearestNeighbors

        # Names compare case-insensitively: "MLP" from a source scan is the logs' "mlp".
        self.categories = {c: sorted({str(v).lower() for v in data[c].dropna()})
                           for c in ("model_name", "model_family", "dataset")}
        self.char_cols = [c for c in CHAR_FEATURES if data[c].notna().any()]
        char = np.column_stack([log_positive(data[c]) for c in self.char_cols]) if self.char_cols \
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
        char = np.column_stack([log_positive(query[c]) for c in self.char_cols]) if self.char_cols \
            else np.zeros((len(query), 0))
        cfg = np.where(np.isfinite(xq[:, :3]), xq[:, :3], self.mean[self.n_char:])
        raw = np.column_stack([self._fill(char), cfg])
        return self.nn.kneighbors(self._embed(query, raw))
