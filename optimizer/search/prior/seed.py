"""A search that starts from history (``--history SPEC``, repeatable): :class:`HistorySeed`.

:func:`seed_from_history` matches each spec's runs to the script (:mod:`.match`), turns the
usable ones into prior measurements (:mod:`.measurements`) and records them in the run folder.
The pipeline then

- skips the baseline probes whose setting the history measured (:meth:`HistorySeed.uncovered`):
  real runs go where the history is silent;
- fits and ranks the priors with its real trials (:meth:`HistorySeed.with_baseline`; the
  setting of the default allocation leads, real or not, as the reference);
- probes for a model that cannot be fitted only where the history measured fewer settings
  than the baseline would (:meth:`HistorySeed.fallback`);
- counts only real runs against the budget (the priors live in ``history/``, not ``trials/``);
- makes one round of the closed loop unless told otherwise (:data:`HISTORY_ROUNDS`);
- ends with a confirmation of the leader instead of a run-off (:mod:`.confirm`).

A spec that gives no usable run of this script is an error naming what it held; the report
says which runs were used and which were left out, and why (:meth:`HistorySeed.summary`).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import ResourceConfig
from optimizer.foundation.errors import HistoryError
from optimizer.foundation.result import Recommendation, plain
from optimizer.history.run import History, HistoryRun
from optimizer.search.baseline import default_allocation
from optimizer.search.memory_need import same_setting
from optimizer.search.prior.match import Match, Script, match_runs
from optimizer.search.prior.measurements import prior_allocation, prior_trial, record_priors
from optimizer.trials.records import HISTORY_DIR, TrialSummary, write_trials_csv

HISTORY_ROUNDS = 0
"""``[run].refine_rounds`` of a search from history, unless given: one round of the closed loop
(the model fitted to the history proposes where it expects most; the rounds a fresh search
spends finding the region, the history spent), then the leader's confirmation."""
SHOWN = 8
"""Runs named one by one in a note; the rest are counted (``recommendation.json`` has all)."""


@dataclass
class HistorySeed:
    """What history gives this search: per spec, what matched (``matches``); the prior
    measurements (``trials``) and the runs they come from (``runs``, in the same order); the
    script's own batch size (``own_batch``: the source's, else the one history runs at the
    script's default ran with)."""

    matches: list[tuple[str, int, Match]] = field(default_factory=list)
    trials: list[TrialSummary] = field(default_factory=list)
    runs: list[HistoryRun] = field(default_factory=list)
    own_batch: int | None = None
    resources: ResourceConfig | None = None
    enough: int = 4
    """Settings measured that make the baseline's worth of data (``[run].baseline_samples``)."""

    @property
    def on(self) -> bool:
        return bool(self.trials)

    def covers(self, alloc: Allocation) -> TrialSummary | None:
        """The prior measurement of ``alloc``'s setting (batch None: the script's own)."""
        mine = Allocation(alloc.gpus, alloc.cpus, alloc.memory_gb,
                          alloc.batch_size or self.own_batch, alloc.workers, alloc.replicas)
        return next((t for t in self.trials if same_setting(t.allocation, mine)), None)

    def uncovered(self, allocations: Sequence[Allocation]) -> list[Allocation]:
        """The planned allocations whose setting no prior measured."""
        return [a for a in allocations if self.covers(a) is None]

    def fallback(self, allocations: Sequence[Allocation]) -> list[Allocation]:
        """The probes for a model that cannot be fitted: none where the history measured as
        many settings as the baseline would (the fit has its data; a model that data cannot
        fit is not one probe away from fitting), else those it did not cover."""
        settings = {(t.allocation.gpus, t.allocation.cpus, t.allocation.batch_size,
                     t.allocation.workers) for t in self.trials if t.ok}
        return [] if self.on and len(settings) >= self.enough else self.uncovered(allocations)

    def with_baseline(self, real: Sequence[TrialSummary]) -> list[TrialSummary]:
        """The baseline's real trials and the priors, the default allocation's trial first
        (a real one where it ran, else its prior): the pipeline's reference. The default holds
        a GPU where the history's runs used GPUs (:func:`default_allocation`)."""
        if not self.on or self.resources is None:
            return list(real)
        uses_gpu = any(t.allocation.gpus for t in self.trials)
        lead = self.covers(default_allocation(self.resources, uses_gpu))
        out = [*real, *self.trials]
        if lead is not None and not any(same_setting(t.allocation, lead.allocation)
                                        and t.ok for t in real):
            out.remove(lead)
            out.insert(0, lead)
        return out

    def hours(self) -> float:
        return sum(t.wall_time_s for t in self.trials) / 3600.0

    def summary(self) -> dict[str, Any]:
        """``recommendation.json``'s ``history``: every spec, each run used (as which prior
        trial) and each one left out with why."""
        used = [{"trial": t.trial_id, "source": r.source, "run_id": r.run_id}
                for t, r in zip(self.trials, self.runs, strict=True)]
        ignored = [{"source": r.source, "run_id": r.run_id, "why": why}
                   for _, _, m in self.matches for r, why in m.ignored]
        return {"specs": [s for s, _, _ in self.matches], "runs_used": len(self.trials),
                "hours_used": self.hours(), "used": used, "ignored": ignored,
                "other_jobs": sum(sum(m.other_jobs.values()) for _, _, m in self.matches)}

    def notes(self) -> list[str]:
        """The report's lines: what was used, and what was left out and why."""
        if not self.on:
            return []
        runs = [f"{t.trial_id} ({r.run_id})" for t, r in zip(self.trials, self.runs,
                                                             strict=True)]
        used = ", ".join(runs[:SHOWN]) + (f" and {len(runs) - SHOWN} more" if
                                           len(runs) > SHOWN else "")
        specs = "; ".join(f"{s} ({n} runs read)" for s, n, _ in self.matches)
        lines = [f"History: {len(self.trials)} earlier runs of this script "
                 f"({self.hours():.2f} h) from {specs} were fitted and ranked as prior "
                 f"measurements, none counted as a real run: {used}."]
        ignored = [f"{r.run_id}: {why}" for _, _, m in self.matches for r, why in m.ignored]
        others = sum(sum(m.other_jobs.values()) for _, _, m in self.matches)
        if ignored or others:
            lines.append("History left out: " + "; ".join(ignored[:SHOWN])
                         + (f" and {len(ignored) - SHOWN} more" if len(ignored) > SHOWN else "")
                         + (f"{'; ' if ignored else ''}{others} runs of other jobs" if others
                            else "") + ".")
        return lines

    def annotate(self, rec: Recommendation, final: TrialSummary | None) -> None:
        """Add the history's summary and notes to the recommendation; say so where the final
        choice rests on history alone (no real run of it in this search)."""
        if not self.on:
            return
        rec.history = plain(self.summary())
        rec.notes.extend(self.notes())
        if final is not None and final.history:
            rec.history["rests_on_history"] = final.trial_id
            rec.notes.append(f"The recommendation rests on history: its setting was not run in "
                             f"this search (no run was left in the budget); its figures are "
                             f"{final.history['run_id']}'s from {final.history['source']}.")


