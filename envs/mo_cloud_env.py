"""``MOCloudEnvironment``: the same job as :class:`envs.CloudEnvironment`, for MO-Gymnasium.

MO-Gymnasium expects ``step()`` to return the reward *vector* its ``reward_space`` declares.
``CloudEnvironment`` returns the scalar (its agents and SB3 need one) and carries the vector in
``info["reward_vector"]``; this variant swaps them: ``step()`` returns the float32 vector
``(cost, time, efficiency, sla)`` and ``info["scalar_reward"]`` keeps the scalar.

The scalar is ``preference · (cost, time, efficiency) + sla_weight · sla − change_penalty ·
[allocation changed]``: MO-Gymnasium's ``LinearReward`` with weights ``(*preference,
sla_weight)`` reproduces it exactly on every step that keeps the allocation, and is
``change_penalty`` above it on a step that changes it (the penalty is not an objective).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from envs.cloud_env import CloudEnvironment


class MOCloudEnvironment(CloudEnvironment):
    """Multi-objective ``CloudEnvironment``: ``step()`` returns the reward vector."""

    def step(self, action: int):
        obs, reward, terminated, truncated, info = super().step(action)
        info = dict(info, scalar_reward=float(reward))
        vector = np.asarray(info["reward_vector"], dtype=np.float32)
        return obs, vector, terminated, truncated, info

    def linear_weights(self) -> np.ndarray:
        """Weights over the reward vector that give the scalar reward (change penalty aside)."""
        cfg: Any = self.resolved.config
        return np.append(self.model.weights, cfg.sla_weight).astype(np.float32)


__all__ = ["MOCloudEnvironment"]
