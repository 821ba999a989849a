"""``reactive-trend``: the job's recent-trend level alone, no phases (a peer of
``phase-adaptive``, which multiplies that same level by its phases' ratios for memory)."""

from __future__ import annotations

import numpy as np

from phases.policies.base import HistoryPolicy
from phases.policies.execution import History
from phases.policies.phase_adaptive import job_levels


class ReactiveTrendPolicy(HistoryPolicy):
    """The last cycle's maximum, or its last sample carried on by its recent slope if higher
    (:func:`~phases.policies.phase_adaptive.job_levels` ``"recent-trend"``)."""

    name = "reactive-trend"

    def allocate(self, history: History) -> np.ndarray:
        c = history.cycle_index
        return job_levels(history.usage, history.cycle, c + 1, "recent-trend")[c]
