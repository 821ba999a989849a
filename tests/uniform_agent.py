"""A third agent, as a newcomer would add one: this file and one registration line.

Every valid action is equally likely, and greedily the first valid one; there is nothing to
learn. ``tests/test_agent_registry.py`` registers it with
``register(AgentSpec("uniform", "uniform_agent:registry_entry"))`` and the optimizer's planning
trains, replays, evaluates and may recommend it beside the built-in agents.
"""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import numpy as np
import pandas as pd

from agents.registry import Budget, EnvFn, TrainedAgent, TrainResult, TrainSetup
from envs import stacked_masks


class UniformAgent(TrainedAgent):
    """Every valid action equally likely; greedily, the first valid one."""

    def action_probabilities(self, obs: np.ndarray, envs: Sequence[gym.Env]) -> np.ndarray:
        masks = stacked_masks(envs)
        if masks is None:
            masks = np.ones((len(obs), envs[0].action_space.n), dtype=bool)
        return masks / masks.sum(axis=1, keepdims=True)

    def act(self, obs: np.ndarray, envs: Sequence[gym.Env]) -> np.ndarray:
        return self.action_probabilities(obs, envs).argmax(axis=1)


def registry_entry(env_fn: EnvFn, setup: TrainSetup, budget: Budget) -> TrainResult:
    """Nothing to learn: one row of curve so the report has something to draw."""
    return TrainResult(UniformAgent(), pd.DataFrame({"episode": [0]}), 0.0, 0)
