"""The run-off: settings that measured close are decided in one block of back-to-back runs.

A shared machine's speed drifts by the hour. On the 2-core machine the example CNN at 2 CPUs
and batch 128 took 11.5-13.1 s in one cloudopt run and 10.4-10.8 s in the ground truth taken
hours later, while batch 256 took 10.3-12.1 s in that run, its faster runs the latest ones: the
runs of two settings taken at different times compare the hours as much as the settings, and
a race that re-measures whichever setting leads ends up crediting the one measured in the
fastest hour. So after the closed loop and its sweeps, the search runs a run-off (the stage
:class:`Runoff`, over :func:`runoff`):

1. the *contenders* are the settings whose measured objective is within :data:`CONFIRM_BAND`
   of the best (at most ``[run].runoff_size``; a setting measured only beside other trials
   counts as :data:`SHARED_SLOWDOWN` faster, so that one the sharing hid still competes), and
   the leader at half its CPUs where no trial ran that setting (:func:`cpu_neighbour`, second
   in the field, so a budget that trims the field keeps it); the best setting that the top of
   its efficiency's interval would bring within the band takes the last place
   (:func:`uncertain`), and where the leader came from the workers sweep, contenders at the
   script's own workers race at the leader's count (:func:`with_workers`); a run-off's run at
   another batch than the script's trains on to its loss, so the efficiency is measured again;
2. each round runs every contender once, back to back, alone, the order rotating from round
   to round so that a steady drift favours none;
3. after two rounds, a contender whose mean is worse than the leader's beyond the noise
   (:func:`optimizer.search.choice.separated`) leaves; the run-off ends when one is left or
   after ``[run].runoff_rounds`` rounds (0: no run-off);
4. the winner is the best contender *by the run-off's runs alone*
   (:func:`optimizer.search.choice.best_measured` with ``runoff``), so every setting in the
   final comparison was measured in the same hour.

A single contender measured only beside other trials, or only once, is measured once more
alone instead (``runoff-alone-…``, ``runoff-again-…``), and the final choice is left to all
trials, which pool the setting's runs. The run-off's trials are ``trials/runoff-<R>-<tag>-<key>``
(``tag``: the preference), reloaded as recorded on ``--resume``; the contenders are chosen from
the other trials only, so a resumed run-off has the same contenders.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from optimizer.foundation.allocation import Allocation, describe_allocation, job_words
from optimizer.search.after_loop.workers import PREFIX as WORKERS_PREFIX
from optimizer.search.after_loop.workers import PROPOSER as WORKERS_PROPOSER
from optimizer.search.choice import efficiency_source, objective_table, same_setting, separated
from optimizer.search.core.state import Proposal, SearchState, drive, twin_of
from optimizer.search.planning import measure_efficiency
from optimizer.search.prior.confirm import confirm_leader, from_history
from optimizer.trials.records import TrialSummary

CONFIRM_BAND = 0.15
"""Settings whose measured objective is within this share of the best one go to the run-off:
one run on a shared machine can be 20% off, and picking the best of several single runs
favours the luckiest one."""
SHARED_SLOWDOWN = 0.15
"""How much slower a trial may have run beside others than alone. Two 1-CPU trials of the
example side by side on a 2-core machine measured -3% to +4% against alone over repeats, and
-15% in a single pair (``benchmarks/parallel_trials.py``): interference and one run's noise
together."""
PREFIX = "runoff-"
NEIGHBOUR = "cpu-neighbour"
"""Who proposed the leader's half-CPU setting (:func:`cpu_neighbour`) in the decisions."""


def contenders(table: pd.DataFrame, size: int = 3) -> pd.DataFrame:
    """The rows of :func:`objective_table` that go to the run-off (at most ``size``), best
    first (``_hopeful``: the objective with a shared trial's slowdown allowed for)."""
    if table.empty:
        return table
    hopeful = table["objective"] / np.where(table["alone"], 1.0, 1.0 + SHARED_SLOWDOWN)
    table = table.assign(_hopeful=hopeful).sort_values("_hopeful").reset_index(drop=True)
    near = table[table["_hopeful"] <= table["_hopeful"].iloc[0] * (1 + CONFIRM_BAND)]
    return near.head(size)


