"""``static-peak``: the peak of the whole execution, as if requested up front (knows the
future).
"""

from __future__ import annotations

import numpy as np

from phases.policies.base import AutoscalingPolicy
from phases.policies.execution import Execution


class StaticPeakPolicy(AutoscalingPolicy):
    """The peak of the whole execution for every cycle, as if requested up front."""

    name = "static-peak"
    uses_future = True

    def plan(self, execution: Execution) -> np.ndarray:
        return np.tile(execution.usage.max(axis=0), (execution.n_cycles, 1))
