"""REINFORCE (:mod:`agents.reinforce`) behind the agent interface: trained with its recipe
(:func:`agents.recipes.reinforce_config`, :func:`agents.recipes.reinforce_train_kwargs`), and
its greedy policy among each environment's valid actions."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from agents.registry.interface import Budget, EnvFn, TrainedAgent, TrainSetup
from envs import stacked_masks

if TYPE_CHECKING:
    import gymnasium as gym

    from agents.reinforce import SimplePolicy
    from agents.train import TrainResult


class ReinforceAgent(TrainedAgent):
    """A trained :class:`SimplePolicy`, asked greedily."""

    def __init__(self, policy: SimplePolicy) -> None:
        self.policy = policy

    def act(self, obs: np.ndarray, envs: Sequence[gym.Env]) -> np.ndarray:
        return self.policy.select_action(obs, evaluate=True, mask=stacked_masks(envs))

    def action_probabilities(self, obs: np.ndarray, envs: Sequence[gym.Env]) -> np.ndarray:
        return self.policy.action_probabilities(obs, stacked_masks(envs))


def train(env_fn: EnvFn, setup: TrainSetup, budget: Budget) -> TrainResult:
    """REINFORCE with its recipe on ``env_fn`` within ``budget``."""
    # Imported here: the orchestrator reads the registry without loading torch.
    from agents.recipes import reinforce_config, reinforce_train_kwargs
    from agents.train import train_reinforce

    settings = reinforce_train_kwargs()
    if budget.episodes:
        settings["episodes"] = budget.episodes
    result = train_reinforce(
        env_fn,
        reinforce_config(setup.rl.seed, setup.rl),
        time_budget_s=budget.seconds,
        quiet=setup.quiet,
        action_factors=setup.action_factors,
        **settings,
    )
    return dataclasses.replace(result, agent=ReinforceAgent(result.agent))
