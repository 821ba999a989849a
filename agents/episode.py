"""Finished episodes for the on-policy actor update, and their advantage estimates.

The multi-objective agent's ``actor_update="advantage"`` learns from whole episodes rather than
replayed transitions: the training loop hands it :class:`Episode` records and
:func:`batch_advantages` turns their rewards and critic values into generalised advantage
estimates (Schulman et al., 2016), episode by episode (:func:`lambda_advantages`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np


class Episode(NamedTuple):
    """One finished episode, for the on-policy actor update (``actor_update="advantage"``)."""

    states: np.ndarray
    """``(T, state_dim)`` states the actions were taken in."""
    actions: np.ndarray
    """``(T,)`` action indices."""
    rewards: np.ndarray
    """``(T,)`` scalar rewards under the policy's preference."""
    last_state: np.ndarray
    """``(state_dim,)`` the state after the last action."""
    terminated: bool
    """Whether the episode reached a terminal state (``False``: truncated, so it bootstraps)."""
    masks: np.ndarray | None = None
    """``(T, n_actions)`` bool, the actions that were valid in ``states``; None: all were."""
    last_mask: np.ndarray | None = None
    """``(n_actions,)`` bool, the actions valid in ``last_state``; None: all are."""


def step_masks(episodes: Sequence[Any], n_actions: int) -> np.ndarray | None:
    """The valid actions of every step of ``episodes``, back to back, ``(steps, n_actions)``
    bool; None if no step has a mask. ``ep.masks`` is None, an array, or a list holding an array
    or None per step; a step without one counts every action valid."""
    if all(ep.masks is None or all(m is None for m in ep.masks) for ep in episodes):
        return None
    full = np.ones(n_actions, dtype=bool)
    rows = [
        full if ep.masks is None or ep.masks[t] is None else ep.masks[t]
        for ep in episodes
        for t in range(len(ep.actions))
    ]
    return np.stack(rows).astype(bool)


def step_and_last_masks(episodes: Sequence[Any], n_actions: int) -> np.ndarray | None:
    """:func:`step_masks`, then the mask of each episode's last state (``ep.last_mask``, all
    valid where None), ``(steps + n_episodes, n_actions)``; None if no step has a mask."""
    steps = step_masks(episodes, n_actions)
    if steps is None:
        return None
    full = np.ones(n_actions, dtype=bool)
    last = [full if ep.last_mask is None else ep.last_mask for ep in episodes]
    return np.concatenate([steps, np.stack(last).astype(bool)])


def lambda_advantages(
    rewards: np.ndarray, values: np.ndarray, last_value: float, gamma: float, lam: float
) -> np.ndarray:
    """Generalised advantage estimates of one episode (Schulman et al., 2016, eq. 16).

    ``A_t = sum_k (gamma lam)^k delta_{t+k}`` with ``delta_t = r_t + gamma V(s_{t+1}) - V(s_t)``
    and ``V(s_T) = last_value`` (0 for a terminal state). ``lam = 1`` gives the Monte Carlo
    return minus the baseline, ``lam = 0`` the one-step TD error.
    """
    next_values = np.append(values[1:], last_value)
    deltas = rewards + gamma * next_values - values
    advantages = np.empty(len(rewards), dtype=np.float64)
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = deltas[t] + gamma * lam * running
        advantages[t] = running
    return advantages


def batch_advantages(
    episodes: Sequence[Episode],
    values: np.ndarray,
    last_values: np.ndarray,
    gamma: float,
    lam: float,
) -> np.ndarray:
    """:func:`lambda_advantages` of each episode, concatenated in episode order.

    ``values`` holds ``V`` of every episode's ``states``, back to back; ``last_values`` ``V`` of
    each episode's ``last_state``, ignored where the episode terminated (its end is worth 0).
    """
    lengths = [len(ep.rewards) for ep in episodes]
    return np.concatenate(
        [
            lambda_advantages(
                np.asarray(ep.rewards, dtype=np.float64),
                values[lo : lo + n],
                0.0 if ep.terminated else last_values[i],
                gamma,
                lam,
            )
            for i, (ep, lo, n) in enumerate(
                zip(episodes, np.cumsum([0, *lengths[:-1]]), lengths, strict=True)
            )
        ]
    )
