"""Fixed-size experience replay (Lin, 1992; Mnih et al., 2015) for discrete-action agents.

A ring buffer over preallocated numpy arrays with explicit dtypes (the layout of
Stable-Baselines3's ``ReplayBuffer``): once full, each new transition overwrites the oldest.
Samples come back as a :class:`ReplayBufferSamples` of tensors on the agent's device.
:class:`NStepAccumulator` turns an environment's steps into the n-step transitions stored here.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch


class ReplayBufferSamples(NamedTuple):
    states: torch.Tensor
    """``(batch, state_dim)`` float32."""
    actions: torch.Tensor
    """``(batch,)`` int64 action indices."""
    rewards: torch.Tensor
    """``(batch,)`` float32."""
    next_states: torch.Tensor
    """``(batch, state_dim)`` float32."""
    dones: torch.Tensor
    """``(batch,)`` float32, 1.0 where the episode terminated at this transition."""
    discounts: torch.Tensor
    """``(batch,)`` float32, the factor on the bootstrapped value: ``gamma ** k`` for a
    transition spanning ``k`` steps (n-step returns), ``gamma`` for a single step."""
    masks: torch.Tensor | None = None
    """``(batch, action_dim)`` bool, the actions valid in ``states``; None for a buffer built
    without ``action_dim``."""
    next_masks: torch.Tensor | None = None
    """``(batch, action_dim)`` bool, the actions valid in ``next_states``."""


class ReplayBuffer:
    """Ring buffer of ``(state, action, reward, next_state, done)`` transitions.

    Parameters
    ----------
    max_size : int
        Capacity; the oldest transitions are overwritten beyond it.
    state_dim : int
        Length of the observation vector.
    device : str or torch.device
        Where sampled tensors are placed.
    seed : int
        Seed of the sampler's generator.
    action_dim : int, optional
        Number of actions; given, the buffer also keeps which actions were valid in each state
        and next state (invalid-action masks; all valid where a transition comes without them).
    """

    def __init__(
        self,
        max_size: int,
        state_dim: int,
        device: str | torch.device = "cpu",
        seed: int = 0,
        action_dim: int | None = None,
    ) -> None:
        if max_size < 1:
            raise ValueError(f"max_size must be >= 1 (got {max_size})")
        self.max_size = int(max_size)
        self.state_dim = int(state_dim)
        self.device = torch.device(device)
        self.ptr = 0
        self.size = 0
        self.rng = np.random.default_rng(seed)
        self.state = np.zeros((self.max_size, self.state_dim), dtype=np.float32)
        self.action = np.zeros(self.max_size, dtype=np.int64)
        self.reward = np.zeros(self.max_size, dtype=np.float32)
        self.next_state = np.zeros((self.max_size, self.state_dim), dtype=np.float32)
        # "done" means terminated (no bootstrap); time-limit truncation must be passed as False.
        self.done = np.zeros(self.max_size, dtype=np.float32)
        self.discount = np.ones(self.max_size, dtype=np.float32)
        self.action_dim = action_dim
        shape = (self.max_size, action_dim or 0)
        self.mask = np.ones(shape, dtype=bool)
        self.next_mask = np.ones(shape, dtype=bool)

    def add(
        self,
        state: np.ndarray,
        action: int | np.ndarray,
        reward: float | np.ndarray,
        next_state: np.ndarray,
        done: bool | np.ndarray,
        discount: float | np.ndarray = 1.0,
        mask: np.ndarray | None = None,
        next_mask: np.ndarray | None = None,
    ) -> None:
        """Store one transition, or a batch of them with a leading ``(n,)`` axis.

        ``mask`` / ``next_mask`` (bool, ``(action_dim,)`` or ``(n, action_dim)``): the actions
        valid in ``state`` / ``next_state``; None counts all valid.
        """
        state = np.asarray(state, dtype=np.float32).reshape(-1, self.state_dim)
        next_state = np.asarray(next_state, dtype=np.float32).reshape(-1, self.state_dim)
        n = state.shape[0]
        action = np.broadcast_to(np.asarray(action, dtype=np.int64).reshape(-1), (n,))
        reward = np.broadcast_to(np.asarray(reward, dtype=np.float32).reshape(-1), (n,))
        done = np.broadcast_to(np.asarray(done, dtype=np.float32).reshape(-1), (n,))
        discount = np.broadcast_to(np.asarray(discount, dtype=np.float32).reshape(-1), (n,))
        if next_state.shape[0] != n:
            raise ValueError(f"state has {n} rows but next_state has {next_state.shape[0]}")
        idx = (self.ptr + np.arange(n)) % self.max_size
        self.state[idx] = state
        self.action[idx] = action
        self.reward[idx] = reward
        self.next_state[idx] = next_state
        self.done[idx] = done
        self.discount[idx] = discount
        self.mask[idx] = self._masks(mask, n)
        self.next_mask[idx] = self._masks(next_mask, n)
        self.ptr = int((self.ptr + n) % self.max_size)
        self.size = min(self.size + n, self.max_size)

    def _masks(self, mask: np.ndarray | None, n: int) -> np.ndarray | bool:
        if mask is None:
            return True
        if not self.action_dim:
            raise ValueError("this buffer keeps no action masks: build it with action_dim")
        return np.asarray(mask, dtype=bool).reshape(n, self.action_dim)

    def sample(self, batch_size: int) -> ReplayBufferSamples:
        """Uniformly sample ``batch_size`` stored transitions (with replacement)."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        idx = self.rng.integers(0, self.size, size=batch_size)

        def to(x: np.ndarray) -> torch.Tensor:
            return torch.as_tensor(x[idx], device=self.device)

        return ReplayBufferSamples(
            states=to(self.state),
            actions=to(self.action),
            rewards=to(self.reward),
            next_states=to(self.next_state),
            dones=to(self.done),
            discounts=to(self.discount),
            masks=to(self.mask) if self.action_dim else None,
            next_masks=to(self.next_mask) if self.action_dim else None,
        )

    def clear(self) -> None:
        """Forget every transition (arrays are kept allocated)."""
        self.ptr = 0
        self.size = 0

    def __len__(self) -> int:
        return self.size


