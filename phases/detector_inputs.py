"""The inputs of :class:`~phases.detector.PhaseDetector`: its parameters checked, tables read
into executions, and the engineered, preprocessed features the CRBM sees.

Functions of the estimator's parameters rather than methods, so the estimator's file holds what
it learns and how it predicts.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from phases.crbm import resolve_device
from phases.detector_batch import Batch, batch_of_arrays, generic_names
from phases.features import engineer_features, feature_groups
from phases.smoothing import SMOOTHING
from phases.traces import TraceSet, traces_from_frame

PREPROCESS_STEPS = ("exec-norm", "diff")


def check_params(est) -> None:
    """Validate a :class:`~phases.detector.PhaseDetector`'s parameters (called by ``fit``)."""
    for name in ("n_phases", "n_hidden", "delay", "epochs", "batch_size", "k"):
        value = getattr(est, name)
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if not (isinstance(est.lr, (int, float)) and est.lr > 0):
        raise ValueError(f"lr must be a positive number, got {est.lr!r}")
    if not (isinstance(est.momentum, (int, float)) and 0 <= est.momentum < 1):
        raise ValueError(f"momentum must be in [0, 1), got {est.momentum!r}")
    preprocess_steps(est.preprocess)
    feature_groups(est.features)
    if est.smoothing not in SMOOTHING:
        raise ValueError(f"smoothing must be one of {SMOOTHING}, got {est.smoothing!r}")
    if not (isinstance(est.stay_prob, (int, float)) and 0 < est.stay_prob < 1):
        raise ValueError(f"stay_prob must be in (0, 1), got {est.stay_prob!r}")
    md = est.min_duration
    if not isinstance(md, (int, np.integer)) or isinstance(md, bool) or md < 1:
        raise ValueError(f"min_duration must be a positive integer, got {md!r}")
    ww = est.window_weight
    if isinstance(ww, bool) or not isinstance(ww, (int, float)) or not 0 <= ww < np.inf:
        raise ValueError(f"window_weight must be a finite number >= 0, got {ww!r}")
    resolve_device(est.device)

def preprocess_steps(preprocess: str | None) -> list[str]:
    """The steps of a ``preprocess`` parameter (``"exec-norm+diff"``), checked."""
    if preprocess in ("none", "", None):
        return []
    steps = str(preprocess).split("+")
    bad = [s for s in steps if s not in PREPROCESS_STEPS]
    if bad:
        raise ValueError(
            f"preprocess={preprocess!r}: unknown step(s) {bad}; "
            f"use 'none' or steps from {PREPROCESS_STEPS} joined by '+'"
        )
    return steps


def as_batch(est, traces, exec_id: str | None = None, features: Sequence[str] | None = None,
             time: str | None = None) -> Batch:
    """All executions concatenated, whatever form ``traces`` came in, checked against the
    features a fitted model expects."""
    fitted = hasattr(est, "n_features_in_")
    if isinstance(traces, pd.DataFrame):
        traces = frame_traces(est, traces, exec_id, features, time, fitted)
    if isinstance(traces, TraceSet):
        if fitted and list(traces.features) != list(est.feature_names_in_):
            if not generic_names(traces.features) and not generic_names(est.feature_names_in_):
                raise ValueError(
                    f"trace features {list(traces.features)} differ from the model's "
                    f"{list(est.feature_names_in_)}"
                )
        batch = batch_of_arrays(traces.arrays, list(traces.features))
        batch = batch._replace(exec_id_col=traces.exec_id_col, time_col=traces.time_col)
    else:
        if isinstance(traces, np.ndarray) and traces.ndim == 2:
            traces = [traces]  # one execution
        batch = batch_of_arrays(traces, None)
    if fitted and batch.flat.shape[1] != est.n_features_in_:
        raise ValueError(
            f"traces have {batch.flat.shape[1]} features, the model expects "
            f"{est.n_features_in_} ({', '.join(map(str, est.feature_names_in_))})"
        )
    return batch


def frame_traces(est, frame, exec_id, features, time, fitted) -> TraceSet:
    """A table's executions, read with the columns given or those the model was fitted on."""
    exec_id = exec_id or (getattr(est, "exec_id_col_", None) if fitted else None) or "exec_id"
    if time is None and fitted and getattr(est, "time_col_", None) in frame.columns:
        time = est.time_col_  # the fitted time column, when this table has it too
    if features is None and fitted:
        features = list(est.feature_names_in_)
    if features is None:
        skip = {exec_id, time}
        features = [
            c
            for c in frame.columns
            if c not in skip and pd.api.types.is_numeric_dtype(frame[c])
        ]
    return traces_from_frame(frame, exec_id, features, time, source="DataFrame")


def prepare(flat: np.ndarray, lengths: np.ndarray, features: str, preprocess: str | None
            ) -> np.ndarray:
    """Apply ``features`` then ``preprocess`` to the concatenated, unscaled executions."""
    out = engineer_features(flat, lengths, features)
    owner = np.repeat(np.arange(len(lengths)), lengths)
    starts = (np.cumsum(lengths) - lengths)[lengths > 0]
    for step in preprocess_steps(preprocess):
        if step == "exec-norm":
            n = np.maximum(lengths, 1)[:, None]
            mean = np.stack([np.bincount(owner, c, len(lengths)) for c in out.T], 1) / n
            centred = out - mean[owner]
            var = np.stack([np.bincount(owner, c * c, len(lengths)) for c in centred.T], 1)
            std = np.sqrt(var / n)
            out = centred / np.where(std > 0, std, 1.0)[owner]
        elif step == "diff":
            d = np.diff(out, axis=0, prepend=out[:1])
            d[starts] = 0.0  # no difference across execution boundaries
            out = np.hstack([out, d])
    return out


class EpochProgress:
    """A tqdm bar over the CRBM's training epochs, showing the reconstruction error."""

    def __init__(self, epochs: int) -> None:
        from tqdm.auto import tqdm

        self._bar = tqdm(total=epochs, desc="CRBM epochs", unit="epoch", disable=None)

    def update(self, epoch: int, loss: float) -> None:
        self._bar.update(1)
        self._bar.set_postfix(recon=f"{loss:.4f}")

    def close(self) -> None:
        self._bar.close()
