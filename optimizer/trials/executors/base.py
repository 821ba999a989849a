"""What every executor shares: a trial request, and the records of trials that shared a machine.

An executor runs a batch of :class:`TrialRequest` and yields ``(index, summary)`` as each trial
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
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import ResourceConfig
from optimizer.trials.records import TrialSummary


@dataclass
class TrialRequest:
    """One trial to run: ``allocation`` into ``trial_dir`` (see
    :meth:`optimizer.trials.training.TrainingModuleManager.run_training` for the rest)."""

    allocation: Allocation
    trial_dir: Path
    probe_seconds: float | None = None
    timeout_s: float = 600.0
    monitor_interval: float = 0.5
    total_samples: float | None = None
    live: Any = None
    """A :class:`~optimizer.trials.live.session.LiveSetup`: the allocation changes while the
    trial runs (billed per interval)."""
    until_box: bool = False
    """A probe that runs its whole time box, steady or not: the script's own batch's, whose
    loss the probes of other batches train to (:mod:`optimizer.trials.probe.loss_target`)."""
    loss_target: Any = None
    """A :class:`~optimizer.trials.probe.loss_target.LossTarget`: a probe of another batch than the
    script's runs on until it has trained as far."""


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
