"""What was measured decides: each trial's objective under the preference, the best measured
trial, and the memory to request for it.

The agents plan on a fitted model, which can be wrong; a trial is a fact. So the final
recommendation is the trial with the best *measured* objective (:func:`best_measured`), the
agents' plan included once it has been run, and never a plan worse than something already
measured. Memory is sized from what the whole job needs (:mod:`optimizer.search.memory_need`:
a whole run's peak at the same batch, else the probes' growth projected over the job; a
probe's peak is a floor, never the answer), the way Kubernetes' VPA recommender sizes it
(:func:`right_size_memory`): a safety margin, rounded, and bumped after an out-of-memory kill.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import OptimizerConfig
from optimizer.foundation.memory import right_size_memory
from optimizer.search.goodput.batch_judge import Judgement, judge, whole_job_seconds
from optimizer.search.goodput.efficiency import TrialEfficiency
from optimizer.search.goodput.heldout import (
    HELDOUT,
    beyond_worse,
    heldout_words,
    loss_kind,
    trains_as_well,
    trains_worse,
)
from optimizer.search.goodput.job_length import JobLength
from optimizer.search.memory_need import MemoryNeed, memory_need, same_setting
from optimizer.trials.cost import ResourceCostCalculator
from optimizer.trials.records import TrialSummary, job_time


def _ooms(trials: Sequence[TrialSummary], alloc: Allocation) -> tuple[int, float | None]:
    """Out-of-memory kills of ``alloc``'s setting that no usable run explains: a run of it that
    used more than the limit it was killed at shows what it needs, so that kill bumps nothing."""
    used = max((t.mem_gb_peak or 0.0 for t in trials
                if t.ok and same_setting(t.allocation, alloc)), default=0.0)
    hit = [t for t in trials if t.status == "failed" and t.reason == "oom"
           and same_setting(t.allocation, alloc) and t.allocation.memory_gb > used]
    return len(hit), max((t.allocation.memory_gb for t in hit), default=None)


def hourly_cost(config: OptimizerConfig, gpus: float, cpus: float, memory_gb: float) -> float:
    """The configured price of an allocation per hour (:class:`ResourceCostCalculator`)."""
    return ResourceCostCalculator.from_config(config.resources).calculate_hourly_cost(
        Allocation(gpus, cpus, memory_gb))


def resource_share(config: OptimizerConfig, gpus: Any, cpus: Any, memory_gb: Any) -> Any:
    """Mean share of the allowed GPUs, CPUs and memory held (scalars or columns alike; bounds
    of 0, such as no GPU, are left out)."""
    r = config.resources
    parts = [v / float(b) for v, b in ((gpus, r.gpu_count_max), (cpus, r.cpu_count_max),
                                       (memory_gb, r.memory_max)) if b]
    return sum(parts) / len(parts)


def objective_table(trials: Sequence[TrialSummary], config: OptimizerConfig,
                    preference: str | Sequence[float],
                    efficiency: TrialEfficiency | None = None,
                    evidence: Sequence[TrialSummary] | None = None) -> pd.DataFrame:
    """One row per usable trial: its whole-job time (measured, or predicted from a probe's
    throughput), the memory it would be given (:func:`memory_request`: what the whole job
    needs, from the runs in ``evidence``, default ``trials``), the job cost at that memory,
    its resource share and ``objective`` (lower is better). A setting whose job outgrows its
    probe's peak is priced at what its job needs, not at what the probe saw.

    ``efficiency`` (statistical efficiency by batch size relative to the script's own,
    :class:`optimizer.search.goodput.efficiency.TrialEfficiency`) turns the time into the time to the
    same training progress: a batch that learns half as much per sample takes twice as long.

    ``cost`` and ``time`` are the job's dollars and seconds; other preferences are the weighted
    sum of the three objectives, each over its best value among the trials (1.0 is ideal).
    """
    rows = []
    evidence = list(trials if evidence is None else evidence)
    judges = _judges(efficiency, evidence, trials)
    for t in trials:
        seconds = job_time(t) if t.ok else None
        if seconds is None or not np.isfinite(seconds) or seconds <= 0:
            continue
        a = t.allocation
        gb = a.global_batch  # statistical efficiency is the whole step's: per worker x workers
        eff, measured = assured_efficiency(efficiency, gb)
        confirmed = gb is not None and int(gb) in judges.as_well and eff < 1.0
        verdict = _verdict(t, seconds, eff, efficiency, judges)
        if verdict is None or not verdict.kept:
            continue  # set aside, or its whole job trains less and its length cannot be set
        seconds = verdict.seconds
        memory = memory_request(t, evidence)[0]
        rows.append({"efficiency": 1.0 if confirmed else eff, "efficiency_estimate": measured,
                     "heldout_confirmed": confirmed, "progress": verdict.progress,
                     "batch_ratio": verdict.batch_ratio, "judged_by": verdict.judged_by,
                     "raw_job_time_s": verdict.raw, "length": verdict.length,
                     "trial_id": t.trial_id, "started_at": t.started_at or "",
                     "alone": not t.concurrent_with,
                     "gpus": a.gpus, "cpus": a.cpus, "batch_size": a.batch_size,
                     "workers": a.workers, "status": t.status, "replicas": a.replicas,
                     "global_batch": gb, "job_time_s": seconds,
                     "memory_gb": memory, "mem_gb_peak": t.mem_gb_peak,
                     "job_cost": seconds * hourly_cost(config, a.gpus, a.cpus, memory) / 3600,
                     "resource_share": resource_share(config, a.gpus, a.cpus, memory)})
    frame = _pool_replicates(pd.DataFrame(rows), config)
    if frame.empty:
        return frame
    frame["objective"] = score(frame, config, preference)
    return frame


@dataclass(frozen=True)
class _Judges:
    """What every trial's batch is judged against: the batches whose whole runs ended worse
    or as well (by the loss ``kind``), the job's length knob, and for an efficiency that is
    off on a job of steps (``blind``), whether only the script's own batch can be kept."""

    worse: dict[int, Any]
    as_well: dict[int, Any]
    kind: str
    job: JobLength | None
    blind: bool
    own_only: bool


