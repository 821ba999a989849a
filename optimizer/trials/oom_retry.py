"""A trial killed at its memory limit runs again only with more memory, never the same limit.

The next limit is the larger of VPA's out-of-memory bump (the limit × 1.2) and what the run's
own growth asks for: its memory was still rising when it was killed, so it is given the limit
plus what it gained per second (over the last half of its trace) for as long again as it ran.
A job that grows at a steady rate then needs a few runs, not dozens of 20% steps. The limit
never passes ``[resources].memory_max``: a setting killed there has outgrown every allocation
on offer, and :class:`OutgrewMemory` says so in one line with the figures and the fix.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from optimizer.foundation.errors import CloudoptError, TraceFormatError
from optimizer.foundation.memory import OOM_BUMP, round_up_memory
from optimizer.trials.monitor import read_trace
from optimizer.trials.records import TrialSummary


class OutgrewMemory(CloudoptError):
    """The job was killed at the largest memory limit cloudopt may give it."""


def killed_for_memory(trial: TrialSummary) -> bool:
    return trial.status == "failed" and trial.reason == "oom"


def memory_growth(trial_dir: Path) -> float | None:
    """GB per second the run's memory rose over the second half of its trace (None when the
    trace is missing or too short to tell)."""
    try:
        trace = read_trace(trial_dir / "trace.csv")
    except (OSError, TraceFormatError, ValueError):
        return None
    if len(trace) < 4:
        return None
    late = trace[trace["time_s"] >= trace["time_s"].iloc[-1] / 2]
    if len(late) < 2 or np.ptp(late["time_s"].to_numpy()) <= 0:
        return None
    slope = float(np.polyfit(late["time_s"].to_numpy(), late["mem_gb"].to_numpy(), 1)[0])
    return max(slope, 0.0)


def next_memory(trial: TrialSummary, trial_dir: Path, memory_max: float) -> float | None:
    """The limit to run an out-of-memory ``trial``'s setting under next, or None when it ran at
    ``memory_max`` already."""
    limit = float(trial.allocation.memory_gb)
    if limit >= memory_max - 1e-9:
        return None
    growth = memory_growth(trial_dir) or 0.0
    seconds = float(trial.wall_time_s or 0.0)
    want = max(limit * OOM_BUMP, limit + growth * seconds)
    return min(float(memory_max), round_up_memory(want))


def outgrew_message(train_file: str, chain: list[TrialSummary], memory_max: float,
                    run_dir: Path) -> str:
    """One line: what the job reached, the largest limit tried, the option that raises it."""
    last = chain[-1]
    tried = ", ".join(f"{t.allocation.memory_gb:g}" for t in chain)
    when = f" after {last.wall_time_s:.0f} s" if last.wall_time_s else ""
    return (f"{train_file}: the job outgrew every memory limit on offer: it reached "
            f"{last.mem_gb_peak:.2f} GB{when} and was killed at {last.allocation.memory_gb:g} GB, "
            f"the largest allowed ([resources].memory_max = {memory_max:g} GB; limits tried: "
            f"{tried} GB). Give it more with --memory-max GB (or lower its batch size), then "
            f"--resume {run_dir} to keep the trials run so far.")


__all__ = ["OutgrewMemory", "killed_for_memory", "memory_growth", "next_memory",
           "outgrew_message"]
