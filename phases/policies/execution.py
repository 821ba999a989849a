"""What a policy sees: an :class:`Execution` split into cycles, and its :class:`History`.

A :class:`History` holds only the samples before a cycle, so a policy given one cannot look
ahead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

WARM_UP = -1  # phase label of samples without a full CRBM history (issue 4)


@dataclass
class Execution:
    """One execution's samples, split into autoscaling cycles.

    Attributes
    ----------
    exec_id : str
    time : ndarray of shape (n_samples,)
        Seconds, increasing.
    usage : ndarray of shape (n_samples, n_resources)
        The resources that are allocated (e.g. CPU cores, memory GiB).
    cycle : ndarray of shape (n_samples,), int
        Cycle of each sample: ``floor((time - time[0]) / cycle_s)``.
    resources : tuple of str
        Name of each usage column.
    features : ndarray of shape (n_samples, n_features), optional
        Phase-model input (may hold more columns than ``usage``).
    phases : ndarray of shape (n_samples,), int, optional
        Detected phase of each sample (-1: warm-up), filled in by the evaluation.
    phase_sets : dict of str to ndarray of shape (n_samples,)
        Phases from models fitted on different inputs (``"raw"``, ``"relative"`` features);
        the evaluation copies the one a policy asks for (``phase_features``) into ``phases``.
    prior_usage : ndarray of shape (n_prior, n_resources), optional
        The usage records of the same job's previous run, when there was one (what a policy
        with the ``"previous-run"`` cold start allocates from in the first cycle).
    """

    exec_id: str
    time: np.ndarray
    usage: np.ndarray
    cycle: np.ndarray
    resources: tuple[str, ...]
    features: np.ndarray | None = None
    phases: np.ndarray | None = None
    phase_sets: dict[str, np.ndarray] = field(default_factory=dict)
    prior_usage: np.ndarray | None = None

    @classmethod
    def from_arrays(
        cls,
        exec_id: str,
        time: np.ndarray,
        usage: np.ndarray,
        cycle_s: float,
        resources: Sequence[str] | None = None,
        **kw,
    ) -> Execution:
        """Build an execution and assign its samples to cycles of ``cycle_s`` seconds."""
        if cycle_s <= 0:
            raise ValueError(f"cycle must be positive, got {cycle_s}")
        time = np.asarray(time, dtype=np.float64)
        usage = np.asarray(usage, dtype=np.float64)
        usage = usage.reshape(len(usage), -1)
        cycle = np.floor((time - time[0]) / cycle_s + 1e-9).astype(np.int64)
        names = tuple(resources) if resources else tuple(f"r{i}" for i in range(usage.shape[1]))
        return cls(str(exec_id), time, usage, cycle, names, **kw)

    @property
    def n_cycles(self) -> int:
        return int(self.cycle[-1]) + 1

    def history(self, c: int, allocations: np.ndarray) -> History:
        """What an autoscaler knows when cycle ``c`` starts: samples and allocations before it."""
        end = int(np.searchsorted(self.cycle, c, side="left"))
        return History(
            c,
            self.time[:end],
            self.usage[:end],
            self.cycle[:end],
            None if self.phases is None else self.phases[:end],
            allocations[:c],
        )


class History(NamedTuple):
    """The past of an execution at the start of cycle ``cycle_index`` (nothing from the future)."""

    cycle_index: int
    time: np.ndarray  # (n_past,)
    usage: np.ndarray  # (n_past, n_resources)
    cycle: np.ndarray  # (n_past,)
    phases: np.ndarray | None  # (n_past,)
    allocations: np.ndarray  # (cycle_index, n_resources): what was allocated so far

    def last_cycle(self) -> np.ndarray:
        """Usage of the most recent cycle that has samples, ``(n, n_resources)``."""
        return self.usage[self.cycle == self.cycle[-1]]
