"""Training loops for the agents, on any Gymnasium env with discrete actions.

- :func:`train_reinforce`: batches of ``n_envs`` episodes run in lockstep, one REINFORCE update
  per batch (on-policy Monte Carlo).
- :func:`train_morl`: ``n_envs`` copies stepped together, every transition stored in the chosen
  policy's replay buffer, ``updates_per_step`` soft actor-critic updates per vector step; its
  settings are one :class:`agents.recipes.MORLTrainConfig`.

Training seeds are ``seed * 1_000_003 + k`` for the ``k``-th episode; evaluation
(:mod:`agents.evaluate`) uses its own seed list, disjoint from training by construction.
Learning curves (one row per update with the mean episode return and the losses) are written
to CSV atomically. The exploration schedules live in :mod:`agents.exploration`, the
recommended settings in :mod:`agents.recipes`; evaluation and those settings are re-exported
here for existing callers.

The lockstep batches come from :func:`envs.lockstep` rather than a Gymnasium vector env, so
that finished episodes in a batch are simply masked (no autoreset semantics to reconcile
across Gymnasium versions): copies of a plain ``CloudEnvironment`` are stepped as arrays,
other environments one by one; the networks see one batched forward pass per step.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from agents.buffer import NStepAccumulator
from agents.episode import Episode
from agents.evaluate import (
    HELDOUT_SEED_BASE,
    ActFn,
    EnvFn,
    EvalResult,
    evaluate,
    heldout_seeds,
    morl_act,
    random_act,
    reinforce_act,
)
from agents.exploration import ExploringStarts, exploration_scale
from agents.morl import MultiObjectiveRLAgent
from agents.recipes import (
    MORLTrainConfig,
    cloud_action_factors,
    morl_train_config,
    morl_train_kwargs,
    recommended_config,
    reinforce_train_kwargs,
)
from agents.reinforce import SimplePolicy
from envs import Lockstep, lockstep, masks_of, stacked_masks
from optimizer.foundation.atomic_files import atomic_write_csv
from optimizer.foundation.config import MultiObjectiveConfig, RLConfig

# Re-exported: callers import the evaluation helpers and recommended settings from here.
__all__ = [
    "HELDOUT_SEED_BASE",
    "TRAIN_SEED_STRIDE",
    "ActFn",
    "EnvFn",
    "EvalResult",
    "ExploringStarts",
    "MORLTrainConfig",
    "NStepAccumulator",
    "TrainResult",
    "cloud_action_factors",
    "evaluate",
    "exploration_scale",
    "heldout_seeds",
    "morl_act",
    "morl_train_config",
    "morl_train_kwargs",
    "random_act",
    "recommended_config",
    "reinforce_act",
    "reinforce_train_kwargs",
    "train_morl",
    "train_reinforce",
]

TRAIN_SEED_STRIDE = 1_000_003


def _dims(env: gym.Env) -> tuple[int, int]:
    if not isinstance(env.action_space, gym.spaces.Discrete):
        raise ValueError(f"agents need a Discrete action space, got {env.action_space}")
    return int(np.prod(env.observation_space.shape)), int(env.action_space.n)


def _anneal_exploration(
    agent: SimplePolicy | MultiObjectiveRLAgent,
    starts: ExploringStarts,
    progress: float,
    anneal_fraction: float,
    anneal_power: float,
) -> None:
    """Scale the agent's exploration and the exploring-starts share together."""
    starts.scale = exploration_scale(progress, anneal_fraction, power=anneal_power)
    agent.set_exploration(starts.scale)


def _progress(done: int, total: int, start: float, budget: float | None) -> float:
    frac = done / total
    if budget:
        frac = max(frac, (time.perf_counter() - start) / budget)
    return min(frac, 1.0)


@dataclass
class TrainResult:
    """A trained agent with its learning curve and the wall time training took."""

    agent: Any
    curve: pd.DataFrame
    train_seconds: float
    episodes: int

    def save_curve(self, path: str | os.PathLike) -> None:
        atomic_write_csv(path, self.curve)


