"""Finished episodes for the on-policy updates, and their advantage estimates.

REINFORCE and the multi-objective agent's ``actor_update="advantage"`` learn from whole
episodes rather than replayed transitions. :class:`EpisodeMemory` keeps the steps of parallel
episodes apart until each ends (REINFORCE's ``add_experience``); the multi-objective loop hands
its agent :class:`Episode` records (:class:`agents.rollout.EpisodeRecorder`), and
:func:`batch_advantages` turns their rewards and critic values into generalised advantage
estimates (Schulman et al., 2016), episode by episode (:func:`lambda_advantages`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
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


@dataclass
class Trajectory:
    """The steps of one episode so far, as :class:`EpisodeMemory` records them."""

    states: list[np.ndarray] = field(default_factory=list)
    actions: list[int] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    masks: list[np.ndarray | None] = field(default_factory=list)


def _as_column(value: float | np.ndarray, n: int) -> list:
    """A scalar or ``(n,)`` array as a list of ``n`` Python values (cheap per-row access)."""
    values = np.asarray(value).reshape(-1).tolist()
    return values * n if len(values) == 1 and n > 1 else values


class EpisodeMemory:
    """The steps of parallel episodes, kept apart by environment id until each ends.

    Parameters
    ----------
    state_dim, action_dim : int
        Observation length and number of actions (the shapes of states and masks).

    Attributes
    ----------
    running : dict of int to Trajectory
        The episodes still running, by environment id.
    finished : list of Trajectory
        The episodes that ended since the last :meth:`take`, in the order they ended.
    """

    def __init__(self, state_dim: int, action_dim: int) -> None:
        self.state_dim, self.action_dim = int(state_dim), int(action_dim)
        self.running: dict[int, Trajectory] = {}
        self.finished: list[Trajectory] = []

    def add(
        self,
        state: np.ndarray,
        action: int | np.ndarray,
        reward: float | np.ndarray,
        done: bool | np.ndarray,
        env_id: int | np.ndarray = 0,
        mask: np.ndarray | None = None,
    ) -> None:
        """Record one step of one episode, or of several parallel episodes.

        ``state`` is ``(state_dim,)`` or ``(n, state_dim)``; ``action``, ``reward``, ``done`` and
        ``env_id`` are scalars or ``(n,)``. ``env_id`` tells parallel episodes apart; ``done``
        (terminated or truncated) closes that episode. ``mask``: the valid actions the action
        was chosen among, ``(action_dim,)`` or ``(n, action_dim)`` bool.
        """
        # A copy: callers often pass a row of an array they overwrite with the next observation.
        states = np.array(state, dtype=np.float32, copy=True).reshape(-1, self.state_dim)
        n = len(states)
        actions = _as_column(action, n)
        rewards = _as_column(reward, n)
        dones = _as_column(done, n)
        env_ids = _as_column(env_id, n)
        masks = None if mask is None else np.asarray(mask, dtype=bool).reshape(n, self.action_dim)
        for i in range(n):
            key = int(env_ids[i])
            traj = self.running.get(key)
            if traj is None:
                traj = self.running[key] = Trajectory()
            traj.states.append(states[i])
            traj.actions.append(int(actions[i]))
            traj.rewards.append(float(rewards[i]))
            traj.masks.append(None if masks is None else masks[i].copy())
            if dones[i]:
                self.finished.append(self.running.pop(key))

    def take(self) -> list[Trajectory]:
        """The finished episodes, handed over and forgotten (on-policy: each is used once)."""
        finished, self.finished = self.finished, []
        return finished


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
