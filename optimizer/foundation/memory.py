"""Memory requests from measured peaks, the way Kubernetes' VPA recommender sizes them.

A percentile-free single peak (a trial is short), plus a safety margin, rounded up to a step
that grows with the request, and bumped after an out-of-memory kill. The search sizes its
choice with it, the reports the Job's bounds (as Kubernetes quantities, :func:`memory_quantity`).
"""

from __future__ import annotations

import math

MEMORY_MARGIN = 0.15
"""Safety margin over the measured peak (VPA's recommender adds 15% too)."""
STEPS_PER_REQUEST = 16
"""A request is rounded up to a power-of-two MiB step of at most 1/16 of itself (64 MiB from
1 to 2 GiB, 16 MiB from 256 to 512 MiB), so rounding adds at most 6.25% to the margin: slack
(request over peak) stays under 1 - 1/(1.15 × 1.0625) = 18.2% for any peak above the floor."""
MIN_REQUEST_MIB = 16
"""The smallest request (a container needs some memory to start)."""
OOM_BUMP = 1.2
"""Factor applied per out-of-memory trial of the same allocation (VPA bumps by 1.2 as well)."""


def memory_step_mib(want_mib: float) -> int:
    """The rounding step for a request of ``want_mib``: the largest power of two MiB not above
    ``want_mib / STEPS_PER_REQUEST``, at least 1 MiB."""
    if want_mib < 2 * STEPS_PER_REQUEST:
        return 1
    return 1 << int(math.floor(math.log2(want_mib / STEPS_PER_REQUEST)))


def round_up_memory(gb: float) -> float:
    """``gb`` rounded up to its step (:func:`memory_step_mib`), in GB (GiB)."""
    want = max(float(gb), 0.0) * 1024
    step = memory_step_mib(want)
    return max(MIN_REQUEST_MIB, math.ceil(want / step - 1e-9) * step) / 1024


def right_size_memory(peak_gb: float, *, ooms: int = 0, limit_gb: float | None = None,
                      margin: float = MEMORY_MARGIN) -> float:
    """``peak × (1 + margin) × 1.2**ooms`` rounded up to a step proportional to the request.

    ``limit_gb`` is the limit the out-of-memory trial ran under: after an OOM the peak it
    recorded is a floor, so the bump starts from the larger of the two.
    """
    base = max(float(peak_gb or 0.0), float(limit_gb or 0.0) if ooms else 0.0)
    return round_up_memory(base * (1.0 + margin) * (OOM_BUMP ** ooms))


def memory_quantity(gb: float) -> str:
    """Memory as a Kubernetes quantity, rounded up to a MiB: ``"13Gi"`` where it is a whole
    number of GiB, else ``"400Mi"``."""
    mib = int(math.ceil(float(gb) * 1024 - 1e-6))
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


def memory_words(gb: float) -> str:
    """Memory as people write it, in GB to two decimals: ``"0.39 GB"``, ``"12.75 GB"`` (GB
    meaning GiB throughout cloudopt, as the cloud providers' price lists do)."""
    return f"{float(gb):.2f}".rstrip("0").rstrip(".") + " GB"
