"""Multi-objective actor-critic: one actor-critic pair per preference vector.

Multi-objective RL by linear scalarisation (Roijers et al., 2013, "A Survey of Multi-Objective
Sequential Decision-Making"): each preference vector ``w`` over (cost, time, resource) gets its
own policy trained on the scalar reward ``w . r``; together the policies approximate the Pareto
front (:mod:`agents.pareto`). Each pair is a discrete-action soft actor-critic (Haarnoja et al.,
2018; discrete form: Christodoulou, 2019, "Soft Actor-Critic for Discrete Action Settings"):

    critic target  y = r + gamma * (1 - done) * sum_a' pi'(a'|s') [Q'(s', a') - alpha log pi'(a'|s')]
    critic loss    (Q_1(s, a) - y)^2 + (Q_2(s, a) - y)^2
    actor loss     -sum_a softmax(Q(s, .) / alpha)_a log pi(a|s)          (actor_update="projection")
                   sum_a pi(a|s) [alpha log pi(a|s) - Q(s, a)]            (actor_update="expected_q")

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

    actor loss     -mean[log pi(a_t|s_t) A_t] - alpha H(pi(.|s_t)),  A_t = GAE(lambda) of
                   r_t + gamma V(s_{t+1}) - V(s_t),  V(s) = sum_a pi(a|s) Q'(s, a)

on each batch of freshly finished episodes (:meth:`MultiObjectiveRLAgent.train_actor`), while
the twin critic keeps learning off-policy from the replay buffer with target networks as above.
The critic serves as the baseline (``lambda = 1``) and, for ``lambda < 1``, bootstraps the
advantage. On ``CloudEnvironment`` with a minute of CPU this learned better than either
replayed actor update (benchmarks/agents_quality.py, 15 preset cases: mean share of the DP
optimum 0.87 and >= 95% in 12 cases, against 0.66 and 3 for "projection"). The replayed
updates are only as good as the critic, and one critic update (batch 256) costs about 5 ms
here, so about 10k fit in a minute: too few for the 81-action critic to rank the moves of a
20-step episode, while the policy gradient needs only Monte Carlo returns.

With ``critic_fit_epochs > 0`` the critic also regresses ``Q(s_t, a_t)`` on each batch's
lambda-returns ``A_t + V(s_t)`` (as PPO fits its value function). The one-step bootstrap
alone carries values back one step per target update, and while the critic is far from the
returns the baseline leaves most of their variance in the gradient. With this fit and
exploring starts (``agents.train.ExploringStarts``) the recipe in
``agents.train.morl_train_kwargs`` reached a mean share of 0.995 and 0.993 in two runs
(>= 95% in 14 and 13 of 15 cases); with the exploration annealed as the square of the time
left, 0.997 and 0.991 (>= 95% in 14 of 15 in both, vgg16-v100/cost at 0.948).

Decisions carry an uncertainty from Monte Carlo dropout over the actor (Gal & Ghahramani, 2016);
``select_policy`` switches to the time-focused policy when the time SLA is at risk and to the
cost-focused one when the cost SLA is; ``check_adaptive_reset`` re-initialises a critic after a
streak of SLA violations (the "adaptive reset" of the design, after Nikishin et al., 2022,
"The Primacy Bias in Deep Reinforcement Learning").
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from agents.buffer import ReplayBuffer
from agents.networks import Actor, TwinCritic, make_adam, mc_dropout_probs
from agents.persist import load_state, save_state
from optimizer.config import OBJECTIVES, MultiObjectiveConfig, RLConfig
from optimizer.errors import ConfigError, ModelFileError


@torch.no_grad()
def soft_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """Polyak averaging: ``target <- tau * source + (1 - tau) * target``, parameter by parameter."""
    t_params, s_params = list(target.parameters()), list(source.parameters())
    assert len(t_params) == len(s_params), "target and source differ in structure"
    torch._foreach_lerp_(t_params, s_params, tau)  # one fused call instead of a Python loop


ACTOR_UPDATES = ("projection", "expected_q", "advantage")


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


class _PolicyPair:
    """Actor, critic, their targets, optimizers and replay buffer for one preference vector."""

    def __init__(
        self,
        state_dim: int,
        action_dim: int,
        cfg: RLConfig,
        device: torch.device,
        seed: int,
        action_factors: Sequence[int] | None,
        critic_dropout: float,
    ) -> None:
        h, p = cfg.hidden_dim, cfg.dropout_rate
        self.actor = Actor(
            state_dim,
            action_dim,
            h,
            p,
            action_factors=action_factors,
            activation=cfg.actor_activation,
        ).to(device)
        self.critic = TwinCritic(state_dim, action_dim, h, critic_dropout).to(device)
        self.target_actor = copy.deepcopy(self.actor).eval()  # targets never use dropout
        self.target_critic = copy.deepcopy(self.critic).eval()
        self.actor_optimizer = make_adam(self.actor.parameters(), cfg.lr_actor)
        self.critic_optimizer = make_adam(self.critic.parameters(), cfg.lr_critic)
        self.buffer = ReplayBuffer(cfg.buffer_size, state_dim, device, seed=seed)
        # Temperature for automatic entropy tuning (used when a target entropy is set).
        self.log_alpha = torch.tensor(
            float(np.log(max(cfg.entropy_coef, 1e-6))), device=device, requires_grad=True
        )
        # The temperature must track the annealed target quickly: 10x the actor step size.
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=10 * cfg.lr_actor)

    def reinitialize_critic(self) -> None:
        for layer in self.critic.modules():
            if isinstance(layer, nn.Linear):
                layer.reset_parameters()
        self.target_critic.load_state_dict(self.critic.state_dict())
        lr = self.critic_optimizer.param_groups[0]["lr"]
        self.critic_optimizer = make_adam(self.critic.parameters(), lr)

    def modules(self) -> dict[str, Any]:
        return {
            "actor": self.actor,
            "critic": self.critic,
            "target_actor": self.target_actor,
            "target_critic": self.target_critic,
            "actor_optimizer": self.actor_optimizer,
            "critic_optimizer": self.critic_optimizer,
            "alpha_optimizer": self.alpha_optimizer,
        }


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
        The actor loss (module docstring): cross-entropy to the critic's Boltzmann policy
        ``softmax(Q / alpha)``, whose gradient does not fade as the actor commits, or discrete
        SAC's expected Q with an entropy term (both in :meth:`train`; at ``alpha = 0`` the
        projection target is the critic's greedy action); or ``"advantage"``, an on-policy
        policy gradient on finished episodes (:meth:`train_actor`), with :meth:`train` then
        updating the critic only. The training loop's recipe uses ``"advantage"``.
    critic_fit_epochs : int
        With ``actor_update="advantage"``: passes (minibatches of ``batch_size``) of each
        :meth:`train_actor` batch over which the critic also regresses ``Q(s_t, a_t)`` on the
        batch's lambda-returns ``A_t + V(s_t)``, as PPO fits its value function. The replayed
        one-step bootstrap moves values back one step per target update, so within a minute
        the critic of a 20-step job is still far from the returns, and as a baseline it then
        removes little of their variance. 0: replayed updates only.
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
        seed = self.rl_config.seed
        self.rng = np.random.default_rng(seed)
        torch.manual_seed(seed)
        self.pairs = [
            _PolicyPair(
                self.state_dim,
                self.action_dim,
                self.rl_config,
                self.device,
                seed + i,
                action_factors,
                self.rl_config.dropout_rate if critic_dropout is None else critic_dropout,
            )
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
        """Set the actor and critic step sizes of one policy (default all) to ``scale`` times
        the configured ones."""
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
                raise ConfigError(
                    f"unknown preference {preference!r}; this agent has {', '.join(self.policy_names)}"
                )
            return self.policy_names.index(preference)
        w = self.multi_objective_config.vector(preference)
        return int(np.argmin(np.linalg.norm(self.preferences - w, axis=1)))

    def _focused_on(self, objective: str) -> int:
        return int(np.argmax(self.preferences[:, OBJECTIVES.index(objective)]))

    def select_policy(
        self,
        preference: str | int | Sequence[float],
        sla_status: Mapping[str, bool] | None = None,
    ) -> int:
        """Pick the policy for the user's preference, overridden when an SLA is at risk.

        ``sla_status`` maps an SLA name (``"time"``, ``"cost"``, ...) to ``True`` when it is met
        and on track, ``False`` when it is violated or about to be. A time SLA at risk switches to
        the most time-focused policy (an unfinished job is worth nothing), otherwise a cost SLA
        at risk switches to the most cost-focused one. The choice is kept in ``active_policy``.
        """
        index = self.policy_index(preference)
        status = dict(sla_status or {})
        if "time" in status and not status["time"]:
            index = self._focused_on("time")
        elif "cost" in status and not status["cost"]:
            index = self._focused_on("cost")
        self.active_policy = index
        return index

    # -------------------------------------------------------------- acting
    def select_action(
        self,
        state: np.ndarray,
        policy: str | int | None = None,
        evaluate: bool = False,
        uncertainty: bool = True,
    ) -> Decision:
        """Choose an action for one state ``(state_dim,)`` or a batch ``(n, state_dim)``.

        The action comes from one deterministic pass (dropout off), the policy the training loop
        samples from and, for inverted dropout, the usual stand-in for the mean over masks:
        ``evaluate=True`` takes its most probable action, otherwise one is sampled (uniformly at
        random with probability epsilon). With ``uncertainty``, ``mc_samples`` further passes
        with dropout on give the spread of the chosen action's probability; without, it is 0.
        """
        index = self.active_policy if policy is None else self.policy_index(policy)
        actor = self.pairs[index].actor
        x = torch.as_tensor(np.asarray(state, dtype=np.float32), device=self.device)
        single = x.ndim == 1
        x = x.view(-1, self.state_dim)
        with torch.no_grad():
            probs = torch.softmax(actor.deterministic_logits(x), dim=-1)
        probs = probs.cpu().numpy().astype(np.float64)
        if evaluate:
            actions = probs.argmax(axis=1)
        else:
            cdf = np.cumsum(probs, axis=1)
            u = self.rng.random((len(probs), 1)) * cdf[:, -1:]
            actions = np.minimum((u > cdf).sum(axis=1), self.action_dim - 1)
            explore = self.rng.random(len(probs)) < self.epsilon
            actions[explore] = self.rng.integers(0, self.action_dim, size=int(explore.sum()))
        spread = np.zeros(len(actions))
        if uncertainty and actor.dropout_rate > 0:
            actor.enable_dropout = True
            try:
                mc = mc_dropout_probs(actor, x, self.mc_samples)
            finally:
                actor.enable_dropout = False
            spread = mc.std_probs.cpu().numpy()[np.arange(len(actions)), actions]
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
    ) -> None:
        """Store transitions (one, or a batch with a leading axis) in ``policy``'s buffer.

        ``reward`` is the scalar reward under that policy's preference; ``done`` must be
        ``terminated`` only (a time-limit truncation still bootstraps). ``discount`` multiplies
        the bootstrapped value: default ``gamma``; ``gamma ** k`` when ``reward`` sums ``k``
        steps and ``next_state`` is ``k`` steps on (n-step returns).
        """
        discount = self.rl_config.gamma if discount is None else discount
        buffer = self.pairs[self.policy_index(policy)].buffer
        buffer.add(state, action, reward, next_state, done, discount)

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
            next_probs = pair.target_actor(data.next_states)
            next_log_probs = torch.log(next_probs.clamp_min(1e-8))
            next_q = pair.target_critic.combined_q(data.next_states, self.critic_combine)
            next_v = (next_probs * (next_q - alpha * next_log_probs)).sum(dim=1)
            td_target = data.rewards + data.discounts * (1.0 - data.dones) * next_v
        q1, q2 = pair.critic(data.states)
        taken = data.actions.view(-1, 1)
        q_taken = q1.gather(1, taken).squeeze(1)
        critic_loss = F.mse_loss(q_taken, td_target) + F.mse_loss(
            q2.gather(1, taken).squeeze(1), td_target
        )
        pair.critic_optimizer.zero_grad()
        critic_loss.backward()
        nn.utils.clip_grad_norm_(pair.critic.parameters(), 10.0)
        pair.critic_optimizer.step()

        if self.actor_update == "advantage":  # the actor learns on-policy: train_actor
            soft_update(pair.target_critic, pair.critic, cfg.tau)
            self.train_steps[index] += 1
            return {"critic_loss": critic_loss.item(), "q_mean": q_taken.mean().item()}

        logits = pair.actor.logits(data.states)
        probs = torch.softmax(logits, dim=1)
        log_probs = torch.log_softmax(logits, dim=1)
        with torch.no_grad():
            q_all = pair.critic.combined_q(data.states, self.critic_combine)
        if self.actor_update == "expected_q":
            actor_loss = (probs * (alpha * log_probs - q_all)).sum(dim=1).mean()
        else:
            # alpha -> 0 (annealed) makes the target the critic's greedy action.
            target = torch.softmax(q_all / max(alpha, 1e-3), dim=1)
            actor_loss = -(target * log_probs).sum(dim=1).mean()
        pair.actor_optimizer.zero_grad()
        actor_loss.backward()
        nn.utils.clip_grad_norm_(pair.actor.parameters(), 10.0)
        pair.actor_optimizer.step()

        entropy = -(probs.detach() * log_probs.detach()).sum(dim=1).mean()
        if self.target_entropy is not None and self.target_entropy > 0:
            # d loss / d log_alpha = H - H*: alpha grows while the entropy is below target.
            alpha_loss = pair.log_alpha * (entropy - self.target_entropy)
            pair.alpha_optimizer.zero_grad()
            alpha_loss.backward()
            pair.alpha_optimizer.step()

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
        (:func:`lambda_advantages`). The loss is ``-mean[log pi(a|s) A] - alpha H(pi(.|s))``
        with ``A`` normalised over the batch, so ``alpha`` (the annealed entropy coefficient)
        is on the same scale whatever the size of the rewards. Returns ``None`` without
        episodes.
        """
        if not episodes:
            return None
        cfg = self.rl_config
        pair = self.pairs[self.policy_index(policy)]
        lengths = [len(ep.rewards) for ep in episodes]
        states = np.concatenate([ep.states for ep in episodes]).astype(np.float32)
        ends = np.stack([ep.last_state for ep in episodes]).astype(np.float32)
        with torch.no_grad():
            x = torch.as_tensor(np.concatenate([states, ends]), device=self.device)
            pi = torch.softmax(pair.actor.deterministic_logits(x), dim=1)
            v = (pi * pair.target_critic.combined_q(x, self.critic_combine)).sum(1)
            v = v.cpu().numpy().astype(np.float64)
        values, last_values = v[: len(states)], v[len(states) :]
        advantages = np.concatenate(
            [
                lambda_advantages(
                    np.asarray(ep.rewards, dtype=np.float64),
                    values[lo : lo + n],
                    0.0 if ep.terminated else last_values[i],
                    cfg.gamma,
                    lam,
                )
                for i, (ep, lo, n) in enumerate(
                    zip(episodes, np.cumsum([0, *lengths[:-1]]), lengths, strict=True)
                )
            ]
        )
        actions = torch.as_tensor(
            np.concatenate([ep.actions for ep in episodes]), dtype=torch.int64, device=self.device
        )
        critic_loss = None
        if self.critic_fit_epochs:
            critic_loss = self._fit_critic(pair, states, actions, advantages + values)
        if len(advantages) > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        adv = torch.as_tensor(advantages, dtype=torch.float32, device=self.device)
        # The gradient must be that of the policy the actions were drawn from: training
        # samples without dropout (select_action), so dropout stays off here too. With it on,
        # the update followed log-probabilities of randomly thinned networks, and the policy
        # ended below zero return in 3 of the first 8 preset cases (0.57-0.97 on those with it off).
        logits = pair.actor.deterministic_logits(torch.as_tensor(states, device=self.device))
        log_probs = torch.log_softmax(logits, dim=1)
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

    def _fit_critic(
        self, pair: _PolicyPair, states: np.ndarray, actions: torch.Tensor, returns: np.ndarray
    ) -> float:
        """Regress both critics' ``Q(s, a)`` on ``returns`` in minibatches; soft-update the target."""
        cfg = self.rl_config
        x = torch.as_tensor(states, device=self.device)
        y = torch.as_tensor(returns, dtype=torch.float32, device=self.device)
        taken = actions.view(-1, 1)
        losses = []
        for _ in range(self.critic_fit_epochs):
            order = torch.as_tensor(self.rng.permutation(len(x)), device=self.device)
            for lo in range(0, len(x), cfg.batch_size):
                idx = order[lo : lo + cfg.batch_size]
                q1, q2 = pair.critic(x[idx])
                loss = F.mse_loss(q1.gather(1, taken[idx]).squeeze(1), y[idx]) + F.mse_loss(
                    q2.gather(1, taken[idx]).squeeze(1), y[idx]
                )
                pair.critic_optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(pair.critic.parameters(), 10.0)
                pair.critic_optimizer.step()
                soft_update(pair.target_critic, pair.critic, cfg.tau)
                losses.append(loss.item())
        return float(np.mean(losses))

    def check_adaptive_reset(self, policy: str | int, sla_violated: bool) -> bool:
        """Count consecutive SLA-violating steps; maybe re-initialise the critic after a streak.

        Once ``reset_interval`` violating steps in a row are seen, the critic (and its target and
        optimizer) is re-initialised with probability ``reset_probability`` and the streak
        restarts. Returns whether a reset happened.
        """
        index = self.policy_index(policy)
        self.violation_streaks[index] = self.violation_streaks[index] + 1 if sla_violated else 0
        if self.violation_streaks[index] < self.rl_config.reset_interval:
            return False
        self.violation_streaks[index] = 0
        if self.rng.random() >= self.rl_config.reset_probability:
            return False
        self.pairs[index].reinitialize_critic()
        self.reset_counters[index] += 1
        return True

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
            state[name] = {k: m.state_dict() for k, m in pair.modules().items()}
        save_state(path, state)

    def load(self, path: str | os.PathLike) -> None:
        """Load what :meth:`save` wrote; the preference names and vectors must match."""
        state = load_state(path, (self.state_dim, self.action_dim, len(self.pairs)))
        if not np.allclose(state["preferences"].numpy(), self.preferences):
            raise ModelFileError(f"{path}: saved for other preference vectors")
        missing = [n for n in self.policy_names if n not in state]
        if missing:
            raise ModelFileError(f"{path}: no policy named {missing[0]!r}")
        for name, pair in zip(self.policy_names, self.pairs, strict=True):
            for key, module in pair.modules().items():
                module.load_state_dict(state[name][key])
        self.train_steps = [int(v) for v in state["train_steps"]]
        self.reset_counters = [int(v) for v in state["reset_counters"]]