def _on_ref(efficiency: TrialEfficiency | None) -> tuple[bool, int | None]:
    """Whether ``efficiency`` is in use, and the script's own batch it is relative to (None
    without one)."""
    if efficiency is None:
        return False, None
    return efficiency.on, efficiency.ref_batch


def _by_whole_runs(efficiency: TrialEfficiency | None) -> bool:
    """Whether whole runs' final losses judge the batches: where the efficiency is in use,
    and where it is off only because nothing measured how the script trains
    (``untried_batches``): a whole run's loss is then the one thing that did. L-BFGS showed
    no noise scale, yet its whole runs at 4x its batch ended at a lower test loss for less."""
    return efficiency is not None and (efficiency.on or efficiency.untried_batches)


def _judges(efficiency: TrialEfficiency | None, evidence: Sequence[TrialSummary],
            trials: Sequence[TrialSummary]) -> _Judges:
    on, ref = _on_ref(efficiency)
    job = efficiency.job if efficiency is not None else None
    # Efficiency off, a job of steps: a batch's whole job is still its own steps' samples, so
    # batches are compared as making equal progress per sample (the own batch's known) or not
    # at all (only the script's own batch kept where it ran; nothing to judge the others by).
    blind = not on and job is not None and job.unit == "steps"
    runs = _by_whole_runs(efficiency)
    return _Judges(trains_worse(evidence, ref) if runs else {},
                   trains_as_well(evidence, ref) if runs else {},
                   loss_kind(evidence, ref) if runs else HELDOUT, job, blind,
                   blind and not ref and any(t.allocation.global_batch is None for t in trials))


