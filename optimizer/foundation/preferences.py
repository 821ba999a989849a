"""Preferences: weights over the three objectives (cost, time, resource), each summing to one."""

from __future__ import annotations

from typing import Any

from optimizer.foundation.errors import ConfigError
from optimizer.foundation.errors import check as _check

OBJECTIVES = ("cost", "time", "resource")


def default_preferences() -> dict[str, list[float]]:
    # Weights over (cost, time, resource), each summing to one.
    return {
        "cost": [0.7, 0.2, 0.1],
        "time": [0.2, 0.7, 0.1],
        "resource": [0.2, 0.1, 0.7],
        "balanced": [0.34, 0.33, 0.33],
    }


def validate_preference(vec: Any, key: str) -> tuple[float, float, float]:
    """Check a (cost, time, resource) weight vector: three non-negative numbers summing to 1."""
    try:
        values = tuple(float(v) for v in vec)
    except (TypeError, ValueError):
        raise ConfigError(f"{key} must be three numbers (cost, time, resource) (got {vec!r})") from None
    _check(len(values) == 3, key, "must have three weights (cost, time, resource)", vec)
    _check(all(v >= 0 for v in values), key, "must have non-negative weights", vec)
    _check(abs(sum(values) - 1.0) < 1e-6, key, f"must sum to 1 (sums to {sum(values):.6g})", vec)
    return values  # type: ignore[return-value]


def parse_preference(text: str) -> str | tuple[float, float, float]:
    """A preference from the command line: a name, or ``0.5,0.3,0.2``."""
    if "," in text:
        return validate_preference(text.split(","), "--preference")
    return text
