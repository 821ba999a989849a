"""Many episodes of one environment stepped together: what the training loops run.

The agents train on batches of episodes that start together and run until each one ends
(finished episodes are masked out, nothing auto-resets). :func:`lockstep` gives that for any
environment factory:

* :class:`CloudLockstep` for a plain :class:`~envs.cloud_env.CloudEnvironment`: one NumPy step
  for all copies over the same :class:`~envs.model.EnvModel` tables, with each episode's
  throughput noise drawn from its own seed exactly as ``CloudEnvironment`` draws it, so a
  seed gives the same episode either way (tests/test_env_lockstep.py checks this step for
  step). Stepping 32 copies one by one cost about a third of an agent's minute of training.
* :class:`GymLockstep`, a list of environments stepped one by one, for anything else
  (wrapped environments included, since a wrapper may change what a step returns).

Both take ``reset(seeds, options)`` and ``step(rows, actions)`` and return plain arrays; the
``info`` dicts are left out (evaluation, which reports them, steps environments one by one).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
from gymnasium.utils import seeding

from envs.cloud_env import CloudEnvironment, valid_moves
from envs.state import FRACTION_HIGH, SLA_NAMES

NOISE_BLOCK = 256
"""Normals per draw, as in ``CloudEnvironment._noise_factor``."""


class Lockstep(Protocol):
    env: gym.Env
    """One of the environments (for its spaces and ``start_candidates()``)."""
    n: int

    def reset(
        self, seeds: Sequence[int], options: Sequence[dict[str, Any] | None] | None = None
    ) -> np.ndarray:
        """Start episodes in the first ``len(seeds)`` copies; returns their observations."""
        ...

    def step(
        self, rows: np.ndarray, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Step copies ``rows``; returns ``(obs, rewards, terminated, episode_over)``."""
        ...

    def action_masks(self, rows: np.ndarray) -> np.ndarray | None:
        """The valid actions of copies ``rows`` (``(len(rows), n_actions)`` bool), or None
        when the environment has no masks."""
        ...


def masks_of(env: gym.Env) -> np.ndarray | None:
    """``env.action_masks()`` through any wrappers, or None where the environment has none."""
    try:
        fn = env.get_wrapper_attr("action_masks")
    except AttributeError:
        return None
    return np.asarray(fn(), dtype=bool)


def stacked_masks(envs: Sequence[gym.Env]) -> np.ndarray | None:
    """The masks of ``envs`` as one ``(len(envs), n_actions)`` array, or None if one has none."""
    masks = [masks_of(env) for env in envs]
    return None if any(m is None for m in masks) else np.stack(masks)


def lockstep(env_fn: Callable[[], gym.Env], n: int) -> Lockstep:
    """``n`` copies of ``env_fn()``'s environment, vectorised where it is a plain CloudEnvironment."""
    if n < 1:
        raise ValueError(f"n_envs must be >= 1 (got {n})")
    first = env_fn()
    if type(first) is CloudEnvironment:
        return CloudLockstep(first, n)
    return GymLockstep([first, *(env_fn() for _ in range(n - 1))])


def _reset_options(
    seeds: Sequence[int], options: Sequence[dict[str, Any] | None] | None, n: int
) -> list[dict[str, Any] | None]:
    if len(seeds) > n:
        raise ValueError(f"reset got {len(seeds)} seeds for {n} environment copies")
    options = list(options) if options is not None else [None] * len(seeds)
    if len(options) != len(seeds):
        raise ValueError(f"reset got {len(options)} options for {len(seeds)} seeds")
    return options


