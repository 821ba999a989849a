"""Tiny Gymnasium environments with known optimal returns, for testing the agents.

- :class:`TwoArmedBandit`: one step per episode; arm 1 pays more on average than arm 0.
- :class:`ChainMDP`: a corridor of ``n`` states; stepping left from the start takes a small
  reward and ends the episode (the trap a myopic learner falls into), walking right to the end
  pays a larger one. Optimal return: ``goal_reward - step_cost * (n - 1)``.

Both expose ``optimal_return`` so tests can assert how close an agent gets, and put a
two-component ``info["reward_vector"]`` beside the scalar reward, like ``CloudEnvironment``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class TwoArmedBandit(gym.Env):
    """Two arms with Gaussian payouts of means ``means`` and standard deviation ``noise``."""

    def __init__(self, means: tuple[float, float] = (0.2, 1.0), noise: float = 0.5) -> None:
        self.means = np.asarray(means, dtype=float)
        self.noise = float(noise)
        self.observation_space = spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self.optimal_return = float(self.means.max())

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        return np.ones(1, dtype=np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        reward = float(self.means[int(action)] + self.noise * self.np_random.standard_normal())
        info = {"reward_vector": np.array([reward, 0.0])}
        return np.ones(1, dtype=np.float32), reward, True, False, info


class ChainMDP(gym.Env):
    """Corridor of ``n`` states observed one-hot; action 0 = left, 1 = right.

    From state 0, left ends the episode with ``trap_reward``. Right moves one state on at a cost
    of ``step_cost``; reaching state ``n - 1`` ends the episode with ``goal_reward``. Left from
    any other state moves back one. Episodes are truncated after ``3 * n`` steps.
    """

    def __init__(
        self,
        n: int = 5,
        goal_reward: float = 1.0,
        trap_reward: float = 0.2,
        step_cost: float = 0.02,
    ) -> None:
        if n < 2:
            raise ValueError(f"n must be >= 2 (got {n})")
        self.n = n
        self.goal_reward = goal_reward
        self.trap_reward = trap_reward
        self.step_cost = step_cost
        self.max_steps = 3 * n
        self.observation_space = spaces.Box(0.0, 1.0, shape=(n,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self.optimal_return = goal_reward - step_cost * (n - 1)
        self._pos = 0
        self._t = 0

    @property
    def epoch_counter(self) -> int:
        """Steps taken in this episode (the name ``CloudEnvironment`` uses)."""
        return self._t

    def _obs(self) -> np.ndarray:
        obs = np.zeros(self.n, dtype=np.float32)
        obs[self._pos] = 1.0
        return obs

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._pos, self._t = 0, 0
        return self._obs(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self._t += 1
        terminated = False
        if int(action) == 1:
            self._pos += 1
            reward = -self.step_cost
            if self._pos == self.n - 1:
                reward += self.goal_reward
                terminated = True
        elif self._pos == 0:
            reward, terminated = self.trap_reward, True
        else:
            self._pos -= 1
            reward = -self.step_cost
        truncated = not terminated and self._t >= self.max_steps
        info = {"reward_vector": np.array([reward, -self.step_cost * (int(action) == 1)])}
        return self._obs(), float(reward), terminated, truncated, info
