"""Data-parallel workers, chosen by goodput as Pollux chooses replicas: measured, then modelled.

A script launched by torchrun (``--launcher torchrun``) runs its closed loop with one worker,
where the workload model is fitted. Then, as the data-loader workers sweep does (the stage
:class:`WorkersScaling`, right after it), the best setting so far is measured at other worker
counts (:func:`replica_levels`, up to
``--workers-max``): each count at the same per-worker batch (the global batch grows, and with it
the steps' statistical efficiency falls) and at the per-worker batch that keeps the global one
(no loss of efficiency; each worker computes less). The cores are the setting's, split between
the workers, and also, where the machine has them, the setting's cores for each worker.

Those trials fit the communication term of the workload model (:func:`fit_sync`, Pollux's
``T_s = alpha_r + beta_r * max(r - 2, 0)``, read off each measured step time after the model's
compute time at the worker's cores and local batch), and compete for the final choice with the
others by their time and cost to the same loss: the efficiency of their *global* batch decides
how far scaling out pays. :func:`scaling_curve` gives the report's curve: the model's goodput,
job time and cost against the workers, with the measured points.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from optimizer.foundation.allocation import Allocation, describe_allocation
from optimizer.search.budget import runoff_reserve
from optimizer.search.choice import hourly_cost, objective_table
from optimizer.search.core.state import Proposal, SearchState, StopReason, drive, sweep_row
from optimizer.search.planning import measure_efficiency
from optimizer.trials.launchers.launch_rule import backend_error
from optimizer.trials.records import TrialSummary, job_time

PREFIX = "replicas"
PROPOSER = "workers-scaling"


def replica_levels(workers_max: int, cpus: int, cpu_max: int | None) -> list[int]:
    """Worker counts beyond one: powers of two up to ``workers_max`` where each worker has a
    core (of the setting's ``cpus``, or of ``cpu_max`` when each gets the setting's)."""
    room = max(int(cpus), int(cpu_max or cpus))
    out, r = [], 2
    while r <= int(workers_max) and r <= room:
        out.append(r)
        r *= 2
    return out


def scaled_settings(best: Allocation, levels: Sequence[int],
                    cpu_max: int | None) -> list[tuple[Allocation, str]]:
    """``(allocation, why)`` per worker count: the same per-worker batch and the per-worker
    batch that keeps the global one, on the setting's cores split (where each worker gets one)
    and on the setting's cores for each worker (where the machine has them)."""
    out: list[tuple[Allocation, str]] = []
    b = best.batch_size
    for r in levels:
        cores = [(best.cpus, "its cores split between them")] if best.cpus >= r else []
        if cpu_max and best.cpus * r <= cpu_max and best.cpus * r != best.cpus:
            cores.append((best.cpus * r, f"{best.cpus} cores each"))
        batches = [(b, "the same batch each (a larger global batch)")]
        if b is not None and b % r == 0 and b // r >= 1:
            batches.append((b // r, f"batch {b // r} each (the same global batch {b})"))
        for c, c_why in cores:
            for wb, b_why in batches:
                gpus = best.gpus * r if best.gpus else 0
                alloc = dataclasses.replace(best, replicas=r, cpus=int(c), batch_size=wb,
                                            gpus=gpus, memory_gb=best.memory_gb * r)
                out.append((alloc, f"{r} workers, {c_why}, {b_why}"))
    return out


class ScalingSweep:
    """The best measured one-worker setting at :func:`scaled_settings`, one per proposal; none
    for a script not launched by torchrun or with ``--workers-max`` 1. :class:`BackendFailed`
    stops it."""

    name = PROPOSER

    def __init__(self, state: SearchState) -> None:
        self.queue = _proposals(state)

    def propose(self, state: SearchState) -> Proposal | None:
        return self.queue.pop(0) if self.queue else None


class BackendFailed:
    """A multi-worker trial failed on the distributed backend (:func:`backend_fallback`): the
    other worker counts would fail alike, and the search goes on with one worker. Silent and
    unrecorded here: the pipeline adds :func:`backend_fallback`'s note to the
    recommendation's."""

    name = "backend-failed"

    def check(self, state: SearchState) -> StopReason | None:
        note = backend_fallback(state.trials)
        return None if note is None else StopReason(self.name, note)


def backend_fallback(trials: Sequence[TrialSummary]) -> str | None:
    """The note for a multi-worker trial that failed on the distributed backend
    (:func:`optimizer.trials.launchers.launch_rule.backend_error`): the workers were not
    measured further and the job is chosen among one-worker settings; None where none did."""
    for t in trials:
        why = None if t.ok or t.allocation.replicas < 2 else backend_error(t.stderr_tail or "")
        if why is not None:
            return (f"measured single-process: the {t.allocation.replicas}-worker trial "
                    f"{t.trial_id} failed on the distributed backend ({why}), so no more "
                    "workers were tried")
    return None


def _proposals(state: SearchState) -> list[Proposal]:
    port, launch = state.port, state.job.spec.launch
    if launch.launcher != "torchrun" or launch.workers_max < 2:
        return []
    workers_max = launch.workers_max
    single = [t for t in state.trials if t.ok and t.allocation.replicas == 1]
    table = objective_table(single, port.config, port.user_preference, state.efficiency)
    if table.empty:
        return []
    top = table.iloc[int(table["objective"].to_numpy().argmin())]
    best = next(t.allocation for t in single if t.trial_id == top["trial_id"])
    cpu_max = port.config.resources.cpu_count_max
    settings = scaled_settings(best, replica_levels(workers_max, best.cpus, cpu_max), cpu_max)
    budget = port.budget
    if budget is not None:
        settings = settings[: budget.limit(len(settings),
                                           runoff_reserve(port.config.run, budget.total))]
    said = describe_allocation(best)
    return [Proposal(a, PROPOSER, f"the best one-worker setting ({said}) as {why}",
                     prefix=PREFIX) for a, why in settings]


def sweep_replicas(state: SearchState) -> list[TrialSummary]:
    """Measure the best one-worker setting at other worker counts (module doc); the new trials
    join ``state.trials`` and ``state.rounds`` and are returned."""
    return drive(state, ScalingSweep(state), sweep_row, (BackendFailed(),))


class WorkersScaling:
    """Stage: the scaling sweep (:func:`sweep_replicas`), each of its trials credited to it;
    the efficiency is measured again with their global batches."""

    name = PROPOSER

    def run(self, state: SearchState) -> None:
        scaled = sweep_replicas(state)
        for trial in scaled:
            state.proposer[trial.trial_id] = PROPOSER
        eff, job = state.efficiency, state.job
        if scaled and eff is not None and eff.on:  # their global batches' efficiency
            state.efficiency = measure_efficiency([t for t in state.trials if t.ok],
                                                  job.reference, job.run_dir,
                                                  state.port.config.run.goodput, eff.job)


# --------------------------------------------------------------------------------------------
# The communication term and the scaling curve
# --------------------------------------------------------------------------------------------


def _compute_seconds(model: Any, a: Allocation) -> float:
    """The model's step time of ``a`` without synchronisation (its compute on each worker's
    cores and local batch)."""
    p = dataclasses.replace(model.params, alpha_r=0.0, beta_r=0.0)
    quiet = dataclasses.replace(model, params=p)
    return float(quiet.predict(a.gpus, a.cpus, a.memory_gb, a.global_batch,
                               replicas=a.replicas)["step_time"])


def sync_points(model: Any, trials: Sequence[TrialSummary]) -> list[tuple[int, float]]:
    """``(workers, synchronisation seconds per step)`` of each measured multi-worker trial:
    its step time (global batch over its throughput) less the model's compute time, undone
    through the model's overlap exponent ``gamma``."""
    gamma = float(model.params.gamma)
    out = []
    for t in trials:
        a = t.allocation
        if not t.ok or a.replicas < 2 or not t.throughput or a.global_batch is None:
            continue
        step = a.global_batch / float(t.throughput)
        compute = _compute_seconds(model, a)
        out.append((a.replicas, max(step**gamma - compute**gamma, 0.0) ** (1.0 / gamma)))
    return out


def fit_sync(model: Any, trials: Sequence[TrialSummary]) -> tuple[Any, list[tuple[int, float]]]:
    """``model`` with its communication term fitted to the multi-worker trials (least squares
    of ``alpha_r + beta_r * max(r - 2, 0)``; ``beta_r`` only with two worker counts above two),
    and the points it was fitted to; ``model`` unchanged without any."""
    points = sync_points(model, trials)
    if not points:
        return model, points
    r = np.array([p[0] for p in points], dtype=float)
    s = np.array([p[1] for p in points], dtype=float)
    x = np.maximum(r - 2.0, 0.0)
    if len(set(x[x > 0])) >= 2 or (len(set(x)) >= 2 and (x > 0).sum() >= 2):
        beta, alpha = np.polyfit(x, s, 1)
        alpha, beta = max(float(alpha), 0.0), max(float(beta), 0.0)
    else:
        alpha, beta = float(s.mean()), 0.0
    params = dataclasses.replace(model.params, alpha_r=alpha, beta_r=beta)
    return dataclasses.replace(model, params=params), points


def _overhead(trials: Sequence[TrialSummary], total: float | None) -> float:
    """The seconds of a job outside its steady steps (start-up, the launcher, the exit): the
    median over one-worker trials of their job time less their samples at their rate."""
    gaps = [job_time(t) - float(total) / float(t.throughput) for t in trials
            if total and t.throughput and job_time(t) is not None]
    return max(float(np.median(gaps)), 0.0) if gaps else 0.0


def scaling_curve(model: Any, best: Allocation, trials: Sequence[TrialSummary],
                  workers_max: int, config: Any, preference: Any, efficiency: Any
                  ) -> dict[str, Any]:
    """The report's scaling curve: for each worker count up to ``workers_max`` (the best
    setting's per-worker cores and batch), the fitted model's throughput, the efficiency of the
    global batch, goodput, job time and cost; beside it each measured trial's time and cost to
    the same loss (from the objective table). ``model`` is the fitted workload model; without
    one (it could not be fitted) the measured points alone."""
    fitted, points = fit_sync(model, trials) if model is not None else (None, [])
    per_worker_cpus = max(best.cpus // max(best.replicas, 1), 1)
    one = dataclasses.replace(best, replicas=1, cpus=per_worker_cpus,
                              memory_gb=best.memory_gb / max(best.replicas, 1),
                              gpus=best.gpus // max(best.replicas, 1) if best.gpus else 0)
    table = objective_table([t for t in trials if t.ok], config, preference, efficiency)
    ref = table[table["replicas"] == 1] if not table.empty else table
    ref_row = ref.loc[ref["trial_id"].isin([t.trial_id for t in trials
                                            if t.allocation == one])] if not ref.empty else ref
    # each worker's memory: the one-worker setting's request (what its whole job needs)
    memory = float(ref_row["memory_gb"].max()) if not ref_row.empty else one.memory_gb
    modelled = []
    for r in range(1, max(int(workers_max), 1) + 1 if fitted is not None else 1):
        a = dataclasses.replace(one, replicas=r, cpus=one.cpus * r, memory_gb=one.memory_gb * r,
                                gpus=one.gpus * r)
        pred = fitted.predict(a.gpus, a.cpus, a.memory_gb, a.global_batch, replicas=r)
        eff = float(efficiency(a.global_batch)) if efficiency is not None else 1.0
        modelled.append({"replicas": r, "cpus": a.cpus, "batch_per_worker": a.batch_size,
                         "global_batch": a.global_batch,
                         "throughput": float(pred["throughput"]), "efficiency": eff,
                         "goodput": float(pred["throughput"]) * eff})
    total = next((t.total_samples for t in trials if t.total_samples), None)
    overhead = _overhead([t for t in trials if t.ok and t.allocation.replicas == 1], total)
    for row in modelled:
        if total and row["goodput"] > 0:
            row["job_time_s"] = overhead + float(total) / row["goodput"]
            row["job_cost"] = row["job_time_s"] / 3600 * hourly_cost(
                config, one.gpus * row["replicas"], row["cpus"], memory * row["replicas"])
    measured = [] if table.empty else [
        {"trial_id": r["trial_id"], "replicas": int(r["replicas"]), "cpus": int(r["cpus"]),
         "batch_per_worker": None if r["batch_size"] is None else int(r["batch_size"]),
         "global_batch": None if r["global_batch"] is None else int(r["global_batch"]),
         "job_time_s": float(r["job_time_s"]), "job_cost": float(r["job_cost"]),
         "efficiency": float(r["efficiency"])} for _, r in table.iterrows()]
    return {"alpha_r": None if fitted is None else float(fitted.params.alpha_r),
            "beta_r": None if fitted is None else float(fitted.params.beta_r),
            "sync_points": [{"replicas": r, "sync_s": s} for r, s in points],
            "reference": ref_row["trial_id"].tolist() if not ref_row.empty else [],
            "modelled": modelled, "measured": measured}


__all__ = ["PREFIX", "PROPOSER", "BackendFailed", "ScalingSweep", "WorkersScaling",
           "backend_fallback", "fit_sync", "replica_levels", "scaled_settings", "scaling_curve",
           "sweep_replicas", "sync_points"]
