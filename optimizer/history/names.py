"""The names stores give to a run's settings and scalars, mapped onto the canonical ones.

MLflow params, TensorBoard hparams and scalar tags are free text: one team logs ``batch_size``,
another ``per_device_train_batch_size``, a third ``hparams/bs``. Readers map them here, so a run
reads the same whoever logged it. Matching ignores case, a ``train``/``training`` qualifier and
the separators ``-``, ``.``, ``/`` and spaces (``Loss/train`` and ``train_loss`` are both
``loss``).
"""

from __future__ import annotations

import math
import re

import numpy as np

from optimizer.history.run import PARAM_KEYS

_PARAM_ALIASES: dict[str, tuple[str, ...]] = {
    "batch_size": ("batch_size", "batchsize", "batch", "bs", "per_device_batch_size",
                   "per_device_train_batch_size", "global_batch_size", "micro_batch_size"),
    "epochs": ("epochs", "epoch", "num_epochs", "n_epochs", "max_epochs", "num_train_epochs"),
    "steps": ("steps", "max_steps", "num_steps", "n_steps", "max_iters", "iterations"),
    "lr": ("lr", "learning_rate", "base_lr", "max_lr", "peak_lr"),
    "cpus": ("cpus", "num_cpus", "n_cpus", "cpu_count", "threads", "num_threads"),
    "gpus": ("gpus", "num_gpus", "n_gpus", "gpu_count"),
    "memory_gb": ("memory_gb", "mem_gb", "memory_limit_gb"),
    "params": ("params", "num_params", "n_params", "parameters", "model_params"),
    "width": ("width", "hidden_size", "hidden_dim", "d_model", "n_embd", "hidden"),
    "layers": ("layers", "num_layers", "n_layers", "n_layer", "depth", "num_hidden_layers"),
    "dataset_size": ("dataset_size", "n_samples", "num_samples", "train_size",
                     "num_train_samples", "n"),
    # data-loader workers, as the trials' records count them (not data-parallel replicas)
    "workers": ("workers", "num_workers", "dataloader_num_workers", "loader_workers"),
}

_CURVE_ALIASES: dict[str, tuple[str, ...]] = {
    "loss": ("loss", "train_loss", "loss_train", "training_loss", "train_loss_step"),
    "throughput": ("throughput", "samples_per_sec", "samples_per_second", "samples_s",
                   "train_samples_per_second", "examples_per_sec", "examples_per_second",
                   "throughput_samples_s", "samples_per_s"),
}


def _key(name: str) -> str:
    words = [w for w in re.split(r"[-./\s_]+", name.strip().lower()) if w]
    # "hparams/lr" (TensorBoard) and "train/loss" name the same thing as "lr" and "loss"
    words = [w for w in words if w not in ("hparams", "hparam", "train", "training")] or words
    return "_".join(words)


_PARAM_BY_KEY = {_key(alias): canon for canon, aliases in _PARAM_ALIASES.items()
                 for alias in aliases}
_CURVE_BY_KEY = {_key(alias): canon for canon, aliases in _CURVE_ALIASES.items()
                 for alias in aliases}
assert set(_PARAM_ALIASES) <= set(PARAM_KEYS)


def canonical_param(name: str) -> str | None:
    """The :data:`PARAM_KEYS` name a logged setting stands for, or None."""
    return _PARAM_BY_KEY.get(_key(name))


def canonical_curve(name: str) -> str:
    """``loss`` or ``throughput`` for the tags that mean them; any other name as logged."""
    return _CURVE_BY_KEY.get(_key(name), name)


def as_number(value: object) -> float | None:
    """A logged value as a finite float (``"64"``, ``"1e-3"``, ``True``), or None."""
    if isinstance(value, bool):
        return float(value)
    try:
        number = float(str(value).strip())
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def canonical_params(logged: dict[str, object]) -> tuple[dict[str, float], dict[str, str]]:
    """Numeric settings under canonical names, and the rest as text tags (``param.<name>``).

    Where two logged names map to one canonical name (``batch_size`` and ``bs``), the first
    in the store's order wins.
    """
    params: dict[str, float] = {}
    rest: dict[str, str] = {}
    for name, value in logged.items():
        canon, number = canonical_param(name), as_number(value)
        if canon is not None and number is not None and canon not in params:
            params[canon] = number
        else:
            rest[f"param.{name}"] = str(value)
    return params, rest


def curve_outcome(curves: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, float]:
    """A run's outcome from its logged curves: the last loss, and the throughput (the one
    value, else the median over steps: the last step carries teardown)."""
    outcome: dict[str, float] = {}
    if "loss" in curves:
        outcome["final_loss"] = float(curves["loss"][1][-1])
    if "throughput" in curves:
        values = curves["throughput"][1]
        outcome["throughput"] = float(values[0] if len(values) == 1 else np.median(values))
    return outcome
