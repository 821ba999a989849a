"""The user's budget of real runs, and what the search cost.

``[run].budget`` (``--budget N``) is the number of real runs the whole search may make: the
baseline probes, a whole run that learns the job's size, the closed loop's rounds, the
data-loader sweep, the run-off and the learning-rate probes. Every trial folder of the run
counts (a resumed run's too: they were paid for). Stages draw on it in that order; a small
budget leaves the closed loop a run or two (:func:`probes_within`), the loop keeps runs for the
data-loader sweep (one) and a run-off round (:func:`runoff_reserve`, smaller below 12 runs) so
the final choice is still made on back-to-back runs, unless the budget is too small for them
(the loop's rounds first). ``budget = "auto"`` sizes it once the job's length is known:
as many runs as cost at most ``budget_share`` of one whole job at the default allocation
(never fewer than the baseline and one round), and the report says when that floor is above
the share.

:func:`search_cost` prices what was run and says after how much of the recommended job the
search has paid for itself.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from optimizer.foundation.allocation import money_words, seconds_words
from optimizer.trials.records import TrialSummary, job_cost

MAX_AUTO = 40
"""``auto`` never plans more runs than this (a long job would otherwise buy an enumeration)."""


@dataclass
class RunBudget:
    """Runs the search may still make. ``total`` None: no limit."""

    total: int | None
    trials_dir: Path
    note: str = ""
    script_sha256: str | None = None
    """Runs of another version of the script do not count: they are measured again."""

    def spent(self) -> int:
        if not self.trials_dir.is_dir():
            return 0
        return sum(1 for d in self.trials_dir.iterdir() if (d / "summary.json").is_file()
                   and self._current(d))

    def _current(self, trial_dir: Path) -> bool:
        if self.script_sha256 is None:
            return True
        try:
            recorded = json.loads((trial_dir / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return True
        digest = recorded.get("script_sha256") if isinstance(recorded, dict) else None
        return digest in (None, self.script_sha256)

    def left(self, reserve: int = 0) -> int | None:
        """Runs left after keeping ``reserve`` for later stages (None: no limit)."""
        if self.total is None:
            return None
        return max(0, self.total - self.spent() - reserve)

    def allows(self, n: int = 1, reserve: int = 0) -> bool:
        left = self.left(reserve)
        return left is None or left >= n

    def limit(self, wanted: int, reserve: int = 0) -> int:
        """How many of ``wanted`` runs fit."""
        left = self.left(reserve)
        return wanted if left is None else max(0, min(wanted, left))


def make_budget(setting: int | str, trials_dir: Path,
                script_sha256: str | None = None) -> RunBudget:
    """The budget of a run from ``[run].budget`` (``auto`` starts unlimited until
    :func:`auto_budget` sizes it)."""
    if setting == "auto" or setting == 0:
        return RunBudget(None, trials_dir, script_sha256=script_sha256)
    return RunBudget(int(setting), trials_dir, script_sha256=script_sha256)


def auto_budget(budget: RunBudget, trials: Sequence[TrialSummary], whole: float | None,
                share: float, floor: int) -> RunBudget:
    """Size an ``auto`` budget from the trials so far: the runs whose mean cost fits in
    ``share`` of one whole job (``whole`` dollars at the reference allocation), at least
    ``floor``."""
    paid = [t.cost for t in trials if t.cost]
    if not paid or not whole or not math.isfinite(whole):
        budget.total = floor
        budget.note = (f"budget auto: the job's cost is unknown, so the search makes {floor} runs")
        return budget
    per_run = sum(paid) / len(paid)
    fits = int(share * whole / per_run)
    budget.total = max(floor, min(MAX_AUTO, fits))
    budget.note = (f"budget auto: a run costs about {money_words(per_run)} and the job "
                   f"{money_words(whole)}, so {share:.0%} of the job buys {fits} run(s); "
                   f"the search makes {budget.total}"
                   + (f" (the least that still runs the baseline and one round: the search "
                      f"costs more than {share:.0%} of a job this short)" if fits < floor
                      else ""))
    return budget


def search_cost(trials: Sequence[TrialSummary], reference: TrialSummary,
                recommended: TrialSummary | None, recommended_cost: float | None,
                recommended_time: float | None) -> dict[str, Any]:
    """Dollars and seconds of every run, and the break-even: how many of the recommended jobs
    (and hours of them) the saving per job over the reference allocation takes to repay it."""
    dollars = float(sum(t.cost or 0.0 for t in trials))
    seconds = float(sum(t.wall_time_s or 0.0 for t in trials))
    out: dict[str, Any] = {"runs": len(trials), "dollars": dollars, "seconds": seconds}
    base_cost = job_cost(reference)
    if base_cost:
        out["share_of_default_job"] = dollars / base_cost
    if recommended is None or not base_cost or recommended_cost is None:
        out["note"] = (f"the search made {len(trials)} real runs: {seconds:,.0f} s, "
                       f"{money_words(dollars)}")
        return out
    saving = base_cost - recommended_cost
    out["saving_per_job"] = saving
    head = (f"the search made {len(trials)} real runs: {seconds:,.0f} s and "
            f"{money_words(dollars)}, {dollars / base_cost:.1f}× one job at the default "
            "allocation")
    if saving <= 0:
        out["break_even_jobs"] = None
        out["note"] = head + "; the recommendation saves nothing per job, so it never pays back"
        return out
    jobs = dollars / saving
    hours = jobs * (recommended_time or 0.0) / 3600
    out.update(break_even_jobs=jobs, break_even_hours=hours)
    out["note"] = (head + f"; it saves {money_words(saving)} per job, so it has paid for itself "
                   f"after {jobs:,.1f} jobs ({seconds_words(hours * 3600)} of the recommended job)")
    return out


__all__ = ["FULL_SEARCH", "RunBudget", "auto_budget", "make_budget", "probes_within",
           "runoff_reserve", "search_cost", "within_budget"]


FULL_SEARCH = 12
"""From this many runs on, the search keeps a whole run-off round; below, less (see
:func:`runoff_reserve`)."""


def runoff_reserve(run: Any, total: int | None) -> int:
    """Runs kept for the closing run-off: one round (``runoff_size``) from :data:`FULL_SEARCH`
    runs or without a limit, two from 8, none below: in a small search a run that explores
    buys more than a repeat that separates two close settings."""
    if not run.runoff_rounds:
        return 0
    if total is None or total >= FULL_SEARCH:
        return int(run.runoff_size)
    return min(int(run.runoff_size), 2) if total >= 8 else 0


def probes_within(total: int | None, planned: int) -> int:
    """Baseline probes a budget of ``total`` runs affords: all of them when two runs are left
    for the closed loop, else all but one (at least two), so that a small budget still tries
    one setting the model chose."""
    if total is None or total >= planned + 2 or planned <= 2:
        return planned
    return max(2, min(planned, total - 1))


def within_budget(budget: RunBudget, planned: Sequence[Any], recorded: Sequence[bool]) -> list:
    """The longest prefix of ``planned`` runs (at least one, at most :func:`probes_within`)
    whose runs not ``recorded`` yet fit in the budget: a recorded run is reloaded, not made
    again, so it is always kept (a resumed run's baseline comes back whole)."""
    keep = probes_within(budget.total, len(planned))
    while keep < len(planned) and recorded[keep]:
        keep += 1
    planned, recorded = planned[:keep], recorded[:keep]
    left, n = budget.left(), 0
    for done in recorded:
        if not done:
            if left is not None and left <= 0:
                break
            left = None if left is None else left - 1
        n += 1
    return list(planned[: max(1, n)])
