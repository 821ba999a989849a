"""The multi-objective actor-critic (:mod:`agents.morl`) behind the agent interface: the policy
of the user's preference trained with the recipe (:func:`agents.recipes.morl_config`,
:func:`agents.recipes.morl_train_config`), asked greedily, with its MC-dropout uncertainty."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from agents.registry.interface import Budget, EnvFn, TrainedAgent, TrainSetup
from envs import stacked_masks

if TYPE_CHECKING:
    import gymnasium as gym

    from agents.morl import Decision, MultiObjectiveRLAgent
    from agents.train import TrainResult


class MORLAgent(TrainedAgent):
    """One policy of a trained :class:`MultiObjectiveRLAgent`, asked greedily."""

    def __init__(self, agent: MultiObjectiveRLAgent, policy: int) -> None:
        self.agent = agent
        self.policy = policy

    def _decide(self, obs: np.ndarray, envs: Sequence[gym.Env], uncertainty: bool) -> Decision:
        return self.agent.select_action(
            obs, self.policy, evaluate=True, uncertainty=uncertainty, mask=stacked_masks(envs)
        )

    def act(self, obs: np.ndarray, envs: Sequence[gym.Env]) -> np.ndarray:
        return self._decide(obs, envs, uncertainty=False).action

    def action_probabilities(self, obs: np.ndarray, envs: Sequence[gym.Env]) -> np.ndarray:
        return self._decide(obs, envs, uncertainty=False).probs

    def uncertainty(self, obs: np.ndarray, envs: Sequence[gym.Env]) -> np.ndarray:
        return np.asarray(self._decide(obs, envs, uncertainty=True).uncertainty)


def train(env_fn: EnvFn, setup: TrainSetup, budget: Budget) -> TrainResult:
    """The policy of ``setup.preference`` with the recipe on ``env_fn`` within ``budget``."""
    # Imported here: the orchestrator reads the registry without loading torch.
    from agents.recipes import morl_config, morl_train_config
    from agents.train import train_morl

    settings = morl_train_config()
    if budget.episodes:
        settings = dataclasses.replace(settings, episodes=budget.episodes)
    result = train_morl(
        env_fn,
        setup.preference,
        morl_config(setup.rl.seed, setup.rl),
        settings,
        multi_objective_config=setup.multi_objective,
        time_budget_s=budget.seconds,
        quiet=setup.quiet,
        action_factors=setup.action_factors,
    )
    policy = result.agent.policy_index(setup.preference)
    return dataclasses.replace(result, agent=MORLAgent(result.agent, policy))