def cpu_neighbour(leader: Allocation, measured: list[TrialSummary],
                  cpu_min: int = 1) -> Allocation | None:
    """The leader at half its CPUs (not below ``cpu_min``), where no trial ran that setting;
    else None.

    Every other setting's CPUs were chosen by the workload model, whose CPU scaling is fitted
    to a few probes. Small steps can run slower on more threads, which the fit misses when no
    probe ran them: on the 2-core machine the example CNN at batch 16 took 13.4 s on 1 CPU and
    15.7 s on 2 in one hour (and ran within 5% of it in another), while the model, fitted to
    1-CPU probes at other batch sizes, put 1 CPU 30% behind and never ran it. Fewer CPUs cost
    less, so the run-off measures that neighbour back to back with the leader rather than
    trusting the extrapolation."""
    cpus = max(int(cpu_min), leader.cpus // 2, leader.replicas)  # a core for each worker
    if cpus >= leader.cpus:
        return None
    half = replace(leader, cpus=cpus)
    if any(same_setting(t.allocation, half) for t in measured):
        return None
    return half


def uncertain(table: pd.DataFrame, field: pd.DataFrame, efficiency: Any) -> str | None:
    """The trial id of the best setting outside ``field`` that the top of its measured
    efficiency's 90% interval would put within :data:`CONFIRM_BAND` of the best objective, or
    None: one probe's efficiency scatters more than its interval says (tab's batch 16: 1.09,
    1.53 and 1.80 in three runs of one code; whole runs: about 1.5), and a batch ruled out on
    its low reading would never be measured again. In the run-off its runs train on to the
    loss again, and the efficiency is pooled over them
    (:func:`optimizer.search.goodput.common_loss.pooled_ratio`)."""
    if table.empty or field.empty or efficiency is None or not efficiency.on:
        return None
    best = float(field["objective"].min())
    rows = []
    for _, row in table[~table["trial_id"].isin(field["trial_id"])].iterrows():
        batch = None if pd.isna(row["global_batch"]) else int(row["global_batch"])
        source, _, high = efficiency_source(efficiency, batch)
        value = float(row.get("efficiency", 1.0))
        if source == "measured" and high and high > value:
            rows.append((float(row["objective"]) * value / high, row["trial_id"]))
    hopeful = [r for r in sorted(rows) if r[0] <= best * (1 + CONFIRM_BAND)]
    return hopeful[0][1] if hopeful else None


def with_workers(leader: Allocation, allocs: list[Allocation], swept: bool) -> list[Allocation]:
    """The other contenders that ran at the script's own data-loader workers, at the count the
    workers sweep chose for the leader (``swept``: the leader is one of the sweep's trials),
    where they run on as many CPUs: the sweep measures one setting and the model does not
    know workers, so a contender left at the default would race with a handicap the leader
    was cured of (tab, 1 CPU, batch 16: 1573-1700 samples/s at its default workers, 2074-2357
    with none). Settings that become one are kept once."""
    if not swept or leader.workers is None:
        return allocs
    out: list[Allocation] = []
    for a in allocs:
        if a.workers is None and (a.gpus, a.cpus) == (leader.gpus, leader.cpus):
            a = replace(a, workers=leader.workers)
        if not any(same_setting(a, b) for b in out):
            out.append(a)
    return out


def still_in(block: pd.DataFrame) -> pd.DataFrame:
    """The run-off's rows (its own runs pooled per setting) not separated from its leader."""
    leader = block.iloc[int(np.argmin(block["objective"].to_numpy()))]
    keep = [i for i, row in block.iterrows()
            if row["trial_id"] == leader["trial_id"] or not separated(leader, row)]
    return block.loc[keep]


def _tag(preference: Any) -> str:
    return preference if isinstance(preference, str) and preference.isidentifier() else "custom"


@dataclass
class Field:
    """The run-off's field: the contenders' allocations, leader first; the trials it was chosen
    from (``before``: none of an earlier run-off) and their ``contenders`` rows; the setting the
    top of its efficiency's interval brought in (``hope``), the leader at half its CPUs
    (``half``), and who put each setting no trial ran into it (``added``, by key)."""

    allocs: list[Allocation]
    before: list[TrialSummary]
    contenders: pd.DataFrame
    hope: Allocation | None
    half: Allocation | None
    added: dict[str, str]

    @property
    def gpus(self) -> bool:
        return any(t.allocation.gpus for t in self.before)


def _field(state: SearchState) -> Field | None:
    """The run-off's contenders (module doc, step 1), or None when there is no run-off."""
    config, preference = state.port.config, state.port.user_preference
    before = [t for t in state.trials if not t.trial_id.startswith(PREFIX)]
    eff = state.efficiency
    table = objective_table(before, config, preference, eff, evidence=state.trials)
    field = contenders(table, config.run.runoff_size)
    if field.empty or config.run.runoff_rounds == 0:
        return None

    def setting(tid: str) -> Allocation:
        return next(t.allocation for t in before if t.trial_id == tid)

    ids, size = list(field["trial_id"]), config.run.runoff_size
    hopeful = uncertain(table, field, eff) if len(ids) > 1 else None
    swept = ids[0].startswith(WORKERS_PREFIX + "-")
    allocs = with_workers(setting(ids[0]), [setting(t) for t in ids], swept)
    hope = None
    if hopeful is not None:  # the last place, should the field be full: measured ones first
        allocs = with_workers(allocs[0], [*allocs[:size - 1], setting(hopeful)], swept)
        hope = with_workers(allocs[0], [allocs[0], setting(hopeful)], swept)[-1]
    added: dict[str, str] = {  # settings no trial ran, by who put them in: the decisions say
        a.key(): WORKERS_PROPOSER for a in allocs
        if not any(same_setting(a, t.allocation) for t in before)}
    half = cpu_neighbour(allocs[0], before, config.resources.cpu_count_min)
    if half is not None:
        allocs = [allocs[0], half, *allocs[1:config.run.runoff_size - 1]]
        added[half.key()] = NEIGHBOUR
    return Field(allocs, before, field, hope, half, added)


def _reason(field: Field, allocs: list[Allocation]) -> str:
    """Why these settings run back to back, as the decisions say it."""
    gpus = field.gpus
    reason = f"within {CONFIRM_BAND:.0%} of each other"
    if field.half is not None:
        reason = (f"{describe_allocation(field.half, gpus=gpus)}: the leader at half its CPUs, "
                  "which no trial ran")
        if len(allocs) > 2:
            reason += f"; the others within {CONFIRM_BAND:.0%} of the leader"
    if field.hope is not None and any(same_setting(field.hope, a) for a in allocs[1:]):
        reason += (f"; {describe_allocation(field.hope, gpus=gpus)} within it at the top of its "
                   "efficiency's interval, trained on to the loss again")
    return reason


class RunoffContenders:
    """The run-off's runs (module doc, steps 2 and 3): every contender once per round, back to
    back, the order rotating; from the second round on, contenders separated from the leader
    leave, and the run-off ends with one left or after ``n_rounds``."""

    name = "run-off"

    def __init__(self, state: SearchState, field: Field, allocs: list[Allocation],
                 n_rounds: int) -> None:
        self.field, self.allocs, self.n_rounds = field, allocs, n_rounds
        self.start = len(state.trials)  # the run-off's trials are the ones added after this
        names = "; ".join(describe_allocation(a, gpus=field.gpus) for a in allocs)
        self.why = f"{names} measured back to back ({_reason(field, allocs)})"
        self.runs = self._runs(state)

    def propose(self, state: SearchState) -> Proposal | None:
        return next(self.runs, None)

    def _runs(self, state: SearchState) -> Iterator[Proposal]:
        config, preference = state.port.config, state.port.user_preference
        left = list(self.allocs)
        for r in range(self.n_rounds):
            order = left[r % len(left):] + left[:r % len(left)]
            for alloc in order:
                yield Proposal(alloc, self.name, f"run-off round {r + 1}: {self.why}",
                               prefix=f"{PREFIX}{r}-{_tag(preference)}",
                               added_by=self.field.added.get(alloc.key()))
            if r == 0:
                continue
            done = state.trials[self.start:]
            block = objective_table(done, config, preference, state.efficiency,
                                    evidence=state.trials)
            if block.empty:
                break
            kept = still_in(block)
            left = [a for a in left if any(
                same_setting(a, next(t.allocation for t in done if t.trial_id == tid))
                for tid in kept["trial_id"])]
            if len(left) <= 1:
                break


def _row(proposal: Proposal, trial: TrialSummary, index: int) -> dict[str, Any]:
    return {"round": index, "proposed_by": "run-off", "planned": proposal.allocation,
            "added_by": proposal.added_by,
            "measured_allocation": proposal.allocation, "trial": trial.trial_id,
            "status": trial.status, "measured_throughput": trial.throughput,
            "why": proposal.reason}


def _alone(state: SearchState, field: Field) -> None:
    """A single contender measured only beside other trials, or only once: measured once
    more, alone. The recommendation's figures are then a mean of two runs (of its runs alone),
    never one run's luck: lbfgs_closure's claim was one whole run of 7.8 s where the same
    setting's whole runs took 8.2-9.1 s that evening (benchmarks/README.md)."""
    budget = state.port.budget
    row = field.contenders.iloc[0]
    alone, runs = bool(row["alone"]), int(row.get("replicates", 1) or 1)
    if (alone and runs >= 2) or not (budget is None or budget.allows(1)):
        return
    alloc, words = field.allocs[0], describe_allocation(field.allocs[0], gpus=field.gpus)
    why, tag = ((f"{words} ran beside other trials: measured again alone", "alone") if not alone
                else (f"{words}, the only contender, was measured once: measured again so "
                      "its figures are a mean of two runs", "again"))
    once = Proposal(alloc, "run-off", why,
                    prefix=f"{PREFIX}{tag}-{_tag(state.port.user_preference)}",
                    added_by=field.added.get(alloc.key()))
    drive(state, _Once(once), _row)


class _Once:
    """One proposal, then none."""

    def __init__(self, proposal: Proposal) -> None:
        self.proposal: Proposal | None = proposal

    def propose(self, state: SearchState) -> Proposal | None:
        out, self.proposal = self.proposal, None
        return out


def _affordable(state: SearchState, allocs: list[Allocation]) -> tuple[list[Allocation], int]:
    """The contenders and whole rounds the budget affords (a round compares every contender
    back to back; a smaller budget runs off the best ones)."""
    n_rounds, budget = state.port.config.run.runoff_rounds, state.port.budget
    room = budget.left() if budget is not None else None
    if room is not None and 2 <= room < len(allocs):
        allocs = allocs[:room]
    if budget is not None:
        n_rounds = budget.limit(n_rounds * len(allocs)) // len(allocs)
    return allocs, n_rounds


def runoff(state: SearchState) -> list[str]:
    """Run the run-off (module doc); the new trials are added to ``state.trials`` and described
    in ``state.rounds``. Returns the ids of the run-off's trials (empty when there was none:
    the final choice is then made over all trials)."""
    field = _field(state)
    if field is None:
        return []
    if len(field.allocs) == 1:
        _alone(state, field)
        return []
    allocs, n_rounds = _affordable(state, field.allocs)
    if n_rounds == 0:
        budget = state.port.budget
        state.rounds.append({"round": len(state.rounds), "action": "stop",
                             "proposed_by": "budget",
                             "why": f"no run-off: the budget of {budget.total} real runs is "
                                    "spent; the choice is made over the trials as measured"})
        return []
    done = drive(state, RunoffContenders(state, field, allocs, n_rounds), _row)
    return [t.trial_id for t in done]


class Runoff:
    """Stage: the run-off (:func:`runoff`), its trials credited to whoever proposed their
    setting (a setting only the run-off ran: to who put it in), and the efficiency pooled over
    its curves; ``state.runoff`` holds its trials."""

    name = "run-off"

    def run(self, state: SearchState) -> None:
        if from_history(state.trials):  # --history: the leader confirmed by one real run instead
            state.runoff = confirm_leader(state)  # no block (search/prior/confirm.py)
            return
        n_before = len(state.trials)
        block = runoff(state)
        added = {r["trial"]: r["added_by"] for r in state.rounds if r.get("added_by")}
        for trial in state.trials[n_before:]:
            twin = twin_of(trial, state.trials)  # itself: a setting only the run-off ran
            state.proposer[trial.trial_id] = (
                added.get(twin, "") if twin in block and twin not in state.proposer
                else state.proposer.get(twin, ""))
        state.runoff = block
        eff, job = state.efficiency, state.job
        if block and eff is not None and eff.on:  # the run-off's curves: the efficiency pooled
            state.efficiency = measure_efficiency([t for t in state.trials if t.ok],
                                                  job.reference, job.run_dir,
                                                  state.port.config.run.goodput, eff.job)


def standings(trials: list[TrialSummary], block: list[str], config: Any,
              preference: Any, efficiency: Any = None) -> list[dict[str, Any]]:
    """The run-off's settings, best first: each one's objective, job seconds and dollars and runs
    there, its ``margin`` behind the winner (a share of the winner's objective) and whether the
    runs' noise leaves it ``tied`` with the winner (not :func:`separated`; the winner: False). A
    tie is the honest reading of most short run-offs: the winner is the better bet, not a proven
    better setting. ``words``: the setting as people read it, at the memory it would be given
    (the one its dollars are priced at)."""
    ids = set(block)
    # priced at the memory the whole job needs, from every run (a whole run outside the block)
    table = objective_table([t for t in trials if t.trial_id in ids], config, preference,
                            efficiency, evidence=trials)
    if table.empty:
        return []
    table = table.sort_values("objective")
    best = table.iloc[0]
    gpus = any(t.allocation.gpus for t in trials)
    setting = {t.trial_id: t.allocation for t in trials}
    return [{"setting": setting[row["trial_id"]].key(),
             "words": describe_allocation(Allocation(
                 setting[row["trial_id"]].gpus, setting[row["trial_id"]].cpus,
                 float(row["memory_gb"]), setting[row["trial_id"]].batch_size,
                 setting[row["trial_id"]].workers), gpus=gpus),
             "objective": float(row["objective"]), "job_time_s": float(row["job_time_s"]),
             "job_cost": float(row["job_cost"]), "runs": int(row.get("replicates", 1)),
             "margin": float(row["objective"]) / float(best["objective"]) - 1.0,
             "tied": bool(i > 0 and not separated(best, row))}
            for i, (_, row) in enumerate(table.iterrows())]


def tie_note(table: list[dict[str, Any]]) -> str:
    """What the choice text says of the settings the run-off could not separate from its
    winner ('' when none)."""
    tied = [r for r in table if r.get("tied")]
    if not tied:
        return ""
    return ("; within the runs' noise of it: "
            + ", ".join(f"{r.get('words', r['setting'])} ({_figures(r)}, {r['margin']:+.1%})"
                        for r in tied)
            + (", so either serves" if len(tied) == 1 else ", so any of them serves")
            + ": the winner is the better bet, not a proven better setting")


def _figures(row: dict[str, Any]) -> str:
    """A standings row's dollars and seconds (a row recorded before rows carried dollars: its
    seconds alone)."""
    if row.get("job_cost") is None:
        return f"{row['job_time_s']:.3g} s"
    return job_words(row["job_cost"], row["job_time_s"], whole=False)


__all__ = ["CONFIRM_BAND", "NEIGHBOUR", "SHARED_SLOWDOWN", "Field", "Runoff",
           "RunoffContenders", "contenders", "cpu_neighbour", "runoff", "standings", "still_in",
           "tie_note", "uncertain", "with_workers"]
