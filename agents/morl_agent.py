"""The multi-objective agent: one actor-critic pair per preference vector, and what it decides.

Multi-objective RL by linear scalarisation (Roijers et al., 2013, "A Survey of Multi-Objective
Sequential Decision-Making"): each preference vector ``w`` over (cost, time, resource) gets its
own policy trained on the scalar reward ``w . r``; together the policies approximate the Pareto
front (:mod:`agents.pareto`). Each policy is a :class:`agents.policy_pair.PolicyPair`, whose
docstring has the updates' equations; :mod:`agents.morl` holds the settings and the training
loops, and registers the agent.

Every policy acts among the valid actions only where the environment gives invalid-action
masks (``CloudEnvironment.action_masks()``; Huang & Ontanon, 2022), exploring included.
Decisions carry an uncertainty from Monte Carlo dropout over the actor (Gal & Ghahramani, 2016);
``select_policy`` and ``check_adaptive_reset`` apply the SLA rules of :mod:`agents.sla_switching`
(switch to the time- or cost-focused policy, re-initialise a critic after violations).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import numpy as np
import torch

from agents.episode import Episode
from agents.networks import action_uncertainty, mask_logits, mask_tensor, sample_rows
from agents.persist import check_policies, load_state, save_state
from agents.policy_pair import PairSettings, PolicyPair
from agents.sla_switching import reset_due, sla_policy
from optimizer.foundation.config import MultiObjectiveConfig
from optimizer.foundation.errors import ConfigError


class AgentSettings(PairSettings, Protocol):
    """The settings a :class:`MultiObjectiveRLAgent` reads besides its pairs' (all of them
    :class:`agents.morl.MORLConfig`'s fields)."""

    seed: int
    exploration_noise: float
    critic_dropout: float | None
    target_entropy: float | None
    mc_samples: int
    reset_interval: int
    reset_probability: float


class Decision(NamedTuple):
    """What :meth:`MultiObjectiveRLAgent.select_action` chose and how sure it was."""

    action: int | np.ndarray
    """Action index, or ``(n,)`` indices for a batch of states."""
    policy: int
    """Index of the policy that decided."""
    probs: np.ndarray
    """Action probabilities (dropout off), ``(action_dim,)`` or ``(n, action_dim)``."""
    uncertainty: float | np.ndarray
    """Monte Carlo dropout standard deviation of the chosen action's probability (0 without)."""


