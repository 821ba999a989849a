"""``reactive-max``: the maximum of the cycle just observed (the paper's ``prev.step``)."""

from __future__ import annotations

import numpy as np

from phases.policies.base import HistoryPolicy
from phases.policies.execution import History


class ReactiveMaxPolicy(HistoryPolicy):
    """The maximum of the cycle just observed (the paper's ``prev.step.max``)."""

    name = "reactive-max"

    def allocate(self, history: History) -> np.ndarray:
        return history.last_cycle().max(axis=0)