class GymLockstep:
    """Environments stepped one by one (any Gymnasium environment)."""

    def __init__(self, envs: Sequence[gym.Env]) -> None:
        self.envs = list(envs)
        self.env, self.n = self.envs[0], len(self.envs)

    def reset(
        self, seeds: Sequence[int], options: Sequence[dict[str, Any] | None] | None = None
    ) -> np.ndarray:
        options = _reset_options(seeds, options, self.n)
        return np.stack(
            [
                env.reset(seed=int(s), options=o)[0]
                for env, s, o in zip(self.envs, seeds, options, strict=False)
            ]
        )

    def step(
        self, rows: np.ndarray, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        out = [self.envs[i].step(int(u)) for i, u in zip(rows, actions, strict=True)]
        obs = np.stack([o[0] for o in out])
        rewards = np.array([o[1] for o in out], dtype=np.float64)
        terminated = np.array([o[2] for o in out], dtype=bool)
        over = terminated | np.array([o[3] for o in out], dtype=bool)
        return obs, rewards, terminated, over

    def action_masks(self, rows: np.ndarray) -> np.ndarray | None:
        return stacked_masks([self.envs[int(i)] for i in rows])


class CloudLockstep:
    """``n`` episodes of one ``CloudEnvironment`` job stepped with array operations.

    The formulas are ``CloudEnvironment.step``'s (``_outcome`` with noise, the tables
    without, ``_oom_step`` on out of memory) written over arrays in the same order, so the
    results match to the last bit. An episode's noise is the same stream of normals from
    ``gymnasium.utils.seeding.np_random(seed)``, drawn once at reset.
    """

    def __init__(self, env: CloudEnvironment, n: int) -> None:
        self.env, self.n = env, int(n)
        m = env.model
        self.model = m
        self.noise = float(env.config.noise)
        self.restart_s = float(env.resolved.restart_s)
        self.time_max, self.cost_max = env.resolved.sla.time_max, env.resolved.sla.cost_max
        self.thr_min = env.resolved.sla.throughput_min
        self.thr_table = np.asarray(m.pred["throughput"], dtype=np.float64)
        self.util = m.reward_vector[..., 0, 2]
        self.checked = np.asarray(m.state.checked, dtype=bool)
        self.weights = [float(w) for w in m.weights]
        self.sla_w = float(env.config.sla_weight)
        self.change_pen = float(env.config.change_penalty)
        self.oom_reward = np.stack(
            [m.oom_outcome(k, np.array([0, 1]))[1] for k in range(m.n_steps)]
        )
        self.i_prog, self.i_time, self.i_cost = env._i_prog, env._i_time, env._i_cost
        self.i_phase, self.i_thr, self.i_sla = env._i_phase, env._i_thr, env._i_sla
        self.n_sla = len(SLA_NAMES)
        self.scale = float(env.state.throughput_scale)
        self.a = np.full(self.n, m.initial, dtype=np.int64)
        self.k = np.zeros(self.n, dtype=np.int64)
        self.elapsed = np.zeros(self.n)
        self.spent = np.zeros(self.n)
        n_blocks = -(-m.n_steps // NOISE_BLOCK)
        self.eps = np.ones((self.n, n_blocks * NOISE_BLOCK))

    def reset(
        self, seeds: Sequence[int], options: Sequence[dict[str, Any] | None] | None = None
    ) -> np.ndarray:
        m, n = self.model, len(seeds)
        # Every start is checked before any copy changes: a bad option resets nothing.
        starts = [
            self.env._start_index(o["allocation"])
            if o and o.get("allocation") is not None
            else m.initial
            for o in _reset_options(seeds, options, self.n)
        ]
        self.a[:n] = starts
        for i, seed in enumerate(seeds if self.noise > 0 else []):
            rng, _ = seeding.np_random(int(seed))
            blocks = self.eps.shape[1] // NOISE_BLOCK
            z = np.concatenate([rng.standard_normal(NOISE_BLOCK) for _ in range(blocks)])
            self.eps[i] = np.exp(self.noise * z - 0.5 * self.noise**2)
        self.k[:n], self.elapsed[:n], self.spent[:n] = 0, 0.0, 0.0
        p0 = int(m.step_phase[0])
        obs = m.obs[p0, self.a[:n], 0]  # fancy indexing: a copy
        obs[:, self.i_phase + m.phase_slot[p0]] = 1.0
        return obs

    def step(
        self, rows: np.ndarray, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        m = self.model
        rows = np.asarray(rows, dtype=np.int64)
        a, k = self.a[rows], self.k[rows]
        a2 = m.next_index[a, np.asarray(actions, dtype=np.int64)]
        ch = (a2 != a).astype(np.int64)
        p = m.step_phase[k]
        oom = m.oom[p, a2]
        obs = m.obs[p, a2, ch]
        if self.noise > 0:
            t, c, reward = self._noisy(obs, p, a2, ch, self.eps[rows, k], ~oom)
        else:
            t, c, reward = m.step_time[p, a2, ch], m.step_cost[p, a2, ch], m.reward[p, a2, ch]
        if oom.any():  # t, c and reward are fresh arrays (fancy indexing copies)
            t[oom] = self.restart_s
            c[oom] = m.hourly_cost[a2[oom]] * self.restart_s / 3600.0
            reward[oom] = self.oom_reward[k[oom], ch[oom]]
            obs[oom, self.i_sla + 3] = 0.0  # memory
            obs[oom, self.i_sla + self.n_sla] = 0.0  # overall
        self.a[rows] = a2
        self.elapsed[rows] += t
        self.spent[rows] += c
        k1 = np.where(oom, m.n_steps, k + 1)
        self.k[rows] = k1
        obs[:, self.i_prog] = np.where(oom, k, k1) / m.n_steps
        obs[:, self.i_time] = np.minimum(self.elapsed[rows] / self.time_max, FRACTION_HIGH)
        obs[:, self.i_cost] = np.minimum(self.spent[rows] / self.cost_max, FRACTION_HIGH)
        done = k1 >= m.n_steps
        nxt = np.where(oom | done, p, m.step_phase[np.minimum(k1, m.n_steps - 1)])
        obs[np.arange(len(rows)), self.i_phase + m.phase_slot[nxt]] = 1.0
        return obs, reward, done, done

    def action_masks(self, rows: np.ndarray) -> np.ndarray:
        m = self.model
        rows = np.asarray(rows, dtype=np.int64)
        k = np.minimum(self.k[rows], m.n_steps - 1)
        masks = valid_moves(m, m.step_phase[k], self.a[rows])
        masks[self.k[rows] >= m.n_steps] = True
        return masks

    def _noisy(
        self,
        obs: np.ndarray,
        p: np.ndarray,
        a2: np.ndarray,
        ch: np.ndarray,
        eps: np.ndarray,
        ran: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``CloudEnvironment._outcome`` over arrays; writes the observations of ``ran`` rows."""
        m = self.model
        with np.errstate(divide="ignore"):  # no goodput where the batch does not fit (OOM rows)
            t = m.chunk / (m.goodput[p, a2] * eps) + ch * self.restart_s
        c = m.hourly_cost[a2] * t / 3600.0
        thr = self.thr_table[p, a2] * eps
        status = m.sla_status[p, a2, ch]
        status[:, 0] = t <= m.time_budget + 1e-9
        status[:, 1] = c <= m.cost_budget + 1e-12
        status[:, 2] = thr >= self.thr_min
        rate = status[:, self.checked].sum(axis=1) / int(self.checked.sum())
        r_cost = np.minimum(1.0, np.maximum(-1.0, 1.0 - c / m.cost_budget))
        r_time = np.minimum(1.0, np.maximum(-1.0, 1.0 - t / m.time_budget))
        w = self.weights
        reward = (
            w[0] * r_cost
            + w[1] * r_time
            + w[2] * self.util[p, a2]
            + self.sla_w * (rate - 1.0)
            - self.change_pen * ch
        )
        thr_obs = np.minimum(thr / self.scale, FRACTION_HIGH)
        i = self.i_sla
        obs[ran, self.i_thr] = thr_obs[ran]
        obs[ran, i : i + 3] = status[ran, :3]
        obs[ran, i + self.n_sla] = rate[ran]
        return t, c, reward
