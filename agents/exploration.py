"""Exploration for the training loops: the annealing schedule and exploring starts.

:func:`exploration_scale` is the factor, falling from 1 over training, that scales an agent's
exploration (epsilon, entropy bonus) and the share of exploring starts;
:class:`ExploringStarts` starts that share of training episodes at random allocations;
:func:`training_progress` is how far a run is (episodes or wall time, whichever is further) and
:func:`anneal` applies the schedule at that point to an agent and its exploring starts.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Protocol

import gymnasium as gym
import numpy as np


def exploration_scale(
    progress: float, anneal_fraction: float, floor: float = 0.0, power: float = 1.0
) -> float:
    """Schedule from 1 to ``floor`` over the first ``anneal_fraction`` of training.

    ``floor + (1 - floor) * (1 - progress / anneal_fraction) ** power``: linear for
    ``power = 1``; a larger power keeps the start but spends less of the run near it.
    """
    if power <= 0:
        raise ValueError(f"anneal_power must be > 0 (got {power})")
    if anneal_fraction <= 0:
        return 1.0
    left = max(0.0, 1.0 - progress / anneal_fraction)
    return floor + (1.0 - floor) * left**power


class ExploringStarts:
    """Starts a share of training episodes at random allocations (Sutton & Barto 2018, 5.3).

    In a deceptive case one move at a time looks bad (an extra GPU costs more than it speeds up
    until the batch and memory grow with it), so an agent that always starts from the job's
    initial allocation rarely sees the good allocations at all. Starting ``prob`` of the
    episodes anywhere the first chunk fits in memory lets it learn what those allocations are
    worth, and the policy from the real start then has somewhere to go. Evaluation always
    starts from the initial allocation. Needs an env with ``start_candidates()`` and the
    ``reset(options={"allocation": index})`` option (``CloudEnvironment``).
    """

    def __init__(self, env: gym.Env, prob: float, seed: int) -> None:
        if not 0.0 <= prob <= 1.0:
            raise ValueError(f"exploring_starts must be a probability in [0, 1] (got {prob})")
        candidates = getattr(env.unwrapped, "start_candidates", None)
        if prob > 0 and candidates is None:
            raise ValueError(
                f"exploring_starts needs an env with start_candidates(); {type(env.unwrapped)} has none"
            )
        self.prob, self.scale = prob, 1.0
        self.candidates = candidates() if prob > 0 else np.empty(0, dtype=np.int64)
        self.rng = np.random.default_rng([seed, 0x5A7])

    def options(self) -> dict[str, Any] | None:
        # No allocation where the first chunk fits: every episode starts at the initial one.
        if self.prob * self.scale <= 0 or not len(self.candidates) \
                or self.rng.random() >= self.prob * self.scale:
            return None
        return {"allocation": int(self.rng.choice(self.candidates))}

    def reset(self, envs: Sequence[gym.Env], seeds: Sequence[int]) -> np.ndarray:
        """Reset each env with its seed; returns the stacked first observations."""
        return np.stack(
            [
                env.reset(seed=s, options=self.options())[0]
                for env, s in zip(envs, seeds, strict=True)
            ]
        )


class Explorer(Protocol):
    """An agent whose exploration the training loop scales (epsilon, entropy bonus)."""

    def set_exploration(self, scale: float) -> None: ...


def training_progress(done: int, total: int, started: float, budget_s: float | None) -> float:
    """The share of a run done, in [0, 1]: ``done`` of ``total`` episodes, or the share of
    ``budget_s`` seconds since ``started`` (``time.perf_counter()``) where that is further."""
    frac = done / total
    if budget_s:
        frac = max(frac, (time.perf_counter() - started) / budget_s)
    return min(frac, 1.0)


def anneal(agent: Explorer, starts: ExploringStarts, progress: float, fraction: float,
           power: float) -> None:
    """Scale the agent's exploration and the exploring-starts share together to
    :func:`exploration_scale` at ``progress``."""
    starts.scale = exploration_scale(progress, fraction, power=power)
    agent.set_exploration(starts.scale)