def train_reinforce(
    env_fn: EnvFn,
    config: RLConfig | None = None,
    episodes: int | None = None,
    n_envs: int = 16,
    time_budget_s: float | None = None,
    quiet: bool = True,
    device: str = "cpu",
    action_factors: Sequence[int] | None = None,
    anneal_fraction: float = 0.0,
    anneal_lr: bool = False,
    exploring_starts: float = 0.0,
    anneal_power: float = 1.0,
) -> TrainResult:
    """Train a :class:`SimplePolicy` for ``episodes`` (default ``config.episodes``) episodes.

    Stops early once ``time_budget_s`` of wall time is spent. ``n_envs`` episodes run in
    lockstep and form one update's batch. With ``anneal_fraction > 0`` epsilon and the entropy
    bonus fall to zero over that share of the training (episodes or time budget, whichever
    runs out first): linearly, or as ``(1 - progress / anneal_fraction) ** anneal_power``.
    ``anneal_lr`` lets the step sizes fall linearly to zero over the whole training (as
    CleanRL's PPO does): once the policy is nearly deterministic, a full-size policy-gradient
    step on a rare action can throw a good policy away. ``exploring_starts``
    is the share of episodes started at a random allocation (:class:`ExploringStarts`), annealed
    with the exploration.
    """
    config = config or RLConfig()
    episodes = episodes or config.episodes
    envs = lockstep(env_fn, n_envs)
    starts = ExploringStarts(envs.env, exploring_starts, config.seed)
    agent = SimplePolicy(*_dims(envs.env), config, device=device, action_factors=action_factors)
    rows: list[dict[str, float]] = []
    start = time.perf_counter()
    done_episodes = 0
    # None: tqdm draws only on a terminal (a redirected log gets no bar lines, 1.2 MB before)
    with tqdm(total=episodes, desc="reinforce", unit="ep", disable=quiet or None) as bar:
        while done_episodes < episodes:
            n = min(n_envs, episodes - done_episodes)
            seeds = [config.seed * TRAIN_SEED_STRIDE + done_episodes + i for i in range(n)]
            progress = _progress(done_episodes, episodes, start, time_budget_s)
            _anneal_exploration(agent, starts, progress, anneal_fraction, anneal_power)
            if anneal_lr:
                agent.set_learning_rate_scale(1.0 - progress)
            _run_batch(envs, envs.reset(seeds, [starts.options() for _ in seeds]), agent)
            stats = agent.train() or {}
            done_episodes += n
            rows.append({"episode": done_episodes, "wall_s": time.perf_counter() - start, **stats})
            bar.update(n)
            bar.set_postfix(ret=f"{stats.get('episode_return', float('nan')):.3g}")
            if time_budget_s is not None and time.perf_counter() - start > time_budget_s:
                break
    return TrainResult(agent, pd.DataFrame(rows), time.perf_counter() - start, done_episodes)


def _run_batch(envs: Lockstep, obs: np.ndarray, agent: SimplePolicy) -> None:
    """One episode per just-reset copy (``obs``: their first observations), in lockstep."""
    alive = np.arange(len(obs))
    while len(alive):
        masks = envs.action_masks(alive)
        actions = agent.select_action(obs[alive], mask=masks)
        next_obs, rewards, _, dones = envs.step(alive, actions)
        agent.add_experience(obs[alive], actions, rewards, dones, env_id=alive, mask=masks)
        obs[alive] = next_obs
        alive = alive[~dones]