def _verdict(t: TrialSummary, seconds: float, eff: float, efficiency: TrialEfficiency | None,
             judges: _Judges) -> Judgement | None:
    """How trial ``t`` (its job ``seconds``) is judged; None where its batch is set aside
    before any job length is considered."""
    gb = t.allocation.global_batch
    if _set_aside(efficiency, gb, judges.worse, judges.as_well) or \
            (judges.own_only and gb is not None):
        return None
    on, ref = _on_ref(efficiency)
    if on or judges.blind or (gb is not None and int(gb) in judges.as_well):
        return judge(t, whole_job_seconds(t, seconds, judges.job), ref or None, eff, judges.job,
                     judges.worse, judges.as_well, judges.kind)
    return Judgement(seconds / max(eff, 1e-9), seconds)


def rejected_batches(trials: Sequence[TrialSummary], efficiency: TrialEfficiency | None,
                     cheaper_than: float | None = None) -> dict[int, str]:
    """Why each measured batch that no recommendation may use was set aside (its whole runs
    ended worse, its whole job makes less training and its length cannot be set, nothing
    measured how it trains): ``{batch: why}``; with ``cheaper_than``, only batches whose
    whole job at the script's length costs less than that many dollars."""
    if not _by_whole_runs(efficiency):
        return {}
    ref = _on_ref(efficiency)[1]
    judges = _judges(efficiency, trials, trials)
    out: dict[int, str] = {}
    for t in trials:
        seconds, gb = (job_time(t) if t.ok else None), t.allocation.global_batch
        if seconds is None or gb is None or int(gb) == ref or int(gb) in out:
            continue
        raw = whole_job_seconds(t, seconds, judges.job)
        if cheaper_than is not None and raw * (t.hourly_cost or 0.0) / 3600 >= cheaper_than:
            continue
        verdict = _verdict(t, seconds, assured_efficiency(efficiency, gb)[0], efficiency, judges)
        if verdict is None:
            out[int(gb)] = _set_aside_words(int(gb), efficiency, judges)
        elif not verdict.kept:
            out[int(gb)] = verdict.why
    return out


def _set_aside_words(batch: int, efficiency: TrialEfficiency | None, judges: _Judges) -> str:
    """Why :func:`_set_aside` left ``batch`` out, with the losses where whole runs decided."""
    loss = HELDOUT if judges.kind == HELDOUT else "training loss over the last tenth of steps"
    if batch in judges.worse:
        v, own = judges.worse[batch]
        return f"its whole runs ended at a {loss} of {v:.4g} against the own batch's {own:.4g}"
    if efficiency is not None and efficiency.untried_batches:
        return "nothing measured how it trains"
    if judges.own_only:
        return "the script's own batch is unknown, so nothing says how much it trains"
    near = min(judges.worse, key=lambda w: abs(w - batch), default=None)
    return (f"it lies beyond batch {near}, whose whole runs ended at a worse {loss}"
            if near is not None else "set aside")


def rejected_words(rejected: dict[int, str]) -> str:
    """One sentence for the report naming each cheaper batch not recommended, and why."""
    if not rejected:
        return ""
    return ("Not recommended although cheaper: " + "; ".join(
        f"batch {b}: {why}" for b, why in sorted(rejected.items())) + ".")


def _set_aside(efficiency: TrialEfficiency | None, gb: int | None, worse: dict[int, Any],
               as_well: dict[int, Any]) -> bool:
    """Whether a trial's global batch is left out of the choice: the job trains but nothing
    measured how this batch does (maybe worse) and no whole run of it ended as well, or its
    whole runs ended at a worse held-out loss than the script's own, or it lies beyond such a
    batch (:func:`beyond_worse`)."""
    ref = _on_ref(efficiency)[1]
    untried = (efficiency is not None and efficiency.untried_batches and gb not in (None, ref)
               and int(gb) not in as_well)
    return bool(untried or (gb is not None and int(gb) in worse)
                or (beyond_worse(gb, worse, ref) and int(gb) not in as_well))


