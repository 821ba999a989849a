"""From a fitted workload model to a recommendation: train the agents, grade them, pick a plan.

:func:`recommend` builds a :class:`envs.CloudEnvironment` over the workload model fitted to the
baseline trials (with the job's size, the SLA, the preference and the phases seen in the
baseline trace), trains REINFORCE and the multi-objective actor-critic on its noisy version,
and replays each greedy policy on the noise-free model, where the exact DP optimum and the best
static allocation are known. The plan of the best agent is the recommendation; if no agent beats
the best static allocation, that allocation is recommended instead and the result says so.

The real run that checks the recommendation uses one fixed allocation (a process cannot change
its thread count mid-run without a restart): the one the plan holds for most of the job.
The planned adjustments are reported beside it.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from optimizer.foundation.allocation import Allocation, describe_allocation, job_words
from optimizer.foundation.config import OptimizerConfig

AGENTS = ("reinforce", "morl")
PARETO_WEIGHTS = 11
"""Cost/time weight steps of the Pareto sweep (resource weight fixed at 0)."""


@dataclass
class PolicyOutcome:
    """A policy replayed on the noise-free model."""

    name: str
    total_return: float
    share_of_optimum: float
    total_time_s: float
    total_cost: float
    sla_ok: bool
    allocations: list[Allocation]
    train_seconds: float = 0.0
    episodes: int = 0
    heldout_return: float | None = None
    """Mean return on held-out noisy episodes (agents only)."""

    def summary(self) -> dict[str, Any]:
        return {"name": self.name, "return": self.total_return,
                "share_of_optimum": self.share_of_optimum, "time_s": self.total_time_s,
                "cost": self.total_cost, "sla_ok": self.sla_ok,
                "train_seconds": self.train_seconds, "episodes": self.episodes,
                "heldout_return": self.heldout_return}


@dataclass
class Recommendation:
    agent: str
    """Policy whose plan is recommended (``reinforce``, ``morl``, or ``best-static``)."""
    allocation: Allocation
    """The allocation held for most of the job: the one run for real."""
    initial: Allocation
    decisions: pd.DataFrame
    """One row per step of the recommended plan: action, reason, reward components."""
    outcomes: list[PolicyOutcome]
    pareto: pd.DataFrame
    curves: dict[str, pd.DataFrame] = field(default_factory=dict)
    predicted: dict[str, float] = field(default_factory=dict)
    sla_feasible: bool = True
    """Whether any allocation of the model meets the SLA (the DP optimum does)."""
    notes: list[str] = field(default_factory=list)
    plans: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Every policy's greedy episode on the noise-free model, a row per step (as
    ``decisions``), by policy name."""

    def outcome(self, name: str) -> PolicyOutcome:
        return next(o for o in self.outcomes if o.name == name)


def describe_change(before: Allocation, after: Allocation) -> str:
    """What an action did, bounds applied: ``CPUs 2→1, memory 6.5→5.5 GB`` or ``no change``."""
    parts = []
    for label, attr, unit in (("GPUs", "gpus", ""), ("CPUs", "cpus", ""),
                              ("memory", "memory_gb", " GB"), ("batch", "batch_size", "")):
        a, b = getattr(before, attr), getattr(after, attr)
        if a != b:
            parts.append(f"{label} {a:g}→{b:g}{unit}")
    return ", ".join(parts) or "no change"


def _replay(env: Any, act: Any, uncertainty: Any = None,
            confidence: Any = None) -> tuple[float, list[dict[str, Any]]]:
    """One greedy noise-free episode; a row per step with the decision and its outcome.

    ``uncertainty(obs, action)`` is the MC-dropout spread of the chosen action's probability and
    ``confidence(obs, action)`` that probability itself (for policies that have them).
    """
    obs, _ = env.reset(seed=0)
    rows, total, done, k = [], 0.0, False, 0
    while not done:
        before = env.current_allocation
        action = int(act(obs))
        spread = float(uncertainty(obs, action)) if uncertainty else None
        prob = float(confidence(obs, action)) if confidence else None
        obs, reward, done, trunc, info = env.step(action)
        done = done or trunc
        total += reward
        vec = info["reward_vector"]
        after = env.current_allocation
        rows.append({
            "step": k, "phase": info["phase"], "action": action,
            "description": env.actions.get_action_description(action),
            "effect": describe_change(before, after),
            "gpus": after.gpus, "cpus": after.cpus, "memory_gb": after.memory_gb,
            "batch_size": after.batch_size, "changed": after != before,
            "reward": float(reward), "r_cost": float(vec[0]), "r_time": float(vec[1]),
            "r_efficiency": float(vec[2]), "r_sla": float(vec[3]),
            "step_time_s": info["step_time_s"], "step_cost": info["step_cost"],
            "elapsed_s": info["elapsed_s"], "spent": info["cost"], "oom": info["oom"],
            "confidence": prob, "uncertainty": spread,
        })
        k += 1
    return total, rows


