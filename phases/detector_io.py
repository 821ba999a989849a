"""Saving and loading :class:`~phases.detector.PhaseDetector` models as plain files.

A model is a directory: ``crbm.pt`` (the CRBM state dict), ``kmeans.npz`` (the phase
centroids), ``scaler.json`` and ``meta.json``. Loading reads tensors, arrays and JSON only and
checks that the files agree, so a crafted or damaged model cannot execute code and fails
with :class:`~optimizer.foundation.errors.ModelFileError`.

The functions take the estimator (or its class) as an argument rather than importing
:mod:`phases.detector`, so the import runs one way.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import sklearn
import torch
from sklearn.utils.validation import check_is_fitted

from optimizer.foundation.atomic_files import atomic_write_bytes, atomic_write_json
from optimizer.foundation.errors import ModelFileError
from phases.crbm import CRBM
from phases.traces import FeatureScaler

FORMAT = "cloudopt-phase-detector"
FORMAT_VERSION = 1


def save_detector(model: Any, path: str | os.PathLike) -> Path:
    """Write a fitted :class:`~phases.detector.PhaseDetector` to directory ``path`` (see
    :meth:`PhaseDetector.save <phases.detector.PhaseDetector.save>`)."""
    check_is_fitted(model, ["crbm_", "cluster_centers_"])
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    torch.save({k: v.detach().cpu() for k, v in model.crbm_.state_dict().items()}, buf)
    atomic_write_bytes(out / "crbm.pt", buf.getvalue())
    buf = io.BytesIO()
    np.savez(buf, cluster_centers=np.asarray(model.cluster_centers_, dtype=np.float64))
    atomic_write_bytes(out / "kmeans.npz", buf.getvalue())
    model.scaler_.to_json(out / "scaler.json")
    atomic_write_json(out / "meta.json", detector_meta(model))
    return out


def detector_meta(model: Any) -> dict[str, Any]:
    """The content of ``meta.json``: format, parameters, features, columns, sizes, loss curve,
    the smoother's emission variance and library versions."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        cloudopt = version("cloudopt")
    except PackageNotFoundError:
        cloudopt = "unknown"
    params = model.get_params()
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "params": params,
        "features": [str(f) for f in model.feature_names_in_],
        "exec_id_col": model.exec_id_col_,
        "time_col": model.time_col_,
        "delay": int(model.delay),
        "n_visible": int(model.crbm_.n_visible),
        "n_hidden": int(model.crbm_.n_hidden),
        "n_phases": int(model.n_phases_),
        "n_windows": int(model.n_windows_),
        "loss_curve": model.loss_curve_,
        "emission_var": getattr(model, "emission_var_", None),
        "cluster_scales": [float(x) for x in getattr(model, "cluster_scales_", (1.0, 0.0))],
        "versions": {
            "cloudopt": cloudopt,
            "torch": torch.__version__,
            "numpy": np.__version__,
            "scikit-learn": sklearn.__version__,
        },
    }


def load_detector(cls: type, path: str | os.PathLike, *, device: str | None = None) -> Any:
    """Read a model written by :func:`save_detector` as an instance of ``cls`` (see
    :meth:`PhaseDetector.load <phases.detector.PhaseDetector.load>`)."""
    root = Path(path)
    if not root.is_dir():
        raise ModelFileError(f"{root}: model directory not found")
    meta = _read_meta(root / "meta.json")
    params = dict(meta["params"])
    if device is not None:
        params["device"] = device
    elif str(params.get("device", "auto")).startswith("cuda") and not torch.cuda.is_available():
        params["device"] = "auto"  # fitted on a GPU, read on a CPU-only machine
    try:
        model = cls(**params)
        model._check_params()
    except (TypeError, ValueError) as exc:
        raise ModelFileError(f"{root / 'meta.json'}: invalid parameters ({exc})") from None
    n_vis, n_hid, delay = meta["n_visible"], meta["n_hidden"], meta["delay"]
    if (n_hid, delay) != (model.n_hidden, model.delay):
        raise ModelFileError(f"{root / 'meta.json'}: n_hidden/delay disagree with params")
    crbm = CRBM(n_vis, n_hid, delay)
    crbm.load_state_dict(_read_state(root / "crbm.pt", crbm))
    scales = _cluster_scales(meta.get("cluster_scales", [1.0, 0.0]), root / "meta.json")
    if (model.window_weight > 0) != (scales[1] > 0):
        raise ModelFileError(
            f"{root / 'meta.json'}: cluster_scales {list(scales)} disagree with window_weight="
            f"{model.window_weight!r}"
        )
    width = n_hid + ((delay + 1) * n_vis if scales[1] else 0)
    centers = _read_centers(root / "kmeans.npz", width, meta["n_phases"])
    scaler = FeatureScaler.from_json(root / "scaler.json")
    if scaler.n_features != n_vis:
        raise ModelFileError(
            f"{root / 'scaler.json'}: {scaler.n_features} features, the CRBM has {n_vis}"
        )
    model.crbm_ = crbm.to(model._device())
    model.scaler_ = scaler
    model.cluster_centers_ = centers
    model.cluster_scales_ = scales
    model.n_phases_ = int(meta["n_phases"])
    model.feature_names_in_ = np.asarray(meta["features"], dtype=object)
    model.n_features_in_ = len(model.feature_names_in_)
    model.exec_id_col_ = meta.get("exec_id_col")
    model.time_col_ = meta.get("time_col")
    model.loss_curve_ = [float(x) for x in meta.get("loss_curve", [])]
    model.n_windows_ = int(meta.get("n_windows", 0))
    _set_emission_var(model, meta.get("emission_var"), root / "meta.json")
    if model._n_visible_expected() != n_vis:
        raise ModelFileError(
            f"{root / 'meta.json'}: {model.n_features_in_} features with preprocess="
            f"{model.preprocess!r} need {model._n_visible_expected()} visible units, "
            f"the CRBM has {n_vis}"
        )
    return model


