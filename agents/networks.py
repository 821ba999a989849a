"""Actor and critic networks of the multi-objective agent, with Monte Carlo dropout.

Both are two-hidden-layer MLPs with ReLU and dropout after each hidden layer, as in the design.
Dropout doubles as a cheap Bayesian approximation (Gal & Ghahramani, 2016, "Dropout as a
Bayesian Approximation"): keeping it on at inference and averaging ``K`` stochastic passes gives
mean action probabilities and their spread, which the agent reports as decision uncertainty
(:func:`mc_dropout_probs`, :func:`action_uncertainty`).

Difference from the design: the design's critic scores one state-action pair
(``Q(concat(s, a))``). For a discrete action set it is cheaper and exactly as expressive to output
``Q(s, ·)`` for every action in one pass (the DQN / discrete-SAC form, Christodoulou 2019), which
the actor-critic update needs anyway to take the expectation of Q under the policy.
:meth:`Critic.q_value` gives the design's per-pair view.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np
import torch
from torch import nn


def _dropout(rate: float) -> nn.Module:
    # A zero-rate dropout still samples a mask on every call; skip it outright.
    return nn.Dropout(rate) if rate > 0 else nn.Identity()


ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh}


def _mlp(
    in_dim: int, out_dim: int, hidden_dim: int, dropout_rate: float, activation: str = "relu"
) -> nn.Sequential:
    act = ACTIVATIONS[activation]
    return nn.Sequential(
        nn.Linear(in_dim, hidden_dim),
        act(),
        _dropout(dropout_rate),
        nn.Linear(hidden_dim, hidden_dim),
        act(),
        _dropout(dropout_rate),
        nn.Linear(hidden_dim, out_dim),
    )


def joint_log_probs(factor_logits: torch.Tensor, factors: Sequence[int]) -> torch.Tensor:
    """Log-probabilities of joint actions under independent per-factor softmaxes.

    A discrete action set that is a product of sub-actions (GPU x CPU x memory x batch, each
    down/keep/up) gets one small softmax per factor ("action branching", Tavakoli et al., 2018);
    the joint index is mixed-radix with the first factor most significant,
    ``index = ((d_0 * n_1 + d_1) * n_2 + d_2) ...``, the layout of :mod:`envs.actions`.
    A product of categoricals still represents every deterministic policy, so the optimum is
    reachable, and exploration is shared across the actions that agree on a sub-action.

    Parameters
    ----------
    factor_logits : Tensor, shape ``(batch, sum(factors))``
    factors : sizes of the sub-actions

    Returns
    -------
    Tensor, shape ``(batch, prod(factors))``, normalised log-probabilities.
    """
    parts = torch.split(factor_logits, list(factors), dim=-1)
    joint = torch.log_softmax(parts[0], dim=-1)
    for part in parts[1:]:
        lp = torch.log_softmax(part, dim=-1)
        joint = (joint.unsqueeze(-1) + lp.unsqueeze(-2)).flatten(-2)
    return joint


MASKED_LOGIT = -1e9
"""The logit of an invalid action: finite, so that entropies stay numbers."""


def mask_logits(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``logits`` with the actions ``mask`` marks invalid (False) pushed to ``MASKED_LOGIT``;
    unchanged where ``mask`` is None (invalid-action masking, Huang & Ontanon, 2022)."""
    return logits if mask is None else logits.masked_fill(~mask, MASKED_LOGIT)


