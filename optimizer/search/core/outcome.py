"""What the search hands back: the recommendation and the trials it comes from.

:class:`SearchRecommendation` holds the final choice and how it was reached, beside the last
round's plan; :meth:`SearchRecommendation.to_dict` gives the dict that the report and
``recommendation.json`` read (the plan's keys, then the choice's, in a fixed order).
:class:`SearchOutcome` adds the final trial, every trial, the efficiency measured last (the
pipeline keeps it) and the reason the closed loop stopped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from optimizer.foundation.allocation import Allocation
from optimizer.search.core.state import StopReason
from optimizer.trials.records import TrialSummary

if TYPE_CHECKING:  # types only
    from optimizer.search.goodput.efficiency import TrialEfficiency


@dataclass
class SearchRecommendation:
    """The final choice: the allocation (the best *measured* trial's, memory right-sized), who
    proposed it (``agent``), the trial, every round's decision (``rounds``), the goodput and
    job-length comparisons, the learning rate (with ``--lr-arg``), the memory request's
    source, the measured figures, the search's cost, the choice in words, the run-off's block
    and standings, the live plan (with ``--live-plan``) and the notes for the report. ``plan``:
    the last round's plan as recorded (its keys come first in :meth:`to_dict`)."""

    plan: dict[str, Any]
    allocation: Allocation
    agent: str
    final_trial: str
    rounds: list[dict[str, Any]]
    goodput: dict[str, Any]
    job_length: dict[str, Any] | None
    memory: dict[str, Any]
    measured: dict[str, Any]
    search: dict[str, Any]
    choice: str
    runoff: list[str]
    runoff_standings: list[dict[str, Any]]
    learning_rate: dict[str, Any] | None = None
    live: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    scaling: dict[str, Any] | None = None
    """A data-parallel job's scaling curve
    (:func:`optimizer.search.after_loop.scaling.scaling_curve`)."""

    def to_dict(self) -> dict[str, Any]:
        """The plan's keys, then the choice's; ``learning_rate`` and ``live`` only where they
        were decided. ``notes`` keeps the plan's place, else the place its first note takes."""
        out = dict(self.plan)
        if "notes" in out:
            out["notes"] = self.notes
        out["planned_allocation"] = self.plan.get("allocation")
        out.update(allocation=self.allocation, agent=self.agent, final_trial=self.final_trial,
                   rounds=self.rounds, goodput=self.goodput, job_length=self.job_length)
        if self.job_length:
            out.setdefault("notes", self.notes)
        if self.learning_rate is not None:
            out["learning_rate"] = self.learning_rate
        if self.goodput.get("note"):
            out.setdefault("notes", self.notes)
        out.update(memory=self.memory, measured=self.measured, search=self.search,
                   choice=self.choice, runoff=self.runoff,
                   runoff_standings=self.runoff_standings)
        out.setdefault("notes", self.notes)
        if self.live is not None:
            out["live"] = self.live
        if self.scaling is not None:
            out["scaling"] = self.scaling
        return out


@dataclass
class SearchOutcome:
    """The search's result: the recommendation, the trial it comes from, every trial, the
    efficiency measured last and why the closed loop stopped (None: it ran every round)."""

    recommendation: SearchRecommendation
    final: TrialSummary
    trials: list[TrialSummary]
    efficiency: TrialEfficiency | None = None
    stop: StopReason | None = None


__all__ = ["SearchOutcome", "SearchRecommendation"]
