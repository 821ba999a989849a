"""Fixed-size experience replay (Lin, 1992; Mnih et al., 2015) for discrete-action agents.

A ring buffer over preallocated numpy arrays with explicit dtypes (the layout of
Stable-Baselines3's ``ReplayBuffer``): once full, each new transition overwrites the oldest.
Samples come back as a :class:`ReplayBufferSamples` of tensors on the agent's device.
:class:`NStepAccumulator` turns an environment's steps into the n-step transitions stored here.
"""

from __future__ import annotations

from typing import NamedTuple

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
    """

    def __init__(
        self, max_size: int, state_dim: int, device: str | torch.device = "cpu", seed: int = 0
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

    def add(
        self,
        state: np.ndarray,
        action: int | np.ndarray,
        reward: float | np.ndarray,
        next_state: np.ndarray,
        done: bool | np.ndarray,
        discount: float | np.ndarray = 1.0,
    ) -> None:
        """Store one transition, or a batch of them with a leading ``(n,)`` axis."""
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
        self.ptr = int((self.ptr + n) % self.max_size)
        self.size = min(self.size + n, self.max_size)

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
        self.pending: list[tuple[np.ndarray, int, float]] = []

    def push(
        self,
        state: np.ndarray,
        action: int,
        reward: float,
        next_state: np.ndarray,
        terminated: bool,
        episode_over: bool,
    ) -> list[tuple[np.ndarray, int, float, np.ndarray, bool, float]]:
        self.pending.append((np.array(state, copy=True), int(action), float(reward)))
        out = []
        while self.pending and (len(self.pending) == self.n or episode_over):
            ret = sum(r * self.gamma**i for i, (_, _, r) in enumerate(self.pending))
            s0, a0, _ = self.pending.pop(0)
            k = len(self.pending) + 1
            out.append((s0, a0, ret, np.array(next_state, copy=True), terminated, self.gamma**k))
        return out
