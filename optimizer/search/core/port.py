"""What the search needs from the pipeline that runs it: :class:`SearchPort`.

The closed loop, the workers sweep, the run-off, the learning-rate probes and the live round
measure trials, say what they do and read the job's settings through this port alone, by its
public names; :class:`optimizer.search.trial_port.TrialPort` implements it for the main job
(:class:`optimizer.pipeline.CloudResourceOptimizer` builds one and hands it over). What the search
works out (the statistical efficiency, the recommendation) comes back as return values and is
never written onto the pipeline, so data crosses the port one way per call and the types say
which.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import OptimizerConfig
from optimizer.foundation.job import Job, Preference
from optimizer.trials.records import TrialSummary

if TYPE_CHECKING:  # types only: the port's users import none of these at run time
    from optimizer.search.budget import RunBudget
    from optimizer.search.goodput.job_length import JobLength
    from optimizer.trials.executors import TrialExecutor
    from optimizer.trials.training import TrainingModuleManager


class SearchPort(Protocol):
    """The pipeline as the search sees it: settings to read, trials to measure, lines to say."""

    @property
    def config(self) -> OptimizerConfig:
        """The resolved configuration of this optimization."""

    @property
    def user_preference(self) -> Preference:
        """What the recommendation is judged by."""

    @property
    def budget(self) -> RunBudget | None:
        """The real runs the whole search may still make (None: no limit)."""

    @property
    def quiet(self) -> bool:
        """No progress bars or stage messages."""

    @property
    def job_length(self) -> JobLength | None:
        """The job's length knob read from the script (epochs, steps), if any."""

    @property
    def log_path(self) -> Path | None:
        """The run's ``main.log`` (a traceback goes there, never to the console)."""

    def say(self, text: str, always: bool = False) -> None:
        """A stage message: printed unless quiet (or ``always``), and logged."""

    def measure(self, manager: TrainingModuleManager, alloc: Allocation, prefix: str,
                run_dir: Path, job: Job, total: float | None) -> TrialSummary:
        """Run ``alloc`` as trial ``trials/<prefix>-<key>`` (reloaded when recorded), time-boxed
        as ``job`` says."""

    def label_batch(self, trial: TrialSummary, trial_dir: Path,
                    settable: bool) -> TrialSummary:
        """``trial`` labelled with the batch size it ran with."""

    def trial_executor(self) -> TrialExecutor:
        """Where trials run (and agents train side by side)."""


__all__ = ["Preference", "SearchPort"]
