"""Stage 4 of the main job, one round of it: fit the workload model, let the agents plan on it.

:func:`plan_round` is called by the closed loop (:mod:`optimizer.search.loop.rounds`) once per
round; its plan is recorded in ``rl/[round-K/]`` with what it was made from
(:mod:`optimizer.search.plan_cache`), so ``--resume`` reuses it while those inputs hold.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from optimizer.foundation.allocation import Allocation, describe_allocation, job_words
from optimizer.foundation.atomic_files import atomic_write_json, read_json
from optimizer.foundation.config import OptimizerConfig
from optimizer.foundation.errors import CloudoptError
from optimizer.search.baseline import rank_trials
from optimizer.search.core.port import SearchPort
from optimizer.search.goodput.efficiency import (
    NoiseScaleEstimate,
    TrialEfficiency,
    efficiency_from_trials,
)
from optimizer.search.goodput.job_length import JobLength
from optimizer.search.goodput.probe_target import depth_note, trained_records, training_depth
from optimizer.search.plan_cache import plan_inputs, reusable_plan
from optimizer.trials.records import TrialSummary

ENV_STEPS = 10
"""Adjustment intervals of the simulated job (one tenth of its work each)."""


@dataclass(frozen=True)
class RoundPlan:
    """One round's planning: the plan as recorded (``rl/[round-K/]recommendation.json``), the
    environment config of the fitted model (None when the model could not be fitted and the
    best measured trial stands in for the plan) and the efficiency measured for it."""

    plan: dict[str, Any]
    env_config: Any
    efficiency: TrialEfficiency


def plan_round(port: SearchPort, usable: list[TrialSummary], reference: TrialSummary,
               total: float | None, profile: Any, run_dir: Path, agent_seconds: float,
               round_k: int = 0) -> RoundPlan:
    """Stage 4 for one round: the efficiency measured on ``usable``, the model fitted to them
    and the agents' plan on it (the agents get half the budget after the first round; the plan
    is cached in ``rl/`` for resume)."""
    from optimizer.search.recommend import AGENTS, recommend, share_text

    out = run_dir / "rl" / (f"round-{round_k}" if round_k else "")
    cache = out / "recommendation.json"
    efficiency = measure_efficiency(usable, reference, run_dir, port.config.run.goodput,
                                    port.job_length)
    try:
        env_cfg = fit_env_config(port.config, port.user_preference, usable, reference, total,
                                 profile, efficiency)
    except CloudoptError as exc:
        env_cfg, reason = None, str(exc)
    budget = agent_seconds if round_k == 0 else agent_seconds / 2
    inputs = plan_inputs(port.user_preference, [t.trial_id for t in usable], budget,
                         port.config)
    recorded, why = reusable_plan(cache, inputs)
    if recorded is not None:
        port.say(f"agents (round {round_k}): reusing the recorded plan")
        return RoundPlan(recorded, env_cfg, efficiency)
    if why:
        port.say(f"agents (round {round_k}): planning again, {why}", always=True)
    if env_cfg is None:
        rec = _fallback(port, usable, reason)
    else:
        executor = port.trial_executor()
        together = "side by side, " if executor.name != "local" else ""
        episodes = port.config.run.agent_episodes
        episodes = episodes if round_k == 0 or not episodes else max(episodes // 2, 1)
        port.say(f"round {round_k}: training agents ({together}"
                 f"{f'{episodes} episodes' if episodes else f'{budget:g} s'} each) on the "
                 f"workload model fitted to {len(usable)} trials")
        r = recommend(env_cfg, port.config, time_budget_s=None if episodes else budget,
                      episodes=episodes or None, quiet=port.quiet, map_fn=executor.map)
        port.say("agents trained: " + ", ".join(
            f"{o.name} {share_text(o.share_of_optimum)} of the model's optimum"
            for o in r.outcomes if o.name in AGENTS)
            + f"; plan of {r.agent}: {describe_allocation(r.allocation)}")
        rec = _rec_dict(r, env_cfg.workload)
        _save_rl(out, r)
    atomic_write_json(cache, {**rec, "inputs": inputs})
    return RoundPlan(read_json(cache), env_cfg, efficiency)


def measure_efficiency(usable: list[TrialSummary], reference: TrialSummary,
                       run_dir: Path, goodput: bool = True, job: JobLength | None = None
                       ) -> TrialEfficiency:
    """Statistical efficiency of the script at its trials' batch sizes, relative to its own
    (the reference trial's) batch: off, and saying so, when the batch is unknown or
    ``[run].goodput`` is false. ``job``: the job's length knob
    (:class:`~optimizer.search.goodput.job_length.JobLength`), carried by the result."""
    eff = _measure_efficiency(usable, reference, run_dir, goodput)
    if goodput and eff.ref_batch and not eff.on and (reference.probe or {}).get("steps"):
        eff = dataclasses.replace(eff, untried_batches=True, note=(
            f"{eff.note} So only the script's own batch size is recommended, or a batch "
            "whose whole runs ended at a final loss as low: a batch's samples/s says nothing "
            "of how well it trains."))
    return dataclasses.replace(eff, job=job) if job is not None else eff


def _measure_efficiency(usable: list[TrialSummary], reference: TrialSummary,
                        run_dir: Path, goodput: bool) -> TrialEfficiency:
    ref = reference.allocation.batch_size
    if not goodput:
        return TrialEfficiency(0, NoiseScaleEstimate(why="[run].goodput is false"),
                               note="Statistical efficiency is off ([run].goodput = false): "
                               "batch sizes are compared by samples/s.")
    if ref is None:
        return TrialEfficiency(0, NoiseScaleEstimate(why="the script's batch size is unknown"),
                               note="Statistical efficiency is off: the script's batch size "
                               "is unknown.")
    eff = efficiency_from_trials(usable, run_dir, int(ref), trained_records(usable, run_dir))
    depth = training_depth(usable, run_dir)
    note = depth_note(usable, run_dir, depth)
    if not note:
        return eff
    # A probe that stopped short of the own batch's loss bounds its batch's efficiency,
    # whatever the curves' common stretch or the noise scale says (a batch that stalls).
    capped = {b: v for b, v in depth[2].items() if b in eff.efficiency and v < eff.efficiency[b]}
    return dataclasses.replace(
        eff, note=f"{eff.note} {note}", efficiency={**eff.efficiency, **capped},
        decided_by="measured progress" if capped else eff.decided_by)


def fit_env_config(config: OptimizerConfig, preference: Any, usable: list[TrialSummary],
                   reference: TrialSummary, total: float | None, profile: Any,
                   efficiency: TrialEfficiency | None = None) -> Any:
    """A CloudEnvironment over the workload model fitted to the trials (raises
    CloudoptError when they cannot identify it), started from the reference allocation.
    With ``efficiency`` measured, the model's time is to the same training progress as the
    script's own batch (goodput: throughput × statistical efficiency)."""
    from optimizer.search.calibrate import env_config_from_trials

    trials = [t for t in usable if t.allocation.batch_size is not None]
    batches = sorted({int(t.allocation.batch_size) for t in trials})
    phases: dict[str, Any] = {}
    if len(batches) == 1:  # the batch was not varied: the model and the agents keep it
        phases.update(batch_sizes=batches, batch_actions=False)
    if profile is not None:
        phases.update(phase_sequence=profile.sequence, phase_scales=profile.scales,
                      max_phases=max(4, len(profile.scales)))
    goodput = ({"noise_scale": efficiency.phi(), "ref_batch": efficiency.ref_batch}
               if efficiency is not None and efficiency.on else {})
    env = env_config_from_trials(
        trials, **goodput, resources=config.resources, sla=config.sla,
        preference=preference, n_steps=ENV_STEPS,
        preferences=config.multi_objective, noise=0.05, total_samples=total, **phases)
    if total:
        env = env.replace(total_samples=float(total))
    return env.replace(initial=initial_allocation(env, reference))


def initial_allocation(config: Any, reference: TrialSummary) -> Allocation:
    """Where the plan starts: the model's best static allocation, found by exact
    enumeration with no restart cost (nothing has run yet); the agents then plan the
    adjustments the phases call for. The reference trial's allocation if that fails."""
    from envs.oracle import best_static

    start = _right_sized(config, reference.allocation)
    try:
        target = best_static(config.replace(initial=start, restart_s=0.0))
    except CloudoptError:
        return reference.allocation
    return target.allocation or reference.allocation


def _right_sized(config: Any, alloc: Allocation) -> Allocation:
    """``alloc`` with the memory the model says it needs (with the request's margin) where
    that is less. A static allocation is walked to one level per interval, and on the H200's
    128 GB in 1-GB levels the 64 GB a 16-CPU probe ran under stayed near 60 GB in every plan,
    for a job that peaked at 2.4 GB."""
    from optimizer.foundation.memory import right_size_memory

    batch = alloc.batch_size or config.workload.params.ref_batch
    try:
        need = float(config.workload.predict(alloc.gpus, alloc.cpus, np.inf, batch)["mem_gb"])
    except (ValueError, KeyError, AttributeError):
        return alloc
    if config.resources is None or not need > 0:  # no memory measured: nothing to size by
        return alloc
    want = max(right_size_memory(need), config.resources.memory_min)
    return Allocation(alloc.gpus, alloc.cpus, min(alloc.memory_gb, want), alloc.batch_size,
                      alloc.workers, alloc.replicas)


def _fallback(port: SearchPort, usable: list[TrialSummary], reason: str) -> dict[str, Any]:
    ranked = rank_trials(usable, port.config, port.user_preference)
    best = ranked.iloc[0]
    alloc = Allocation(int(best["gpus"]), int(best["cpus"]), float(best["memory_gb"]),
                       None if pd.isna(best["batch_size"]) else int(best["batch_size"]))
    port.say(f"workload model not fitted ({reason}); recommending the best measured trial")
    return {"agent": "best-measured-trial", "allocation": alloc, "initial": alloc,
            "outcomes": [], "predicted": {}, "sla_feasible": None,
            "notes": [f"the workload model could not be fitted: {reason}; the best measured "
                      f"baseline setting ({describe_allocation(alloc)}: "
                      f"{job_words(best['job_cost'], best['job_time_s'])}) is recommended "
                      "and no agent was trained" + _all_measured(port.config.resources, usable)],
            "fit": None}


def _all_measured(res: Any, usable: list[TrialSummary]) -> str:
    """Words for a fallback that loses nothing: at one batch size, every CPU and GPU count the
    bounds allow was measured (a script without a batch flag on 2 cores has two settings)."""
    if len({t.allocation.batch_size for t in usable}) != 1:
        return ""
    seen = {(t.allocation.gpus, t.allocation.cpus) for t in usable}
    gpus = {g for g, _ in seen}
    every = {(g, c) for g in gpus for c in range(res.cpu_count_min, res.cpu_count_max + 1)}
    if not every <= seen or len(gpus) < res.gpu_count_max - res.gpu_count_min + 1:
        return ""
    return (": every setting these bounds allow at that batch was measured, so no model could "
            "add a better one")


def _rec_dict(r: Any, fitted: Any) -> dict[str, Any]:
    pred = fitted.predict_trial(r.allocation)
    fit = fitted.fit_report_.to_dict() if fitted.fit_report_ is not None else None
    return {"agent": r.agent, "allocation": r.allocation, "initial": r.initial,
            "outcomes": [o.summary() for o in r.outcomes],
            "predicted": {**r.predicted, "throughput": pred["throughput"],
                          "mem_gb": pred["mem_gb"]},
            "sla_feasible": r.sla_feasible, "notes": list(r.notes), "fit": fit,
            "planned_adjustments": r.decisions.loc[r.decisions["changed"], [
                "step", "description", "gpus", "cpus", "memory_gb", "batch_size"]
            ].to_dict("records")}


def _save_rl(out: Path, r: Any) -> None:
    from optimizer.foundation.atomic_files import atomic_write_csv

    atomic_write_csv(out / "decisions.csv", r.decisions)
    atomic_write_csv(out / "pareto_sweep.csv", r.pareto)
    for name, curve in r.curves.items():
        atomic_write_csv(out / f"curve_{name}.csv", curve)


__all__ = ["RoundPlan", "fit_env_config", "initial_allocation", "plan_round"]