def _set_emission_var(model: Any, value: Any, where: Path) -> None:
    """``emission_var_`` from ``meta.json``; models saved before smoothing existed lack it (and
    their parameters, absent from ``params``, default to no smoothing), so it stays unset."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ModelFileError(f"{where}: emission_var must be a positive number, got {value!r}")
    if not np.isfinite(value):
        raise ModelFileError(f"{where}: emission_var must be finite, got {value!r}")
    model.emission_var_ = float(value)


def _cluster_scales(value: Any, where: Path) -> tuple[float, float]:
    """The code's and the window's multipliers in the clustering space; models saved before
    ``window_weight`` existed cluster codes alone, ``(1.0, 0.0)``."""
    ok = (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in value)
        and all(np.isfinite(x) and x >= 0 for x in value)
        and value[0] > 0
    )
    if not ok:
        raise ModelFileError(
            f"{where}: cluster_scales must be two finite numbers >= 0 (the first > 0), "
            f"got {value!r}"
        )
    return float(value[0]), float(value[1])


def _read_meta(path: Path) -> dict[str, Any]:
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelFileError(f"{path}: file not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelFileError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ModelFileError(
            f"{path}: not a {FORMAT} model (format={meta.get('format')!r})"
            if isinstance(meta, dict)
            else f"{path}: expected a JSON object"
        )
    if meta.get("format_version") != FORMAT_VERSION:
        raise ModelFileError(
            f"{path}: format_version {meta.get('format_version')!r}, this code reads "
            f"{FORMAT_VERSION}"
        )
    need = ("params", "features", "delay", "n_visible", "n_hidden", "n_phases")
    missing = [k for k in need if k not in meta]
    if missing or not isinstance(meta["params"], dict):
        raise ModelFileError(f"{path}: missing or malformed keys {missing or ['params']}")
    for key in ("delay", "n_visible", "n_hidden", "n_phases"):
        if not isinstance(meta[key], int) or meta[key] < 1:
            raise ModelFileError(f"{path}: {key} must be a positive integer, got {meta[key]!r}")
    return meta


def _read_state(path: Path, crbm: CRBM) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise ModelFileError(f"{path}: file not found")
    try:
        # weights_only=True: the unpickler accepts tensors and plain containers only and
        # refuses any other object, so a crafted file cannot run code.
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - the restricted unpickler fails in many ways on
        # corrupt bytes (struct.error, IndexError, UnpicklingError...); all mean the same here
        raise ModelFileError(
            f"{path}: not a plain tensor state dict (refused or corrupted: "
            f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
        ) from None
    expected = crbm.state_dict()
    if not isinstance(state, dict) or set(state) != set(expected):
        keys = sorted(state) if isinstance(state, dict) else type(state).__name__
        raise ModelFileError(f"{path}: expected tensors {sorted(expected)}, found {keys}")
    for name, ref in expected.items():
        value = state[name]
        if not isinstance(value, torch.Tensor) or value.shape != ref.shape:
            shape = getattr(value, "shape", type(value).__name__)
            raise ModelFileError(
                f"{path}: {name} has shape {tuple(shape) if hasattr(shape, '__len__') else shape}, "
                f"meta.json implies {tuple(ref.shape)}"
            )
        if not torch.isfinite(value).all():
            raise ModelFileError(f"{path}: {name} contains NaN or infinite values")
    return {k: v.to(torch.float32) for k, v in state.items()}


def _read_centers(path: Path, width: int, n_phases: int) -> np.ndarray:
    if not path.is_file():
        raise ModelFileError(f"{path}: file not found")
    try:
        with np.load(path, allow_pickle=False) as data:
            centers = np.asarray(data["cluster_centers"], dtype=np.float64)
    except (ValueError, KeyError, OSError, zipfile.BadZipFile, EOFError) as exc:
        raise ModelFileError(f"{path}: unreadable or contains objects ({exc})") from None
    if centers.shape != (n_phases, width) or not np.isfinite(centers).all():
        raise ModelFileError(
            f"{path}: cluster_centers has shape {centers.shape}, meta.json implies "
            f"({n_phases}, {width})"
        )
    return centers
