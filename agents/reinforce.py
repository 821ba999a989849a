"""REINFORCE with a learned value baseline: the design's ``SimplePolicy``.

Williams (1992), "Simple statistical gradient-following algorithms for connectionist
reinforcement learning"; baseline and entropy bonus as in Sutton & Barto (2018), section 13.4.
For each finished episode the discounted return is

    G_t = sum_{k >= t} gamma^(k - t) r_k                                    (Sutton & Barto 13.8)

and one update minimises, over the batch of episodes,

    L = -mean[ log pi(a_t | s_t) * A_t ] - beta * mean[ H(pi(. | s_t)) ] + mean[ (V(s_t) - G_t)^2 ]

with advantages ``A_t = G_t - V(s_t)`` normalised over the batch. Exploration is an entropy
bonus ``beta`` (``RLConfig.entropy_coef``) plus epsilon-mixing: actions are drawn from
``(1 - eps) * pi + eps / |A|`` (``RLConfig.exploration_noise``) and the gradient uses the log
probability of that mixture, so the update stays on-policy for the actions actually taken.
Evaluation is greedy (arg max of ``pi``). The training loop may anneal both to zero
(:meth:`SimplePolicy.set_exploration`) so the policy ends close to the greedy one it is graded as.

For a product action set (``CloudEnvironment``'s 81 actions = GPU x CPU x memory x batch moves)
the policy can have one softmax per sub-action (``action_factors``, "action branching",
Tavakoli et al., 2018): 12 logits instead of 81, and exploring "one more GPU" is shared by the
27 joint actions that include it.

The design stores a log-probability per step with its autograd graph; here the states and actions
are stored and the log-probabilities recomputed in one batched pass at update time, which gives
the same gradient (the network has not changed since the actions were drawn) at a fraction of
the memory and time.

Invalid-action masking (Huang & Ontanon, 2022): where the environment says which actions are
valid (``CloudEnvironment.action_masks()``: the moves that fit in memory in the coming phase),
the policy is renormalised over them, for acting, exploring and the gradient alike, so no
episode is spent learning that running out of memory ends the job.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from agents.episode import step_masks
from agents.networks import joint_log_probs, make_adam, mask_logits
from optimizer.foundation.config import RLConfig


def discounted_returns(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """Discounted return from every step of one episode.

    Parameters
    ----------
    rewards : array, shape ``(T,)``
    gamma : float

    Returns
    -------
    array, shape ``(T,)``, ``G_t = r_t + gamma * G_{t+1}``, ``G_T = 0``.
    """
    returns = np.zeros(len(rewards), dtype=np.float64)
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = float(rewards[t]) + gamma * running
        returns[t] = running
    return returns


def _mlp(in_dim: int, out_dim: int, hidden_dim: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(in_dim, hidden_dim),
        nn.Tanh(),
        nn.Linear(hidden_dim, hidden_dim),
        nn.Tanh(),
        nn.Linear(hidden_dim, out_dim),
    )


def _as_column(value: float | np.ndarray, n: int) -> list:
    """A scalar or ``(n,)`` array as a list of ``n`` Python values (cheap per-row access)."""
    values = np.asarray(value).reshape(-1).tolist()
    return values * n if len(values) == 1 and n > 1 else values


@dataclass
class _Trajectory:
    states: list[np.ndarray] = field(default_factory=list)
    actions: list[int] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    masks: list[np.ndarray | None] = field(default_factory=list)


class SimplePolicy:
    """Policy-gradient (REINFORCE) agent over a discrete action set.

    Parameters
    ----------
    state_dim, action_dim : int
        Observation length and number of discrete actions.
    config : RLConfig
        ``hidden_dim``, ``gamma``, ``lr_actor`` (policy), ``lr_critic`` (value baseline),
        ``entropy_coef``, ``exploration_noise`` (epsilon) and ``seed`` are used.
    device : str
        Torch device of the networks.
    action_factors : sequence of int, optional
        Sub-action sizes whose product is ``action_dim`` (e.g. ``(3, 3, 3, 3)`` for the cloud
        env's 81 actions): one softmax per sub-action, see :func:`agents.networks.joint_log_probs`.

    Attributes
    ----------
    policy_network : nn.Module
        State -> action logits.
    value_network : nn.Module
        State -> baseline, in units of the running return scale.
    train_steps : int
        Gradient updates done.
    """

    def __init__(
        self,
        state_dim: int,
        action_dim: int,
        config: RLConfig | None = None,
        device: str = "cpu",
        action_factors: Sequence[int] | None = None,
    ) -> None:
        self.config = config if config is not None else RLConfig()
        self.action_factors = tuple(action_factors) if action_factors else None
        if self.action_factors and math.prod(self.action_factors) != action_dim:
            raise ValueError(
                f"action_factors {self.action_factors} do not multiply to {action_dim}"
            )
        self.state_dim = int(state_dim)
        self.action_dim = int(action_dim)
        self.device = torch.device(device)
        self.rng = np.random.default_rng(self.config.seed)
        torch.manual_seed(self.config.seed)  # network initialisation is part of the seeded run
        self._build_networks()
        self.reset()

    def _build_networks(self) -> None:
        h = self.config.hidden_dim
        out_dim = sum(self.action_factors) if self.action_factors else self.action_dim
        self.policy_network = _mlp(self.state_dim, out_dim, h).to(self.device)
        self.value_network = _mlp(self.state_dim, 1, h).to(self.device)
        self.optimizer = make_adam(self.policy_network.parameters(), self.config.lr_actor)
        self.value_optimizer = make_adam(self.value_network.parameters(), self.config.lr_critic)
        # Current exploration; the training loop may anneal both towards zero (set_exploration).
        self.epsilon = self.config.exploration_noise
        self.entropy_coef = self.config.entropy_coef
        # Running mean/std of returns (count, mean, M2; Welford) so the baseline learns O(1) targets.
        self.return_stats = np.array([0.0, 0.0, 0.0])
        self.train_steps = 0

    def set_exploration(self, scale: float) -> None:
        """Scale epsilon and the entropy bonus to ``scale`` (in [0, 1]) times their configured values.

        Annealing both to zero late in training lets the stochastic policy settle on what the
        greedy evaluation policy will do: with noise left, a policy that is robust to its own
        random actions (e.g. one that keeps far from out-of-memory) scores better than the best
        deterministic one.
        """
        self.epsilon = self.config.exploration_noise * scale
        self.entropy_coef = self.config.entropy_coef * scale

    def set_learning_rate_scale(self, scale: float) -> None:
        """Set both optimizers' step sizes to ``scale`` times the configured ones."""
        for group in self.optimizer.param_groups:
            group["lr"] = self.config.lr_actor * scale
        for group in self.value_optimizer.param_groups:
            group["lr"] = self.config.lr_critic * scale

    # ---------------------------------------------------------------- acting
    def _logits(self, states: torch.Tensor) -> torch.Tensor:
        out = self.policy_network(states)
        return joint_log_probs(out, self.action_factors) if self.action_factors else out

    def _mixture_probs(self, logits: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        eps = self.epsilon
        if mask is None:
            return (1.0 - eps) * torch.softmax(logits, dim=-1) + eps / self.action_dim
        uniform = mask.float() / mask.sum(dim=-1, keepdim=True)
        return (1.0 - eps) * torch.softmax(mask_logits(logits, mask), dim=-1) + eps * uniform

    @torch.no_grad()
    def select_action(self, state: np.ndarray, evaluate: bool = False,
                      mask: np.ndarray | None = None) -> int | np.ndarray:
        """Choose an action for one state ``(state_dim,)`` or a batch ``(n, state_dim)``.

        Training: sample from the epsilon-mixed policy. ``evaluate=True``: the most probable
        action. ``mask`` (bool, ``(action_dim,)`` or ``(n, action_dim)``): the valid actions,
        the only ones chosen. Returns an ``int`` for one state, an int64 array ``(n,)`` for a
        batch.
        """
        x = torch.as_tensor(np.asarray(state, dtype=np.float32), device=self.device)
        single = x.ndim == 1
        logits = self._logits(x.view(-1, self.state_dim))
        valid = self._mask_tensor(mask, len(logits))
        if evaluate:
            actions = mask_logits(logits, valid).argmax(dim=-1)
            actions = actions.cpu().numpy()
        else:
            probs = self._mixture_probs(logits, valid).cpu().numpy().astype(np.float64)
            # Inverse-CDF sampling with the agent's own generator: one vectorised draw per row.
            cdf = np.cumsum(probs, axis=1)
            u = self.rng.random((len(probs), 1)) * cdf[:, -1:]
            actions = np.minimum((u > cdf).sum(axis=1), self.action_dim - 1)
        return int(actions[0]) if single else actions.astype(np.int64)

    def _mask_tensor(self, mask: np.ndarray | None, n: int) -> torch.Tensor | None:
        if mask is None:
            return None
        return torch.as_tensor(np.asarray(mask, dtype=bool).reshape(n, self.action_dim),
                               device=self.device)

    def action_probabilities(
        self, state: np.ndarray, mask: np.ndarray | None = None
    ) -> np.ndarray:
        """Policy probabilities ``pi(. | s)``, shape ``(n, action_dim)``, over the valid actions
        where ``mask`` is given (as :meth:`select_action` chooses)."""
        x = torch.as_tensor(np.asarray(state, dtype=np.float32), device=self.device)
        with torch.no_grad():
            logits = self._logits(x.view(-1, self.state_dim))
            valid = self._mask_tensor(mask, len(logits))
            return torch.softmax(mask_logits(logits, valid), -1).cpu().numpy()

    # ------------------------------------------------------------ experience
    def add_experience(
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
        (terminated or truncated) closes that episode so :meth:`train` can use it. ``mask``:
        the valid actions the action was chosen among (as given to :meth:`select_action`).
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
            traj = self.trajectories.get(key)
            if traj is None:
                traj = self.trajectories[key] = _Trajectory()
            traj.states.append(states[i])
            traj.actions.append(int(actions[i]))
            traj.rewards.append(float(rewards[i]))
            traj.masks.append(None if masks is None else masks[i].copy())
            if dones[i]:
                self.episodes.append(self.trajectories.pop(key))

    @property
    def n_complete_episodes(self) -> int:
        return len(self.episodes)

    # -------------------------------------------------------------- learning
    def _update_return_stats(self, returns: np.ndarray) -> tuple[float, float]:
        count, mean, m2 = self.return_stats
        for g in returns:  # Welford's update; batches are a few hundred steps
            count += 1
            delta = g - mean
            mean += delta / count
            m2 += delta * (g - mean)
        self.return_stats = np.array([count, mean, m2])
        std = float(np.sqrt(m2 / count)) if count > 1 else 1.0
        return float(mean), max(std, 1e-6)

    def train(self) -> dict[str, float] | None:
        """One REINFORCE update on every finished episode recorded since the last update.

        Returns the diagnostics (losses, entropy, mean episode return) or ``None`` when no
        episode has finished yet. The used episodes are dropped (on-policy).
        """
        if not self.episodes:
            return None
        episodes, self.episodes = self.episodes, []
        b_states = np.concatenate([np.stack(ep.states) for ep in episodes])
        b_actions = np.concatenate([np.asarray(ep.actions) for ep in episodes])
        b_returns = np.concatenate(
            [discounted_returns(np.asarray(ep.rewards), self.config.gamma) for ep in episodes]
        )
        mean, std = self._update_return_stats(b_returns)

        states = torch.as_tensor(b_states, device=self.device)
        actions = torch.as_tensor(b_actions, dtype=torch.int64, device=self.device)
        returns = torch.as_tensor((b_returns - mean) / std, dtype=torch.float32, device=self.device)

        values = self.value_network(states).squeeze(1)
        advantages = (returns - values).detach()
        if len(advantages) > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)

        valid = step_masks(episodes, self.action_dim)
        valid = None if valid is None else torch.as_tensor(valid, device=self.device)
        logits = self._logits(states)
        probs = self._mixture_probs(logits, valid)
        log_probs = torch.log(probs.gather(1, actions.view(-1, 1)).squeeze(1))
        logits = mask_logits(logits, valid)
        entropy = torch.distributions.Categorical(logits=logits).entropy().mean()
        policy_loss = -(log_probs * advantages).mean() - self.entropy_coef * entropy
        value_loss = torch.mean((values - returns) ** 2)

        self.optimizer.zero_grad()
        policy_loss.backward()
        nn.utils.clip_grad_norm_(self.policy_network.parameters(), 1.0)
        self.optimizer.step()
        self.value_optimizer.zero_grad()
        value_loss.backward()
        nn.utils.clip_grad_norm_(self.value_network.parameters(), 1.0)
        self.value_optimizer.step()
        self.train_steps += 1
        return {
            "policy_loss": policy_loss.item(),
            "value_loss": value_loss.item(),
            "entropy": entropy.item(),
            "episode_return": float(np.mean([sum(ep.rewards) for ep in episodes])),
            "episodes": float(len(episodes)),
        }

    # ----------------------------------------------------------- persistence
    def save(self, path: str | os.PathLike) -> None:
        """Save networks, optimizers and return statistics (tensors only, atomically)."""
        from agents.persist import save_state

        save_state(
            path,
            {
                "policy_network": self.policy_network.state_dict(),
                "value_network": self.value_network.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "value_optimizer": self.value_optimizer.state_dict(),
                "return_stats": torch.as_tensor(self.return_stats),
                "train_steps": torch.tensor(self.train_steps),
                "shape": torch.tensor([self.state_dim, self.action_dim]),
            },
        )

    def load(self, path: str | os.PathLike) -> None:
        """Load what :meth:`save` wrote (``torch.load(weights_only=True)``: no code executed)."""
        from agents.persist import load_state

        state: dict[str, Any] = load_state(path, expected_shape=(self.state_dim, self.action_dim))
        self.policy_network.load_state_dict(state["policy_network"])
        self.value_network.load_state_dict(state["value_network"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.value_optimizer.load_state_dict(state["value_optimizer"])
        self.return_stats = state["return_stats"].numpy().astype(float)
        self.train_steps = int(state["train_steps"])

    def reset(self, reinitialize: bool = False) -> None:
        """Drop all recorded experience; with ``reinitialize``, also start learning afresh."""
        self.trajectories: dict[int, _Trajectory] = {}
        self.episodes: list[_Trajectory] = []
        if reinitialize:
            self._build_networks()
