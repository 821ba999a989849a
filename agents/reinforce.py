"""REINFORCE with a learned value baseline: the design's ``SimplePolicy``, registered as
``reinforce``.

Williams (1992), "Simple statistical gradient-following algorithms for connectionist
reinforcement learning"; baseline and entropy bonus as in Sutton & Barto (2018), section 13.4.
For each finished episode the discounted return is

    G_t = sum_{k >= t} gamma^(k - t) r_k                                    (Sutton & Barto 13.8)

and one update minimises, over the batch of episodes,

    L = -mean[ log pi(a_t | s_t) * A_t ] - beta * mean[ H(pi(. | s_t)) ] + mean[ (V(s_t) - G_t)^2 ]

with advantages ``A_t = G_t - V(s_t)`` normalised over the batch. Exploration is an entropy
bonus ``beta`` (``entropy_coef``) plus epsilon-mixing: actions are drawn from
``(1 - eps) * pi + eps / |A|`` (``exploration_noise``) and the gradient uses the log
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

In CleanRL's order: the config, the returns, the networks, the agent, the loop (:func:`train`)
and the registry's entry (:func:`registry_entry`, the greedy :class:`ReinforceAgent`).
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import torch
from torch import nn
from tqdm.auto import tqdm

from agents.episode import EpisodeMemory, step_masks
from agents.exploration import ExploringStarts, anneal, training_progress
from agents.networks import joint_log_probs, make_adam, mask_logits, mask_tensor, sample_rows
from agents.persist import load_parts, save_parts
from agents.registry.interface import Budget, EnvFn, TrainedAgent, TrainResult, TrainSetup
from agents.rollout import lockstep_steps, space_dims, training_seeds
from envs import lockstep, stacked_masks
from optimizer.foundation.config import RLConfig

if TYPE_CHECKING:
    import gymnasium as gym


@dataclass(frozen=True)
class ReinforceConfig:
    """REINFORCE's settings; the defaults train it on ``CloudEnvironment`` within a minute on
    CPU (chosen on the default preset's cost preference; benchmarks/agents_quality.py measures
    every preset).

    Exploring starts (half the episodes, annealed with the entropy bonus) took vgg16-v100/cost
    from a trap in 6 of 8 runs (-0.67 or -0.15 of the DP optimum) to 0.98 in 6 of 6, and
    vgg16-p100/cost from 0.97 to 1.00 (55 s). It is not out of reach of every local optimum:
    two later one-case runs there gave 0.984 and 0.948 (a plan that keeps more memory than
    needed).
    """

    seed: int = 0
    """Seeds the networks, the action sampling, the exploring starts and the episodes."""
    hidden_dim: int = 64
    """Width of both hidden layers of the policy and value networks."""
    gamma: float = 1.0
    """Discount; undiscounted because episodes are short (~20 steps) and the agents are graded
    on the undiscounted episode return."""
    lr_actor: float = 1e-2
    """Adam step size of the policy."""
    lr_critic: float = 3e-3
    """Adam step size of the value baseline."""
    entropy_coef: float = 0.2
    """Entropy bonus ``beta`` (on normalised advantages), annealed with the exploration."""
    exploration_noise: float = 0.0
    """Epsilon of the epsilon-mixed policy; none, because random actions often double the
    batch into out-of-memory, which teaches the policy to keep far from the memory limit."""
    episodes: int = 200_000
    """Training episodes (a time budget usually ends training first)."""
    n_envs: int = 16
    """Episodes run in lockstep: one update's batch."""
    anneal_fraction: float = 0.8
    """Share of the training over which epsilon, the entropy bonus and the exploring starts
    fall to zero."""
    anneal_power: float = 1.0
    """Shape of that fall: ``(1 - progress / anneal_fraction) ** anneal_power``."""
    anneal_lr: bool = True
    """Step sizes falling linearly to zero over the whole training (as CleanRL's PPO): once the
    policy is nearly deterministic, a full step on a rare action can throw a good policy away."""
    exploring_starts: float = 0.5
    """Share of episodes started at a random allocation (:class:`ExploringStarts`)."""

    def __post_init__(self) -> None:
        for name, ok, rule in (
            ("hidden_dim", self.hidden_dim >= 1, ">= 1"), ("episodes", self.episodes >= 1, ">= 1"),
            ("n_envs", self.n_envs >= 1, ">= 1"), ("gamma", 0 <= self.gamma <= 1, "in [0, 1]"),
            ("lr_actor", self.lr_actor > 0, "> 0"), ("lr_critic", self.lr_critic > 0, "> 0"),
            ("entropy_coef", self.entropy_coef >= 0, ">= 0"),
            ("exploration_noise", 0 <= self.exploration_noise <= 1, "in [0, 1]"),
            ("anneal_fraction", 0 <= self.anneal_fraction <= 1, "in [0, 1]"),
            ("anneal_power", self.anneal_power > 0, "> 0"),
            ("exploring_starts", 0 <= self.exploring_starts <= 1, "in [0, 1]"),
        ):
            if not ok:
                raise ValueError(
                    f"ReinforceConfig.{name} must be {rule} (got {getattr(self, name)})")

    @classmethod
    def from_rl(cls, rl: RLConfig) -> ReinforceConfig:
        """The defaults with the ``[rl]`` table's seed: the rest of ``[rl]`` is the design's
        generic settings, which these defaults replace."""
        return cls(seed=rl.seed)