def mask_probs(probs: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``probs`` renormalised over the valid actions (the softmax of :func:`mask_logits`)."""
    if mask is None:
        return probs
    kept = probs * mask
    return kept / kept.sum(dim=-1, keepdim=True).clamp_min(1e-12)


def mask_tensor(mask: np.ndarray | None, n: int, n_actions: int,
                device: torch.device) -> torch.Tensor | None:
    """``mask`` (bool, ``(n_actions,)`` or ``(n, n_actions)``) as an ``(n, n_actions)`` tensor
    on ``device``; None stays None (every action valid)."""
    if mask is None:
        return None
    return torch.as_tensor(np.asarray(mask, dtype=bool).reshape(n, n_actions), device=device)


def sample_rows(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One action per row of ``probs`` ``(n, n_actions)``, by inverse-CDF sampling with ``rng``:
    one vectorised draw for the whole batch."""
    cdf = np.cumsum(probs, axis=1)
    u = rng.random((len(probs), 1)) * cdf[:, -1:]
    return np.minimum((u > cdf).sum(axis=1), probs.shape[1] - 1)


def make_adam(params: Iterable[nn.Parameter], lr: float) -> torch.optim.Optimizer:
    """Adam, fused where this torch build supports it (about 3x faster steps on small CPU nets)."""
    params = list(params)
    try:
        return torch.optim.Adam(params, lr=lr, fused=True)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.Adam(params, lr=lr)


def _set_dropout(module: nn.Module, active: bool) -> None:
    # Only the dropout layers change mode, so MC dropout never touches other layers' behaviour.
    for layer in module.modules():
        if isinstance(layer, nn.Dropout):
            layer.train(active)


class Actor(nn.Module):
    """Policy network: state -> probabilities over discrete actions.

    Parameters
    ----------
    state_dim, action_dim : int
        Sizes of the observation vector and of the discrete action set.
    hidden_dim : int
        Width of both hidden layers.
    dropout_rate : float
        Dropout probability after each hidden layer.
    enable_dropout : bool
        Keep dropout active even in ``eval()`` mode (Monte Carlo dropout at inference).
    action_factors : sequence of int, optional
        Sizes of sub-actions whose product is ``action_dim``: one softmax head per factor
        (:func:`joint_log_probs`) instead of one over all actions.
    activation : {"relu", "tanh"}
        Hidden-layer activation; ReLU as in the design.
    """

    def __init__(
        self,
        state_dim: int,
        action_dim: int,
        hidden_dim: int = 128,
        dropout_rate: float = 0.1,
        enable_dropout: bool = False,
        action_factors: Sequence[int] | None = None,
        activation: str = "relu",
    ) -> None:
        super().__init__()
        self.dropout_rate = dropout_rate
        self.enable_dropout = enable_dropout
        self.action_factors = tuple(action_factors) if action_factors else None
        if self.action_factors and math.prod(self.action_factors) != action_dim:
            raise ValueError(
                f"action_factors {self.action_factors} do not multiply to {action_dim}"
            )
        out_dim = sum(self.action_factors) if self.action_factors else action_dim
        if activation not in ACTIVATIONS:
            raise ValueError(
                f"activation must be one of {sorted(ACTIVATIONS)} (got {activation!r})"
            )
        self.net = _mlp(state_dim, out_dim, hidden_dim, dropout_rate, activation)

    def logits(self, state: torch.Tensor) -> torch.Tensor:
        """(Log-)probabilities up to a constant, shape ``(batch, action_dim)``."""
        if self.enable_dropout:
            _set_dropout(self, True)
        out = self.net(state)
        return joint_log_probs(out, self.action_factors) if self.action_factors else out

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        """Action probabilities, shape ``(batch, action_dim)``, rows summing to one."""
        return torch.softmax(self.logits(state), dim=-1)

    def deterministic_logits(self, state: torch.Tensor) -> torch.Tensor:
        """:meth:`logits` with dropout skipped, whatever the module's mode.

        Equal to ``logits`` in ``eval()`` mode, without switching modes: toggling ``train`` /
        ``eval`` on every acting step cost about a quarter of the training loop's time.
        """
        x = state
        for layer in self.net:
            if not isinstance(layer, nn.Dropout):
                x = layer(x)
        return joint_log_probs(x, self.action_factors) if self.action_factors else x


class Critic(nn.Module):
    """Action-value network: state -> ``Q(s, a)`` for every discrete action.

    Parameters are as for :class:`Actor`. Layer names follow the design (``l1``, ``l2``, ``l3``,
    ``drop1``, ``drop2``).
    """

    def __init__(
        self,
        state_dim: int,
        action_dim: int,
        hidden_dim: int = 128,
        dropout_rate: float = 0.1,
        enable_dropout: bool = False,
    ) -> None:
        super().__init__()
        self.dropout_rate = dropout_rate
        self.enable_dropout = enable_dropout
        self.l1 = nn.Linear(state_dim, hidden_dim)
        self.drop1 = _dropout(dropout_rate)
        self.l2 = nn.Linear(hidden_dim, hidden_dim)
        self.drop2 = _dropout(dropout_rate)
        self.l3 = nn.Linear(hidden_dim, action_dim)

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        """Q-values, shape ``(batch, action_dim)``."""
        if self.enable_dropout:
            _set_dropout(self, True)
        x = self.drop1(torch.relu(self.l1(state)))
        x = self.drop2(torch.relu(self.l2(x)))
        return self.l3(x)

    def q_value(self, state: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Q of given state-action pairs, shape ``(batch,)``; ``action`` holds indices ``(batch,)``."""
        return self(state).gather(1, action.long().view(-1, 1)).squeeze(1)


class TwinCritic(nn.Module):
    """Two independent :class:`Critic` s; targets and the actor use their minimum.

    Clipped double Q-learning (Fujimoto et al., 2018, TD3; used by SAC): the minimum of two
    estimates counters the over-estimation a single bootstrapped critic accumulates, which
    otherwise lets the actor chase actions whose value is an error (here: out of memory).
    """

    def __init__(
        self, state_dim: int, action_dim: int, hidden_dim: int = 128, dropout_rate: float = 0.1
    ) -> None:
        super().__init__()
        self.q1 = Critic(state_dim, action_dim, hidden_dim, dropout_rate)
        self.q2 = Critic(state_dim, action_dim, hidden_dim, dropout_rate)

    def forward(self, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Both estimates, each ``(batch, action_dim)``."""
        return self.q1(state), self.q2(state)

    def min_q(self, state: torch.Tensor) -> torch.Tensor:
        """Element-wise minimum of the two estimates, ``(batch, action_dim)``."""
        q1, q2 = self(state)
        return torch.minimum(q1, q2)

    def combined_q(self, state: torch.Tensor, how: str = "min") -> torch.Tensor:
        """``"min"`` (clipped double Q, pessimistic) or ``"mean"`` (an ensemble average)."""
        q1, q2 = self(state)
        return torch.minimum(q1, q2) if how == "min" else 0.5 * (q1 + q2)


class MCDropoutResult(NamedTuple):
    mean_probs: torch.Tensor
    """Mean action probabilities over the passes, shape ``(batch, action_dim)``."""
    std_probs: torch.Tensor
    """Standard deviation of each action probability over the passes, ``(batch, action_dim)``."""


@torch.no_grad()
def mc_dropout_probs(actor: Actor, state: torch.Tensor, n_samples: int = 10) -> MCDropoutResult:
    """Monte Carlo dropout: ``n_samples`` stochastic passes of ``actor`` on ``state``.

    Dropout is switched on for the passes only when ``actor.enable_dropout`` is set; otherwise the
    passes are deterministic and the spread is exactly zero. The actor's modes are restored.

    Parameters
    ----------
    state : Tensor, shape ``(batch, state_dim)``
    """
    if n_samples < 1:
        raise ValueError(f"n_samples must be >= 1 (got {n_samples})")
    was_training = actor.training
    actor.eval()  # deterministic unless enable_dropout turns the dropout layers back on
    try:
        probs = torch.stack([actor(state) for _ in range(n_samples)])
    finally:
        actor.train(was_training)
    std = probs.std(dim=0, unbiased=False)
    return MCDropoutResult(mean_probs=probs.mean(dim=0), std_probs=std)


def action_uncertainty(
    actor: Actor, state: torch.Tensor, actions: np.ndarray, n_samples: int
) -> np.ndarray:
    """Spread of each chosen action's probability over ``n_samples`` dropout passes, ``(batch,)``.

    Dropout is on for these passes only: the actions themselves come from the deterministic
    pass, which training samples from too.
    """
    actor.enable_dropout = True
    try:
        mc = mc_dropout_probs(actor, state, n_samples)
    finally:
        actor.enable_dropout = False
    return mc.std_probs.cpu().numpy()[np.arange(len(actions)), actions]
