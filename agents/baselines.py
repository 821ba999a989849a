"""Reference policies for grading the agents on ``CloudEnvironment``, all run on the same episodes.

Each builder returns an ``ActFn`` (``(observations (n, obs_dim), envs) -> actions (n,)``) for
:func:`agents.evaluate.evaluate`:

- :func:`static_act` replays an action list by step (``envs.oracle.best_static``'s walk to the
  best fixed allocation, or ``envs.oracle.optimal_policy``'s optimal sequence). Allocation
  moves are deterministic in the environment (noise only touches throughput), so replaying the
  list visits exactly the allocations the oracle planned, whatever the noise;
- :func:`heuristic_act` is the reactive threshold rule of autoscalers: each of GPU, CPU and memory
  goes up one level when its utilisation in the last interval was above ``high`` (80%) and
  down when below ``low`` (30%); the batch size is kept.
"""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import numpy as np

from agents.evaluate import ActFn


def _step_of(env: gym.Env) -> int:
    return int(env.unwrapped.epoch_counter)


def static_act(actions: Sequence[int], fallback: int) -> ActFn:
    """Play ``actions[k]`` at step ``k``; ``fallback`` (e.g. keep) once the list runs out."""
    plan = [int(a) for a in actions]

    def act(obs: np.ndarray, envs: Sequence[gym.Env]) -> np.ndarray:
        steps = [_step_of(env) for env in envs]
        return np.array([plan[k] if k < len(plan) else fallback for k in steps])

    return act


def cloud_action_index(deltas: Sequence[int], batch_actions: bool) -> int:
    """Index of a (gpu, cpu, memory[, batch]) move, each -1/0/+1, in ``CloudEnvironment``."""
    digits = [int(d) + 1 for d in deltas]
    if batch_actions and len(digits) == 3:
        digits.append(1)
    index = 0
    for d in digits:
        index = index * 3 + d
    return index


def heuristic_act(env: gym.Env, high: float = 0.8, low: float = 0.3) -> ActFn:
    """Threshold autoscaling on the observed GPU, CPU and memory utilisation (fractions)."""
    index = env.unwrapped.state.index
    cols = [index["gpu_util"], index["cpu_util"], index["mem_util"]]
    batch_actions = bool(env.unwrapped.actions.batch_actions_enabled)

    def act(obs: np.ndarray, envs: Sequence[gym.Env]) -> np.ndarray:
        util = np.asarray(obs)[:, cols]
        deltas = np.where(util > high, 1, np.where(util < low, -1, 0))
        return np.array([cloud_action_index(d, batch_actions) for d in deltas])

    return act
