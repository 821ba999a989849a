"""Multi-objective actor-critic: one actor-critic pair per preference vector.

Multi-objective RL by linear scalarisation (Roijers et al., 2013, "A Survey of Multi-Objective
Sequential Decision-Making"): each preference vector ``w`` over (cost, time, resource) gets its
own policy trained on the scalar reward ``w . r``; together the policies approximate the Pareto
front (:mod:`agents.pareto`). Each pair is a discrete-action soft actor-critic (Haarnoja et al.,
2018; discrete form: Christodoulou, 2019, "Soft Actor-Critic for Discrete Action Settings"):

    critic target y = r + gamma * (1 - done) * sum_a' pi'(a'|s') [Q'(s', a') - alpha log pi'(a'|s')]
    critic loss   (Q_1(s, a) - y)^2 + (Q_2(s, a) - y)^2
    actor loss    -sum_a softmax(Q(s, .) / alpha)_a log pi(a|s)         (actor_update="projection")
                  sum_a pi(a|s) [alpha log pi(a|s) - Q(s, a)]           (actor_update="expected_q")

where ``Q = min(Q_1, Q_2)`` (clipped double Q, Fujimoto et al., 2018: each pair's critic is a
:class:`agents.networks.TwinCritic`), ``pi'`` and ``Q'`` are the target actor and target
critic, moved towards the online networks by Polyak averaging
``theta' <- tau theta + (1 - tau) theta'`` after each update, and
``alpha`` is ``RLConfig.entropy_coef``. Exploration while collecting adds epsilon-random actions
(``RLConfig.exploration_noise``); the update is off-policy, so that is harmless.

Both actor losses have the same minimiser, the Boltzmann policy ``softmax(Q / alpha)``: the
"expected_q" loss is ``KL(pi || softmax(Q / alpha))`` (discrete SAC), the "projection" loss is
``KL(softmax(Q / alpha) || pi)``, the policy-improvement step of MPO (Abdolmaleki et al., 2018)
in its discrete, one-step form. Their gradients differ: with respect to a logit, the expected-Q
gradient is ``pi_a (Q_a - E_pi Q)``, scaled by the probability of the very action that should
gain, so an actor that committed early gets little signal from a critic that has since changed
its mind; the projection gradient is ``pi_a - target_a`` whatever ``pi`` is. Measured on
``CloudEnvironment`` (vgg16-v100, balanced, 15 s of training, fixed alpha 0.05): with
"expected_q" the actor chose the critic's best action on only 8% of replayed states and gave up
1.39 of Q against it on average. "projection" is the default.

``actor_update="advantage"`` trains the actor on-policy instead, as an advantage actor-critic
(Mnih et al., 2016) with generalised advantage estimates (Schulman et al., 2016):

    actor loss    -mean[log pi(a_t|s_t) A_t] - alpha H(pi(.|s_t)),  A_t = GAE(lambda) of
                  r_t + gamma V(s_{t+1}) - V(s_t),  V(s) = sum_a pi(a|s) Q'(s, a)

on each batch of freshly finished episodes (:meth:`MultiObjectiveRLAgent.train_actor`), while
the twin critic keeps learning off-policy from the replay buffer with target networks as above.
The critic serves as the baseline (``lambda = 1``) and, for ``lambda < 1``, bootstraps the
advantage. On ``CloudEnvironment`` with a minute of CPU this learned better than either
replayed actor update (measured in ``agents.recipes.morl_train_config``). The replayed updates
are only as good as the critic, and one critic update (batch 256) costs about 5 ms here, so
about 10k fit in a minute: too few for the 81-action critic to rank the moves of a 20-step
episode, while the policy gradient needs only Monte Carlo returns.

With ``critic_fit_epochs > 0`` the critic also regresses ``Q(s_t, a_t)`` on each batch's
lambda-returns ``A_t + V(s_t)`` (as PPO fits its value function). The one-step bootstrap
alone carries values back one step per target update, and while the critic is far from the
returns the baseline leaves most of their variance in the gradient. With this fit and
exploring starts (``agents.exploration.ExploringStarts``) the recipe of
``agents.recipes.morl_train_config`` comes within 1% of the DP optimum on average over the
15 preset cases (its docstring has the runs).

Where the environment gives invalid-action masks (``CloudEnvironment.action_masks()``), every
policy here is renormalised over the valid actions (Huang & Ontanon, 2022): acting and
exploring, the expectation over next actions in the critic's target, and both actor updates.
The replay buffer keeps the masks of each state and next state for that.

Decisions carry an uncertainty from Monte Carlo dropout over the actor (Gal & Ghahramani, 2016);
``select_policy`` and ``check_adaptive_reset`` apply the SLA rules of :mod:`agents.sla_switching`
(switch to the time- or cost-focused policy, re-initialise a critic after violations).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from agents.episode import Episode, batch_advantages, lambda_advantages, step_and_last_masks
from agents.networks import action_uncertainty, mask_logits, mask_probs
from agents.persist import check_policies, load_state, save_state
from agents.policy_pair import PolicyPair, soft_update
from agents.sla_switching import reset_due, sla_policy
from optimizer.foundation.config import MultiObjectiveConfig, RLConfig
from optimizer.foundation.errors import ConfigError

__all__ = ["ACTOR_UPDATES", "Decision", "Episode", "MultiObjectiveRLAgent", "lambda_advantages",
           "soft_update"]

ACTOR_UPDATES = ("projection", "expected_q", "advantage")


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
    rl_config : RLConfig
        Network sizes, learning rates, ``gamma``, ``tau``, ``batch_size``, ``buffer_size``,
        ``exploration_noise`` (epsilon), ``entropy_coef`` (alpha), ``dropout_rate``,
        ``reset_interval``, ``reset_probability``, ``seed``.
    multi_objective_config : MultiObjectiveConfig
        The named preference vectors; policy ``i`` belongs to the ``i``-th name.
    device : str
        Torch device.
    mc_samples : int
        Dropout passes per decision when uncertainty is requested.
    action_factors : sequence of int, optional
        Sub-action sizes whose product is ``action_dim``: factored actor heads
        (:func:`agents.networks.joint_log_probs`); the critic still scores every joint action.
    target_entropy : float, optional
        Automatic temperature (SAC v2, Haarnoja et al., 2018b): ``alpha`` is learned so that the
        actor's entropy stays at ``target_entropy * log(action_dim)`` (a fraction of the uniform
        policy's), scaled by :meth:`set_exploration`. ``None``: fixed ``alpha = entropy_coef``.
        A fixed alpha is blind to the scale of Q; with Q-values of ~10 and action gaps of ~0.1
        a small alpha lets the actor collapse early onto a safe but poor action.
    critic_combine : {"min", "mean"}
        How the twin critics' estimates are combined for targets and the actor: the minimum
        (clipped double Q, against over-estimation) or the mean (no built-in pessimism, which
        can favour "safe" but poor allocations far from the out-of-memory cliff).
    actor_update : {"projection", "expected_q", "advantage"}
        The actor loss (module docstring), in :meth:`train` for the replayed ones (at
        ``alpha = 0`` the projection target is the critic's greedy action); ``"advantage"``
        learns on-policy from finished episodes (:meth:`train_actor`) and :meth:`train` then
        updates the critic only. The training loop's recipe uses ``"advantage"``.
    critic_fit_epochs : int
        With ``actor_update="advantage"``: passes (minibatches of ``batch_size``) of each
        :meth:`train_actor` batch over which the critic also regresses ``Q(s_t, a_t)`` on the
        batch's lambda-returns ``A_t + V(s_t)`` (module docstring). 0: replayed updates only.
    critic_dropout : float, optional
        Dropout rate of the critics; default ``rl_config.dropout_rate`` as in the design. The
        uncertainty estimate needs dropout in the actor only, and critic dropout costs about a
        third of each update on CPU, so fast training may set it to 0.

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
        rl_config: RLConfig | None = None,
        multi_objective_config: MultiObjectiveConfig | None = None,
        device: str = "cpu",
        mc_samples: int = 10,
        action_factors: Sequence[int] | None = None,
        critic_dropout: float | None = None,
        target_entropy: float | None = None,
        critic_combine: str = "min",
        actor_update: str = "projection",
        critic_fit_epochs: int = 0,
    ) -> None:
        if actor_update not in ACTOR_UPDATES:
            raise ValueError(
                f"actor_update must be one of {', '.join(ACTOR_UPDATES)} (got {actor_update!r})"
            )
        self.actor_update = actor_update
        if critic_fit_epochs < 0:
            raise ValueError(f"critic_fit_epochs must be >= 0 (got {critic_fit_epochs})")
        self.critic_fit_epochs = int(critic_fit_epochs)
        if critic_combine not in ("min", "mean"):
            raise ValueError(f"critic_combine must be 'min' or 'mean' (got {critic_combine!r})")
        self.critic_combine = critic_combine
        self.target_entropy_ratio = target_entropy
        self.rl_config = rl_config if rl_config is not None else RLConfig()
        self.multi_objective_config = multi_objective_config or MultiObjectiveConfig()
        self.state_dim, self.action_dim = int(state_dim), int(action_dim)
        self.device = torch.device(device)
        self.mc_samples = int(mc_samples)
        self.policy_names = list(self.multi_objective_config.names)
        self.preferences = np.array(
            [self.multi_objective_config.preference_vectors[n] for n in self.policy_names]
        )
        cfg, seed = self.rl_config, self.rl_config.seed
        self.rng = np.random.default_rng(seed)
        torch.manual_seed(seed)
        critic_dropout = cfg.dropout_rate if critic_dropout is None else critic_dropout
        dims = (self.state_dim, self.action_dim)
        self.pairs = [
            PolicyPair(*dims, cfg, self.device, seed + i, action_factors, critic_dropout)
            for i in range(len(self.policy_names))
        ]
        self.train_steps = [0] * len(self.pairs)
        self.reset_counters = [0] * len(self.pairs)
        self.violation_streaks = [0] * len(self.pairs)
        self.active_policy = 0
        self.epsilon = self.rl_config.exploration_noise
        self.entropy_coef = self.rl_config.entropy_coef
        self.target_entropy = (
            None if target_entropy is None else target_entropy * float(np.log(self.action_dim))
        )

    def set_exploration(self, scale: float) -> None:
        """Scale epsilon and alpha (or the target entropy) to ``scale`` times their settings."""
        self.epsilon = self.rl_config.exploration_noise * scale
        self.entropy_coef = self.rl_config.entropy_coef * scale
        if self.target_entropy_ratio is not None:
            self.target_entropy = self.target_entropy_ratio * scale * float(np.log(self.action_dim))

    def set_learning_rate_scale(self, scale: float, policy: str | int | None = None) -> None:
        """Set one policy's (default: all) step sizes to ``scale`` times the configured ones."""
        pairs = self.pairs if policy is None else [self.pairs[self.policy_index(policy)]]
        for pair in pairs:
            for group in pair.actor_optimizer.param_groups:
                group["lr"] = self.rl_config.lr_actor * scale
            for group in pair.critic_optimizer.param_groups:
                group["lr"] = self.rl_config.lr_critic * scale

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
        valid = self._mask_tensor(mask, len(x))
        with torch.no_grad():
            probs = torch.softmax(mask_logits(actor.deterministic_logits(x), valid), dim=-1)
        probs = probs.cpu().numpy().astype(np.float64)
        if evaluate:
            actions = probs.argmax(axis=1)
        else:
            cdf = np.cumsum(probs, axis=1)
            u = self.rng.random((len(probs), 1)) * cdf[:, -1:]
            actions = np.minimum((u > cdf).sum(axis=1), self.action_dim - 1)
            explore = np.flatnonzero(self.rng.random(len(probs)) < self.epsilon)
            if valid is None:
                actions[explore] = self.rng.integers(0, self.action_dim, size=len(explore))
            else:
                allowed = valid.cpu().numpy()
                for row in explore:
                    actions[row] = self.rng.choice(np.flatnonzero(allowed[row]))
        spread = np.zeros(len(actions))
        if uncertainty and actor.dropout_rate > 0:
            spread = action_uncertainty(actor, x, actions, self.mc_samples)
        if single:
            return Decision(int(actions[0]), index, probs[0], float(spread[0]))
        return Decision(actions.astype(np.int64), index, probs, spread)

    def _mask_tensor(self, mask: np.ndarray | None, n: int) -> torch.Tensor | None:
        if mask is None:
            return None
        mask = np.asarray(mask, dtype=bool).reshape(n, self.action_dim)
        return torch.as_tensor(mask, device=self.device)

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
        discount = self.rl_config.gamma if discount is None else discount
        buffer = self.pairs[self.policy_index(policy)].buffer
        buffer.add(state, action, reward, next_state, done, discount, mask, next_mask)

    # ------------------------------------------------------------ learning
    def train(self, policy: str | int, batch_size: int | None = None) -> dict[str, float] | None:
        """One soft actor-critic update of ``policy`` from its replay buffer.

        Returns the diagnostics, or ``None`` while the buffer holds fewer than a batch.
        """
        cfg = self.rl_config
        index = self.policy_index(policy)
        pair = self.pairs[index]
        batch_size = batch_size or cfg.batch_size
        if len(pair.buffer) < batch_size:
            return None
        data = pair.buffer.sample(batch_size)
        if self.target_entropy is None:
            alpha = self.entropy_coef
        else:
            alpha = float(pair.log_alpha.detach().exp()) if self.target_entropy > 0 else 0.0

        with torch.no_grad():
            next_probs = mask_probs(pair.target_actor(data.next_states), data.next_masks)
            next_log_probs = torch.log(next_probs.clamp_min(1e-8))
            next_q = pair.target_critic.combined_q(data.next_states, self.critic_combine)
            next_v = (next_probs * (next_q - alpha * next_log_probs)).sum(dim=1)
            td_target = data.rewards + data.discounts * (1.0 - data.dones) * next_v
        critic_loss, q_taken = pair.critic_step(data.states, data.actions, td_target)

        if self.actor_update == "advantage":  # the actor learns on-policy: train_actor
            soft_update(pair.target_critic, pair.critic, cfg.tau)
            self.train_steps[index] += 1
            return {"critic_loss": critic_loss.item(), "q_mean": q_taken.mean().item()}

        with torch.no_grad():
            q_all = pair.critic.combined_q(data.states, self.critic_combine)
        actor_loss, entropy = pair.replayed_actor_step(
            data.states, data.masks, q_all, alpha, self.actor_update, self.target_entropy)

        soft_update(pair.target_critic, pair.critic, cfg.tau)
        soft_update(pair.target_actor, pair.actor, cfg.tau)
        self.train_steps[index] += 1
        return {
            "critic_loss": critic_loss.item(),
            "actor_loss": actor_loss.item(),
            "q_mean": q_taken.mean().item(),
            "entropy": entropy.item(),
            "alpha": alpha,
        }

    def train_actor(
        self,
        policy: str | int,
        episodes: Sequence[Episode],
        lam: float = 1.0,
    ) -> dict[str, float] | None:
        """On-policy actor update from finished episodes (``actor_update="advantage"``).

        The advantage actor-critic of Mnih et al. (2016) with generalised advantage estimates:
        ``V(s) = sum_a pi(a|s) Q'(s, a)`` from the policy's target critic (trained off-policy
        by :meth:`train`) is the baseline, and with ``lam < 1`` also bootstraps the advantages
        (:func:`agents.episode.lambda_advantages`). The loss is
        ``-mean[log pi(a|s) A] - alpha H(pi(.|s))`` with ``A`` normalised over the batch, so
        ``alpha`` (the annealed entropy coefficient) is on the same scale whatever the size of
        the rewards. Returns ``None`` without episodes.
        """
        if not episodes:
            return None
        cfg = self.rl_config
        pair = self.pairs[self.policy_index(policy)]
        states = np.concatenate([ep.states for ep in episodes]).astype(np.float32)
        ends = np.stack([ep.last_state for ep in episodes]).astype(np.float32)
        # The baseline and the update weigh only the actions that were valid.
        masks = step_and_last_masks(episodes, self.action_dim)
        if masks is not None:
            masks = torch.as_tensor(masks, device=self.device)
        valid = None if masks is None else masks[: len(states)]
        x = torch.as_tensor(np.concatenate([states, ends]), device=self.device)
        v = pair.state_values(x, masks, self.critic_combine)
        values, last_values = v[: len(states)], v[len(states) :]
        advantages = batch_advantages(episodes, values, last_values, cfg.gamma, lam)
        actions = torch.as_tensor(
            np.concatenate([ep.actions for ep in episodes]), dtype=torch.int64, device=self.device
        )
        critic_loss = None
        if self.critic_fit_epochs:
            returns = advantages + values
            critic_loss = pair.fit_critic(
                states, actions, returns, self.critic_fit_epochs, cfg.batch_size, cfg.tau, self.rng
            )
        if len(advantages) > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        adv = torch.as_tensor(advantages, dtype=torch.float32, device=self.device)
        # The gradient must be that of the policy the actions were drawn from: training
        # samples without dropout (select_action), so dropout stays off here too. With it on,
        # the update followed log-probabilities of randomly thinned networks, and the policy
        # ended below zero return in 3 of the first 8 preset cases (0.57-0.97 on those with it off).
        logits = pair.actor.deterministic_logits(torch.as_tensor(states, device=self.device))
        log_probs = torch.log_softmax(mask_logits(logits, valid), dim=1)
        entropy = -(log_probs.exp() * log_probs).sum(dim=1).mean()
        taken = log_probs.gather(1, actions.view(-1, 1)).squeeze(1)
        actor_loss = -(taken * adv).mean() - self.entropy_coef * entropy
        pair.actor_optimizer.zero_grad()
        actor_loss.backward()
        nn.utils.clip_grad_norm_(pair.actor.parameters(), 1.0)
        pair.actor_optimizer.step()
        soft_update(pair.target_actor, pair.actor, cfg.tau)
        stats = {
            "actor_loss": actor_loss.item(),
            "entropy": entropy.item(),
            "episode_return": float(np.mean([float(np.sum(ep.rewards)) for ep in episodes])),
        }
        if critic_loss is not None:
            stats["critic_fit_loss"] = critic_loss
        return stats

    def check_adaptive_reset(self, policy: str | int, sla_violated: bool) -> bool:
        """Count consecutive SLA-violating steps; maybe re-initialise the critic after a streak.

        Once ``reset_interval`` violating steps in a row are seen, the critic (and its target and
        optimizer) is re-initialised with probability ``reset_probability`` and the streak
        restarts. Returns whether a reset happened.
        """
        index, cfg = self.policy_index(policy), self.rl_config
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
