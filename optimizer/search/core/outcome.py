"""What the search hands back: the recommendation and the trials it comes from.

The recommendation is the typed :class:`~optimizer.foundation.result.Recommendation` (the final
choice and how it was reached, beside the last round's plan), which the report and
``recommendation.json`` read as it is; :class:`SearchOutcome` adds the final trial, every
trial, the efficiency measured last and the reason the closed loop stopped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from optimizer.foundation.result import Recommendation
from optimizer.search.core.state import StopReason
from optimizer.trials.records import TrialSummary

if TYPE_CHECKING:  # types only
    from optimizer.search.goodput.efficiency import TrialEfficiency


@dataclass
class SearchOutcome:
    """The search's result: the recommendation, the trial it comes from, every trial, the
    efficiency measured last and why the closed loop stopped (None: it ran every round)."""

    recommendation: Recommendation
    final: TrialSummary
    trials: list[TrialSummary]
    efficiency: TrialEfficiency | None = None
    stop: StopReason | None = None


__all__ = ["SearchOutcome"]
