"""The agents' settings: their hyper-parameters (``[rl]``) and the preference vectors over
(cost, time, resource) they are trained for (``[multi_objective]``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from optimizer.foundation.errors import ConfigError
from optimizer.foundation.errors import check as _check
from optimizer.foundation.preferences import default_preferences as _default_preferences
from optimizer.foundation.preferences import validate_preference


@dataclass
class RLConfig:
    """Hyper-parameters of the agents."""

    hidden_dim: int = 128
    """Width of each hidden layer of the actor, critic and policy networks."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Soft-update rate of the target networks."""
    lr_actor: float = 3e-4
    lr_critic: float = 1e-3
    batch_size: int = 64
    """Minibatch size sampled from the replay buffer."""
    buffer_size: int = 100_000
    exploration_noise: float = 0.1
    """Probability of a uniformly random action while training (epsilon)."""
    train_freq: int = 1
    """Environment steps between gradient updates."""
    reset_interval: int = 50
    """Consecutive SLA-violating steps after which a critic may be re-initialised."""
    reset_probability: float = 0.1
    """Probability of re-initialising the critic once ``reset_interval`` is reached."""
    dropout_rate: float = 0.1
    entropy_coef: float = 0.01
    actor_activation: str = "relu"
    """Hidden-layer activation of the multi-objective agent's actors: ``"relu"`` (the design)
    or ``"tanh"`` (the usual choice for policy-gradient actors, e.g. PPO's and A2C's)."""
    episodes: int = 300
    """Training episodes per agent."""
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("hidden_dim", "batch_size", "buffer_size", "train_freq", "reset_interval",
                     "episodes"):
            v = getattr(self, name)
            _check(isinstance(v, int) and v >= 1, f"[rl].{name}", "must be a positive integer", v)
        for name in ("gamma", "tau", "exploration_noise", "reset_probability", "dropout_rate"):
            v = getattr(self, name)
            _check(isinstance(v, (int, float)) and 0 <= v <= 1, f"[rl].{name}",
                   "must be in [0, 1]", v)
        _check(self.dropout_rate < 1, "[rl].dropout_rate", "must be < 1", self.dropout_rate)
        for name in ("lr_actor", "lr_critic"):
            v = getattr(self, name)
            _check(isinstance(v, (int, float)) and v > 0, f"[rl].{name}", "must be > 0", v)
        _check(self.entropy_coef >= 0, "[rl].entropy_coef", "must be >= 0", self.entropy_coef)
        _check(self.actor_activation in ("relu", "tanh"), "[rl].actor_activation",
               "must be 'relu' or 'tanh'", self.actor_activation)


@dataclass
class MultiObjectiveConfig:
    """Preference vectors over (cost, time, resource); one actor/critic pair each."""

    preference_vectors: dict[str, list[float]] = field(default_factory=_default_preferences)
    num_policies: int = 0
    """Number of policies; 0 means one per preference vector."""

    def __post_init__(self) -> None:
        if not isinstance(self.preference_vectors, Mapping) or not self.preference_vectors:
            raise ConfigError(
                "[multi_objective].preference_vectors must be a table of name = [cost, time, "
                f"resource] (got {self.preference_vectors!r})"
            )
        for name, vec in self.preference_vectors.items():
            self.preference_vectors[name] = list(validate_preference(
                vec, f"[multi_objective.preference_vectors].{name}"))
        if self.num_policies == 0:
            self.num_policies = len(self.preference_vectors)
        _check(self.num_policies == len(self.preference_vectors),
               "[multi_objective].num_policies",
               f"must equal the number of preference vectors ({len(self.preference_vectors)})",
               self.num_policies)

    @property
    def names(self) -> list[str]:
        return list(self.preference_vectors)

    def vector(self, preference: str | Sequence[float]) -> np.ndarray:
        """The weight vector of a named preference, or an explicit vector validated."""
        if isinstance(preference, str):
            if preference not in self.preference_vectors:
                raise ConfigError(
                    f"unknown preference {preference!r}; choose one of "
                    f"{', '.join(self.preference_vectors)} or give three weights summing to 1"
                )
            return np.array(self.preference_vectors[preference], dtype=float)
        return np.array(validate_preference(preference, "preference"), dtype=float)


__all__ = ["MultiObjectiveConfig", "RLConfig"]
