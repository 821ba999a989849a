"""Where trials run: ``local`` (the default, one subprocess after another), ``ray``, or
``replay:DIR`` (answered from a recorded grid, for regret curves over many seeds).

:func:`make_executor` builds one from ``[run].executor`` and ``[run].ray_address``. Ray is an
optional extra, imported only when chosen. To add an executor, copy ``local.py`` and add the
class here.
"""

from __future__ import annotations

from typing import Any

from optimizer.foundation.errors import ConfigError
from optimizer.trials.executors.base import TrialExecutor, record_concurrency
from optimizer.trials.executors.local import LocalExecutor
from optimizer.trials.run.request import TrialRequest

EXECUTORS = ("local", "ray", "replay:DIR")


def check_available(name: str) -> None:
    """Fail now, before any trial or run folder, when the chosen executor cannot be used."""
    if name.startswith("replay:"):
        from optimizer.trials.executors.replay import ReplayExecutor

        ReplayExecutor(name.split(":", 1)[1])
    elif name == "ray":
        from optimizer.trials.executors.ray_executor import _ray

        _ray()
    elif name != "local":
        raise ConfigError(f"unknown executor {name!r}: choose one of {', '.join(EXECUTORS)}")


def make_executor(name: str = "local", address: str | None = None, seed: int = 0,
                  **options: Any) -> TrialExecutor:
    """The executor called ``name`` (``address``: a Ray cluster to join; ``seed``: the recorded
    run a replay answers first, so searches with different seeds see different repetitions)."""
    if name == "local":
        return LocalExecutor()
    if name.startswith("replay:"):
        from optimizer.trials.executors.replay import ReplayExecutor

        return ReplayExecutor(name.split(":", 1)[1], start=seed)
    if name == "ray":
        from optimizer.trials.executors.ray_executor import RayExecutor

        return RayExecutor(address, **options)
    raise ConfigError(f"unknown executor {name!r}: choose one of {', '.join(EXECUTORS)}")


__all__ = ["EXECUTORS", "LocalExecutor", "TrialExecutor", "TrialRequest", "check_available",
           "make_executor", "record_concurrency"]
