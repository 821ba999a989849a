"""One preference vector's learner: its networks, their targets, optimizers and replay buffer.

:class:`agents.morl.MultiObjectiveRLAgent` keeps one :class:`PolicyPair` per preference
vector. The targets follow the online networks by Polyak averaging (:func:`soft_update`);
:meth:`PolicyPair.critic_step` is the regression of both critics that the agent's replayed
update (bootstrapped targets) and :meth:`PolicyPair.fit_critic` (episode returns) take;
:meth:`PolicyPair.reinitialize_critic` is the agent's adaptive reset, and
:meth:`PolicyPair.state_dict` what a saved agent file holds of the pair.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from agents.buffer import ReplayBuffer
from agents.networks import Actor, TwinCritic, make_adam, mask_logits
from optimizer.foundation.config import RLConfig


@torch.no_grad()
def soft_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """Polyak averaging: ``target <- tau * source + (1 - tau) * target``, parameter by parameter."""
    t_params, s_params = list(target.parameters()), list(source.parameters())
    assert len(t_params) == len(s_params), "target and source differ in structure"
    torch._foreach_lerp_(t_params, s_params, tau)  # one fused call instead of a Python loop


class PolicyPair:
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
        self.buffer = ReplayBuffer(
            cfg.buffer_size, state_dim, device, seed=seed, action_dim=action_dim
        )
        # Temperature for automatic entropy tuning (used when a target entropy is set).
        self.log_alpha = torch.tensor(
            float(np.log(max(cfg.entropy_coef, 1e-6))), device=device, requires_grad=True
        )
        # The temperature must track the annealed target quickly: 10x the actor step size.
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=10 * cfg.lr_actor)

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

    def fit_critic(
        self,
        states: np.ndarray,
        actions: torch.Tensor,
        returns: np.ndarray,
        epochs: int,
        batch_size: int,
        tau: float,
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
            for lo in range(0, len(x), batch_size):
                idx = order[lo : lo + batch_size]
                loss, _ = self.critic_step(x[idx], actions[idx], y[idx])
                soft_update(self.target_critic, self.critic, tau)
                losses.append(loss.item())
        return float(np.mean(losses))

    def replayed_actor_step(self, states: torch.Tensor, masks: torch.Tensor | None,
                            q_all: torch.Tensor, alpha: float, update: str,
                            target_entropy: float | None) -> tuple[torch.Tensor, torch.Tensor]:
        """One replayed actor update towards ``softmax(Q / alpha)`` over the valid actions
        (``update`` is ``"projection"`` or ``"expected_q"``, see :mod:`agents.morl`), then the
        temperature's step when it is learned. Returns the actor loss and the policy's entropy."""
        logits = mask_logits(self.actor.logits(states), masks)
        probs = torch.softmax(logits, dim=1)
        log_probs = torch.log_softmax(logits, dim=1)
        if update == "expected_q":
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

    @torch.no_grad()
    def state_values(self, states: torch.Tensor, masks: torch.Tensor | None,
                     combine: str) -> np.ndarray:
        """``V(s) = sum_a pi(a|s) Q'(s, a)`` over the valid actions, from the deterministic
        actor and the target critic (the on-policy update's baseline), float64."""
        pi = torch.softmax(mask_logits(self.actor.deterministic_logits(states), masks), dim=1)
        v = (pi * self.target_critic.combined_q(states, combine)).sum(1)
        return v.cpu().numpy().astype(np.float64)

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
