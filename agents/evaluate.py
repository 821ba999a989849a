"""Greedy evaluation of trained agents on held-out seeds, on any Gymnasium env.

:func:`evaluate` runs a policy (any :data:`ActFn`, ``(obs batch, envs) -> actions``) for one
episode per seed, several environments at a time, and returns each episode's return, length,
summed reward vector and last ``info``. The same seeds give every policy (agents, baselines of
:mod:`agents.baselines`) the same episodes. :func:`heldout_seeds` lists seeds disjoint from
every training seed (:mod:`agents.rollout`). The policy acts on a batch of observations at a
time, but each environment steps through its own ``env.step`` (not the arrays of
:func:`envs.lockstep`), because evaluation reports each episode's ``info``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

EnvFn = Callable[[], gym.Env]
"""A factory for one fresh environment."""
ActFn = Callable[[np.ndarray, Sequence[gym.Env]], np.ndarray]
"""A policy for evaluation: ``(observations (n, obs_dim), the n envs) -> actions (n,)``."""

HELDOUT_SEED_BASE = 2_000_000_000


def heldout_seeds(n: int, offset: int = 0) -> list[int]:
    """Evaluation seeds: far above every training seed ``seed * 1_000_003 + k``
    (:func:`agents.rollout.training_seeds`)."""
    return [HELDOUT_SEED_BASE + offset + i for i in range(n)]


@dataclass
class EvalResult:
    """Returns and last ``info`` of each evaluated episode, in seed order."""

    returns: np.ndarray
    """``(n_episodes,)`` undiscounted episode returns."""
    final_infos: list[dict[str, Any]]
    lengths: np.ndarray
    reward_vector_sums: np.ndarray
    """``(n_episodes, reward_dim)`` summed ``info["reward_vector"]`` (0 columns if absent)."""

    @property
    def mean_return(self) -> float:
        return float(np.mean(self.returns))


def evaluate(act_fn: ActFn, env_fn: EnvFn, seeds: Sequence[int], n_envs: int = 16) -> EvalResult:
    """Run ``act_fn`` for one episode per seed; episodes run ``n_envs`` at a time in lockstep."""
    envs = [env_fn() for _ in range(min(n_envs, len(seeds)))]
    returns = np.zeros(len(seeds))
    lengths = np.zeros(len(seeds), dtype=np.int64)
    infos: list[dict[str, Any]] = [{} for _ in seeds]
    vec_sums: dict[int, np.ndarray] = {}
    for lo in range(0, len(seeds), len(envs)):
        batch = list(range(lo, min(lo + len(envs), len(seeds))))
        obs = np.stack([envs[j].reset(seed=seeds[k])[0] for j, k in enumerate(batch)])
        alive = np.ones(len(batch), dtype=bool)
        while alive.any():
            idx = np.flatnonzero(alive)
            actions = np.asarray(act_fn(obs[idx], [envs[j] for j in idx])).reshape(-1)
            for a, j in zip(actions, idx, strict=True):
                obs[j], reward, terminated, truncated, info = envs[j].step(int(a))
                returns[batch[j]] += reward
                if "reward_vector" in info:
                    vec = np.asarray(info["reward_vector"], dtype=float)
                    vec_sums[batch[j]] = vec_sums.get(batch[j], 0.0) + vec
                lengths[batch[j]] += 1
                if terminated or truncated:
                    alive[j] = False
                    infos[batch[j]] = info
    dim = len(next(iter(vec_sums.values()))) if vec_sums else 0
    sums = np.array([vec_sums.get(k, np.zeros(dim)) for k in range(len(seeds))]).reshape(-1, dim)
    return EvalResult(returns, infos, lengths, sums)


def random_act(seed: int = 0) -> ActFn:
    """Uniformly random actions (from each env's action space size)."""
    rng = np.random.default_rng(seed)
    return lambda obs, envs: np.array([rng.integers(env.action_space.n) for env in envs])
