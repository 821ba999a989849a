"""Exact answers for :class:`envs.CloudEnvironment`: the yardstick the agents are graded against.

Both functions read the same :class:`envs.model.EnvModel` tables as ``step()`` (noise off).

* :func:`optimal_policy` solves the finite-horizon MDP over ``(step, allocation)`` by backward
  induction (Bellman, 1957)::

      V_N(a) = 0
      Q_k(a, u) = r_k(a, a') + [not oom_k(a')] * V_{k+1}(a'),   a' = next(a, u)
      V_k(a) = max_u Q_k(a, u)

  The phase is a function of ``k``, so the state needs nothing else. Returns are undiscounted
  episode sums, the quantity agents are compared on.
* :func:`best_static` is the best *fixed-target* policy: for every allocation of the grid, walk
  to it one level per step (all resources at once) and keep it; the best such target. It is
  what a one-shot tuner achieves in the same environment, so it never beats the optimum.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from envs.model import EnvConfig, EnvModel, build_env_model
from optimizer.foundation.allocation import Allocation


@dataclass
class OracleResult:
    """An optimal (or best-static) episode and its totals."""

    total_return: float
    actions: list[int]
    allocations: list[Allocation]
    """Allocation each chunk ran with (after the step's action)."""
    rewards: list[float]
    reward_vector_sum: np.ndarray
    """Summed ``(cost, time, efficiency, sla)`` components, shape ``(4,)``."""
    total_time_s: float
    total_cost: float
    oom: bool
    allocation: Allocation | None = None
    """best_static only: the target allocation."""
    value: np.ndarray | None = field(default=None, repr=False)
    """optimal_policy only: ``V_k(a)``, shape ``(n_steps + 1, n_alloc)``."""
    policy: np.ndarray | None = field(default=None, repr=False)
    """optimal_policy only: optimal action per ``(k, a)``, shape ``(n_steps, n_alloc)``."""


def _model(env_config: EnvConfig | None, preference: str | Sequence[float] | None) -> EnvModel:
    cfg = env_config or EnvConfig()
    if preference is not None:
        cfg = cfg.replace(preference=preference)
    return build_env_model(cfg.replace(noise=0.0))


def solve(model: EnvModel) -> tuple[np.ndarray, np.ndarray]:
    """Backward induction on ``model``: ``(V, policy)`` of shapes ``(N+1, A)`` and ``(N, A)``."""
    n, n_a = model.n_steps, model.n_alloc
    nxt = model.next_index
    changed = (nxt != np.arange(n_a)[:, None]).astype(np.int64)
    value = np.zeros((n + 1, n_a))
    policy = np.zeros((n, n_a), dtype=np.int64)
    for k in range(n - 1, -1, -1):
        p = model.step_phase[k]
        oom = model.oom[p][nxt]
        q = np.where(
            oom, model.oom_outcome(k, changed)[1], model.reward[p][nxt, changed] + value[k + 1][nxt]
        )
        policy[k] = np.argmax(q, axis=1)
        value[k] = q[np.arange(n_a), policy[k]]
    return value, policy


def rollout(model: EnvModel, actions: Sequence[int]) -> OracleResult:
    """Noise-free episode of an action sequence from the initial allocation, via the tables."""
    a, rewards, allocs, done_actions = model.initial, [], [], []
    vec_sum, t_sum, c_sum, oom = np.zeros(4), 0.0, 0.0, False
    for k, u in enumerate(actions[: model.n_steps]):
        a2 = int(model.next_index[a, u])
        ch = int(a2 != a)
        p = int(model.step_phase[k])
        done_actions.append(int(u))
        allocs.append(model.grid.allocation(a2))
        if model.oom[p, a2]:
            vec, r = model.oom_outcome(k, ch)
            rewards.append(float(r))
            vec_sum += vec
            t_sum += model.resolved.restart_s
            c_sum += float(model.hourly_cost[a2]) * model.resolved.restart_s / 3600
            oom = True
            break
        rewards.append(float(model.reward[p, a2, ch]))
        vec_sum += model.reward_vector[p, a2, ch]
        t_sum += float(model.step_time[p, a2, ch])
        c_sum += float(model.step_cost[p, a2, ch])
        a = a2
    return OracleResult(
        float(np.sum(rewards)), done_actions, allocs, rewards, vec_sum, t_sum, c_sum, oom
    )


def optimal_policy(
    env_config: EnvConfig | None = None, preference: str | Sequence[float] | None = None
) -> OracleResult:
    """Exact optimum of the noise-free environment: return, actions and the full policy table.

    Parameters
    ----------
    env_config : EnvConfig, optional
        The environment (default ``EnvConfig()``); its noise is ignored.
    preference : str or (cost, time, resource) weights, optional
        Overrides ``env_config.preference``.
    """
    model = _model(env_config, preference)
    value, policy = solve(model)
    a, actions = model.initial, []
    for k in range(model.n_steps):
        u = int(policy[k, a])
        actions.append(u)
        a2 = int(model.next_index[a, u])
        if model.oom[model.step_phase[k], a2]:
            break
        a = a2
    result = rollout(model, actions)
    assert np.isclose(result.total_return, value[0, model.initial]), "DP and rollout disagree"
    result.value, result.policy = value, policy
    return result


def _toward(model: EnvModel, cur: np.ndarray, target_levels: np.ndarray) -> np.ndarray:
    """Action moving every resource one level toward the target, for arrays of allocations."""
    lv = np.stack(np.unravel_index(cur, model.grid.shape), axis=1)
    d = np.sign(target_levels - lv) + 1
    if model.actions.batch_actions_enabled:
        return ((d[:, 0] * 3 + d[:, 1]) * 3 + d[:, 2]) * 3 + d[:, 3]
    return (d[:, 0] * 3 + d[:, 1]) * 3 + d[:, 2]


def best_static(
    env_config: EnvConfig | None = None, preference: str | Sequence[float] | None = None
) -> OracleResult:
    """Best fixed target allocation (walked to, then kept) and its noise-free episode."""
    model = _model(env_config, preference)
    targets = np.arange(model.n_alloc)
    t_lv = np.stack(np.unravel_index(targets, model.grid.shape), axis=1)
    if not model.actions.batch_actions_enabled:  # the batch size cannot move: keep it
        t_lv[:, 3] = np.unravel_index(model.initial, model.grid.shape)[3]
    cur = np.full(model.n_alloc, model.initial)
    alive = np.ones(model.n_alloc, dtype=bool)
    ret = np.zeros(model.n_alloc)
    acts = np.zeros((model.n_steps, model.n_alloc), dtype=np.int64)
    for k in range(model.n_steps):
        u = _toward(model, cur, t_lv)
        acts[k] = u
        a2 = model.next_index[cur, u]
        ch = (a2 != cur).astype(np.int64)
        p = model.step_phase[k]
        oom = model.oom[p, a2]
        r = np.where(oom, model.oom_outcome(k, ch)[1], model.reward[p, a2, ch])
        ret += np.where(alive, r, 0.0)
        alive &= ~oom
        cur = a2
    best = int(np.argmax(ret))
    result = rollout(model, acts[:, best].tolist())
    assert np.isclose(result.total_return, ret[best])
    result.allocation = model.grid.allocation(
        int(np.ravel_multi_index(tuple(t_lv[best]), model.grid.shape))
    )
    return result


def noop_return(
    env_config: EnvConfig | None = None, preference: str | Sequence[float] | None = None
) -> float:
    """Return of never changing the initial allocation (a floor for comparisons)."""
    model = _model(env_config, preference)
    return rollout(model, [model.actions.noop] * model.n_steps).total_return