# ----------------------------------------------------------------------------- math helpers
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


# --------------------------------------------------------------------------------- networks
def _mlp(in_dim: int, out_dim: int, hidden_dim: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(in_dim, hidden_dim),
        nn.Tanh(),
        nn.Linear(hidden_dim, hidden_dim),
        nn.Tanh(),
        nn.Linear(hidden_dim, out_dim),
    )


# ------------------------------------------------------------------------------------ agent
class SimplePolicy:
    """Policy-gradient (REINFORCE) agent over a discrete action set.

    Parameters
    ----------
    state_dim, action_dim : int
        Observation length and number of discrete actions.
    config : ReinforceConfig
        Network width, step sizes, discount, exploration and seed (the loop's fields unused).
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
        config: ReinforceConfig | None = None,
        device: str = "cpu",
        action_factors: Sequence[int] | None = None,
    ) -> None:
        self.config = config if config is not None else ReinforceConfig()
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
        valid = mask_tensor(mask, len(logits), self.action_dim, self.device)
        if evaluate:
            actions = mask_logits(logits, valid).argmax(dim=-1)
            actions = actions.cpu().numpy()
        else:
            probs = self._mixture_probs(logits, valid).cpu().numpy().astype(np.float64)
            actions = sample_rows(probs, self.rng)  # the agent's own generator
        return int(actions[0]) if single else actions.astype(np.int64)

    def action_probabilities(
        self, state: np.ndarray, mask: np.ndarray | None = None
    ) -> np.ndarray:
        """Policy probabilities ``pi(. | s)``, shape ``(n, action_dim)``, over the valid actions
        where ``mask`` is given (as :meth:`select_action` chooses)."""
        x = torch.as_tensor(np.asarray(state, dtype=np.float32), device=self.device)
        with torch.no_grad():
            logits = self._logits(x.view(-1, self.state_dim))
            valid = mask_tensor(mask, len(logits), self.action_dim, self.device)
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
        """Record one step of one episode, or of several parallel episodes
        (:meth:`agents.episode.EpisodeMemory.add`): ``done`` closes the episode of ``env_id``
        so :meth:`train` can use it; ``mask``: the valid actions the action was chosen among."""
        self.memory.add(state, action, reward, done, env_id, mask)

    @property
    def n_complete_episodes(self) -> int:
        """Finished episodes waiting for :meth:`train`."""
        return len(self.memory.finished)

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
        if not self.memory.finished:
            return None
        episodes = self.memory.take()
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
    def _parts(self) -> dict[str, Any]:
        return {"policy_network": self.policy_network, "value_network": self.value_network,
                "optimizer": self.optimizer, "value_optimizer": self.value_optimizer}

    def save(self, path: str | os.PathLike) -> None:
        """Save networks, optimizers and return statistics (tensors only, atomically)."""
        save_parts(path, (self.state_dim, self.action_dim), self._parts(),
                   return_stats=torch.as_tensor(self.return_stats),
                   train_steps=torch.tensor(self.train_steps))

    def load(self, path: str | os.PathLike) -> None:
        """Load what :meth:`save` wrote (``torch.load(weights_only=True)``: no code executed)."""
        state = load_parts(path, (self.state_dim, self.action_dim), self._parts())
        self.return_stats = state["return_stats"].numpy().astype(float)
        self.train_steps = int(state["train_steps"])

    def reset(self, reinitialize: bool = False) -> None:
        """Drop all recorded experience; with ``reinitialize``, also start learning afresh."""
        self.memory = EpisodeMemory(self.state_dim, self.action_dim)
        if reinitialize:
            self._build_networks()


# ---------------------------------------------------------------------------- training loop
def train(
    env_fn: EnvFn,
    config: ReinforceConfig | None = None,
    *,
    time_budget_s: float | None = None,
    quiet: bool = True,
    device: str = "cpu",
    action_factors: Sequence[int] | None = None,
) -> TrainResult:
    """Train a :class:`SimplePolicy` on ``env_fn``'s environments for ``config.episodes``.

    Stops early once ``time_budget_s`` of wall time is spent. ``config.n_envs`` episodes run in
    lockstep (:func:`envs.lockstep`) and form one update's batch; the exploration, exploring
    starts and step sizes fall as ``config`` says, over the episodes or the time budget,
    whichever runs out first. The result's ``agent`` is the :class:`SimplePolicy`.
    """
    config = config or ReinforceConfig()
    envs = lockstep(env_fn, config.n_envs)
    starts = ExploringStarts(envs.env, config.exploring_starts, config.seed)
    agent = SimplePolicy(*space_dims(envs.env), config, device=device,
                         action_factors=action_factors)
    rows: list[dict[str, float]] = []
    start = time.perf_counter()
    done_episodes = 0
    # None: tqdm draws only on a terminal (a redirected log gets no bar lines, 1.2 MB before)
    with tqdm(total=config.episodes, desc="reinforce", unit="ep", disable=quiet or None) as bar:
        while done_episodes < config.episodes:
            n = min(config.n_envs, config.episodes - done_episodes)
            seeds = training_seeds(config.seed, done_episodes, n)
            progress = training_progress(done_episodes, config.episodes, start, time_budget_s)
            anneal(agent, starts, progress, config.anneal_fraction, config.anneal_power)
            if config.anneal_lr:
                agent.set_learning_rate_scale(1.0 - progress)
            obs = envs.reset(seeds, [starts.options() for _ in seeds])
            for step in lockstep_steps(envs, obs, lambda o, m: agent.select_action(o, mask=m)):
                agent.add_experience(step.obs, step.actions, step.rewards, step.over,
                                     env_id=step.alive, mask=step.masks)
            stats = agent.train() or {}
            done_episodes += n
            rows.append({"episode": done_episodes, "wall_s": time.perf_counter() - start, **stats})
            bar.update(n)
            bar.set_postfix(ret=f"{stats.get('episode_return', float('nan')):.3g}")
            if time_budget_s is not None and time.perf_counter() - start > time_budget_s:
                break
    return TrainResult(agent, pd.DataFrame(rows), time.perf_counter() - start, done_episodes)


# ------------------------------------------------------------------------- for the registry
class ReinforceAgent(TrainedAgent):
    """A trained :class:`SimplePolicy`, asked greedily among each environment's valid actions."""

    def __init__(self, policy: SimplePolicy) -> None:
        self.policy = policy

    def act(self, obs: np.ndarray, envs: Sequence[gym.Env]) -> np.ndarray:
        return self.policy.select_action(obs, evaluate=True, mask=stacked_masks(envs))

    def action_probabilities(self, obs: np.ndarray, envs: Sequence[gym.Env]) -> np.ndarray:
        return self.policy.action_probabilities(obs, stacked_masks(envs))


def registry_entry(env_fn: EnvFn, setup: TrainSetup, budget: Budget) -> TrainResult:
    """What ``agents.registry`` calls: :class:`ReinforceConfig`'s defaults with ``setup``'s
    seed, trained within ``budget``; the result's ``agent`` is a :class:`ReinforceAgent`."""
    config = ReinforceConfig.from_rl(setup.rl)
    if budget.episodes:
        config = dataclasses.replace(config, episodes=budget.episodes)
    result = train(env_fn, config, time_budget_s=budget.seconds, quiet=setup.quiet,
                   action_factors=setup.action_factors)
    return dataclasses.replace(result, agent=ReinforceAgent(result.agent))
