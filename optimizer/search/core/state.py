"""What every part of the search reads and writes: the job, the state, proposals, stops, stages.

:class:`SearchJob` is what one search works on (fixed for its length); :class:`SearchState`
what it has found so far (the trials, the decisions' rows, who proposed each trial, the
efficiency), during a round of the closed loop that round's plan (:class:`RoundView`) and
proposal, and what the stages after the loop decided. The search is a list of stages
(:class:`Stage`, listed by :func:`optimizer.search.stages.stages`), each ``run(state)``; a
stage that measures asks a :class:`Proposer`, which suggests the next trial as a
:class:`Proposal` or nothing, and checks its stop rules (:class:`StopRule`), which end it with a
:class:`StopReason`; :func:`drive` measures what one proposer proposes until it proposes
nothing or a rule stops it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.job import Job
from optimizer.search.choice import same_setting
from optimizer.search.core.port import SearchPort
from optimizer.trials.records import TrialSummary

if TYPE_CHECKING:  # types only
    from optimizer.search.expected import Acquisition
    from optimizer.search.goodput.efficiency import TrialEfficiency
    from optimizer.trials.training import TrainingModuleManager


@dataclass(frozen=True)
class SearchJob:
    """What one search works on: the script (through its manager), the run folder and the job
    as the command line describes it (``spec``), the job's size, the reference trial and the
    phase profile; the allocations to probe when no model can be fitted (``more_probes``), and
    the trials an earlier run of the folder measured (``earlier``, in the running for the final
    choice)."""

    manager: TrainingModuleManager | None
    run_dir: Path
    spec: Job
    """The job, described once (:class:`~optimizer.foundation.job.Job`)."""
    total: float | None = None
    reference: TrialSummary | None = None
    profile: Any = None
    more_probes: Sequence[Allocation] = ()
    earlier: Sequence[TrialSummary] = ()

    @property
    def batch_settable(self) -> bool:
        """Whether trials can set the batch size."""
        return self.spec.batch_settable


@dataclass(frozen=True)
class Proposal:
    """A trial to run and why: ``proposer`` is who the decisions credit with it, ``reason``
    the sentence they give, ``prefix`` the trial folder's (``trials/<prefix>-<key>``);
    ``added_by``: who put a setting no trial ran into the run-off."""

    allocation: Allocation
    proposer: str
    reason: str
    prefix: str = ""
    added_by: str | None = None


@dataclass(frozen=True)
class StopReason:
    """Why the closed loop ends: the rule's name, its sentence, the row the decisions record
    (None: the loop ends without one) and whether the console hears it."""

    rule: str
    why: str
    row: dict[str, Any] | None = None
    said: bool = False


@dataclass
class RoundView:
    """One round of the closed loop as the proposers and the stop rules see it: the agents'
    plan on the model fitted to the usable trials, how well the fit holds, what the model
    expects of unmeasured settings (``acquisition``), whether the plan's setting was measured
    already and a measured trial that beats the plan's prediction (``dominated``)."""

    k: int
    plan: dict[str, Any]
    env_config: Any
    planned: Allocation
    usable: list[TrialSummary]
    poor: bool
    acquisition: Acquisition | None = None
    spread: float | None = None
    measured_before: bool = False
    dominated: TrialSummary | None = None

    @property
    def agent(self) -> str:
        return self.plan["agent"]


@dataclass
class SearchState:
    """What the search has found so far: every trial, the decisions' rows, who proposed each
    trial, the efficiency measured last; during the loop, its round and that round's proposal.
    ``default_batch``: the script's own batch (a trial at "default" ran it); ``reserve``: runs
    the loop leaves to the stages after it. The fields from ``stop`` on are what the stages
    after the loop decided, each set by one stage."""

    port: SearchPort
    job: SearchJob
    trials: list[TrialSummary]
    rounds: list[dict[str, Any]] = field(default_factory=list)
    proposer: dict[str, str] = field(default_factory=dict)
    efficiency: TrialEfficiency | None = None
    default_batch: int | None = None
    reserve: int = 0
    k: int = 0
    round: RoundView | None = None
    proposal: Proposal | None = None
    stop: StopReason | None = None
    """Why the closed loop stopped (None: it ran every round)."""
    runoff: list[str] = field(default_factory=list)
    """The run-off's trials (none: there was no run-off, and the choice is made over all)."""
    final: TrialSummary | None = None
    """The trial the recommendation comes from: the best measured one."""
    final_row: dict[str, Any] | None = None
    """The final trial's row of the objective table (its job's time and cost, as judged)."""
    recommended: Allocation | None = None
    """The final trial's setting with the memory the whole job needs."""
    learning_rate: dict[str, Any] | None = None
    """The learning rate measured for the recommended batch (None: not asked for)."""
    live: dict[str, Any] | None = None
    """The live plan and its measurement (None: not asked for, or no model was fitted)."""