def _pool_replicates(frame: pd.DataFrame, config: OptimizerConfig) -> pd.DataFrame:
    """One row per setting: repeated trials of a setting (the loop's confirmations) count by
    their mean time and their largest peak, under the id of the latest one. A single run on a
    shared machine can be 20% off; the best of several noisy single runs is biased low.

    A setting measured both alone and beside other trials (``concurrent_with``) counts by its
    runs alone: they measure what the job gets when it runs by itself. ``alone`` says whether
    a row's figures come from such runs."""
    if frame.empty:
        return frame
    keys = ["gpus", "cpus", "batch_size", "workers", "replicas"]
    alone_somewhere = frame.groupby(keys, dropna=False)["alone"].transform("any")
    frame = frame[frame["alone"] | ~alone_somewhere]
    frame = frame.assign(_order=range(len(frame)))
    grouped = frame.groupby(keys, dropna=False, sort=False)
    if grouped.ngroups == len(frame):
        return frame.drop(columns=["_order", "started_at"]).assign(replicates=1,
                                                                   time_rel_sd=float("nan"))
    rows = []
    for _, g in grouped:
        # the latest run names the setting, whatever order the trials came in
        last = g.sort_values(["started_at", "_order"]).iloc[-1].to_dict()
        memory = g["memory_gb"].max()
        seconds = float(g["job_time_s"].mean())
        spread = float(g["job_time_s"].std(ddof=1) / seconds) if len(g) > 1 else float("nan")
        raw = float(g["raw_job_time_s"].mean()) if "raw_job_time_s" in g else seconds
        last.update(job_time_s=seconds, raw_job_time_s=raw, memory_gb=memory, mem_gb_peak=g["mem_gb_peak"].max(),
                    job_cost=seconds * hourly_cost(config, last["gpus"], last["cpus"],
                                                   memory) / 3600,
                    resource_share=resource_share(config, last["gpus"], last["cpus"], memory),
                    replicates=len(g), time_rel_sd=spread)
        rows.append(last)
    return (pd.DataFrame(rows).sort_values("_order").drop(columns=["_order", "started_at"])
            .reset_index(drop=True))


def _oom_kwargs(trials: Sequence[TrialSummary], alloc: Allocation) -> dict[str, Any]:
    n, limit = _ooms(trials, alloc)
    return {"ooms": n, "limit_gb": limit}


def score(frame: pd.DataFrame, config: OptimizerConfig, preference: str | Sequence[float],
          best: Sequence[float] | None = None) -> np.ndarray:
    """The preference's objective of rows with ``job_cost``, ``job_time_s``, ``resource_share``;
    ``best`` are the normalisers of a weighted preference (default: the rows' own minima)."""
    if preference == "cost":
        return frame["job_cost"].to_numpy(dtype=float)
    if preference == "time":
        return frame["job_time_s"].to_numpy(dtype=float)
    w = config.multi_objective.vector(preference)
    objs = frame[["job_cost", "job_time_s", "resource_share"]].to_numpy(dtype=float)
    norm = np.asarray(best if best is not None else objs.min(axis=0), dtype=float)
    return (objs / np.where(norm > 0, norm, 1.0)) @ w


NOISE_FLOOR = 0.05
"""The least relative spread assumed of one run (its job time here, its log-throughput in
:mod:`optimizer.search.acquisition`): a single run shows no spread of its own and two runs
under-estimate it (on a shared 2-core machine single runs of one setting differ by 5-20%)."""


def _variance(row: Any) -> float:
    rel = row.get("time_rel_sd")
    rel = NOISE_FLOOR if rel is None or not np.isfinite(rel) else max(float(rel), NOISE_FLOOR)
    return (rel * float(row["objective"])) ** 2 / max(int(row.get("replicates", 1)), 1)


def separated(a: Any, b: Any) -> bool:
    """Whether two rows of :func:`objective_table` differ by more than twice the standard
    error of the difference of their objectives (each run's spread at least
    :data:`NOISE_FLOOR`); the closed loop races two settings that are not."""
    gap = abs(float(a["objective"]) - float(b["objective"]))
    return gap > 2.0 * math.sqrt(_variance(a) + _variance(b))