def train_morl(
    env_fn: EnvFn,
    policy: str | int,
    config: RLConfig | None = None,
    settings: MORLTrainConfig | None = None,
    *,
    multi_objective_config: MultiObjectiveConfig | None = None,
    agent: MultiObjectiveRLAgent | None = None,
    time_budget_s: float | None = None,
    quiet: bool = True,
    device: str = "cpu",
    action_factors: Sequence[int] | None = None,
    **overrides: Any,
) -> TrainResult:
    """Train one policy of a :class:`MultiObjectiveRLAgent` on ``env_fn``'s scalar reward.

    ``env_fn`` must build the environment whose reward is scalarised with ``policy``'s
    preference vector. ``settings`` say how (default ``MORLTrainConfig()``, the plain loop;
    :func:`agents.recipes.morl_train_config` is the recipe); ``overrides`` are its fields as
    keywords, applied on top, for the callers that pass them so (the benchmarks). Pass ``agent``
    to train another policy of an existing agent (the settings that build one are then
    unused). ``anneal_fraction`` as in :func:`train_reinforce` (epsilon and alpha).
    ``n_step > 1`` stores n-step transitions (:class:`NStepAccumulator`).

    With ``actor_update="advantage"`` the ``n_envs`` episodes run in lockstep batches instead:
    every transition goes to the replay buffer, the critic takes ``updates_per_step`` updates
    per lockstep step of the batch, then the actor one on-policy update on the batch's episodes
    (:meth:`MultiObjectiveRLAgent.train_actor`, advantages with ``gae_lambda``).
    ``exploring_starts`` and ``anneal_power`` as in :func:`train_reinforce`;
    ``critic_fit_epochs`` as in :class:`MultiObjectiveRLAgent`.
    """
    settings = dataclasses.replace(settings or MORLTrainConfig(), **overrides)
    config = config or (agent.rl_config if agent else RLConfig())
    episodes = settings.episodes or config.episodes
    n_envs = settings.n_envs
    batch = lockstep(env_fn, n_envs)
    if agent is None:
        agent = MultiObjectiveRLAgent(
            *_dims(batch.env),
            config,
            multi_objective_config,
            device=device,
            action_factors=action_factors,
            critic_dropout=settings.critic_dropout,
            target_entropy=settings.target_entropy,
            critic_combine=settings.critic_combine,
            actor_update=settings.actor_update,
            critic_fit_epochs=settings.critic_fit_epochs,
        )
    index = agent.policy_index(policy)
    starts = ExploringStarts(batch.env, settings.exploring_starts, config.seed)
    if agent.actor_update == "advantage":
        return _train_morl_on_policy(
            agent, index, batch, starts, episodes, settings, time_budget_s, quiet
        )
    # Replayed updates: episodes restart one by one as they end, so the envs step one by one.
    envs = [batch.env, *(env_fn() for _ in range(n_envs - 1))]
    started = [config.seed * TRAIN_SEED_STRIDE + i for i in range(n_envs)]
    obs = starts.reset(envs, started)
    next_seed = config.seed * TRAIN_SEED_STRIDE + n_envs
    running = np.zeros(n_envs)
    accumulators = [NStepAccumulator(settings.n_step, config.gamma) for _ in range(n_envs)]
    rows: list[dict[str, float]] = []
    finished: list[float] = []
    stats: dict[str, float] = {}
    start = time.perf_counter()
    steps = 0
    with tqdm(
        total=episodes, desc=f"morl[{agent.policy_names[index]}]", unit="ep", disable=quiet or None
    ) as bar:
        while len(finished) < episodes:
            progress = _progress(len(finished), episodes, start, time_budget_s)
            _anneal_exploration(
                agent, starts, progress, settings.anneal_fraction, settings.anneal_power
            )
            masks = stacked_masks(envs)
            actions = agent.select_action(obs, index, uncertainty=False, mask=masks).action
            next_obs = np.empty_like(obs)
            restart_obs = {}
            transitions = []
            for i, env in enumerate(envs):
                next_obs[i], reward, terminated, truncated, _ = env.step(int(actions[i]))
                running[i] += reward
                # A truncated episode ends without a terminal state: it still bootstraps.
                transitions += accumulators[i].push(
                    obs[i], actions[i], reward, next_obs[i], terminated, terminated or truncated,
                    None if masks is None else masks[i], masks_of(env),
                )
                if terminated or truncated:
                    finished.append(float(running[i]))
                    running[i] = 0.0
                    restart_obs[i] = env.reset(seed=next_seed, options=starts.options())[0]
                    next_seed += 1
                    bar.update(1)
            if transitions:  # one batched store per vector step
                *columns, m, next_m = zip(*transitions, strict=True)
                agent.add_experience(
                    index, *(np.array(column) for column in columns),
                    mask=None if masks is None else np.array(m),
                    next_mask=None if masks is None else np.array(next_m),
                )
            obs = next_obs
            for i, o in restart_obs.items():
                obs[i] = o
            steps += n_envs
            if steps >= settings.learning_starts:
                for _ in range(int(settings.updates_per_step)):
                    stats = agent.train(index) or stats
            if len(finished) and (not rows or len(finished) - rows[-1]["episode"] >= n_envs):
                rows.append(
                    {
                        "episode": len(finished),
                        "step": steps,
                        "wall_s": time.perf_counter() - start,
                        "episode_return": float(np.mean(finished[-n_envs:])),
                        **stats,
                    }
                )
            if time_budget_s is not None and time.perf_counter() - start > time_budget_s:
                break
    return TrainResult(agent, pd.DataFrame(rows), time.perf_counter() - start, len(finished))


