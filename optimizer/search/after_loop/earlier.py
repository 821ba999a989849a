"""The trials an earlier run of the run folder measured, in the running for the final choice.

A measurement does not depend on the preference, so the trials another run of the folder made
beyond its baseline (its closed loop's, say, under another preference; the pipeline reads them
into ``SearchJob.earlier``) join the field once this run's loop is over: the sweeps, the
run-off and the final choice then see them beside this run's own trials.
"""

from __future__ import annotations

from optimizer.search.core.state import SearchState, twin_of

PROPOSER = "an-earlier-run"
"""Who the decisions credit with a setting only an earlier run measured."""


class EarlierTrials:
    """Stage: the earlier run's trials join ``state.trials``; a repeat of a setting this run
    measured is credited to whoever proposed it here."""

    name = "earlier-trials"

    def run(self, state: SearchState) -> None:
        ids = {t.trial_id for t in state.trials}
        for t in state.job.earlier:
            if t.trial_id not in ids:
                state.trials.append(t)
                twin = twin_of(t, state.trials)
                state.proposer[t.trial_id] = (state.proposer.get(twin, "") if twin != t.trial_id
                                              else PROPOSER)


__all__ = ["PROPOSER", "EarlierTrials"]