def best_measured(trials: Sequence[TrialSummary], config: OptimizerConfig,
                  preference: str | Sequence[float], runoff: Sequence[str] = (),
                  efficiency: TrialEfficiency | None = None
                  ) -> tuple[TrialSummary, dict[str, Any]]:
    """The trial with the lowest measured objective and its row of :func:`objective_table`
    (ties: the earlier trial): never a setting measured worse than another. ``runoff``: the ids
    of a run-off's trials (:mod:`optimizer.search.after_loop.runoff`); when any of them is
    usable, the choice is made by those runs alone, all taken in the same hour. Raises
    ValueError when no trial is usable."""
    table = pd.DataFrame()
    if runoff:
        ids = set(runoff)
        table = objective_table([t for t in trials if t.trial_id in ids], config, preference,
                                efficiency, evidence=trials)
    if table.empty:
        table = objective_table(trials, config, preference, efficiency)
    if table.empty:
        raise ValueError("no usable trial")
    row = table.iloc[int(np.argmin(table["objective"].to_numpy()))].to_dict()
    trial = next(t for t in trials if t.trial_id == row["trial_id"])
    return trial, row


def memory_request(trial: TrialSummary, trials: Sequence[TrialSummary]
                   ) -> tuple[float, MemoryNeed]:
    """The memory to request for ``trial``'s setting (GB) and what it covers: what the whole
    job needs (:func:`memory_need`), plus the margin, bumped after out-of-memory kills of the
    setting that no run explains (:func:`_ooms`)."""
    need = memory_need(trial, trials)
    return right_size_memory(need.gb, **_oom_kwargs(trials, trial.allocation)), need


def recommended_allocation(trial: TrialSummary, trials: Sequence[TrialSummary],
                           batch_settable: bool) -> Allocation:
    """The chosen trial's setting with the memory its whole job needs
    (:func:`memory_request`); a batch size the script cannot be told is left to the script
    (None)."""
    a = trial.allocation
    return Allocation(a.gpus, a.cpus, memory_request(trial, trials)[0],
                      a.batch_size if batch_settable else None, a.workers, a.replicas)


def memory_entry(trial: TrialSummary, trials: Sequence[TrialSummary]) -> dict[str, Any]:
    """``recommendation.json``'s ``memory``: the request, the peak it covers and the run that
    peak comes from (:meth:`MemoryNeed.to_dict`)."""
    request, need = memory_request(trial, trials)
    return need.to_dict(request, setting_peak(trial, trials))


def setting_peak(trial: TrialSummary, trials: Sequence[TrialSummary]) -> float:
    """The largest memory peak of ``trial`` and every usable run of its setting."""
    return max([t.mem_gb_peak for t in trials if t.ok and same_setting(t.allocation,
                                                                       trial.allocation)]
               + [trial.mem_gb_peak])


def assured_efficiency(efficiency: TrialEfficiency | None, batch: Any) -> tuple[float, float]:
    """``(judged, estimate)``: the statistical efficiency a batch other than the script's own
    is judged by, the low end of its 90% interval, and the point estimate.

    Changing the batch risks how well the job trains, and the estimate comes from a few
    noisy curves: Lightning's batch 128 read 1.00 (interval 0.84 to 1.00) from 23 losses and
    its whole job ended 7% worse; its batch 256 read about 0.5 and, run for the 8 epochs
    that implied, ended 1.7% worse for no saving. Judged at the low end, a batch wins only
    where it wins within what was measured, and a shorter job is given the epochs that
    reach the own batch's loss even at that end (issue 61)."""
    if efficiency is None:
        return 1.0, 1.0
    value = float(efficiency(batch))
    if batch is None or not efficiency.on or int(batch) == efficiency.ref_batch:
        return value, value
    _, low, _ = efficiency_source(efficiency, batch)
    return (min(value, float(low)) if low is not None and low > 0 else value), value


