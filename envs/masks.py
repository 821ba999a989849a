"""Observation masks: a :class:`envs.CloudEnvironment` with some state entries hidden.

What an agent does without the phase in its state is the peer that says what the phase is
worth: :class:`PhaseMask` (``benchmarks/phase_ablation.py``) and the live plan's phase-blind
peer (``optimizer/search/live/live_plan.py``) both train on it.
"""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import numpy as np

MASKED_FIELDS = {
    "phase": lambda name: name.startswith("phase_"),
    "clock": lambda name: name in ("progress", "time_used", "cost_used"),
}
"""Groups of observation entries an arm may hide. ``clock``: how far the job has gone, which
tells the step (and so the phase of a fixed schedule) without the one-hot."""


class FieldMask(gym.ObservationWrapper):
    """Zero some entries of a ``CloudEnvironment``'s observation (groups of
    :data:`MASKED_FIELDS`).

    Every other entry, the spaces, rewards and ``info`` pass through unchanged; zero lies in the
    observation space, so the wrapped environment still satisfies Gymnasium's checks.
    """

    def __init__(self, env: gym.Env, groups: Sequence[str]) -> None:
        super().__init__(env)
        self.groups = tuple(groups)
        index = env.unwrapped.state.index
        self.columns = np.array(
            sorted(i for name, i in index.items() if any(MASKED_FIELDS[g](name) for g in groups)),
            dtype=np.int64,
        )
        if self.columns.size == 0:
            raise ValueError(f"{type(env.unwrapped).__name__} has no {'/'.join(groups)} "
                             "observation fields")

    def observation(self, observation: np.ndarray) -> np.ndarray:
        masked = np.array(observation, dtype=np.float32, copy=True)
        masked[..., self.columns] = 0.0
        return masked

    def action_masks(self) -> np.ndarray:
        """Every action valid where the phase is hidden: the environment's own masks are the
        moves that fit in memory *in the coming phase*, so they would tell the phase."""
        if "phase" in self.groups:
            return np.ones(self.action_space.n, dtype=bool)
        return self.env.unwrapped.action_masks()


class PhaseMask(FieldMask):
    """Zero the phase one-hot (``phase_*`` entries) and nothing else."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env, ("phase",))
        self.phase_columns = self.columns


__all__ = ["MASKED_FIELDS", "FieldMask", "PhaseMask"]
