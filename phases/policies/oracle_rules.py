"""``oracle-rules``: mean + 2 std of the coming cycle (knows the future; the paper's
``current.step``).
"""

from __future__ import annotations

import numpy as np

from phases.policies.base import AutoscalingPolicy, cycle_stats, fill_empty
from phases.policies.execution import Execution


class OracleRulesPolicy(AutoscalingPolicy):
    """Knows the coming cycle and allocates its mean + ``n_std`` std (the paper's best case)."""

    name = "oracle-rules"
    uses_future = True

    def __init__(self, *, n_std: float = 2.0) -> None:
        self.n_std = n_std

    def plan(self, execution: Execution) -> np.ndarray:
        stats = cycle_stats(execution.usage, execution.cycle, execution.n_cycles)
        return fill_empty(stats["mean"] + self.n_std * stats["std"])
