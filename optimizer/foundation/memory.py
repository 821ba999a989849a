"""Memory requests from measured peaks, the way Kubernetes' VPA recommender sizes them.

A percentile-free single peak (a trial is short), plus a safety margin, rounded up, and bumped
after an out-of-memory kill. The search sizes its choice with it, the reports the Job's bounds.
"""

from __future__ import annotations

import math

MEMORY_MARGIN = 0.15
"""Safety margin over the measured peak (VPA's recommender adds 15% too)."""
MEMORY_STEP_GB = 0.25
"""Requests are rounded up to 256 MiB."""
OOM_BUMP = 1.2
"""Factor applied per out-of-memory trial of the same allocation (VPA bumps by 1.2 as well)."""


def right_size_memory(peak_gb: float, *, ooms: int = 0, limit_gb: float | None = None,
                      margin: float = MEMORY_MARGIN, step_gb: float = MEMORY_STEP_GB) -> float:
    """``peak × (1 + margin) × 1.2**ooms`` rounded up to ``step_gb`` (at least one step).

    ``limit_gb`` is the limit the out-of-memory trial ran under: after an OOM the peak it
    recorded is a floor, so the bump starts from the larger of the two.
    """
    base = max(float(peak_gb or 0.0), float(limit_gb or 0.0) if ooms else 0.0)
    want = base * (1.0 + margin) * (OOM_BUMP ** ooms)
    return max(step_gb, math.ceil(want / step_gb - 1e-9) * step_gb)
