"""What the orchestrator needs from an agent: train it, then ask a trained one what it would do.

An agent is an :class:`AgentSpec`: a name and a ``train(env_fn, setup, budget)`` function (or
where to import it from, ``"module:function"``) that returns a :class:`TrainResult` whose
``agent`` is a :class:`TrainedAgent`. A trained agent answers for a batch of observations, each
with its environment (where the valid actions come from), as Stable-Baselines3's
``BasePolicy.predict`` does for a vectorised env:

- :meth:`TrainedAgent.act`: the greedy actions, one per observation. Its signature is
  :data:`agents.evaluate.ActFn`'s, so a trained agent is evaluated as it is;
- :meth:`TrainedAgent.action_probabilities`: the policy's probabilities over all actions (the
  orchestrator reports the chosen action's as the decision's confidence);
- :meth:`TrainedAgent.uncertainty`: how far that probability moves under MC dropout, for
  agents that can tell (default: None).
"""

from __future__ import annotations

import importlib
import math
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from optimizer.foundation.atomic_files import atomic_write_csv
from optimizer.foundation.config import MultiObjectiveConfig, RLConfig

if TYPE_CHECKING:
    import gymnasium as gym
    import pandas as pd

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


@dataclass
class TrainResult:
    """A trained agent with its learning curve and the wall time training took."""

    agent: Any
    """The trained agent: a :class:`TrainedAgent` from a registered ``train``; the
    algorithm's own object (``SimplePolicy``, ``MultiObjectiveRLAgent``) from its loop."""
    curve: pd.DataFrame
    """One row per update: episodes so far, wall time, mean episode return, the losses."""
    train_seconds: float
    """Wall time of the training."""
    episodes: int
    """Training episodes run."""

    def save_curve(self, path: str | os.PathLike) -> None:
        """Write :attr:`curve` as CSV, atomically."""
        atomic_write_csv(path, self.curve)


def cloud_action_factors(env: gym.Env) -> tuple[int, ...] | None:
    """Sub-action sizes of a ``CloudEnvironment`` (GPU, CPU, memory[, batch], 3 moves each).

    Its actions are indexed ``((d_gpu*3 + d_cpu)*3 + d_mem)*3 + d_batch``, the mixed-radix
    layout :func:`agents.networks.joint_log_probs` expects. ``None`` for other environments.
    """
    actions = getattr(env.unwrapped, "actions", None)
    if actions is None or not hasattr(actions, "batch_actions_enabled"):
        return None
    factors = (3, 3, 3, 3) if actions.batch_actions_enabled else (3, 3, 3)
    return factors if math.prod(factors) == env.action_space.n else None


@dataclass(frozen=True)
class TrainSetup:
    """What every agent is trained for: the same for all the agents of one recommendation."""

    preference: str | Sequence[float]
    """The user's preference (a name or cost/time/resource weights); the environments'
    reward is already scalarised with it, a multi-objective agent trains its policy."""
    rl: RLConfig
    """The ``[rl]`` settings and the seed; each agent's config takes what it uses from them
    (its ``from_rl``) and keeps its own defaults for the rest."""
    multi_objective: MultiObjectiveConfig
    """The named preference vectors (``[multi_objective]``)."""
    action_factors: tuple[int, ...] | None = None
    """Sub-action sizes of the environment's actions (:func:`cloud_action_factors`)."""
    quiet: bool = True
    """No progress bar."""


@dataclass(frozen=True)
class Budget:
    """How long to train: whichever of the two runs out first."""

    seconds: float | None = None
    """Wall time; None: no limit (episodes alone decide, and a run repeats exactly)."""
    episodes: int | None = None
    """Training episodes; None: the agent's config's."""


class TrainFn(Protocol):
    """Trains one agent: ``train(env_fn, setup, budget)`` returns a :class:`TrainResult`
    whose ``agent`` is a :class:`TrainedAgent`."""

    def __call__(self, env_fn: EnvFn, setup: TrainSetup, budget: Budget) -> TrainResult: ...


@dataclass(frozen=True)
class AgentSpec:
    """One registered agent: the name its outcome, plan and curve go by, and its training."""

    name: str
    """The agent's name in plans, reports and the registry."""
    entry_point: TrainFn | str
    """Its ``train(env_fn, setup, budget)``, or where to find it, ``"module:function"``
    (Gymnasium's form: imported on first use, so reading the registry loads no torch)."""

    def __post_init__(self) -> None:
        if isinstance(self.entry_point, str):
            module, _, function = self.entry_point.partition(":")
            if not module or not function:
                raise ValueError(f"agent {self.name!r}: entry point {self.entry_point!r} is "
                                 "not of the form 'module:function'")
        elif not callable(self.entry_point):
            raise ValueError(f"agent {self.name!r}: entry point {self.entry_point!r} is "
                             "neither callable nor 'module:function'")

    def load(self) -> TrainFn:
        """The training function, imported where the entry point names a module."""
        if not isinstance(self.entry_point, str):
            return self.entry_point
        module, _, function = self.entry_point.partition(":")
        return getattr(importlib.import_module(module), function)

    def train(self, env_fn: EnvFn, setup: TrainSetup, budget: Budget) -> TrainResult:
        """Train this agent on ``env_fn`` for ``setup`` within ``budget``."""
        return self.load()(env_fn, setup, budget)
