"""The default executor: each trial a subprocess of the optimizer, one after the other.

Sequential on purpose: a trial alone on the machine measures what the job gets alone. A job
size found by one trial is passed on to the trials after it, so every probe predicts the same
job. To run trials somewhere else, copy this file, keep ``name``, ``run``, ``map`` and
``close``, and add the class to :func:`optimizer.trials.executors.make_executor`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from optimizer.foundation.config import ResourceConfig
from optimizer.trials.records import TrialSummary
from optimizer.trials.run.request import TrialRequest


class LocalExecutor:
    name = "local"

    def run(self, manager: Any, requests: Sequence[TrialRequest],
            resource_config: ResourceConfig) -> Iterator[tuple[int, TrialSummary]]:
        total = None
        for i, req in enumerate(requests):
            if req.total_samples is None and total is not None:
                req = dataclasses.replace(req, total_samples=total)
            summary = manager.run_training(req, resource_config)
            if total is None and summary.ok and summary.total_samples:
                total = summary.total_samples
            yield i, summary

    def map(self, fns: Sequence[Callable[[], Any]]) -> list[Any]:
        return [f() for f in fns]

    def close(self) -> None:
        pass
