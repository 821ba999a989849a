"""Reading what a running training script reports: rates, ``key=value`` facts and its work.

Throughput comes from the first source available: ``metrics_csv`` (rows the script appends
to ``$OPTIMIZER_METRICS_CSV``), ``stdout`` (printed rates: ``samples/s``, ``images/sec``,
``it/s`` × batch size, parsed by :func:`parse_rate`) or ``wall_time`` (work / time). A
:class:`RateTracker` holds the rate windows of one source and says when their mean is steady.
The whole job's work comes from the metrics, a printed ``total_samples=N`` or the script's
arguments (:func:`total_samples_from_args`).

Pure parsing: no processes or files; :mod:`optimizer.trials.runner` feeds it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

_NUM = r"(\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)"
_SAMPLE_RATE = re.compile(
    _NUM + r"\s*(?:samples|sample|images|imgs|img|examples|sequences|seqs|records|rows)"
    r"\s*/\s*s(?:ec(?:ond)?s?)?\b", re.IGNORECASE)
_SAMPLE_RATE_KEY = re.compile(
    r"(?:samples|images|examples)_per_s(?:ec(?:ond)?)?\s*[=:]\s*" + _NUM, re.IGNORECASE)
_IT_RATE = re.compile(_NUM + r"\s*it/s\b")
_S_PER_IT = re.compile(_NUM + r"\s*s/it\b")
_KEY_VALUE = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)=([^\s,;]+)")
BATCH_SIZE_PATTERN = re.compile(r"batch[_ ]size\s*[=:]\s*(\d+)", re.IGNORECASE)
"""``batch_size=N`` / ``batch size: N`` in a script's output: its batch size when not set."""
HELDOUT_LOSS_PATTERN = re.compile(
    r"\b(?:val(?:idation)?|valid|test|eval|dev)[ _/-]?loss['\"]?\s*[=:]?\s*['\"]?"
    r"([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)", re.IGNORECASE)
"""A held-out loss as scripts print it: ``val_loss=0.55``, ``test loss  3.88``,
``'eval_loss': 0.46``, ``Validation loss: 0.104``."""
INFO_KEYS = ("model_name", "model_family", "params", "layers", "dataset")
"""Facts about its model and data a script may report (metrics columns or ``key=value``)."""


def parse_rate(line: str, batch_size: int | None) -> float | None:
    """Samples per second printed on one output line, or None.

    ``123.4 samples/s`` (also images/sec, examples/s...) counts directly; ``12.5it/s`` and
    ``0.8s/it`` (tqdm) are multiplied by ``batch_size`` and ignored without one.
    """
    m = _SAMPLE_RATE.search(line) or _SAMPLE_RATE_KEY.search(line)
    if m:
        return float(m.group(1))
    if batch_size:
        m = _IT_RATE.search(line)
        if m:
            return float(m.group(1)) * batch_size
        m = _S_PER_IT.search(line)
        if m and float(m.group(1)) > 0:
            return batch_size / float(m.group(1))
    return None


def parse_key_values(text: str) -> dict[str, str]:
    """``key=value`` tokens printed by a script (the last value of each key wins)."""
    return {k: v for k, v in _KEY_VALUE.findall(text)}


def to_number(value: Any) -> float | int | None:
    """``value`` as a finite int (when whole) or float, else None."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(f):
        return None
    return int(f) if f.is_integer() else f


def first_number(*values: Any) -> float | None:
    """The first of ``values`` that is a positive number."""
    for v in values:
        n = to_number(v)
        if n is not None and n > 0:
            return n
    return None


def total_samples_from_args(args: Sequence[str]) -> int | None:
    """Work implied by common arguments: ``--samples N`` (or ``--num-samples``...) ×
    ``--epochs E``, or ``--total-samples N``."""
    values: dict[str, str] = {}
    for i, a in enumerate(args):
        if a.startswith("--"):
            if "=" in a:
                k, v = a[2:].split("=", 1)
                values[k.replace("-", "_")] = v
            elif i + 1 < len(args):
                values[a[2:].replace("-", "_")] = args[i + 1]
    n = next((values[k] for k in ("total_samples",) if k in values), None)
    if n is not None and to_number(n):
        return int(to_number(n))
    n = next((values[k] for k in ("samples", "num_samples", "n_samples", "train_samples")
              if k in values), None)
    epochs = values.get("epochs") or values.get("num_epochs")
    if n is not None and epochs is not None and to_number(n) and to_number(epochs):
        return int(to_number(n) * to_number(epochs))
    return None


class RateTracker:
    """Windows of measured throughput, in arrival order.

    Each window is ``(t_s, rate, samples)``: when it was seen (seconds since start), its rate
    (samples/s) and the cumulative samples at its end when the script reports them.
    """

    def __init__(self) -> None:
        self.windows: list[tuple[float, float, float | None]] = []

    def add(self, t_s: float, rate: float, samples: float | None = None) -> None:
        if rate > 0 and math.isfinite(rate):
            self.windows.append((t_s, rate, samples))

    def steady_rates(self) -> np.ndarray:
        """Rates after the first window (which holds the warm-up), or the only one."""
        rates = [w[1] for w in self.windows]
        return np.array(rates[1:] if len(rates) > 1 else rates, dtype=float)

    def is_steady(self, k: int = 4, tol: float = 0.03) -> bool:
        """True when at least ``k`` windows after warm-up pin their mean rate down to a
        relative standard error of ``tol`` (noisy machines need more windows)."""
        rates = self.steady_rates()
        if len(self.windows) < k + 1:
            return False
        sem = rates.std(ddof=1) / np.sqrt(len(rates))
        return bool(sem / rates.mean() <= tol)

    def throughput(self) -> float | None:
        """Mean rate of the windows after warm-up (None before any window)."""
        if not self.windows:
            return None
        return float(self.steady_rates().mean())


def reported_model_info(source: dict[str, Any], metrics: Any, stdout_text: str
                        ) -> dict[str, Any]:
    """``source`` (what the script's source shows) updated with the ``INFO_KEYS`` the script
    reported: the last value of each in the metrics frame, else a ``key=value`` it printed."""
    info = {k: v for k, v in source.items() if v is not None}
    reported: dict[str, Any] = {}
    if metrics is not None and not metrics.empty:
        for k in INFO_KEYS:
            if k in metrics and metrics[k].notna().any():
                reported[k] = metrics[k].dropna().iloc[-1]
    kv = parse_key_values(stdout_text)
    reported.update({k: kv[k] for k in INFO_KEYS if k in kv and k not in reported})
    for k in ("params", "layers"):
        if k in reported:
            reported[k] = to_number(reported[k])
    info.update({k: v for k, v in reported.items() if v is not None})
    return info


def final_heldout_loss(stdout_text: str) -> float | None:
    """The last held-out loss a script printed (:data:`HELDOUT_LOSS_PATTERN`): at the end of a
    whole run, the loss its job ends at, as its user reads it. None when it printed none."""
    found = HELDOUT_LOSS_PATTERN.findall(stdout_text or "")
    try:
        return float(found[-1]) if found else None
    except ValueError:
        return None