def efficiency_source(efficiency: TrialEfficiency | None, batch: Any) -> tuple[str, float | None, float | None]:
    """Where the efficiency in use at ``batch`` comes from, with its 90% interval where it
    has one: ``own batch``, ``measured`` (samples to a common loss), ``noise scale`` (the
    interval of the noise scale carried through its form), ``bound`` (a probe that stopped
    short of the own batch's loss: "at most"), or ``off``. The report shows it beside the
    value: a choice that rests on a wide interval may change with one more run."""
    if efficiency is None or not efficiency.on or batch is None:
        return "off", None, None
    b, value = int(batch), efficiency(batch)
    if b == efficiency.ref_batch:
        return "own batch", None, None
    m = efficiency.measured.get(b)
    if m is not None and m.value is not None and math.isclose(m.value, value):
        return "measured", m.low, m.high
    n = efficiency.noise
    if b in efficiency.prior and math.isclose(efficiency.prior[b], value) and n.ok:
        ends = [(phi + efficiency.ref_batch) / (phi + b) for phi in (n.low, n.high)
                if phi is not None and math.isfinite(phi)]
        return "noise scale", (min(ends) if len(ends) == 2 else None), (
            max(ends) if len(ends) == 2 else None)
    if b in efficiency.efficiency:
        return "bound", None, None
    return "noise scale", None, None


def goodput_comparison(trials: Sequence[TrialSummary], config: OptimizerConfig,
                       preference: str | Sequence[float], final: TrialSummary,
                       efficiency: TrialEfficiency | None) -> dict[str, Any]:
    """The recommended batch against the script's own (``efficiency.ref_batch``) at the same
    GPUs, CPUs and workers where both were measured (else the script's best): samples/s,
    statistical efficiency, goodput, and the time and cost to the same training progress.
    ``efficiency`` is a :class:`optimizer.search.goodput.efficiency.TrialEfficiency`."""
    out: dict[str, Any] = efficiency.summary() if efficiency is not None else {
        "decided_by": "nothing measured", "note": "Statistical efficiency was not measured."}
    table = objective_table(trials, config, preference, efficiency)
    ref = _on_ref(efficiency)[1]
    if table.empty or not ref:
        return out
    a = final.allocation
    mine = table[table["trial_id"] == final.trial_id]
    own = table[table["global_batch"] == ref]
    same = own[(own["gpus"] == a.gpus) & (own["cpus"] == a.cpus)
               & (own["workers"].fillna(-1) == (-1 if a.workers is None else a.workers))]
    own = same if not same.empty else own.sort_values("objective").head(1)
    rows = []
    for role, row in (("the script's own batch", own), ("recommended", mine)):
        if row.empty:
            continue
        r = row.iloc[0]
        trial = next(t for t in trials if t.trial_id == r["trial_id"])
        thr = float(trial.throughput or 0.0)
        batch = None if pd.isna(r["global_batch"]) else int(r["global_batch"])
        progress = (out.get("progress_per_sample") or {}).get(str(batch), {})
        source, low, high = efficiency_source(efficiency, batch)
        rows.append({"role": role, "trial_id": r["trial_id"], "batch_size": batch,
                     "cpus": int(r["cpus"]), "gpus": int(r["gpus"]), "throughput": thr,
                     "progress_per_sample": progress.get("value"),
                     "progress_low": progress.get("low"), "progress_high": progress.get("high"),
                     "efficiency": float(r["efficiency_estimate"]),
                     "efficiency_source": source,
                     "efficiency_low": low, "efficiency_high": high,
                     "efficiency_judged": float(r["efficiency"]),
                     "goodput": thr * float(r["efficiency_estimate"]),
                     "time_to_same_progress_s": float(r["job_time_s"]),
                     "cost_to_same_progress": float(r["job_cost"])})
    out["comparison"] = rows
    worse = trains_worse(trials, ref)
    if worse:
        out["heldout"] = {"set_aside": {str(b): {"loss": v, "own": own}
                                        for b, (v, own) in worse.items()},
                          "note": heldout_words(worse, loss_kind(trials, ref))}
    return out
