"""The report's answer and its closed-loop section: what to run, what it saves, how each round
went, the final choice and the memory it requests (with the run that memory comes from).

Every figure here may be missing (a fit without an R², a resumed run's recommendation written
before a field existed, a job whose time was never measured): :func:`fmt` renders such a
figure as "n/a", so the report always renders what it has.
"""

from __future__ import annotations

from typing import Any

from optimizer.foundation.allocation import Allocation, describe_allocation, job_words
from optimizer.foundation.job import Preference
from optimizer.foundation.result import Recommendation
from optimizer.reports.render import Report, fmt
from optimizer.trials.records import TrialSummary, job_cost, job_time


def _alloc(value: Any) -> Allocation:
    return Allocation(**value) if isinstance(value, dict) else value


def _short(a: Allocation) -> str:
    """``g0 c2 b64`` (`` w0`` where the workers are set) for the closed loop's table."""
    w = "" if a.workers is None else f" w{a.workers}"
    return f"g{a.gpus} c{a.cpus} b{a.batch_size or 'default'}{w}"


def _change(new: float | None, old: float | None, less: str, more: str) -> str:
    if not new or not old:
        return "not comparable"
    ratio = new / old - 1
    return f"{abs(ratio):.0%} {less if ratio < 0 else more}" if abs(ratio) >= 0.005 else "same"


def answer(rec: Recommendation, preference: Preference, reference: TrialSummary,
           alloc: Allocation, gpus: bool = False) -> str:
    """What to run, what it saves against the default allocation, and how it was verified (in
    words and dollars: the trial ids are in the tables below)."""
    lines = [f"Run it with {describe_allocation(alloc, gpus=gpus)}."]
    m, t0, c0 = rec.measured, job_time(reference), job_cost(reference)
    if m and t0 and c0 and m.get("job_cost") is not None and m.get("job_time_s") is not None:
        lines.append(
            f"Measured: {job_words(m['job_cost'], m['job_time_s'], whole=False)} per job, "
            f"{_change(m['job_cost'], c0, 'cheaper', 'dearer')} and "
            f"{_change(m['job_time_s'], t0, 'faster', 'slower')} than the default allocation "
            f"({describe_allocation(reference.allocation, gpus=gpus)}: "
            f"{job_words(c0, t0, whole=False)}).")
    rounds, fit = rec.rounds, rec.fit or {}
    how = "Verified by real runs of this setting" + (
        f" (the job's time and cost {m['time_is']})"
        if (m.get("time_is") or "measured") != "measured" else "")
    loop = sum(1 for row in rounds if row.get("trial"))
    lines.append(f"{how}: the best measured of the run's trials for '{preference}', "
                 f"{loop} of them chosen by the closed loop"
                 + (f"; workload-model error up to {fmt(fit.get('max_rel_error'), '.0%')} "
                    f"over {fit.get('n_trials')} trials" if fit.get("max_rel_error") is not None
                    else "; no workload model could be fitted") + ".")
    lines.append("Deploy: k8s-job.yaml (a Job with these requests and a VerticalPodAutoscaler "
                 "bounded by the measured peaks).")
    if alloc.replicas > 1:
        lines.append(f"Distributed: trainjob.yaml (a Kubeflow TrainJob of {alloc.replicas} "
                     "nodes, one torchrun worker each, on the torch-distributed runtime).")
    return "\n".join(lines)


def memory_words_paragraph(mem: dict[str, Any]) -> str:
    """The memory request, the peak it covers and the run that peak comes from
    (``recommendation.json``'s ``memory``; an entry written before ``why`` existed says
    what it has)."""
    why = mem.get("why") or "measured on the chosen allocation"
    slack = fmt(mem.get("slack"), ".0f", scale=100, unit="%")
    return (f"Memory: request {fmt(mem.get('request_gb'), '.2f', unit=' GB')} for a peak of "
            f"{fmt(mem.get('peak_gb'), '.2f', unit=' GB')}, {why}; the peak + 15%, rounded up "
            f"to 1/16 of itself (slack {slack}). A probe's peak is what the job needs at least: "
            "the request covers the largest peak a whole run reached at this batch size, or, "
            "without one, the probes' memory growth projected over the whole job.")


def rounds_section(r: Report, rec: Recommendation) -> None:
    """Each closed-loop round: what was planned, predicted and measured, and the final choice."""
    r.heading("Closed loop: planned, predicted, measured")
    fit = rec.fit or {}
    if fit:
        r.paragraph(f"Workload fit (latest round): R² throughput "
                    f"{fmt(fit.get('r2_throughput'), '.3f')}, largest error "
                    f"{fmt(fit.get('max_rel_error'), '.1f', scale=100, unit='%')} over "
                    f"{fit.get('n_trials') if fit.get('n_trials') is not None else 'n/a'} "
                    "trials.")
    rows = []
    for row in rec.rounds:
        p = row.get("planned")  # a budget stop plans nothing
        a = row.get("measured_allocation") if row.get("trial") else None
        outside = row.get("plan_outside_measured_range") or []
        rows.append({"round": row.get("round"), "proposed by": row.get("proposed_by"),
                     "planned": (_short(_alloc(p)) if p else "-")
                     + (f" (beyond the measured range: {', '.join(outside)})" if outside else ""),
                     "measured": _short(_alloc(a)) if a else "-",
                     "why": row.get("why", ""),
                     "spread of the plan's objective": row.get("plan_spread"),
                     "predicted samples/s": row.get("predicted_throughput"),
                     "measured samples/s": row.get("measured_throughput"),
                     "error": row.get("rel_error")})
    if rows:
        r.table(rows)
    if rec.memory:
        r.paragraph(memory_words_paragraph(rec.memory))
    if rec.choice:
        r.paragraph(f"Final choice: {rec.choice}.")


__all__ = ["answer", "memory_words_paragraph", "rounds_section"]