def _train_morl_on_policy(
    agent: MultiObjectiveRLAgent,
    index: int,
    envs: Lockstep,
    starts: ExploringStarts,
    episodes: int,
    settings: MORLTrainConfig,
    time_budget_s: float | None,
    quiet: bool,
) -> TrainResult:
    config = agent.rl_config
    rows: list[dict[str, float]] = []
    start = time.perf_counter()
    done_episodes, steps = 0, 0
    with tqdm(
        total=episodes, desc=f"morl[{agent.policy_names[index]}]", unit="ep", disable=quiet or None
    ) as bar:
        while done_episodes < episodes:
            n = min(envs.n, episodes - done_episodes)
            seeds = [config.seed * TRAIN_SEED_STRIDE + done_episodes + i for i in range(n)]
            progress = _progress(done_episodes, episodes, start, time_budget_s)
            _anneal_exploration(
                agent, starts, progress, settings.anneal_fraction, settings.anneal_power
            )
            if settings.anneal_lr:
                agent.set_learning_rate_scale(1.0 - progress, index)
            obs = envs.reset(seeds, [starts.options() for _ in seeds])
            batch, batch_steps = _run_morl_batch(envs, obs, agent, index)
            steps += batch_steps
            stats: dict[str, float] = {}
            if steps >= settings.learning_starts:
                updates = max(1, round(settings.updates_per_step * batch_steps / n))
                for _ in range(updates):
                    stats = agent.train(index) or stats
                stats.update(agent.train_actor(index, batch, settings.gae_lambda) or {})
            done_episodes += n
            rows.append(
                {
                    "episode": done_episodes,
                    "step": steps,
                    "wall_s": time.perf_counter() - start,
                    "episode_return": float(np.mean([ep.rewards.sum() for ep in batch])),
                    **{k: v for k, v in stats.items() if k != "episode_return"},
                }
            )
            bar.update(n)
            if time_budget_s is not None and time.perf_counter() - start > time_budget_s:
                break
    return TrainResult(agent, pd.DataFrame(rows), time.perf_counter() - start, done_episodes)


def _run_morl_batch(
    envs: Lockstep, obs: np.ndarray, agent: MultiObjectiveRLAgent, index: int
) -> tuple[list[Episode], int]:
    """One episode per just-reset copy in lockstep with ``index``'s policy; store all steps.

    Every episode starts at step 0 and the alive set only shrinks, so episode ``i`` is column
    ``i`` of the per-step arrays, rows ``0 .. length_i - 1``.
    """
    n = len(obs)
    states, actions_t, rewards_t, masks_t = [], [], [], []
    lengths = np.zeros(n, dtype=np.int64)
    last, ended_terminal = np.empty_like(obs), np.zeros(n, dtype=bool)
    alive = np.arange(n)
    masks = envs.action_masks(alive)
    last_masks = None if masks is None else np.ones_like(masks)
    while len(alive):
        actions = agent.select_action(obs[alive], index, uncertainty=False, mask=masks).action
        next_obs, rewards, terminated, over = envs.step(alive, actions)
        next_masks = envs.action_masks(alive)
        agent.add_experience(
            index, obs[alive], actions, rewards, next_obs, terminated,
            mask=masks, next_mask=next_masks,
        )
        if masks is not None:
            masks_t.append(np.ones((n, masks.shape[1]), dtype=bool))
            masks_t[-1][alive] = masks
            last_masks[alive[over]] = next_masks[over]
            masks = next_masks[~over]
        states.append(obs.copy())
        actions_t.append(np.zeros(n, dtype=np.int64))
        actions_t[-1][alive] = actions
        rewards_t.append(np.zeros(n))
        rewards_t[-1][alive] = rewards
        lengths[alive] += 1
        last[alive[over]], ended_terminal[alive[over]] = next_obs[over], terminated[over]
        obs[alive] = next_obs
        alive = alive[~over]
    s, a, r = np.stack(states), np.stack(actions_t), np.stack(rewards_t)
    m = np.stack(masks_t) if masks_t else None
    episodes = [
        Episode(
            s[:length, i], a[:length, i], r[:length, i], last[i], bool(ended_terminal[i]),
            None if m is None else m[:length, i], None if m is None else last_masks[i],
        )
        for i, length in enumerate(lengths)
    ]
    return episodes, int(lengths.sum())
