"""From a fitted workload model to a recommendation: train the agents, grade them, pick a plan.

:func:`recommend` builds a :class:`envs.CloudEnvironment` over the workload model fitted to the
baseline trials (with the job's size, the SLA, the preference and the phases seen in the
baseline trace), trains every registered agent (:mod:`agents.registry`: REINFORCE and the
multi-objective actor-critic) on its noisy version, and replays each greedy policy on the
noise-free model, where the exact DP optimum and the best static allocation are known. The plan
of the best agent is the recommendation; if no agent beats the best static allocation, that
allocation is recommended instead and the result says so.

The real run that checks the recommendation uses one fixed allocation (a process cannot change
its thread count mid-run without a restart): the one the plan holds for most of the job.
The planned adjustments are reported beside it.
"""

from __future__ import annotations

import functools
import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from agents.registry import (
    REGISTRY,
    Budget,
    TrainedAgent,
    TrainSetup,
    cloud_action_factors,
    registered,
)
from optimizer.foundation.allocation import Allocation, describe_allocation, job_words
from optimizer.foundation.config import OptimizerConfig

AGENTS = REGISTRY.keys()
"""The names of the agents :func:`recommend` trains: a live view of the registry, so an agent
registered later is in it."""
BEST_STATIC = "best-static"
OPTIMAL = "optimal"
"""The two baselines every agent is compared with: the best fixed allocation and the DP optimum
(both on the noise-free model)."""
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
    """Policy whose plan is recommended: a registered agent's name, or ``best-static``."""
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


Judge = Callable[[np.ndarray, int], tuple[float | None, float | None]]
"""``judge(obs, action)``: the chosen action's probability and its MC-dropout spread (None
where the policy has no such figure)."""


def _replay(env: Any, act: Callable[[np.ndarray], int],
            judge: Judge | None = None) -> tuple[float, list[dict[str, Any]]]:
    """One greedy noise-free episode; a row per step with the decision and its outcome."""
    obs, _ = env.reset(seed=0)
    rows, total, done, k = [], 0.0, False, 0
    while not done:
        before = env.current_allocation
        action = int(act(obs))
        prob, spread = judge(obs, action) if judge else (None, None)
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


def _replay_agent(env: Any, agent: TrainedAgent) -> tuple[float, list[dict[str, Any]]]:
    """:func:`_replay` of a trained agent, each observation asked as a batch of one."""
    envs = [env]

    def act(obs: np.ndarray) -> int:
        return int(agent.act(obs[None], envs)[0])

    def judge(obs: np.ndarray, action: int) -> tuple[float | None, float | None]:
        # The spread first: its dropout passes draw from torch's global generator, and
        # this order is the one the recorded seeded runs were made with.
        spread = agent.uncertainty(obs[None], envs)
        prob = float(agent.action_probabilities(obs[None], envs)[0][action])
        return prob, None if spread is None else float(spread[0])

    return _replay(env, act, judge)


def _replay_actions(env: Any, actions: Sequence[int]) -> tuple[float, list[dict[str, Any]]]:
    """:func:`_replay` of a fixed sequence of actions (a baseline's plan)."""
    planned = iter(list(actions))
    return _replay(env, lambda obs: next(planned))


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


