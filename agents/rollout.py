"""Episodes for the training loops: their seeds, and batches of them run in lockstep.

Training seeds are ``seed * 1_000_003 + k`` for the ``k``-th episode of a run
(:func:`training_seeds`); evaluation (:mod:`agents.evaluate`) uses its own seeds, disjoint from
these by construction. :func:`lockstep_steps` runs one episode per just-reset copy of a
:func:`envs.lockstep` batch, all together, and yields each step's arrays (:class:`Step`); a
finished episode is simply left out of the next step (no autoreset), so episode ``i`` is copy
``i`` throughout. :class:`EpisodeRecorder` turns those steps into finished
:class:`agents.episode.Episode` records for an on-policy update.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import NamedTuple

import gymnasium as gym
import numpy as np

from agents.episode import Episode
from envs import Lockstep

TRAIN_SEED_STRIDE = 1_000_003
"""Training episode ``k`` of a run seeded ``seed`` is seeded ``seed * TRAIN_SEED_STRIDE + k``."""

ActOnBatch = Callable[[np.ndarray, "np.ndarray | None"], np.ndarray]
"""``act(observations (m, obs_dim), valid actions (m, n_actions) or None) -> actions (m,)``."""


def training_seeds(seed: int, first: int, n: int) -> list[int]:
    """The seeds of training episodes ``first .. first + n - 1`` of a run seeded ``seed``."""
    return [seed * TRAIN_SEED_STRIDE + first + i for i in range(n)]


def space_dims(env: gym.Env) -> tuple[int, int]:
    """Observation length and number of actions; a ValueError unless the actions are discrete."""
    if not isinstance(env.action_space, gym.spaces.Discrete):
        raise ValueError(f"agents need a Discrete action space, got {env.action_space}")
    return int(np.prod(env.observation_space.shape)), int(env.action_space.n)


class Step(NamedTuple):
    """One lockstep step of the ``m`` episodes still running."""

    alive: np.ndarray
    """``(m,)`` the copies (episodes) that took this step."""
    obs: np.ndarray
    """``(m, obs_dim)`` their observations before it."""
    actions: np.ndarray
    """``(m,)`` the actions taken."""
    rewards: np.ndarray
    """``(m,)`` float64 rewards."""
    next_obs: np.ndarray
    """``(m, obs_dim)`` the observations after it."""
    terminated: np.ndarray
    """``(m,)`` bool, episodes that reached a terminal state."""
    over: np.ndarray
    """``(m,)`` bool, episodes that ended (terminated or truncated)."""
    masks: np.ndarray | None
    """``(m, n_actions)`` bool, the actions valid before the step; None without masks."""
    next_masks: np.ndarray | None
    """``(m, n_actions)`` bool, the actions valid after it (all, where the episode ended)."""


def lockstep_steps(envs: Lockstep, obs: np.ndarray, act: ActOnBatch) -> Iterator[Step]:
    """Run one episode per just-reset copy (``obs``: their first observations, updated in
    place) until every one has ended, yielding each step."""
    alive = np.arange(len(obs))
    masks = envs.action_masks(alive)
    while len(alive):
        actions = act(obs[alive], masks)
        next_obs, rewards, terminated, over = envs.step(alive, actions)
        next_masks = envs.action_masks(alive)
        yield Step(alive, obs[alive], actions, rewards, next_obs, terminated, over, masks,
                   next_masks)
        obs[alive] = next_obs
        masks = None if next_masks is None else next_masks[~over]
        alive = alive[~over]


class EpisodeRecorder:
    """Collects the steps of ``n`` lockstep episodes into :class:`Episode` records.

    Every episode starts at step 0 and the running set only shrinks, so episode ``i`` is
    column ``i`` of the per-step arrays, rows ``0 .. length_i - 1``.
    """

    def __init__(self, first_obs: np.ndarray) -> None:
        self.n = len(first_obs)
        self.obs_dim, self.dtype = first_obs.shape[1], first_obs.dtype
        self.states: list[np.ndarray] = []
        self.actions: list[np.ndarray] = []
        self.rewards: list[np.ndarray] = []
        self.masks: list[np.ndarray] = []
        self.lengths = np.zeros(self.n, dtype=np.int64)
        self.last = np.empty_like(first_obs)
        self.ended_terminal = np.zeros(self.n, dtype=bool)
        self.last_masks: np.ndarray | None = None

    def add(self, step: Step) -> None:
        """Record one step (rows of episodes that had ended stay zero)."""
        n, alive, over = self.n, step.alive, step.over
        if step.masks is not None:
            if self.last_masks is None:
                self.last_masks = np.ones((n, step.masks.shape[1]), dtype=bool)
            self.masks.append(np.ones((n, step.masks.shape[1]), dtype=bool))
            self.masks[-1][alive] = step.masks
            self.last_masks[alive[over]] = step.next_masks[over]
        for rows, values, dtype in ((self.states, step.obs, self.dtype),
                                    (self.actions, step.actions, np.int64),
                                    (self.rewards, step.rewards, np.float64)):
            shape = (n, self.obs_dim) if rows is self.states else (n,)
            rows.append(np.zeros(shape, dtype=dtype))
            rows[-1][alive] = values
        self.lengths[alive] += 1
        self.last[alive[over]] = step.next_obs[over]
        self.ended_terminal[alive[over]] = step.terminated[over]

    @property
    def steps(self) -> int:
        """Steps recorded, over all episodes."""
        return int(self.lengths.sum())

    def episodes(self) -> list[Episode]:
        """The finished episodes, in copy order."""
        s, a, r = np.stack(self.states), np.stack(self.actions), np.stack(self.rewards)
        m = np.stack(self.masks) if self.masks else None
        return [
            Episode(
                s[:length, i], a[:length, i], r[:length, i], self.last[i],
                bool(self.ended_terminal[i]), None if m is None else m[:length, i],
                None if m is None else self.last_masks[i],
            )
            for i, length in enumerate(self.lengths)
        ]
