"""``oracle-max``: the maximum of the coming cycle (knows the future; a lower bound)."""

from __future__ import annotations

import numpy as np

from phases.policies.base import AutoscalingPolicy, cycle_stats, fill_empty
from phases.policies.execution import Execution


class OracleMaxPolicy(AutoscalingPolicy):
    """Knows the coming cycle and allocates its maximum (impractical; a lower bound)."""

    name = "oracle-max"
    uses_future = True

    def plan(self, execution: Execution) -> np.ndarray:
        stats = cycle_stats(execution.usage, execution.cycle, execution.n_cycles)
        return fill_empty(stats["max"])