def _timed(train: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    started = time.perf_counter()
    result = train(*args)
    return result, time.perf_counter() - started


def _in_order(jobs: list[Callable[[], Any]]) -> list[Any]:
    return [job() for job in jobs]


def recommend(env_config: Any, config: OptimizerConfig, *, time_budget_s: float | None,
              episodes: int | None = None, quiet: bool = True,
              map_fn: Callable[[list[Callable[[], Any]]], list[Any]] | None = None
              ) -> Recommendation:
    """Train every registered agent on ``env_config`` (noisy) and pick the plan (see module
    docstring).

    Each agent trains for ``time_budget_s`` of wall time or ``episodes`` (default: its recipe's),
    whichever ends first; with ``time_budget_s=None`` and a number of episodes, a seeded run
    gives the same recommendation every time. ``map_fn`` runs the agents' trainings
    (argument-free callables) and returns their results in order: default one after the
    other; an executor's ``map`` trains them side by side
    (:meth:`optimizer.trials.executors.ray_executor.RayExecutor.map`), each for the same budget."""
    from envs import CloudEnvironment
    from envs.oracle import best_static, optimal_policy

    clean = env_config.replace(noise=0.0)
    noisy = env_config.replace(noise=env_config.noise or 0.05)
    optimum = optimal_policy(clean)
    resolved = CloudEnvironment(clean).resolved
    sla, startup = resolved.sla, resolved.restart_s  # the job's start-up, counted once

    def env_fn() -> Any:
        return CloudEnvironment(noisy)

    def graded(name: str, total: float, rows: list[dict[str, Any]]) -> PolicyOutcome:
        return _outcome(name, total, rows, optimum.total_return, sla, startup)

    # Every agent gets the same setup and budget; its own config's defaults (measured by
    # benchmarks/agents_quality.py) take from [rl] what they leave to it, inside its train.
    setup = TrainSetup(env_config.preference, config.rl, config.multi_objective,
                       cloud_action_factors(env_fn()), quiet)
    budget = Budget(time_budget_s, episodes)
    specs = registered()
    jobs = [functools.partial(_timed, spec.train, env_fn, setup, budget) for spec in specs]
    trained = (map_fn or _in_order)(jobs)
    agents, curves, plans = _graded_agents(specs, trained, clean, env_fn, graded)
    baselines: dict[str, PolicyOutcome] = {}
    for name, res in ((BEST_STATIC, best_static(clean)), (OPTIMAL, optimum)):
        total, rows = _replay_actions(CloudEnvironment(clean), res.actions)
        baselines[name] = graded(name, total, rows)
        plans[name] = rows
    outcomes = [*agents, *baselines.values()]
    gpus = any(a.gpus for o in outcomes for a in o.allocations)
    chosen, notes = _choose(agents, baselines[BEST_STATIC], gpus)
    best = baselines[OPTIMAL]  # start-up included
    feasible = _sla_feasible(best, optimum.oom, sla, notes)
    return Recommendation(
        agent=chosen.name, allocation=held_allocation(chosen.allocations),
        initial=CloudEnvironment(clean).current_allocation,
        decisions=pd.DataFrame(plans[chosen.name]), outcomes=outcomes,
        pareto=pareto_sweep(clean), curves=curves, sla_feasible=feasible, notes=notes,
        predicted={"time_s": chosen.total_time_s, "cost": chosen.total_cost,
                   "optimal_time_s": best.total_time_s, "optimal_cost": best.total_cost},
        plans=plans,
    )


def _graded_agents(specs: Sequence[Any], trained: list[Any], clean: Any,
                   env_fn: Callable[[], Any], graded: Callable[..., PolicyOutcome]
                   ) -> tuple[list[PolicyOutcome], dict[str, pd.DataFrame],
                              dict[str, list[dict[str, Any]]]]:
    """Each trained agent replayed on the noise-free model and graded, its training time and
    episodes, its return on held-out noisy seeds; the outcomes, learning curves and plans."""
    from agents.evaluate import evaluate, heldout_seeds
    from envs import CloudEnvironment

    agents: list[PolicyOutcome] = []
    curves: dict[str, pd.DataFrame] = {}
    plans: dict[str, list[dict[str, Any]]] = {}
    seeds = heldout_seeds(16)
    for spec, (result, seconds) in zip(specs, trained, strict=True):
        total, rows = _replay_agent(CloudEnvironment(clean), result.agent)
        out = graded(spec.name, total, rows)
        out.train_seconds, out.episodes = seconds, result.episodes
        out.heldout_return = evaluate(result.agent.act, env_fn, seeds).mean_return
        agents.append(out)
        curves[spec.name] = result.curve
        plans[spec.name] = rows
    return agents, curves, plans


def _sla_feasible(best: PolicyOutcome, oom: bool, sla: Any, notes: list[str]) -> bool:
    """Whether the model's optimum meets the SLA; where not, a note says the agents plan the
    allocation closest to it."""
    feasible = best.total_time_s <= sla.time_max and best.total_cost <= sla.cost_max \
        and not oom
    if not feasible:
        notes.append(f"the workload model predicts that no allocation meets the SLA (time ≤ "
                     f"{sla.time_max:.4g} s, cost ≤ ${sla.cost_max:.4g}); the agents plan the "
                     "allocation closest to it under the preference")
    return feasible


def _choose(agents: list[PolicyOutcome], static: PolicyOutcome,
            gpus: bool) -> tuple[PolicyOutcome, list[str]]:
    """The best agent's outcome, or the best static allocation's where no agent beats it; and
    the notes that say so."""
    best_agent = max(agents, key=lambda o: o.total_return)
    static_words = (f"{describe_allocation(held_allocation(static.allocations), gpus=gpus)}, "
                    f"forecast at {job_words(static.total_cost, static.total_time_s)}"
                    if static.allocations else "")
    which = f": {static_words}" if static_words else ""
    share = share_text(best_agent.share_of_optimum)
    if best_agent.total_return < static.total_return - 1e-9:
        return static, [f"no agent beat the best static allocation (best agent "
                        f"{best_agent.name} reached {share} of the optimum); the best static "
                        f"allocation is the plan{which}"]
    if best_agent.total_return <= static.total_return + 1e-9:
        # A tie is the static allocation's: the agent learned nothing a fixed choice lacks.
        return static, [f"{best_agent.name} tied with the best static allocation ({share} of "
                        f"the optimum), so the plan is the best static allocation{which}"]
    return best_agent, []
