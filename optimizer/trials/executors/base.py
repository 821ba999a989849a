"""What every executor shares: the protocol, and the records of trials that shared a machine.

An executor runs a batch of :class:`~optimizer.trials.run.request.TrialRequest` (the one
request every way of running a trial takes) and yields ``(index, summary)`` as each trial
ends, its folder already complete (``summary.json`` written last, atomically). Whatever happens
to a trial (a crash, an out-of-memory kill, a lost worker) it comes back as a recorded trial,
failed if need be, never as an exception: the optimization goes on with the others.

Trials of one batch may run side by side (:mod:`optimizer.trials.executors.ray_executor`). Those that
overlapped in time on one machine are written into each other's ``concurrent_with`` by
:func:`record_concurrency`, so the report can say which throughputs were measured beside
other trials.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from optimizer.foundation.config import ResourceConfig
from optimizer.trials.records import TrialSummary
from optimizer.trials.run.request import TrialRequest


class TrialExecutor(Protocol):
    """Where trials run. Copy :mod:`optimizer.trials.executors.local` to add one."""

    name: str

    def run(self, manager: Any, requests: Sequence[TrialRequest],
            resource_config: ResourceConfig) -> Iterator[tuple[int, TrialSummary]]:
        """Run ``requests`` with ``manager`` (a ``TrainingModuleManager``); yield each one's
        index and recorded summary as it ends (in any order)."""
        ...

    def map(self, fns: Sequence[Callable[[], Any]]) -> list[Any]:
        """Call each function (no arguments) and return their results in order; an executor
        that can may run them side by side (the agents' trainings of one round)."""
        ...

    def close(self) -> None:
        """Give back what the executor started (a local Ray, say)."""
        ...


def _interval(t: TrialSummary) -> tuple[float, float] | None:
    try:
        return (datetime.fromisoformat(t.started_at).timestamp(),
                datetime.fromisoformat(t.finished_at).timestamp())
    except (TypeError, ValueError):
        return None


def overlapping(a: TrialSummary, b: TrialSummary) -> bool:
    """Whether ``a`` and ``b`` ran on the same machine at the same time."""
    ia, ib = _interval(a), _interval(b)
    if ia is None or ib is None or a.node != b.node:
        return False
    return ia[0] < ib[1] and ib[0] < ia[1]


def record_concurrency(done: Sequence[tuple[TrialSummary, Path]]) -> None:
    """Write into each finished trial of a batch the trials it overlapped (rewriting only
    the summaries that change, atomically)."""
    for t, trial_dir in done:
        others = sorted(o.trial_id for o, _ in done if o is not t and overlapping(t, o))
        if others != t.concurrent_with:
            t.concurrent_with = others
            t.save(trial_dir)


__all__ = ["TrialExecutor", "TrialRequest", "overlapping", "record_concurrency"]
