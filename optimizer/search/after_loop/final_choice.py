"""The final choice: the best *measured* trial, so the recommendation is never worse than a
trial already run.

:func:`optimizer.search.choice.best_measured` judges every trial by the job's time and cost to
the same progress under the preference, by the run-off's runs alone where there was a run-off
(the settings there were measured in the same hour); the chosen trial's setting is then given
the memory its whole job needs (:func:`optimizer.search.choice.recommended_allocation`). A search
that started from history chooses among the settings it ran for real
(:func:`optimizer.search.prior.confirm.choosable`).
"""

from __future__ import annotations

from optimizer.search.choice import best_measured, recommended_allocation
from optimizer.search.core.state import SearchState
from optimizer.search.prior.confirm import choosable


class FinalChoice:
    """Stage: ``state.final`` (the chosen trial), ``state.final_row`` (its row of the objective
    table) and ``state.recommended`` (its setting, memory right-sized)."""

    name = "final-choice"

    def run(self, state: SearchState) -> None:
        port = state.port
        state.final, state.final_row = best_measured(
            choosable(state.trials), port.config, port.user_preference, runoff=state.runoff,
            efficiency=state.efficiency)
        state.recommended = recommended_allocation(state.final, state.trials,
                                                   state.job.batch_settable)


__all__ = ["FinalChoice"]