class NStepAccumulator:
    """Turns one env's steps into n-step transitions (Sutton & Barto 2018, section 7.1).

    Each emitted transition is ``(state, action, R, next_state, done, discount)`` with
    ``R = sum_{i<k} gamma^i r_{t+i}``, ``next_state = s_{t+k}`` and ``discount = gamma^k``;
    ``k = n`` except at the end of an episode, where the pending steps are flushed with the
    steps left. With ``n = 1`` these are the ordinary one-step transitions. Fewer hops of
    bootstrapping carry the end-of-job value back through a 20-step episode in fewer updates;
    the price is a bias from the behaviour policy's actions inside the window, small for short n.
    """

    def __init__(self, n: int, gamma: float) -> None:
        if n < 1:
            raise ValueError(f"n_step must be >= 1 (got {n})")
        self.n, self.gamma = n, gamma
        self.pending: list[tuple[np.ndarray, int, float, np.ndarray | None]] = []

    def push(
        self,
        state: np.ndarray,
        action: int,
        reward: float,
        next_state: np.ndarray,
        terminated: bool,
        episode_over: bool,
        mask: np.ndarray | None = None,
        next_mask: np.ndarray | None = None,
    ) -> list[tuple[Any, ...]]:
        """Take one step; return the transitions it completes, each
        ``(state, action, R, next_state, done, discount, mask, next_mask)`` with the valid
        actions of ``state`` and ``next_state`` (None where not given)."""
        copy = None if mask is None else np.array(mask, dtype=bool)
        self.pending.append((np.array(state, copy=True), int(action), float(reward), copy))
        out = []
        while self.pending and (len(self.pending) == self.n or episode_over):
            ret = sum(p[2] * self.gamma**i for i, p in enumerate(self.pending))
            s0, a0, _, m0 = self.pending.pop(0)
            k = len(self.pending) + 1
            end = np.array(next_state, copy=True)
            out.append((s0, a0, ret, end, terminated, self.gamma**k, m0, next_mask))
        return out