class Proposer(Protocol):
    """A way of choosing the next trial."""

    def propose(self, state: SearchState) -> Proposal | None:
        """The next trial to run, or None: nothing to propose."""


class StopRule(Protocol):
    """A rule that ends the closed loop, or another stage's measuring."""

    def check(self, state: SearchState) -> StopReason | None:
        """Why the stage ends now, or None: it goes on."""


class Stage(Protocol):
    """One step of the search, in the order :func:`optimizer.search.stages.stages` gives: it
    measures through its proposers and stop rules (:func:`drive`), or decides from what was
    measured, and leaves what it found in the state."""

    name: str

    def run(self, state: SearchState) -> None:
        """Run the stage on ``state``."""


def first_stop(rules: Sequence[StopRule], state: SearchState) -> StopReason | None:
    """The first rule's reason to stop, recorded in the decisions and said where it is."""
    stop = next((s for s in (rule.check(state) for rule in rules) if s is not None), None)
    if stop is not None:
        if stop.said:
            state.port.say(f"closed loop stops: {stop.why}")
        if stop.row is not None:
            state.rounds.append(stop.row)
    return stop


def measure(state: SearchState, alloc: Allocation, prefix: str) -> TrialSummary:
    """Run ``alloc`` as trial ``trials/<prefix>-<key>`` through the port, labelled with the
    batch it ran with (not yet added to the state)."""
    port, job = state.port, state.job
    trial = port.measure(job.manager, alloc, prefix, job.run_dir, job.spec, job.total)
    return port.label_batch(trial, job.run_dir / "trials" / trial.trial_id, job.batch_settable)


def drive(state: SearchState, proposer: Proposer,
          row: Callable[[Proposal, TrialSummary, int], dict[str, Any]],
          stop_rules: Sequence[StopRule] = ()) -> list[TrialSummary]:
    """Measure what ``proposer`` proposes until it proposes nothing or one of ``stop_rules``
    (checked with each proposal in ``state.proposal``, before it runs) stops it; each new trial
    is added to ``state.trials`` and described in ``state.rounds`` by
    ``row(proposal, trial, index)`` (``index``: the row's place in the decisions). Returns the
    new trials."""
    new: list[TrialSummary] = []
    while (proposal := proposer.propose(state)) is not None:
        state.proposal = proposal
        if first_stop(stop_rules, state) is not None:
            break
        trial = measure(state, proposal.allocation, proposal.prefix)
        state.trials.append(trial)
        new.append(trial)
        state.rounds.append(row(proposal, trial, len(state.rounds)))
    return new


def sweep_row(proposal: Proposal, trial: TrialSummary, index: int) -> dict[str, Any]:
    """The decisions' row of a trial a sweep after the loop proposed (the data-loader workers',
    the data-parallel workers'): who, what was planned and measured, and why."""
    return {"round": index, "proposed_by": proposal.proposer, "planned": proposal.allocation,
            "measured_allocation": proposal.allocation, "trial": trial.trial_id,
            "status": trial.status, "measured_throughput": trial.throughput,
            "why": proposal.reason}


def twin_of(trial: TrialSummary, trials: Sequence[TrialSummary]) -> str:
    """The first trial of the same setting (whose proposer a repeat inherits)."""
    return next(t.trial_id for t in trials if same_setting(t.allocation, trial.allocation))


__all__ = ["Proposal", "Proposer", "RoundView", "SearchJob", "SearchState", "Stage",
           "StopReason", "StopRule", "drive", "first_stop", "measure", "sweep_row", "twin_of"]
