"""Data-loader workers: measured at the end of the closed loop, never modelled.

The workload model and the agents plan over GPUs, CPU threads, memory and batch size. How many
data-loader processes a script should start is a different kind of knob: it depends on how
much of a step is Python-side data work and on how many cores the training threads leave
idle, and worker processes compete with those threads for the same cores and hold memory of
their own. On the 2-core machine the regret benchmark's CNN
(``benchmarks/workloads/cnn_dataloader.py``) at 1 CPU thread and batch 32 ran 5% faster with
no workers than with its default 2 (median of five full runs each) and peaked at 0.34 GB
against 0.83 GB, so it was 13.5% cheaper; Optuna, which could set the workers, found it and
cloudopt could not.

So with ``--workers-arg FLAG``, after the closed loop and before the run-off, the stage
:class:`LoaderWorkers` measures the best setting so far at other worker counts
(:func:`worker_levels`: none, half the CPU threads, all of them and twice as many). Those
trials (``trials/workers-<key>``) compete for the final choice like any other trial: one that
measures within the run-off's band of the best goes to the run-off, where the settings are
measured back to back. They never feed the workload model, whose trials all run at the
script's default (:func:`optimizer.search.workload_fit.measurements_from_trials`).
"""

from __future__ import annotations

import dataclasses

from optimizer.foundation.allocation import describe_allocation, workers_words
from optimizer.search.budget import runoff_reserve
from optimizer.search.choice import objective_table
from optimizer.search.core.state import Proposal, SearchState, drive, sweep_row
from optimizer.trials.records import TrialSummary

PREFIX = "workers"
PROPOSER = "workers-sweep"


def worker_levels(cpus: int, current: int | None, more_first: bool = False) -> list[int]:
    """The worker counts to try beside ``current`` (the count the best setting ran with; None
    when the script's default is not known, so every level is tried): none, half the CPU
    threads, all of them and twice as many, each at least one where not none.

    Twice the threads: a loader that waits on Python-side decoding or augmentation keeps more
    processes busy than it has cores (the regret benchmark's CNN was fastest with 4 workers on
    2 cores at 12 of its 16 CPU and batch settings). Fewer levels first (less memory, fewer
    processes beside the training threads) unless ``more_first``, for a preference that weighs
    time most; a budget that affords only some levels keeps the first."""
    levels = sorted({0, max(1, int(cpus) // 2), max(1, int(cpus)), max(2, 2 * int(cpus))},
                    reverse=bool(more_first))
    return [n for n in levels if n != current]


class WorkersSweep:
    """The best measured setting so far at :func:`worker_levels`, one level per proposal; the
    levels are fixed when the sweep starts (a budget that affords only some keeps the first),
    none without the manager's ``workers_arg``."""

    name = PROPOSER

    def __init__(self, state: SearchState) -> None:
        self.queue = _proposals(state)

    def propose(self, state: SearchState) -> Proposal | None:
        return self.queue.pop(0) if self.queue else None


def _proposals(state: SearchState) -> list[Proposal]:
    port, manager = state.port, state.job.manager
    if not state.job.spec.workers_arg:
        return []
    table = objective_table([t for t in state.trials if t.ok], port.config,
                            port.user_preference, state.efficiency)
    if table.empty:
        return []
    top = table.iloc[int(table["objective"].to_numpy().argmin())]
    best = next(t.allocation for t in state.trials if t.trial_id == top["trial_id"])
    current = best.workers if best.workers is not None else manager.default_workers()
    said = ("the script's own data-loader workers, a number not known" if current is None
            else workers_words(current))
    setting = describe_allocation(dataclasses.replace(best, workers=None))
    cost_w, time_w, share_w = port.config.multi_objective.vector(port.user_preference)
    levels = worker_levels(best.cpus, current, more_first=bool(time_w > max(cost_w, share_w)))
    budget = port.budget
    if budget is not None:  # the run-off's runs stay in reserve (optimizer.search.loop.rounds)
        levels = levels[: budget.limit(len(levels), runoff_reserve(port.config.run,
                                                                     budget.total))]
    return [Proposal(dataclasses.replace(best, workers=n), PROPOSER,
                     f"the best setting so far ({setting}, {said}) with {workers_words(n)} "
                     f"({manager.workers_arg} {n})", prefix=PREFIX) for n in levels]


def sweep_workers(state: SearchState) -> list[TrialSummary]:
    """Measure the best measured setting so far at :func:`worker_levels`; the new trials are
    added to ``state.trials`` and described in ``state.rounds``, and returned. Nothing is
    measured without the manager's ``workers_arg``."""
    return drive(state, WorkersSweep(state), sweep_row)


class LoaderWorkers:
    """Stage: the workers sweep (:func:`sweep_workers`), each of its trials credited to it."""

    name = PROPOSER

    def run(self, state: SearchState) -> None:
        for trial in sweep_workers(state):
            state.proposer[trial.trial_id] = PROPOSER


__all__ = ["PREFIX", "PROPOSER", "LoaderWorkers", "WorkersSweep", "sweep_workers",
           "worker_levels"]
