"""The memory a whole job needs, from what its runs used.

A probe is stopped at its time box, so its peak says how much memory the job needs *at
least*, never at most: a job whose memory grows through the run (a cache filled as it goes,
a history of outputs kept, a leak) reaches more by its end. A request sized from a probe's
peak gets such a job killed (issue 62: a probe stopped after 1.3 s peaked at 0.355 GB; the
whole job reached 12.65 GB). So the memory a setting needs (:func:`memory_need`, before
:func:`~optimizer.foundation.memory.right_size_memory`'s margin) is the largest of:

1. the largest peak of any *whole* run of the job (``status == "completed"``) at the
   setting's batch size, whatever its CPUs, GPUs, workers or limit: memory of a whole run at
   the same batch is the job itself, measured to its end;
2. where no whole run at that batch exists, each probe's projection: its peak plus its
   memory growth over its steady part (:attr:`TrialSummary.mem_gb_growth`, GB/s) kept up
   for the rest of its predicted job, ``peak + growth × (job time − probe wall time)``,
   the largest over the probes at that batch. Linear on purpose: a probe cannot tell a
   growth that levels off from one that does not, and a request too small kills the job
   while one too large only costs its share of the bill;
3. the peaks of the setting's own usable runs, and the limit of every run at that batch
   killed for memory (the job needed more than that limit).

The recommendation says which run its request comes from (:meth:`MemoryNeed.words`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.memory import memory_words
from optimizer.trials.records import TrialSummary, job_time


@dataclass(frozen=True)
class MemoryNeed:
    """What a setting's memory request covers and where that figure comes from."""

    gb: float
    """The memory the whole job is expected to reach (the request adds the margin)."""
    source: str
    """``whole run``, ``projected``, ``probe`` (a probe's own peak: nothing more was known)
    or ``out-of-memory kill`` (the limit a run was killed at)."""
    trial_id: str
    """The run the figure comes from."""
    peak_gb: float = 0.0
    """That run's measured peak."""
    growth_gb_s: float | None = None
    """A probe's growth, GB/s (``projected``)."""
    job_s: float | None = None
    """The whole job's length the growth was projected over (``projected``)."""
    wall_s: float | None = None
    """The run's own wall time."""
    detail: str = ""
    """Why a probe's own peak was all there was to go on (``probe``)."""

    def words(self) -> str:
        """Where the figure comes from, for the report: ``from the whole run 00-… (peak
        12.65 GB)``."""
        if self.source == "whole run":
            return f"from the whole run {self.trial_id} (peak {memory_words(self.peak_gb)})"
        if self.source == "projected":
            return (f"projected from the probes' growth of {self.growth_gb_s:.3g} GB/s over "
                    f"the job's {self.job_s or 0:.0f} s (probe {self.trial_id}: peak "
                    f"{memory_words(self.peak_gb)} after {self.wall_s or 0:.1f} s)")
        if self.source == "out-of-memory kill":
            return (f"above the {self.gb:g} GB limit at which run {self.trial_id} was killed "
                    "for memory")
        return (f"from the run {self.trial_id} (peak {memory_words(self.peak_gb)}"
                + (f"; {self.detail}" if self.detail else "") + ")")

    def to_dict(self, request_gb: float, chosen_peak_gb: float) -> dict[str, Any]:
        """``recommendation.json``'s ``memory`` entry for a request of ``request_gb``;
        ``chosen_peak_gb``: the largest peak of the chosen setting's own runs."""
        return {"peak_gb": self.gb, "request_gb": request_gb,
                "slack": 1 - self.gb / request_gb if request_gb else None,
                "source": self.source, "from_trial": self.trial_id,
                "source_peak_gb": self.peak_gb, "growth_gb_s": self.growth_gb_s,
                "job_s": self.job_s, "chosen_peak_gb": chosen_peak_gb, "why": self.words()}


def same_setting(a: Allocation, b: Allocation) -> bool:
    """Same GPUs, CPUs, batch size, data-loader workers and data-parallel workers (memory is a
    limit)."""
    return (a.gpus, a.cpus, a.batch_size, a.workers, a.replicas) == \
        (b.gpus, b.cpus, b.batch_size, b.workers, b.replicas)


def projection(t: TrialSummary) -> float | None:
    """A probe's peak with its growth kept up to the end of its predicted job (rule 2 of the
    module's docstring); None where its growth or its job's length is unknown."""
    job = job_time(t)
    if t.status != "probe" or t.mem_gb_growth is None or job is None:
        return None
    return float(t.mem_gb_peak or 0.0) + float(t.mem_gb_growth) * max(
        float(job) - float(t.wall_time_s or 0.0), 0.0)


def _peak(t: TrialSummary) -> float:
    return float(t.mem_gb_peak or 0.0)


def memory_need(trial: TrialSummary, trials: Sequence[TrialSummary]) -> MemoryNeed:
    """The memory ``trial``'s setting needs for the whole job, by the module docstring's
    rules, with the run it comes from (the first of the largest: a whole run before a probe
    or a kill at the same figure, the chosen setting's own whole run before another's)."""
    a = trial.allocation
    batch = [t for t in [*trials, trial] if t.allocation.batch_size == a.batch_size
             and t.allocation.replicas == a.replicas]
    own = [t for t in batch if t.ok and same_setting(t.allocation, a)] or [trial]
    whole = sorted((t for t in batch if t.status == "completed"),
                   key=lambda t: (_peak(t), same_setting(t.allocation, a)), reverse=True)
    found = [MemoryNeed(_peak(w), "whole run", w.trial_id, _peak(w), wall_s=w.wall_time_s)
             for w in whole[:1]]
    probes = [t for t in batch if t.status == "probe"]
    if not whole:
        found += [MemoryNeed(gb, "projected", t.trial_id, _peak(t), t.mem_gb_growth,
                             job_time(t), t.wall_time_s)
                  for t in probes if t.mem_gb_growth and (gb := projection(t)) is not None]
    top = max(own, key=_peak)
    growths = [t.mem_gb_growth for t in probes]
    detail = (f"above the {memory_words(found[0].gb)} the whole run {found[0].trial_id} "
              "reached" if whole else
              "no whole run at this batch size, and the job's length unknown" if not any(
                  job_time(t) for t in probes) else
              "no whole run at this batch size, and the probes' memory growth unmeasured "
              "(too short a trace)" if all(g is None for g in growths) else
              "no whole run at this batch size; the probes' growth projects no higher" if any(
                  growths) else
              "no whole run at this batch size; the probes' memory did not grow over their "
              "steady part")
    found.append(MemoryNeed(_peak(top), "probe", top.trial_id, _peak(top),
                            wall_s=top.wall_time_s, detail=detail))
    found += [MemoryNeed(float(t.allocation.memory_gb), "out-of-memory kill", t.trial_id,
                         _peak(t), wall_s=t.wall_time_s)
              for t in batch if t.status == "failed" and t.reason == "oom"]
    return max(found, key=lambda n: n.gb)  # max keeps the first of equals


__all__ = ["MemoryNeed", "memory_need", "projection", "same_setting"]
