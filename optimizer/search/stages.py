"""The search, from the baseline's trials to the recommendation: its stages, in order.

:func:`refine` runs the stages :func:`stages` lists over one
:class:`~optimizer.search.core.state.SearchState`, in this order:

1. the closed loop (:class:`~optimizer.search.loop.rounds.ClosedLoop`): fit, plan, propose,
   stop or measure, round after round;
2. the trials an earlier run of the folder measured join the field
   (:class:`~optimizer.search.after_loop.earlier.EarlierTrials`);
3. with ``--workers-arg``, the best setting so far at other data-loader worker counts
   (:class:`~optimizer.search.after_loop.workers.LoaderWorkers`);
4. for a torchrun job, the best one-worker setting at other worker counts
   (:class:`~optimizer.search.after_loop.scaling.WorkersScaling`);
5. the settings that measured close, decided in back-to-back runs
   (:class:`~optimizer.search.after_loop.runoff.Runoff`);
6. the best *measured* trial, its memory right-sized
   (:class:`~optimizer.search.after_loop.final_choice.FinalChoice`);
7. with ``--lr-arg``, the learning rate for a changed batch
   (:class:`~optimizer.search.after_loop.learning_rate.LearningRate`);
8. with ``--live-plan``, the agents' per-stage plan, measured beside the static one
   (:class:`~optimizer.search.after_loop.live_round.LiveRound`).

:func:`~optimizer.search.after_loop.recommendation.recommendation` then gathers what they
decided. A stage is a class with a ``name`` and ``run(state)``
(:class:`~optimizer.search.core.state.Stage`); one that measures asks its proposers and stop
rules through :func:`~optimizer.search.core.state.drive`. Adding one is a module holding its
class and a line in :func:`stages`.

This module is the top of the search's layers (``tests/test_architecture.py``): the measures
(trials read, models fitted, choices among trials), the vocabulary (:mod:`optimizer.search.core`),
one round's planning, the stages, and here their order; nothing imports a layer above its own.
"""

from __future__ import annotations

from collections.abc import Sequence

from optimizer.search.after_loop.earlier import EarlierTrials
from optimizer.search.after_loop.final_choice import FinalChoice
from optimizer.search.after_loop.learning_rate import LearningRate
from optimizer.search.after_loop.live_round import LiveRound
from optimizer.search.after_loop.recommendation import recommendation
from optimizer.search.after_loop.runoff import Runoff
from optimizer.search.after_loop.scaling import WorkersScaling
from optimizer.search.after_loop.workers import LoaderWorkers
from optimizer.search.core.outcome import SearchOutcome
from optimizer.search.core.port import SearchPort
from optimizer.search.core.state import SearchJob, SearchState, Stage
from optimizer.search.loop.rounds import ClosedLoop, Planner
from optimizer.trials.records import TrialSummary


def stages(planner: Planner | None = None) -> tuple[Stage, ...]:
    """The search's stages in the order they run (module doc); ``planner``: the closed loop's
    planning of one round (the agents'; a test gives its own)."""
    return (
        ClosedLoop(planner),
        EarlierTrials(),
        LoaderWorkers(),
        WorkersScaling(),
        Runoff(),
        FinalChoice(),
        LearningRate(),
        LiveRound(),
    )


def refine(port: SearchPort, job: SearchJob, trials: Sequence[TrialSummary],
           planner: Planner | None = None) -> SearchOutcome:
    """Run the stages on ``trials`` (the usable baseline); returns the recommendation
    (``allocation`` is the final, measured choice; ``rounds`` says what each round planned,
    predicted and measured), the trial it comes from, every trial, the efficiency measured last
    and why the closed loop stopped."""
    state = SearchState(port, job, list(trials), default_batch=job.spec.default_batch)
    for stage in stages(planner):
        stage.run(state)
    assert state.final is not None  # the final choice is one of the stages
    return SearchOutcome(recommendation(state), state.final, state.trials, state.efficiency,
                         state.stop)


__all__ = ["refine", "stages"]