def _outcome(name: str, total: float, rows: list[dict[str, Any]], optimum: float,
             sla: Any, startup_s: float = 0.0) -> PolicyOutcome:
    """A policy's episode as the whole job: the environment's intervals plus the job's
    start-up once, priced at the first interval's allocation (the episode starts with the job
    running; on the H200 gpuresnet's 10 s start-up was two thirds of its 15-s job)."""
    t = rows[-1]["elapsed_s"] if rows else 0.0
    c = rows[-1]["spent"] if rows else 0.0
    if rows and startup_s > 0 and rows[0]["step_time_s"] > 0:
        t, c = t + startup_s, c + rows[0]["step_cost"] / rows[0]["step_time_s"] * startup_s
    ok = bool(rows) and not rows[-1]["oom"] and t <= sla.time_max and c <= sla.cost_max
    allocs = [Allocation(int(r["gpus"]), int(r["cpus"]), float(r["memory_gb"]),
                         int(r["batch_size"])) for r in rows]
    share = total / optimum if optimum > 0 else float("nan")
    return PolicyOutcome(name, float(total), float(share), float(t), float(c), ok, allocs)


def share_text(share: float) -> str:
    """A share of the optimum for people: "n/a" where the optimum's return is not positive."""
    return f"{share:.1%}" if math.isfinite(share) else "n/a"


def held_allocation(allocations: Sequence[Allocation]) -> Allocation:
    """The allocation a plan holds for the most steps (the later one on ties)."""
    counts = Counter(a.key() for a in allocations)
    best = max(counts.values())
    return next(a for a in reversed(allocations) if counts[a.key()] == best)


def pareto_sweep(env_config: Any) -> pd.DataFrame:
    """Cost and time of the DP optimum for cost/time weights from (1, 0) to (0, 1), and which
    of those points are Pareto-optimal (no other is cheaper and faster)."""
    from agents.pareto import pareto_mask
    from envs.oracle import optimal_policy

    rows = []
    for w in np.linspace(0.0, 1.0, PARETO_WEIGHTS):
        res = optimal_policy(env_config, preference=(float(w), float(1 - w), 0.0))
        held = held_allocation(res.allocations)
        rows.append({"w_cost": float(w), "w_time": float(1 - w), "time_s": res.total_time_s,
                     "cost": res.total_cost, "gpus": held.gpus, "cpus": held.cpus,
                     "memory_gb": held.memory_gb, "batch_size": held.batch_size,
                     "oom": res.oom})
    frame = pd.DataFrame(rows)
    frame["pareto"] = pareto_mask(frame[["cost", "time_s"]].to_numpy())
    return frame