def seed_from_history(histories: Sequence[tuple[str, History]], script: Script,
                      own_batch: int | None, run_dir: Path, workers: bool = False,
                      enough: int = 4) -> HistorySeed:
    """The prior measurements of ``histories`` (``(spec, runs read)``) for ``script``,
    recorded in ``run_dir/history/``; ``workers``: the search sets data-loader workers;
    ``enough``: :attr:`HistorySeed.enough`. Raises HistoryError where a spec gives no usable
    run of the script."""
    seed = HistorySeed(resources=script.resources, enough=enough)
    seen: set[tuple[str, str]] = set()
    for spec, history in histories:
        match = match_runs(history, script)
        if not match.used:
            raise HistoryError(f"--history {spec}: {len(history)} run(s) read, none usable for "
                               f"{script.train_file.name}: {match.why_none()}")
        seed.matches.append((spec, len(history), match))
        for run in match.used:
            if (run.source, run.run_id) not in seen:
                seen.add((run.source, run.run_id))
                seed.runs.append(run)
    seed.own_batch = own_batch or _own_batch(seed.runs)
    seed.trials = [prior_trial(run, i, prior_allocation(run, script.resources, seed.own_batch,
                                                        workers), script.resources)
                   for i, run in enumerate(seed.runs)]
    if seed.on:
        record_priors(run_dir, seed.trials, seed.runs)
    elif (run_dir / HISTORY_DIR).is_dir():  # started again without --history: none is used
        _forget(run_dir)
    return seed


def _own_batch(runs: Sequence[HistoryRun]) -> int | None:
    """The batch the runs that ran the script's own batch size had (cloudopt's records say
    which did)."""
    batches = [int(r.value("batch_size")) for r in runs if r.tags.get("default_batch") == "1"
               and r.value("batch_size") > 0]
    return max(set(batches), key=batches.count) if batches else None


def _forget(run_dir: Path) -> None:
    shutil.rmtree(run_dir / HISTORY_DIR)
    write_trials_csv(run_dir)


__all__ = ["HISTORY_ROUNDS", "HistorySeed", "seed_from_history"]