class MultiObjectiveRLAgent:
    """Actor-critic pairs, one per preference vector, with SLA-aware policy switching.

    Parameters
    ----------
    state_dim, action_dim : int
        Observation length and number of discrete actions.
    config : AgentSettings
        Networks, step sizes, ``gamma``, ``tau``, the buffer, exploration, the actor update
        and the SLA resets: :class:`agents.morl.MORLConfig`.
    multi_objective_config : MultiObjectiveConfig
        The named preference vectors; policy ``i`` belongs to the ``i``-th name.
    device : str
        Torch device.
    action_factors : sequence of int, optional
        Sub-action sizes whose product is ``action_dim``: factored actor heads
        (:func:`agents.networks.joint_log_probs`); the critic still scores every joint action.

    Attributes
    ----------
    actors, critics, target_actors, target_critics : list of nn.Module
    actor_optimizers, critic_optimizers : list of torch.optim.Optimizer
    replay_buffers : list of ReplayBuffer
    train_steps : list of int
        Gradient updates per policy.
    reset_counters : list of int
        Adaptive critic resets per policy.
    """

    def __init__(
        self,
        state_dim: int,
        action_dim: int,
        config: AgentSettings,
        multi_objective_config: MultiObjectiveConfig | None = None,
        device: str = "cpu",
        action_factors: Sequence[int] | None = None,
    ) -> None:
        self.config = config
        self.multi_objective_config = multi_objective_config or MultiObjectiveConfig()
        self.state_dim, self.action_dim = int(state_dim), int(action_dim)
        self.device = torch.device(device)
        self.policy_names = list(self.multi_objective_config.names)
        self.preferences = np.array(
            [self.multi_objective_config.preference_vectors[n] for n in self.policy_names]
        )
        cfg, seed = self.config, self.config.seed
        self.rng = np.random.default_rng(seed)
        torch.manual_seed(seed)
        critic_dropout = cfg.dropout_rate if cfg.critic_dropout is None else cfg.critic_dropout
        dims = (self.state_dim, self.action_dim)
        self.pairs = [
            PolicyPair(*dims, cfg, self.device, seed + i, action_factors, critic_dropout)
            for i in range(len(self.policy_names))
        ]
        self.train_steps = [0] * len(self.pairs)
        self.reset_counters = [0] * len(self.pairs)
        self.violation_streaks = [0] * len(self.pairs)
        self.active_policy = 0
        self.epsilon = cfg.exploration_noise
        self.entropy_coef = cfg.entropy_coef
        self.target_entropy = (
            None if cfg.target_entropy is None
            else cfg.target_entropy * float(np.log(self.action_dim))
        )

    def set_exploration(self, scale: float) -> None:
        """Scale epsilon and alpha (or the target entropy) to ``scale`` times their settings."""
        self.epsilon = self.config.exploration_noise * scale
        self.entropy_coef = self.config.entropy_coef * scale
        if self.config.target_entropy is not None:
            self.target_entropy = (self.config.target_entropy * scale
                                   * float(np.log(self.action_dim)))

    def set_learning_rate_scale(self, scale: float, policy: str | int | None = None) -> None:
        """Set one policy's (default: all) step sizes to ``scale`` times the configured ones."""
        pairs = self.pairs if policy is None else [self.pairs[self.policy_index(policy)]]
        for pair in pairs:
            for group in pair.actor_optimizer.param_groups:
                group["lr"] = self.config.lr_actor * scale
            for group in pair.critic_optimizer.param_groups:
                group["lr"] = self.config.lr_critic * scale

    # Design-named views of the per-policy parts.
    actors = property(lambda self: [p.actor for p in self.pairs])
    critics = property(lambda self: [p.critic for p in self.pairs])
    target_actors = property(lambda self: [p.target_actor for p in self.pairs])
    target_critics = property(lambda self: [p.target_critic for p in self.pairs])
    actor_optimizers = property(lambda self: [p.actor_optimizer for p in self.pairs])
    critic_optimizers = property(lambda self: [p.critic_optimizer for p in self.pairs])
    replay_buffers = property(lambda self: [p.buffer for p in self.pairs])

    # ------------------------------------------------------------ policies
    def policy_index(self, preference: str | int | Sequence[float]) -> int:
        """The policy of a named preference, an index, or the nearest one to a weight vector."""
        if isinstance(preference, (int, np.integer)):
            if not 0 <= preference < len(self.pairs):
                raise ConfigError(
                    f"policy index {preference} out of range 0..{len(self.pairs) - 1}"
                )
            return int(preference)
        if isinstance(preference, str):
            if preference not in self.policy_names:
                names = ", ".join(self.policy_names)
                raise ConfigError(f"unknown preference {preference!r}; this agent has {names}")
            return self.policy_names.index(preference)
        w = self.multi_objective_config.vector(preference)
        return int(np.argmin(np.linalg.norm(self.preferences - w, axis=1)))

    def select_policy(
        self,
        preference: str | int | Sequence[float],
        sla_status: Mapping[str, bool] | None = None,
    ) -> int:
        """Pick the policy for the user's preference, overridden when an SLA is at risk.

        ``sla_status`` maps an SLA name to whether it is met and on track; a time SLA at risk
        wins over a cost SLA (:func:`agents.sla_switching.sla_policy`). The choice is kept in
        ``active_policy``.
        """
        self.active_policy = sla_policy(self.preferences, self.policy_index(preference), sla_status)
        return self.active_policy

    # -------------------------------------------------------------- acting
    def select_action(
        self,
        state: np.ndarray,
        policy: str | int | None = None,
        evaluate: bool = False,
        uncertainty: bool = True,
        mask: np.ndarray | None = None,
    ) -> Decision:
        """Choose an action for one state ``(state_dim,)`` or a batch ``(n, state_dim)``.

        The action comes from one deterministic pass (dropout off), the policy the training loop
        samples from and, for inverted dropout, the usual stand-in for the mean over masks:
        ``evaluate=True`` takes its most probable action, otherwise one is sampled (uniformly at
        random with probability epsilon). With ``uncertainty``, ``mc_samples`` further passes
        with dropout on give the spread of the chosen action's probability; without, it is 0.
        ``mask`` (bool, ``(action_dim,)`` or ``(n, action_dim)``): the valid actions, the only
        ones chosen, explored or given probability.
        """
        index = self.active_policy if policy is None else self.policy_index(policy)
        actor = self.pairs[index].actor
        x = torch.as_tensor(np.asarray(state, dtype=np.float32), device=self.device)
        single = x.ndim == 1
        x = x.view(-1, self.state_dim)
        valid = mask_tensor(mask, len(x), self.action_dim, self.device)
        with torch.no_grad():
            probs = torch.softmax(mask_logits(actor.deterministic_logits(x), valid), dim=-1)
        probs = probs.cpu().numpy().astype(np.float64)
        if evaluate:
            actions = probs.argmax(axis=1)
        else:
            actions = sample_rows(probs, self.rng)
            explore = np.flatnonzero(self.rng.random(len(probs)) < self.epsilon)
            if valid is None:
                actions[explore] = self.rng.integers(0, self.action_dim, size=len(explore))
            else:
                allowed = valid.cpu().numpy()
                for row in explore:
                    actions[row] = self.rng.choice(np.flatnonzero(allowed[row]))
        spread = np.zeros(len(actions))
        if uncertainty and actor.dropout_rate > 0:
            spread = action_uncertainty(actor, x, actions, self.config.mc_samples)
        if single:
            return Decision(int(actions[0]), index, probs[0], float(spread[0]))
        return Decision(actions.astype(np.int64), index, probs, spread)

    def add_experience(
        self,
        policy: str | int,
        state: np.ndarray,
        action: int | np.ndarray,
        reward: float | np.ndarray,
        next_state: np.ndarray,
        done: bool | np.ndarray,
        discount: float | np.ndarray | None = None,
        mask: np.ndarray | None = None,
        next_mask: np.ndarray | None = None,
    ) -> None:
        """Store transitions (one, or a batch with a leading axis) in ``policy``'s buffer.

        ``reward`` is the scalar reward under that policy's preference; ``done`` must be
        ``terminated`` only (a time-limit truncation still bootstraps). ``discount`` multiplies
        the bootstrapped value: default ``gamma``; ``gamma ** k`` when ``reward`` sums ``k``
        steps and ``next_state`` is ``k`` steps on (n-step returns). ``mask`` / ``next_mask``:
        the actions valid in ``state`` / ``next_state`` (None: all), so that the critic's
        target and the actor's update weigh only actions the policy can take.
        """
        discount = self.config.gamma if discount is None else discount
        buffer = self.pairs[self.policy_index(policy)].buffer
        buffer.add(state, action, reward, next_state, done, discount, mask, next_mask)

    # ------------------------------------------------------------ learning
    def train(self, policy: str | int, batch_size: int | None = None) -> dict[str, float] | None:
        """One soft actor-critic update of ``policy`` from its replay buffer
        (:meth:`agents.policy_pair.PolicyPair.replayed_update`; with
        ``actor_update="advantage"`` the critic's only).

        Returns the diagnostics, or ``None`` while the buffer holds fewer than a batch.
        """
        index = self.policy_index(policy)
        pair = self.pairs[index]
        batch_size = batch_size or self.config.batch_size
        if len(pair.buffer) < batch_size:
            return None
        data = pair.buffer.sample(batch_size)
        if self.target_entropy is None:
            alpha = self.entropy_coef
        else:
            alpha = float(pair.log_alpha.detach().exp()) if self.target_entropy > 0 else 0.0
        stats = pair.replayed_update(data, alpha, self.target_entropy)
        self.train_steps[index] += 1
        return stats

    def train_actor(
        self,
        policy: str | int,
        episodes: Sequence[Episode],
        lam: float = 1.0,
    ) -> dict[str, float] | None:
        """On-policy actor update from finished episodes (``actor_update="advantage"``).

        The advantage actor-critic of Mnih et al. (2016) with generalised advantage estimates
        (:meth:`agents.policy_pair.PolicyPair.advantage_update`): ``V(s) = sum_a pi(a|s)
        Q'(s, a)`` from the policy's target critic (trained off-policy by :meth:`train`) is the
        baseline, and with ``lam < 1`` also bootstraps the advantages. The loss is
        ``-mean[log pi(a|s) A] - alpha H(pi(.|s))`` with ``A`` normalised over the batch and
        ``alpha`` the annealed entropy coefficient. Returns ``None`` without episodes.
        """
        if not episodes:
            return None
        pair = self.pairs[self.policy_index(policy)]
        return pair.advantage_update(episodes, lam, self.entropy_coef, self.rng)

    def check_adaptive_reset(self, policy: str | int, sla_violated: bool) -> bool:
        """Count consecutive SLA-violating steps; maybe re-initialise the critic after a streak.

        Once ``reset_interval`` violating steps in a row are seen, the critic (and its target and
        optimizer) is re-initialised with probability ``reset_probability`` and the streak
        restarts. Returns whether a reset happened.
        """
        index, cfg = self.policy_index(policy), self.config
        self.violation_streaks[index], reset = reset_due(
            self.violation_streaks[index],
            sla_violated,
            cfg.reset_interval,
            cfg.reset_probability,
            self.rng,
        )
        if reset:
            self.pairs[index].reinitialize_critic()
            self.reset_counters[index] += 1
        return reset

    # --------------------------------------------------------- persistence
    def save(self, path: str | os.PathLike) -> None:
        """Save every policy's networks and optimizers to one file (tensors only, atomically)."""
        state: dict[str, Any] = {
            "shape": torch.tensor([self.state_dim, self.action_dim, len(self.pairs)]),
            "preferences": torch.as_tensor(self.preferences),
            "train_steps": torch.tensor(self.train_steps),
            "reset_counters": torch.tensor(self.reset_counters),
        }
        for name, pair in zip(self.policy_names, self.pairs, strict=True):
            state[name] = pair.state_dict()
        save_state(path, state)

    def load(self, path: str | os.PathLike) -> None:
        """Load what :meth:`save` wrote; the preference names and vectors must match."""
        state = load_state(path, (self.state_dim, self.action_dim, len(self.pairs)))
        check_policies(path, state, self.policy_names, self.preferences)
        for name, pair in zip(self.policy_names, self.pairs, strict=True):
            pair.load_state_dict(state[name])
        self.train_steps = [int(v) for v in state["train_steps"]]
        self.reset_counters = [int(v) for v in state["reset_counters"]]