def _timed(train: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    result = train()
    return result, time.perf_counter() - started


def recommend(env_config: Any, config: OptimizerConfig, *, time_budget_s: float,
              quiet: bool = True,
              map_fn: Callable[[list[Callable[[], Any]]], list[Any]] | None = None
              ) -> Recommendation:
    """Train both agents on ``env_config`` (noisy) and pick the plan (see module docstring).

    ``map_fn`` runs the agents' trainings (argument-free callables) and returns their results
    in order: default one after the other; an executor's ``map`` trains them side by side
    (:meth:`optimizer.trials.executors.ray_executor.RayExecutor.map`), each for the same budget."""
    from agents.train import (
        cloud_action_factors,
        evaluate,
        heldout_seeds,
        morl_act,
        morl_train_kwargs,
        recommended_config,
        reinforce_act,
        reinforce_train_kwargs,
        train_morl,
        train_reinforce,
    )
    from envs import CloudEnvironment
    from envs.oracle import best_static, optimal_policy

    clean = env_config.replace(noise=0.0)
    noisy = env_config.replace(noise=env_config.noise or 0.05)
    optimum = optimal_policy(clean)
    static = best_static(clean)
    resolved = CloudEnvironment(clean).resolved
    sla, startup = resolved.sla, resolved.restart_s  # the job's start-up, counted once

    def env_fn() -> Any:
        return CloudEnvironment(noisy)

    factors = cloud_action_factors(env_fn())
    outcomes: list[PolicyOutcome] = []
    curves: dict[str, pd.DataFrame] = {}
    plans: dict[str, list[dict[str, Any]]] = {}
    seeds = heldout_seeds(16)
    # The agents' own recipe (benchmarks/agents_quality.py measures it) on top of [rl]: the
    # learning rates, widths and annealing it sets are what trains them within a minute.
    seed = config.rl.seed
    trainers = {
        "reinforce": lambda: train_reinforce(
            env_fn, recommended_config("reinforce", seed, config.rl), quiet=quiet,
            time_budget_s=time_budget_s, action_factors=factors, **reinforce_train_kwargs()),
        "morl": lambda: train_morl(
            env_fn, env_config.preference, recommended_config("morl", seed, config.rl),
            config.multi_objective, time_budget_s=time_budget_s, quiet=quiet,
            action_factors=factors, **morl_train_kwargs()),
    }
    jobs = [lambda train=trainers[name]: _timed(train) for name in AGENTS]
    trained = (map_fn or (lambda fns: [f() for f in fns]))(jobs)
    for name, (result, seconds) in zip(AGENTS, trained, strict=True):
        agent = result.agent
        replay_env = CloudEnvironment(clean)
        if name == "reinforce":
            act_fn = reinforce_act(agent)
            greedy = lambda o, a=agent, e=replay_env: a.select_action(  # noqa: E731
                o, evaluate=True, mask=e.action_masks())
            spread = None
            prob = lambda o, u, a=agent, e=replay_env: a.action_probabilities(  # noqa: E731
                o, e.action_masks())[0][u]
        else:
            policy = agent.policy_index(env_config.preference)
            act_fn = morl_act(agent, policy)
            greedy = lambda o, a=agent, p=policy, e=replay_env: a.select_action(  # noqa: E731
                o, p, evaluate=True, uncertainty=False, mask=e.action_masks()).action

            def spread(o, u, a=agent, p=policy, e=replay_env):
                return a.select_action(
                    o, p, evaluate=True, uncertainty=True, mask=e.action_masks()).uncertainty

            def prob(o, u, a=agent, p=policy, e=replay_env):
                return a.select_action(
                    o, p, evaluate=True, uncertainty=False, mask=e.action_masks()).probs[u]
        total, rows = _replay(replay_env, greedy, spread, prob)
        out = _outcome(name, total, rows, optimum.total_return, sla, startup)
        out.train_seconds, out.episodes = seconds, result.episodes
        out.heldout_return = evaluate(act_fn, env_fn, seeds).mean_return
        outcomes.append(out)
        curves[name] = result.curve
        plans[name] = rows
    for name, res in (("best-static", static), ("optimal", optimum)):
        planned = iter(list(res.actions))
        total, rows = _replay(CloudEnvironment(clean), lambda o, it=planned: next(it))
        outcomes.append(_outcome(name, total, rows, optimum.total_return, sla, startup))
        plans[name] = rows
    best_agent = max((o for o in outcomes if o.name in AGENTS), key=lambda o: o.total_return)
    notes = []
    chosen = best_agent
    static_out = outcomes[-2]
    gpus = any(a.gpus for o in outcomes for a in o.allocations)
    static_words = (f"{describe_allocation(held_allocation(static_out.allocations), gpus=gpus)}, "
                    f"forecast at {job_words(static_out.total_cost, static_out.total_time_s)}"
                    if static_out.allocations else "")
    if best_agent.total_return < static_out.total_return - 1e-9:
        chosen = static_out
        notes.append(f"no agent beat the best static allocation (best agent {best_agent.name} "
                     f"reached {share_text(best_agent.share_of_optimum)} of the optimum); the "
                     "best static allocation is the plan" + (f": {static_words}" if static_words
                                                             else ""))
    elif best_agent.total_return <= static_out.total_return + 1e-9:
        # A tie is the static allocation's: the agent learned nothing a fixed choice lacks.
        chosen = static_out
        notes.append(f"{best_agent.name} tied with the best static allocation "
                     f"({share_text(best_agent.share_of_optimum)} of the optimum), so the plan "
                     "is the best static allocation" + (f": {static_words}" if static_words
                                                        else ""))
    best = outcomes[-1]  # the optimum, start-up included
    feasible = best.total_time_s <= sla.time_max and best.total_cost <= sla.cost_max \
        and not optimum.oom
    if not feasible:
        notes.append(f"the workload model predicts that no allocation meets the SLA (time ≤ "
                     f"{sla.time_max:.4g} s, cost ≤ ${sla.cost_max:.4g}); the agents plan the "
                     "allocation closest to it under the preference")
    held = held_allocation(chosen.allocations)
    return Recommendation(
        agent=chosen.name, allocation=held, initial=CloudEnvironment(clean).current_allocation,
        decisions=pd.DataFrame(plans[chosen.name]), outcomes=outcomes,
        pareto=pareto_sweep(clean), curves=curves, sla_feasible=feasible, notes=notes,
        predicted={"time_s": chosen.total_time_s, "cost": chosen.total_cost,
                   "optimal_time_s": best.total_time_s, "optimal_cost": best.total_cost},
        plans=plans,
    )
