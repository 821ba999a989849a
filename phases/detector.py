"""``PhaseDetector``: AI4DL phase discovery (CRBM codes + k-means) as a scikit-learn estimator.

The pipeline of Berral, Wang & Youssef, "AI4DL: Mining behaviors of deep learning workloads for
resource management" (HotCloud'20): features are standardised (:class:`~phases.traces.
FeatureScaler`), every window of ``delay + 1`` consecutive samples is encoded by a
:class:`~phases.crbm.CRBM` (hidden probabilities given the current sample and its history), and
k-means on the codes gives the phases. The first ``delay`` samples of an execution have no full
history; they are labelled :data:`WARMUP` (-1) instead of being padded with invented data.

Saved models are directories of plain files (state dict, NPZ, JSON) that load without executing
code; see :meth:`PhaseDetector.save` and :mod:`phases.detector_io`. The estimator's helpers live
beside it: :mod:`phases.detector_inputs` (parameters, tables, engineered features),
:mod:`phases.detector_batch` (executions concatenated into one array) and
:mod:`phases.constrained_kmeans` (adding phases with :meth:`PhaseDetector.expand`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from sklearn.base import BaseEstimator
from sklearn.cluster import KMeans
from sklearn.utils.validation import check_is_fitted

from phases.constrained_kmeans import best_of_restarts
from phases.crbm import CRBM, Windows, _affine, resolve_device, window_index, windows_from_flat
from phases.detector_batch import (
    Batch,
    flat_positions,
    split_per_execution,
    unit_scale,
    window_rows,
)
from phases.detector_inputs import PREPROCESS_STEPS as PREPROCESS_STEPS
from phases.detector_inputs import (
    EpochProgress,
    as_batch,
    check_params,
    frame_traces,
    prepare,
    preprocess_steps,
)
from phases.detector_io import FORMAT as FORMAT
from phases.detector_io import FORMAT_VERSION as FORMAT_VERSION
from phases.detector_io import load_detector, save_detector
from phases.features import feature_groups
from phases.smoothing import smooth_executions
from phases.traces import FeatureScaler, TraceSet

__all__ = ["PhaseDetector", "WARMUP", "DEFAULT_EPOCHS", "Traces"]

WARMUP = -1
"""Phase id of the first ``delay`` samples of an execution (no full history yet)."""

DEFAULT_EPOCHS = 400
"""Default training epochs, chosen where the reconstruction error stops improving on the
shipped ``dl-traces`` (4,865 windows, batch 64, lr 1e-3, momentum 0.9; error over all windows
after each epoch, seeds 0 and 1): 0.060 after 1 epoch, 0.045 after 100, 0.042 after 200, 0.040
after 400, 0.039 after 1000. 400 epochs are within 1.5% of the 1000-epoch error (300: 2%,
100: 14%) and take about 5 s on one CPU thread. ``benchmarks/phases_speed.py --curve`` prints
the curve. Much smaller trace sets (a few hundred windows: few minibatches per epoch) need
more epochs; AI4DL trained 2000."""

Traces = TraceSet | pd.DataFrame | Sequence[np.ndarray] | np.ndarray


class PhaseDetector(BaseEstimator):
    """Discover and detect execution phases in resource traces (AI4DL: CRBM + k-means).

    Parameters
    ----------
    n_phases : int, default=5
        Number of k-means clusters (phases).
    n_hidden : int, default=10
        CRBM hidden units (code size).
    delay : int, default=3
        Previous samples conditioning each window.
    lr : float, default=1e-3
        CD learning rate.
    epochs : int, default=DEFAULT_EPOCHS
        CRBM training epochs (see :data:`DEFAULT_EPOCHS` for how the default was chosen).
    batch_size : int, default=64
        Windows per CD minibatch.
    k : int, default=1
        Gibbs steps of contrastive divergence.
    momentum : float, default=0.9
        Momentum of the CD updates.
    preprocess : str, default="none"
        ``"none"``, or steps joined by ``+`` applied to each execution before scaling:
        ``"exec-norm"`` (z-score each execution by its own mean and std; uses the whole
        execution, so it suits offline analysis) and ``"diff"`` (append first differences of
        the features). Phase statistics always use the original features.
    features : str, default="abs"
        Inputs engineered from the features before ``preprocess``: groups joined by ``+``,
        each ``abs``, ``rel`` (each execution against its own running level; causal) or
        ``whole`` (against its own 95th percentile; offline), optionally with ``-diff`` (first
        differences) or ``-rate`` (slope over 4 samples), e.g. ``"whole+whole-rate"``. See
        :mod:`phases.features`.
    smoothing : str, default="none"
        ``"none"`` (nearest centroid), ``"viterbi"`` (most likely phase sequence of each
        execution under a sticky hidden-Markov model; offline) or ``"forward"`` (filtered
        phase; causal). See :mod:`phases.smoothing`.
    stay_prob : float, default=0.99
        Probability of staying in a phase from one sample to the next, for ``smoothing``.
    min_duration : int, default=1
        Runs of one phase shorter than this many samples are merged into a neighbour after
        smoothing (1: off; offline).
    window_weight : float, default=0.0
        Weight of the scaled input window beside the CRBM code in the space k-means clusters
        (0: the code alone, the AI4DL method). Code and window are each scaled to unit total
        variance on the training windows, then the window is multiplied by this weight. The
        code carries what the CRBM learned of the window's dynamics, the window the levels the
        code blurs; together they agree with the scripts' stages better than either alone
        (``benchmarks/phases_quality.py``: 2 is the smallest weight on the plateau of 1-4
        there).
    device : str, default="auto"
        ``"auto"`` (CUDA when available), ``"cpu"`` or ``"cuda"``.
    random_state : int or None
        Seed for weights, minibatch order, Gibbs sampling and k-means.
    verbose : bool, default=False
        Show a tqdm progress bar over epochs.

    Attributes
    ----------
    crbm_ : CRBM
        The trained encoder.
    scaler_ : FeatureScaler
        Standardisation fitted on the training samples (after ``preprocess``).
    cluster_centers_ : ndarray of shape (n_phases_, n_hidden + window dims)
        Phase centroids in the clustering space (the code, then the window scaled by
        ``window_weight`` when it is positive); row ``i`` is phase ``i``. Phases found by
        :meth:`fit` are numbered by the mean of the first feature of their samples, ascending.
    n_phases_ : int
        Number of phases (grows with :meth:`expand`).
    n_features_in_ : int
        Features per sample.
    feature_names_in_ : ndarray of str
        Feature names (``f0, f1...`` when fitted on bare arrays).
    exec_id_col_, time_col_ : str or None
        Columns used when fitted on a table; reused to read tables in ``predict``.
    loss_curve_ : list of float
        Reconstruction error after each epoch.
    n_windows_ : int
        Training windows.
    emission_var_ : float
        Mean squared distance of the training points to their centroid, per dimension (the
        spread of a phase that ``smoothing`` assumes).
    cluster_scales_ : tuple of float
        Multipliers of the code and of the window in the clustering space (``(1.0, 0.0)`` when
        ``window_weight`` is 0).

    Notes
    -----
    ``traces`` arguments accept a :class:`~phases.traces.TraceSet` (from :func:`read_traces`), a
    list of ``(n_samples_i, n_features)`` arrays (one per execution, in time order), a single
    2-D array (one execution), or a DataFrame with one row per sample. For a DataFrame the
    execution id column is ``exec_id`` (keyword) or, after fitting, ``exec_id_col_``
    (default ``"exec_id"``); the features are ``features`` or, after fitting, the fitted
    names; when fitting with ``features=None`` every numeric column other than the id and time
    columns is a feature. Rows are sorted by ``time`` when given.
    """

    def __init__(
        self,
        *,
        n_phases: int = 5,
        n_hidden: int = 10,
        delay: int = 3,
        lr: float = 1e-3,
        epochs: int = DEFAULT_EPOCHS,
        batch_size: int = 64,
        k: int = 1,
        momentum: float = 0.9,
        preprocess: str = "none",
        features: str = "abs",
        smoothing: str = "none",
        stay_prob: float = 0.99,
        min_duration: int = 1,
        window_weight: float = 0.0,
        device: str = "auto",
        random_state: int | None = None,
        verbose: bool = False,
    ) -> None:
        self.n_phases = n_phases
        self.n_hidden = n_hidden
        self.delay = delay
        self.lr = lr
        self.epochs = epochs
        self.batch_size = batch_size
        self.k = k
        self.momentum = momentum
        self.preprocess = preprocess
        self.features = features
        self.smoothing = smoothing
        self.stay_prob = stay_prob
        self.min_duration = min_duration
        self.window_weight = window_weight
        self.device = device
        self.random_state = random_state
        self.verbose = verbose

    # ---- input handling ---------------------------------------------------------------------
    def _check_params(self) -> None:
        check_params(self)

    def _preprocess_steps(self) -> list[str]:
        return preprocess_steps(self.preprocess)

    def _as_batch(self, traces: Traces, exec_id: str | None = None,
                  features: Sequence[str] | None = None, time: str | None = None) -> Batch:
        return as_batch(self, traces, exec_id, features, time)

    def _frame_traces(self, frame, exec_id, features, time, fitted) -> TraceSet:
        return frame_traces(self, frame, exec_id, features, time, fitted)

    def _prepare(self, flat: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Apply ``features`` then ``preprocess`` to the concatenated, unscaled executions."""
        return prepare(flat, lengths, self.features, self.preprocess)

    def _windows(self, batch: Batch) -> Windows:
        scaled = self.scaler_.scaler.transform(self._prepare(batch.flat, batch.lengths))
        return windows_from_flat(scaled, batch.lengths, self.delay, device=self._device())

    def _device(self) -> torch.device:
        return resolve_device(self.device)

    # ---- fitting ------------------------------------------------------------------------------
    def fit(
        self,
        traces: Traces,
        y: None = None,
        *,
        exec_id: str | None = None,
        features: Sequence[str] | None = None,
        time: str | None = None,
    ) -> PhaseDetector:
        """Train the CRBM on all windows of ``traces`` and cluster their codes.

        Parameters
        ----------
        traces : TraceSet, list of ndarray of shape (n_samples_i, n_features), or DataFrame
            Training executions (see the class Notes for tables).
        y : None
            Ignored (unsupervised).
        exec_id, features, time : str, list of str, str, optional
            Columns, when ``traces`` is a DataFrame.

        Returns
        -------
        self
        """
        self._check_params()
        for attr in [a for a in vars(self) if a.endswith("_") and not a.startswith("__")]:
            delattr(self, attr)
        batch = self._as_batch(traces, exec_id, features, time)
        seeds = np.random.default_rng(self.random_state).integers(2**31 - 1, size=3)
        prepared = self._prepare(batch.flat, batch.lengths)
        scaler = FeatureScaler(batch.features).fit([prepared])
        scaled = scaler.scaler.transform(prepared)
        win = windows_from_flat(scaled, batch.lengths, self.delay, device=self._device())
        if len(win.v) < self.n_phases:
            raise ValueError(
                f"{len(win.v)} windows of {self.delay + 1} samples in the training traces; "
                f"need at least n_phases={self.n_phases} ({len(batch.flat)} samples)"
            )
        crbm = CRBM(win.v.shape[1], self.n_hidden, self.delay, random_state=int(seeds[0]))
        progress = EpochProgress(self.epochs) if self.verbose else None
        crbm.to(win.v.device)
        curve = crbm.fit_windows(
            win.v,
            win.u,
            epochs=self.epochs,
            batch_size=self.batch_size,
            lr=self.lr,
            momentum=self.momentum,
            k=self.k,
            random_state=int(seeds[1]),
            callback=progress.update if progress is not None else None,
        )
        if progress is not None:
            progress.close()
        codes = crbm.codes(win.v, win.u)
        rows = None
        self.cluster_scales_ = (1.0, 0.0)
        if self.window_weight > 0:
            # the layout inference builds from consecutive rows, not the CRBM's (u, v) split
            flat = torch.as_tensor(scaled, dtype=codes.dtype)
            inside = torch.as_tensor(window_index(batch.lengths, self.delay)[2])
            rows = window_rows(flat, self.delay)[inside].to(codes.device)
            self.cluster_scales_ = (
                unit_scale(codes),
                float(self.window_weight) * unit_scale(rows),
            )
        points = self._points(codes, rows).cpu().numpy().astype(np.float64)
        km = KMeans(n_clusters=self.n_phases, n_init=10, random_state=int(seeds[2])).fit(points)
        emission_var = float(km.inertia_) / points.size
        first = batch.flat[flat_positions(batch.lengths, win), 0]
        level = [first[km.labels_ == c].mean() for c in range(self.n_phases)]
        order = np.argsort(level, kind="stable")

        self.crbm_ = crbm
        self.scaler_ = scaler
        self.cluster_centers_ = km.cluster_centers_[order]
        self.n_phases_ = int(self.n_phases)
        self.n_features_in_ = int(batch.flat.shape[1])
        self.feature_names_in_ = np.asarray(batch.features, dtype=object)
        self.exec_id_col_ = batch.exec_id_col
        self.time_col_ = batch.time_col
        self.loss_curve_ = [float(x) for x in curve]
        self.n_windows_ = int(len(win.v))
        self.emission_var_ = max(emission_var, 1e-12)
        return self

    def _points(self, codes: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
        """The clustering space: each code, beside its window (``rows``) when weighted."""
        code_scale, window_scale = getattr(self, "cluster_scales_", (1.0, 0.0))
        if window_scale == 0:
            return codes
        return torch.cat([codes * code_scale, rows.to(codes.dtype) * window_scale], 1)

    # ---- inference ----------------------------------------------------------------------------
    def _all_codes(
        self, traces, exec_id, time, *, points: bool = False
    ) -> tuple[Batch, torch.Tensor, np.ndarray]:
        """Codes of every window of consecutive samples (the inference fast path, see
        ``CRBM.window_codes``), or with ``points`` their place in the clustering space, and
        which of them lie inside one execution.

        Returns
        -------
        batch, codes (or points) of shape (n_samples - delay, n), valid of shape
        (n_samples - delay,)
        """
        check_is_fitted(self, ["crbm_", "cluster_centers_"])
        batch = self._as_batch(traces, exec_id, None, time)
        scaled = self.scaler_.transform_flat(self._prepare(batch.flat, batch.lengths))
        flat = torch.as_tensor(scaled, device=self._device())
        codes = self.crbm_.window_codes(flat)
        if points:
            rows = window_rows(flat, self.delay) if self.cluster_scales_[1] else None
            codes = self._points(codes, rows)
        return batch, codes, window_index(batch.lengths, self.delay)[2]

    def _assign(self, codes: torch.Tensor) -> np.ndarray:
        """Nearest phase centroid of each code: argmin ||c||^2 - 2 x.c (one product)."""
        return self._partial_distances(codes).argmin(1).cpu().numpy()

    def _partial_distances(self, codes: torch.Tensor) -> torch.Tensor:
        """||c||^2 - 2 x.c for every code and centroid: the squared distance less ||x||^2."""
        centers = torch.as_tensor(self.cluster_centers_, dtype=codes.dtype, device=codes.device)
        dist = codes.new_empty((len(codes), len(centers)))
        _affine(codes, -2.0 * centers.T.contiguous(), (centers * centers).sum(1), dist)
        return dist

    def _smoothed(self, codes: torch.Tensor, valid: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Phases of the valid windows after ``smoothing`` and ``min_duration``, per execution."""
        if not hasattr(self, "emission_var_"):
            raise ValueError(
                f"smoothing={self.smoothing!r} needs emission_var_, which this model (saved "
                "before smoothing existed) lacks; refit it"
            )
        d = self._partial_distances(codes) + (codes * codes).sum(1, keepdim=True)
        d = d.clamp_min(0).double().cpu().numpy()[valid]
        return smooth_executions(
            split_per_execution(d, np.maximum(lengths - self.delay, 0)), self.emission_var_,
            method=self.smoothing, stay=float(self.stay_prob), min_duration=int(self.min_duration))

    def predict(
        self, traces: Traces, *, exec_id: str | None = None, time: str | None = None
    ) -> list[np.ndarray]:
        """Phase of every sample.

        Parameters
        ----------
        traces : TraceSet, list of ndarray of shape (n_samples_i, n_features), or DataFrame

        Returns
        -------
        list of ndarray of shape (n_samples_i,), int64
            One sequence per execution, as long as the execution; the first ``delay`` samples
            (and every sample of an execution shorter than ``delay + 1``) are :data:`WARMUP`.
        """
        batch, codes, valid = self._all_codes(traces, exec_id, time, points=True)
        labels = np.full(len(batch.flat), WARMUP, dtype=np.int64)
        if self.smoothing == "none" and self.min_duration == 1:
            labels[self.delay :][valid] = self._assign(codes)[valid]
        else:
            labels[self.delay :][valid] = self._smoothed(codes, valid, batch.lengths)
        return split_per_execution(labels, batch.lengths)

    def transform(
        self, traces: Traces, *, exec_id: str | None = None, time: str | None = None
    ) -> list[np.ndarray]:
        """CRBM codes (hidden probabilities) of every window.

        Returns
        -------
        list of ndarray of shape (max(n_samples_i - delay, 0), n_hidden)
            Row ``j`` of execution ``i`` is the code of the window ending at sample
            ``j + delay``.
        """
        batch, codes, valid = self._all_codes(traces, exec_id, time)
        counts = np.maximum(batch.lengths - self.delay, 0)
        kept = codes.cpu().numpy()[valid].astype(np.float64)
        return split_per_execution(kept, counts)

    def score(
        self,
        traces: Traces,
        y: None = None,
        *,
        exec_id: str | None = None,
        time: str | None = None,
    ) -> float:
        """Mean squared reconstruction error of the windows (scaled units).

        Sign convention: **lower is better** (unlike scikit-learn's ``score``, which is
        maximised); in a scikit-learn search use ``scoring=lambda est, X, y=None:
        -est.score(X)``.
        """
        check_is_fitted(self, ["crbm_", "cluster_centers_"])
        win = self._windows(self._as_batch(traces, exec_id, None, time))
        if len(win.v) == 0:
            raise ValueError(f"no window of {self.delay + 1} samples in the traces")
        return float(self.crbm_.reconstruction_errors(win.v, win.u).mean())

    # ---- expanding phases -----------------------------------------------------------------
    def expand(
        self,
        new_traces: Traces,
        n_new_phases: int,
        *,
        exec_id: str | None = None,
        time: str | None = None,
    ) -> PhaseDetector:
        """Add ``n_new_phases`` phases for behaviour in ``new_traces`` (AI4DL "expanding phases").

        The CRBM and scaler stay frozen, so existing codes and phase centroids keep their
        meaning and ids; k-means runs on the new codes with the old centroids held fixed and
        ``n_new_phases`` free centroids, seeded k-means++-style on the codes farthest from the
        existing phases. New phases get ids ``n_phases_ ...``.

        Returns
        -------
        self
        """
        check_is_fitted(self, ["crbm_", "cluster_centers_"])
        if not isinstance(n_new_phases, (int, np.integer)) or n_new_phases < 1:
            raise ValueError(f"n_new_phases must be a positive integer, got {n_new_phases!r}")
        _, codes, valid = self._all_codes(new_traces, exec_id, time, points=True)
        codes_np = codes.cpu().numpy()[valid].astype(np.float64)
        if len(codes_np) < n_new_phases:
            raise ValueError(f"{len(codes_np)} windows cannot seed {n_new_phases} new phases")
        best = best_of_restarts(codes_np, self.cluster_centers_, n_new_phases,
                                np.random.default_rng(self.random_state))
        self.cluster_centers_ = np.vstack([self.cluster_centers_, best])
        self.n_phases_ = int(len(self.cluster_centers_))
        return self

    # ---- persistence ------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> Path:
        """Write the model to directory ``path``.

        Files: ``crbm.pt`` (the CRBM state dict, ``torch.save``), ``kmeans.npz``
        (``cluster_centers``), ``scaler.json`` and ``meta.json`` (format, parameters, features,
        columns, delay, loss curve, library versions). Each file is written atomically.
        """
        return save_detector(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike, *, device: str | None = None) -> PhaseDetector:
        """Read a model written by :meth:`save` without executing code from its files.

        Parameters
        ----------
        path : path-like
            Model directory.
        device : str, optional
            Overrides the saved ``device`` parameter (a model saved with ``device="cuda"``
            loads as ``"auto"`` where CUDA is missing).

        Raises
        ------
        ModelFileError
            A file is missing, corrupted, holds a pickled object, or does not match the others.
        """
        return load_detector(cls, path, device=device)

    def _n_visible_expected(self) -> int:
        """CRBM visible units implied by the features, ``features`` and ``preprocess``."""
        n = int(self.n_features_in_) * len(feature_groups(self.features))
        return 2 * n if "diff" in self._preprocess_steps() else n
