"""``reactive-rules``: mean + 2 std of the cycle just observed (the paper's ``prev.step``)."""

from __future__ import annotations

import numpy as np

from phases.policies.base import HistoryPolicy, mean_plus_std
from phases.policies.execution import History


class ReactiveRulesPolicy(HistoryPolicy):
    """Mean + ``n_std`` std of the cycle just observed (the paper's ``prev.step.rules``)."""

    name = "reactive-rules"

    def __init__(self, *, n_std: float = 2.0, cold_start: str = "pooled") -> None:
        super().__init__(cold_start=cold_start)
        self.n_std = n_std

    def allocate(self, history: History) -> np.ndarray:
        return mean_plus_std(history.last_cycle(), self.n_std)
