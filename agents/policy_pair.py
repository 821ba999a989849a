"""One preference vector's learner: its networks, their targets, optimizers, replay buffer and
updates.

:class:`agents.morl.MultiObjectiveRLAgent` keeps one :class:`PolicyPair` per preference vector,
each a discrete-action soft actor-critic (Haarnoja et al., 2018; discrete form: Christodoulou,
2019, "Soft Actor-Critic for Discrete Action Settings") on the scalar reward ``w . r``:

    critic target y = r + gamma * (1 - done) * sum_a' pi'(a'|s') [Q'(s', a') - alpha log pi'(a'|s')]
    critic loss   (Q_1(s, a) - y)^2 + (Q_2(s, a) - y)^2
    actor loss    -sum_a softmax(Q(s, .) / alpha)_a log pi(a|s)         (actor_update="projection")
                  sum_a pi(a|s) [alpha log pi(a|s) - Q(s, a)]           (actor_update="expected_q")

where ``Q = min(Q_1, Q_2)`` (clipped double Q, Fujimoto et al., 2018: the critic is a
:class:`agents.networks.TwinCritic`), ``pi'`` and ``Q'`` are the target actor and target
critic, moved towards the online networks by Polyak averaging
``theta' <- tau theta + (1 - tau) theta'`` after each update (:func:`soft_update`), and
``alpha`` is the entropy coefficient. Exploration while collecting adds epsilon-random actions;
the update is off-policy, so that is harmless (:meth:`PolicyPair.replayed_update`).

Both actor losses have the same minimiser, the Boltzmann policy ``softmax(Q / alpha)``: the
"expected_q" loss is ``KL(pi || softmax(Q / alpha))`` (discrete SAC), the "projection" loss is
``KL(softmax(Q / alpha) || pi)``, the policy-improvement step of MPO (Abdolmaleki et al., 2018)
in its discrete, one-step form. Their gradients differ: with respect to a logit, the expected-Q
gradient is ``pi_a (Q_a - E_pi Q)``, scaled by the probability of the very action that should
gain, so an actor that committed early gets little signal from a critic that has since changed
its mind; the projection gradient is ``pi_a - target_a`` whatever ``pi`` is. Measured on
``CloudEnvironment`` (vgg16-v100, balanced, 15 s of training, fixed alpha 0.05): with
"expected_q" the actor chose the critic's best action on only 8% of replayed states and gave up
1.39 of Q against it on average.

``actor_update="advantage"`` trains the actor on-policy instead, as an advantage actor-critic
(Mnih et al., 2016) with generalised advantage estimates (Schulman et al., 2016):

    actor loss    -mean[log pi(a_t|s_t) A_t] - alpha H(pi(.|s_t)),  A_t = GAE(lambda) of
                  r_t + gamma V(s_{t+1}) - V(s_t),  V(s) = sum_a pi(a|s) Q'(s, a)

on each batch of freshly finished episodes (:meth:`PolicyPair.advantage_update`), while the
twin critic keeps learning off-policy from the replay buffer with target networks as above.
The critic serves as the baseline (``lambda = 1``) and, for ``lambda < 1``, bootstraps the
advantage. With ``critic_fit_epochs > 0`` the critic also regresses ``Q(s_t, a_t)`` on each
batch's lambda-returns ``A_t + V(s_t)`` (as PPO fits its value function,
:meth:`PolicyPair.fit_critic`): the one-step bootstrap alone carries values back one step per
target update, and while the critic is far from the returns the baseline leaves most of their
variance in the gradient.

Where the environment gives invalid-action masks, every policy here is renormalised over the
valid actions (Huang & Ontanon, 2022): the expectation over next actions in the critic's
target and both actor updates; the replay buffer keeps the masks of each state and next state.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from agents.buffer import ReplayBuffer, ReplayBufferSamples
from agents.episode import Episode, batch_advantages, step_and_last_masks
from agents.networks import Actor, TwinCritic, make_adam, mask_logits, mask_probs


class PairSettings(Protocol):
    """The settings a :class:`PolicyPair` reads (:class:`agents.morl.MORLConfig` has them)."""

    hidden_dim: int
    dropout_rate: float
    actor_activation: str
    lr_actor: float
    lr_critic: float
    buffer_size: int
    batch_size: int
    entropy_coef: float
    gamma: float
    tau: float
    critic_combine: str
    actor_update: str
    critic_fit_epochs: int


@torch.no_grad()
def soft_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """Polyak averaging: ``target <- tau * source + (1 - tau) * target``, parameter by parameter."""
    t_params, s_params = list(target.parameters()), list(source.parameters())
    assert len(t_params) == len(s_params), "target and source differ in structure"
    torch._foreach_lerp_(t_params, s_params, tau)  # one fused call instead of a Python loop


class PolicyPair:
    """Actor, critic, their targets, optimizers and replay buffer for one preference vector.

    Parameters
    ----------
    state_dim, action_dim : int
        Observation length and number of discrete actions.
    cfg : PairSettings
        Network sizes, step sizes, buffer, discount, target rate and the update's form.
    device : torch.device
    seed : int
        Seed of the replay buffer's sampler.
    action_factors : sequence of int, optional
        Factored actor heads (:func:`agents.networks.joint_log_probs`).
    critic_dropout : float
        Dropout rate of the critics.
    """

    def __init__(
        self,
        state_dim: int,
        action_dim: int,
        cfg: PairSettings,
        device: torch.device,
        seed: int,
        action_factors: Sequence[int] | None,
        critic_dropout: float,
    ) -> None:
        self.cfg, self.device, self.action_dim = cfg, device, int(action_dim)
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
        self.buffer = ReplayBuffer(
            cfg.buffer_size, state_dim, device, seed=seed, action_dim=action_dim
        )
        # Temperature for automatic entropy tuning (used when a target entropy is set).
        self.log_alpha = torch.tensor(
            float(np.log(max(cfg.entropy_coef, 1e-6))), device=device, requires_grad=True
        )
        # The temperature must track the annealed target quickly: 10x the actor step size.
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=10 * cfg.lr_actor)

    # ------------------------------------------------------------ replayed update
    def replayed_update(
        self, data: ReplayBufferSamples, alpha: float, target_entropy: float | None
    ) -> dict[str, float]:
        """One soft actor-critic update from a replayed batch: the critics towards the soft
        target, then (unless ``actor_update="advantage"``, whose actor learns on-policy) the
        actor towards ``softmax(Q / alpha)``; the targets follow. Returns the diagnostics."""
        cfg = self.cfg
        with torch.no_grad():
            next_probs = mask_probs(self.target_actor(data.next_states), data.next_masks)
            next_log_probs = torch.log(next_probs.clamp_min(1e-8))
            next_q = self.target_critic.combined_q(data.next_states, cfg.critic_combine)
            next_v = (next_probs * (next_q - alpha * next_log_probs)).sum(dim=1)
            td_target = data.rewards + data.discounts * (1.0 - data.dones) * next_v
        critic_loss, q_taken = self.critic_step(data.states, data.actions, td_target)

        if cfg.actor_update == "advantage":
            soft_update(self.target_critic, self.critic, cfg.tau)
            return {"critic_loss": critic_loss.item(), "q_mean": q_taken.mean().item()}

        with torch.no_grad():
            q_all = self.critic.combined_q(data.states, cfg.critic_combine)
        actor_loss, entropy = self.replayed_actor_step(
            data.states, data.masks, q_all, alpha, target_entropy)
        soft_update(self.target_critic, self.critic, cfg.tau)
        soft_update(self.target_actor, self.actor, cfg.tau)
        return {
            "critic_loss": critic_loss.item(),
            "actor_loss": actor_loss.item(),
            "q_mean": q_taken.mean().item(),
            "entropy": entropy.item(),
            "alpha": alpha,
        }

    def critic_step(
        self, states: torch.Tensor, actions: torch.Tensor, targets: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One step of both critics on ``(Q_1(s, a) - y)^2 + (Q_2(s, a) - y)^2``.

        Returns the loss and ``Q_1(s, a)``; the gradient norm is clipped at 10.
        """
        q1, q2 = self.critic(states)
        taken = actions.view(-1, 1)
        q_taken = q1.gather(1, taken).squeeze(1)
        loss = F.mse_loss(q_taken, targets) + F.mse_loss(q2.gather(1, taken).squeeze(1), targets)
        self.critic_optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.critic.parameters(), 10.0)
        self.critic_optimizer.step()
        return loss, q_taken

    def replayed_actor_step(self, states: torch.Tensor, masks: torch.Tensor | None,
                            q_all: torch.Tensor, alpha: float,
                            target_entropy: float | None) -> tuple[torch.Tensor, torch.Tensor]:
        """One replayed actor update towards ``softmax(Q / alpha)`` over the valid actions
        (``"projection"`` or ``"expected_q"``, module docstring), then the temperature's step
        when it is learned. Returns the actor loss and the policy's entropy."""
        logits = mask_logits(self.actor.logits(states), masks)
        probs = torch.softmax(logits, dim=1)
        log_probs = torch.log_softmax(logits, dim=1)
        if self.cfg.actor_update == "expected_q":
            actor_loss = (probs * (alpha * log_probs - q_all)).sum(dim=1).mean()
        else:
            # alpha -> 0 (annealed) makes the target the critic's greedy action.
            target = torch.softmax(mask_logits(q_all / max(alpha, 1e-3), masks), dim=1)
            actor_loss = -(target * log_probs).sum(dim=1).mean()
        self.actor_optimizer.zero_grad()
        actor_loss.backward()
        nn.utils.clip_grad_norm_(self.actor.parameters(), 10.0)
        self.actor_optimizer.step()

        entropy = -(probs.detach() * log_probs.detach()).sum(dim=1).mean()
        if target_entropy is not None and target_entropy > 0:
            # d loss / d log_alpha = H - H*: alpha grows while the entropy is below target.
            alpha_loss = self.log_alpha * (entropy - target_entropy)
            self.alpha_optimizer.zero_grad()
            alpha_loss.backward()
            self.alpha_optimizer.step()
        return actor_loss, entropy

    # ----------------------------------------------------------- on-policy update
    def advantage_update(self, episodes: Sequence[Episode], lam: float, entropy_coef: float,
                         rng: np.random.Generator) -> dict[str, float]:
        """The advantage actor-critic's update on finished ``episodes``: GAE(``lam``)
        advantages over ``V(s) = sum_a pi(a|s) Q'(s, a)``, normalised over the batch, so the
        entropy bonus ``entropy_coef`` is on the same scale whatever the size of the rewards;
        before it, the critic's fit to the lambda-returns where ``critic_fit_epochs > 0``
        (``rng`` shuffles its minibatches)."""
        cfg, device = self.cfg, self.device
        states = np.concatenate([ep.states for ep in episodes]).astype(np.float32)
        ends = np.stack([ep.last_state for ep in episodes]).astype(np.float32)
        # The baseline and the update weigh only the actions that were valid.
        masks = step_and_last_masks(episodes, self.action_dim)
        if masks is not None:
            masks = torch.as_tensor(masks, device=device)
        valid = None if masks is None else masks[: len(states)]
        x = torch.as_tensor(np.concatenate([states, ends]), device=device)
        v = self.state_values(x, masks)
        values, last_values = v[: len(states)], v[len(states) :]
        advantages = batch_advantages(episodes, values, last_values, cfg.gamma, lam)
        actions = torch.as_tensor(
            np.concatenate([ep.actions for ep in episodes]), dtype=torch.int64, device=device
        )
        critic_loss = None
        if cfg.critic_fit_epochs:
            critic_loss = self.fit_critic(states, actions, advantages + values,
                                          cfg.critic_fit_epochs, rng)
        if len(advantages) > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        adv = torch.as_tensor(advantages, dtype=torch.float32, device=device)
        # The gradient must be that of the policy the actions were drawn from: training
        # samples without dropout (select_action), so dropout stays off here too. With it on,
        # the update followed log-probabilities of randomly thinned networks, and the policy
        # ended below zero return in 3 of the first 8 preset cases (0.57-0.97 on those with it off).
        logits = self.actor.deterministic_logits(torch.as_tensor(states, device=device))
        log_probs = torch.log_softmax(mask_logits(logits, valid), dim=1)
        entropy = -(log_probs.exp() * log_probs).sum(dim=1).mean()
        taken = log_probs.gather(1, actions.view(-1, 1)).squeeze(1)
        actor_loss = -(taken * adv).mean() - entropy_coef * entropy
        self.actor_optimizer.zero_grad()
        actor_loss.backward()
        nn.utils.clip_grad_norm_(self.actor.parameters(), 1.0)
        self.actor_optimizer.step()
        soft_update(self.target_actor, self.actor, cfg.tau)
        stats = {
            "actor_loss": actor_loss.item(),
            "entropy": entropy.item(),
            "episode_return": float(np.mean([float(np.sum(ep.rewards)) for ep in episodes])),
        }
        if critic_loss is not None:
            stats["critic_fit_loss"] = critic_loss
        return stats

    def fit_critic(
        self,
        states: np.ndarray,
        actions: torch.Tensor,
        returns: np.ndarray,
        epochs: int,
        rng: np.random.Generator,
    ) -> float:
        """Regress both critics' ``Q(s, a)`` on ``returns`` in shuffled minibatches.

        ``epochs`` passes of ``batch_size``; the target critic is soft-updated after each
        step. Returns the mean loss.
        """
        device = actions.device
        x = torch.as_tensor(states, device=device)
        y = torch.as_tensor(returns, dtype=torch.float32, device=device)
        losses = []
        for _ in range(epochs):
            order = torch.as_tensor(rng.permutation(len(x)), device=device)
            for lo in range(0, len(x), self.cfg.batch_size):
                idx = order[lo : lo + self.cfg.batch_size]
                loss, _ = self.critic_step(x[idx], actions[idx], y[idx])
                soft_update(self.target_critic, self.critic, self.cfg.tau)
                losses.append(loss.item())
        return float(np.mean(losses))

    @torch.no_grad()
    def state_values(self, states: torch.Tensor, masks: torch.Tensor | None) -> np.ndarray:
        """``V(s) = sum_a pi(a|s) Q'(s, a)`` over the valid actions, from the deterministic
        actor and the target critic (the on-policy update's baseline), float64."""
        pi = torch.softmax(mask_logits(self.actor.deterministic_logits(states), masks), dim=1)
        v = (pi * self.target_critic.combined_q(states, self.cfg.critic_combine)).sum(1)
        return v.cpu().numpy().astype(np.float64)

    # ------------------------------------------------------------------ the rest
    def reinitialize_critic(self) -> None:
        """Fresh critic weights, target and optimizer (same step size); the actor is kept."""
        for layer in self.critic.modules():
            if isinstance(layer, nn.Linear):
                layer.reset_parameters()
        self.target_critic.load_state_dict(self.critic.state_dict())
        lr = self.critic_optimizer.param_groups[0]["lr"]
        self.critic_optimizer = make_adam(self.critic.parameters(), lr)

    def state_dict(self) -> dict[str, Any]:
        """Every part's ``state_dict``, by its key in a saved agent file."""
        return {k: m.state_dict() for k, m in self._parts().items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load what :meth:`state_dict` gave, part by part."""
        for key, part in self._parts().items():
            part.load_state_dict(state[key])

    def _parts(self) -> dict[str, Any]:
        return {
            "actor": self.actor,
            "critic": self.critic,
            "target_actor": self.target_actor,
            "target_critic": self.target_critic,
            "actor_optimizer": self.actor_optimizer,
            "critic_optimizer": self.critic_optimizer,
            "alpha_optimizer": self.alpha_optimizer,
        }
