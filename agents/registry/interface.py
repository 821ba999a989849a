"""What the orchestrator needs from an agent: train it, then ask a trained one what it would do.

An agent is an :class:`AgentSpec`: a name and a ``train(env_fn, setup, budget)`` function that
returns an :class:`agents.train.TrainResult` whose ``agent`` is a :class:`TrainedAgent`. A
trained agent answers for a batch of observations, each with its environment (where the valid
actions come from), as Stable-Baselines3's ``BasePolicy.predict`` does for a vectorised env:

- :meth:`TrainedAgent.act`: the greedy actions, one per observation. Its signature is
  :data:`agents.evaluate.ActFn`'s, so a trained agent is evaluated as it is;
- :meth:`TrainedAgent.action_probabilities`: the policy's probabilities over all actions (the
  orchestrator reports the chosen action's as the decision's confidence);
- :meth:`TrainedAgent.uncertainty`: how far that probability moves under MC dropout, for
  agents that can tell (default: None).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from optimizer.foundation.config import MultiObjectiveConfig, RLConfig

if TYPE_CHECKING:
    import gymnasium as gym

    from agents.train import TrainResult

EnvFn = Callable[[], "gym.Env"]
"""A factory for one fresh (noisy) training environment."""


class TrainedAgent(ABC):
    """A trained policy, asked for a batch of observations ``(n, obs_dim)`` and their ``n``
    environments (each environment's ``action_masks()``, where it has one, bounds the choice)."""

    @abstractmethod
    def act(self, obs: np.ndarray, envs: Sequence[gym.Env]) -> np.ndarray:
        """The greedy action for each observation, int ``(n,)``."""

    @abstractmethod
    def action_probabilities(self, obs: np.ndarray, envs: Sequence[gym.Env]) -> np.ndarray:
        """The probability of each action for each observation, ``(n, n_actions)``; the
        greedy action is the most probable valid one."""

    def uncertainty(self, obs: np.ndarray, envs: Sequence[gym.Env]) -> np.ndarray | None:
        """The spread ``(n,)`` of the greedy action's probability, or None where the agent has
        no measure of it (the default)."""
        return None


@dataclass(frozen=True)
class TrainSetup:
    """What every agent is trained for: the same for all the agents of one recommendation."""

    preference: str | Sequence[float]
    """The user's preference (a name or cost/time/resource weights); the environments'
    reward is already scalarised with it, a multi-objective agent trains its policy."""
    rl: RLConfig
    """The ``[rl]`` settings and the seed; each agent's own recipe goes on top."""
    multi_objective: MultiObjectiveConfig
    """The named preference vectors (``[multi_objective]``)."""
    action_factors: tuple[int, ...] | None = None
    """Sub-action sizes of the environment's actions (:func:`agents.recipes.cloud_action_factors`)."""
    quiet: bool = True
    """No progress bar."""


@dataclass(frozen=True)
class Budget:
    """How long to train: whichever of the two runs out first."""

    seconds: float | None = None
    """Wall time; None: no limit (episodes alone decide, and a run repeats exactly)."""
    episodes: int | None = None
    """Training episodes; None: the agent's recipe's."""


class TrainFn(Protocol):
    """Trains one agent: ``train(env_fn, setup, budget)`` returns a :class:`TrainResult`
    whose ``agent`` is a :class:`TrainedAgent`."""

    def __call__(self, env_fn: EnvFn, setup: TrainSetup, budget: Budget) -> TrainResult: ...


@dataclass(frozen=True)
class AgentSpec:
    """One registered agent: the name its outcome, plan and curve go by, and its training."""

    name: str
    train: TrainFn
