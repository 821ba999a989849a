"""The multi-objective actor-critic, registered as ``morl``: its settings and training loop.

One soft actor-critic pair per preference vector, multi-objective RL by linear scalarisation
(:class:`agents.morl_agent.MultiObjectiveRLAgent`); each pair's updates and their equations are
in :mod:`agents.policy_pair`. This file reads as CleanRL's do: the settings (:class:`MORLConfig`,
whose defaults train the agent on ``CloudEnvironment`` within a minute on CPU), the training
loop (:func:`train`: on-policy batches for ``actor_update="advantage"``, the settings' default;
replayed actor updates otherwise) and the registry's entry (:func:`registry_entry`, the greedy
:class:`MORLAgent`).

``actor_update="advantage"`` learned better than either replayed actor update on
``CloudEnvironment`` with a minute of CPU (:class:`MORLConfig` has the runs). The replayed
updates are only as good as the critic, and one critic update (batch 256) costs about 5 ms
here, so about 10k fit in a minute: too few for the 81-action critic to rank the moves of a
20-step episode, while the policy gradient needs only Monte Carlo returns.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from agents.buffer import NStepAccumulator
from agents.episode import Episode
from agents.exploration import ExploringStarts, anneal, training_progress
from agents.morl_agent import Decision, MultiObjectiveRLAgent
from agents.registry.interface import Budget, EnvFn, TrainedAgent, TrainResult, TrainSetup
from agents.rollout import EpisodeRecorder, lockstep_steps, space_dims, training_seeds
from envs import Lockstep, lockstep, masks_of, stacked_masks
from optimizer.foundation.config import MultiObjectiveConfig, RLConfig

if TYPE_CHECKING:
    import gymnasium as gym

ACTOR_UPDATES = ("projection", "expected_q", "advantage")
"""The actor's update (:mod:`agents.policy_pair`): two replayed, one on-policy."""


@dataclass(frozen=True)
class MORLConfig:
    """The multi-objective agent's settings; the defaults train it on ``CloudEnvironment``
    within a minute on CPU, undiscounted as REINFORCE's.

    Measured over the 15 preset/preference cases of benchmarks/agents_quality.py (55 s each, 2
    CPU cores), mean share of the DP optimum: the replayed actor updates reached 0.66
    ("projection", mean of 7 whole runs) and 0.58 ("expected_q", 4 runs); the on-policy
    "advantage" update 0.75 with 0.25 critic updates per step. On the six hardest cases, 0.1
    critic updates per step (more episodes in the minute; the critic is then mostly the
    baseline) lifted the sum of shares from 2.41 to 3.66, lambda 0.95 with 0.25 updates to 3.21.
    32 episodes per batch rather than 16 gave 0.96 against 0.90 on resnet50-p100/balanced and
    about the same elsewhere. With tanh actors: mean 0.87, >= 95% of the optimum in 12 of 15
    cases, vgg16-v100/cost collapsing to -0.67. Exploring starts (as for REINFORCE) and the
    critic fitted to each batch's returns (``critic_fit_epochs``; with it the baseline tracks
    the returns within seconds) then gave mean 0.995 and 0.993 in two runs, >= 95% of the
    optimum in 14 and 13 of 15 cases (resnet50-v100/time at about 0.90 in both).

    The entropy bonus and exploring starts then fall as ``(1 - progress / 0.8) ** 2``
    (``anneal_power``) instead of linearly: the same strong start, which keeps
    vgg16-v100/cost out of its trap, but more of the minute spent near a deterministic
    policy, where the CPU and memory heads are pruned. On resnet50-v100/time the greedy
    policy had kept climbing to 32 CPUs / 48 GB (0.90 of the optimum) in 4 of 10 linear runs;
    squared, it reached >= 95% in 8 of 8 seeds (the optimum in 4). Linear alternatives each
    broke the other case: a bonus of 0.2 (16 episodes per batch) reached >= 95% there in 6 of
    6 seeds but let vgg16-v100/cost fall into the trap in 2 of 4; 0.25 kept vgg16-v100/cost
    at 0.98 but resnet50-v100/time at 0.91 in 2 of 5; annealing over 60% rather than 80% of
    the minute left vgg16-v100/cost at 0.948 in 4 of 4. The whole benchmark with the square:
    mean 0.997 and 0.991 (seeds 0 and 1), >= 95% in 14 of 15 in both; vgg16-v100/cost stayed
    at 0.948 in both (0.984 in 4 of 8 one-case seeds).

    There the 0.948 plan (memory kept three levels above what the job needs) gives way to
    more training per second, not to other settings: with 110 s instead of 55, 3 of 4 seeds
    reached 0.984; with 27 s, 0 of 4; 64 episodes per batch (79k episodes in the minute, half
    the updates per episode) 0 of 2; an entropy floor of 0.15 of the start, a trap (-0.67) and
    0.98 there but 0.90 on resnet50-v100/time. With the lockstep batches (``envs.lockstep``,
    about 15% more episodes in the minute) the whole benchmark gave mean 0.9995 and 0.9999
    (seeds 0 and 1), >= 95% in 15 of 15 in both, vgg16-v100/cost at 0.984 and 0.977; one-case
    runs there still gave 0.948 for seeds 1 and 3.
    """

    seed: int = 0
    """Seeds the networks, the sampling, the replay buffers, the exploring starts, the episodes."""
    hidden_dim: int = 64
    """Width of both hidden layers of the actors and critics."""
    actor_activation: Literal["relu", "tanh"] = "tanh"
    """The actors' hidden units: they learn by policy gradient on normalised advantages, as
    REINFORCE, with its step size and exploration. With the design's ReLU the actor stalled on
    cheap, too-slow allocations in vgg16-p100/cost (0.14 of the optimum) and
    resnet50-v100/balanced (0.84), where tanh reached 0.97 and 1.02 (same seed, 55 s)."""
    dropout_rate: float = 0.1
    """The actors' dropout: their MC-dropout passes give each decision's uncertainty."""
    critic_dropout: float | None = 0.0
    """The critics' dropout (None: ``dropout_rate``, as in the design); off, because it costs a
    third of each critic update on CPU and the uncertainty needs the actor's only."""
    lr_actor: float = 1e-2
    """Adam step size of the actors."""
    lr_critic: float = 1e-2
    """Adam step size of the critics: the critic is the actor's baseline and must reach the
    returns' scale (about -15 to +5 per episode) within seconds; at 1e-3 it lagged."""
    gamma: float = 1.0
    """Discount."""
    tau: float = 0.02
    """Polyak rate of the target networks."""
    batch_size: int = 256
    """Replayed minibatch (and critic-fit minibatch) size."""
    buffer_size: int = 100_000
    """Transitions each policy's replay buffer keeps."""
    entropy_coef: float = 0.3
    """Entropy bonus ``alpha``, annealed: at 0.2 the policy settled on vgg16-v100/cost in 2 of
    7 seeds on one GPU with fewer CPUs (past the time limit, -0.67 of the optimum); at 0.3 in
    none of 8."""
    exploration_noise: float = 0.0
    """Epsilon of the random actions while collecting."""
    target_entropy: float | None = None
    """Automatic temperature (SAC v2, Haarnoja et al., 2018b): ``alpha`` learned so that the
    actor's entropy stays at this share of ``log(action_dim)``, scaled by the annealing;
    None: fixed ``alpha = entropy_coef``. A fixed alpha is blind to the scale of Q."""
    critic_combine: Literal["min", "mean"] = "min"
    """The twin critics combined for targets and the actor: clipped double Q, or their mean."""
    actor_update: Literal["projection", "expected_q", "advantage"] = "advantage"
    """The actor's update (:mod:`agents.policy_pair`); ``"advantage"`` learns on-policy."""
    critic_fit_epochs: int = 1
    """With ``"advantage"``: passes over each batch in which the critic also regresses
    ``Q(s_t, a_t)`` on the batch's lambda-returns; 0: replayed updates only."""
    mc_samples: int = 10
    """Dropout passes per decision when its uncertainty is asked for."""
    reset_interval: int = 50
    """Consecutive SLA-violating steps after which a critic may be re-initialised."""
    reset_probability: float = 0.1
    """Probability of that re-initialisation."""
    episodes: int = 200_000
    """Training episodes (a time budget usually ends training first)."""
    n_envs: int = 32
    """Environments stepped together (with ``"advantage"``, one batch's episodes)."""
    updates_per_step: float = 0.1
    """Critic (and replayed actor) updates per vector step."""
    learning_starts: int = 256
    """Environment steps before the first update."""
    anneal_fraction: float = 0.8
    """Share of the training over which epsilon, alpha and exploring starts fall to zero."""
    anneal_power: float = 2.0
    """Shape of that fall: ``(1 - progress / anneal_fraction) ** anneal_power``."""
    anneal_lr: bool = True
    """Step sizes falling linearly to zero over the whole training."""
    exploring_starts: float = 0.5
    """Share of episodes started at a random allocation (:class:`ExploringStarts`)."""
    n_step: int = 1
    """Transitions of ``n_step`` rewards in the replay buffer (replayed actor updates)."""
    gae_lambda: float = 1.0
    """Lambda of the advantage estimates (``"advantage"``)."""

    def __post_init__(self) -> None:
        if self.actor_update not in ACTOR_UPDATES:
            raise ValueError(f"MORLConfig.actor_update must be one of {', '.join(ACTOR_UPDATES)}"
                             f" (got {self.actor_update!r})")
        if self.critic_combine not in ("min", "mean"):
            raise ValueError(f"MORLConfig.critic_combine must be 'min' or 'mean' "
                             f"(got {self.critic_combine!r})")
        if self.actor_activation not in ("relu", "tanh"):
            raise ValueError(f"MORLConfig.actor_activation must be 'relu' or 'tanh' "
                             f"(got {self.actor_activation!r})")
        for name, ok, rule in (
            ("critic_fit_epochs", self.critic_fit_epochs >= 0, ">= 0"),
            ("learning_starts", self.learning_starts >= 0, ">= 0"),
            ("updates_per_step", self.updates_per_step >= 0, ">= 0"),
            *((n, getattr(self, n) >= 1, ">= 1") for n in (
                "hidden_dim", "batch_size", "buffer_size", "mc_samples", "reset_interval",
                "episodes", "n_envs", "n_step")),
            *((n, 0 <= getattr(self, n) <= 1, "in [0, 1]") for n in (
                "dropout_rate", "gamma", "tau", "exploration_noise", "reset_probability",
                "anneal_fraction", "exploring_starts", "gae_lambda")),
            ("lr_actor", self.lr_actor > 0, "> 0"), ("lr_critic", self.lr_critic > 0, "> 0"),
            ("entropy_coef", self.entropy_coef >= 0, ">= 0"),
            ("anneal_power", self.anneal_power > 0, "> 0"),
        ):
            if not ok:
                raise ValueError(f"MORLConfig.{name} must be {rule} (got {getattr(self, name)})")

    @classmethod
    def from_rl(cls, rl: RLConfig) -> MORLConfig:
        """The defaults with what the ``[rl]`` table sets that they leave alone: the seed, the
        actors' dropout, the buffer's size and the SLA resets."""
        return cls(seed=rl.seed, dropout_rate=rl.dropout_rate, buffer_size=rl.buffer_size,
                   reset_interval=rl.reset_interval, reset_probability=rl.reset_probability)


# ---------------------------------------------------------------------------- training loop
def train(
    env_fn: EnvFn,
    preference: str | int | Sequence[float],
    config: MORLConfig | None = None,
    *,
    multi_objective_config: MultiObjectiveConfig | None = None,
    time_budget_s: float | None = None,
    quiet: bool = True,
    device: str = "cpu",
    action_factors: Sequence[int] | None = None,
) -> TrainResult:
    """Train the policy of ``preference`` of a new :class:`MultiObjectiveRLAgent` on
    ``env_fn``'s scalar reward (``env_fn`` builds the environment whose reward is scalarised
    with that preference) for ``config.episodes``, or until ``time_budget_s`` is spent.

    With ``actor_update="advantage"`` the ``n_envs`` episodes run in lockstep batches: every
    transition goes to the replay buffer, the critic takes ``updates_per_step`` updates per
    lockstep step of the batch, then the actor one on-policy update on the batch's episodes
    (advantages with ``gae_lambda``). Otherwise the ``n_envs`` environments restart one by one
    as their episodes end, and each vector step stores its (``n_step``) transitions and takes
    ``updates_per_step`` replayed updates. The result's ``agent`` is the
    :class:`MultiObjectiveRLAgent`.
    """
    config = config or MORLConfig()
    batch = lockstep(env_fn, config.n_envs)
    agent = MultiObjectiveRLAgent(*space_dims(batch.env), config, multi_objective_config,
                                  device=device, action_factors=action_factors)
    index = agent.policy_index(preference)
    starts = ExploringStarts(batch.env, config.exploring_starts, config.seed)
    run = _train_on_policy if config.actor_update == "advantage" else _train_replayed
    with tqdm(total=config.episodes, desc=f"morl[{agent.policy_names[index]}]", unit="ep",
              disable=quiet or None) as bar:  # None: a bar only on a terminal
        start = time.perf_counter()
        rows, episodes = run(agent, index, env_fn, batch, starts, time_budget_s, bar)
    return TrainResult(agent, pd.DataFrame(rows), time.perf_counter() - start, episodes)


def _train_on_policy(agent: MultiObjectiveRLAgent, index: int, env_fn: EnvFn, envs: Lockstep,
                     starts: ExploringStarts, time_budget_s: float | None,
                     bar: tqdm) -> tuple[list[dict[str, float]], int]:
    """Lockstep batches of episodes: critic updates per step, one actor update per batch."""
    config: MORLConfig = agent.config
    rows: list[dict[str, float]] = []
    start = time.perf_counter()
    done_episodes, steps = 0, 0
    while done_episodes < config.episodes:
        n = min(envs.n, config.episodes - done_episodes)
        seeds = training_seeds(config.seed, done_episodes, n)
        progress = training_progress(done_episodes, config.episodes, start, time_budget_s)
        anneal(agent, starts, progress, config.anneal_fraction, config.anneal_power)
        if config.anneal_lr:
            agent.set_learning_rate_scale(1.0 - progress, index)
        obs = envs.reset(seeds, [starts.options() for _ in seeds])
        batch = _run_batch(envs, obs, agent, index)
        batch_steps = sum(len(ep.actions) for ep in batch)
        steps += batch_steps
        stats: dict[str, float] = {}
        if steps >= config.learning_starts:
            updates = max(1, round(config.updates_per_step * batch_steps / n))
            for _ in range(updates):
                stats = agent.train(index) or stats
            stats.update(agent.train_actor(index, batch, config.gae_lambda) or {})
        done_episodes += n
        rows.append({
            "episode": done_episodes,
            "step": steps,
            "wall_s": time.perf_counter() - start,
            "episode_return": float(np.mean([ep.rewards.sum() for ep in batch])),
            **{k: v for k, v in stats.items() if k != "episode_return"},
        })
        bar.update(n)
        if time_budget_s is not None and time.perf_counter() - start > time_budget_s:
            break
    return rows, done_episodes


def _run_batch(envs: Lockstep, obs: np.ndarray, agent: MultiObjectiveRLAgent,
               index: int) -> list[Episode]:
    """One episode per just-reset copy with ``index``'s policy, every step stored in its
    replay buffer; the finished episodes."""
    recorder = EpisodeRecorder(obs)

    def act(o: np.ndarray, masks: np.ndarray | None) -> np.ndarray:
        return agent.select_action(o, index, uncertainty=False, mask=masks).action

    for step in lockstep_steps(envs, obs, act):
        agent.add_experience(index, step.obs, step.actions, step.rewards, step.next_obs,
                             step.terminated, mask=step.masks, next_mask=step.next_masks)
        recorder.add(step)
    return recorder.episodes()


def _train_replayed(agent: MultiObjectiveRLAgent, index: int, env_fn: EnvFn, batch: Lockstep,
                    starts: ExploringStarts, time_budget_s: float | None,
                    bar: tqdm) -> tuple[list[dict[str, float]], int]:
    """Environments restarted one by one as their episodes end, so they step one by one;
    replayed updates after each vector step."""
    config: MORLConfig = agent.config
    n_envs = config.n_envs
    envs = [batch.env, *(env_fn() for _ in range(n_envs - 1))]
    obs = starts.reset(envs, training_seeds(config.seed, 0, n_envs))
    next_seed = training_seeds(config.seed, n_envs, 1)[0]
    running = np.zeros(n_envs)
    accumulators = [NStepAccumulator(config.n_step, config.gamma) for _ in range(n_envs)]
    rows: list[dict[str, float]] = []
    finished: list[float] = []
    stats: dict[str, float] = {}
    start = time.perf_counter()
    steps = 0
    while len(finished) < config.episodes:
        progress = training_progress(len(finished), config.episodes, start, time_budget_s)
        anneal(agent, starts, progress, config.anneal_fraction, config.anneal_power)
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
        if steps >= config.learning_starts:
            for _ in range(int(config.updates_per_step)):
                stats = agent.train(index) or stats
        if len(finished) and (not rows or len(finished) - rows[-1]["episode"] >= n_envs):
            rows.append({
                "episode": len(finished),
                "step": steps,
                "wall_s": time.perf_counter() - start,
                "episode_return": float(np.mean(finished[-n_envs:])),
                **stats,
            })
        if time_budget_s is not None and time.perf_counter() - start > time_budget_s:
            break
    return rows, len(finished)


# ------------------------------------------------------------------------- for the registry
class MORLAgent(TrainedAgent):
    """One policy of a trained :class:`MultiObjectiveRLAgent`, asked greedily among each
    environment's valid actions, with its MC-dropout uncertainty."""

    def __init__(self, agent: MultiObjectiveRLAgent, policy: int) -> None:
        self.agent = agent
        self.policy = policy

    def _decide(self, obs: np.ndarray, envs: Sequence[gym.Env], uncertainty: bool) -> Decision:
        return self.agent.select_action(
            obs, self.policy, evaluate=True, uncertainty=uncertainty, mask=stacked_masks(envs)
        )

    def act(self, obs: np.ndarray, envs: Sequence[gym.Env]) -> np.ndarray:
        return self._decide(obs, envs, uncertainty=False).action

    def action_probabilities(self, obs: np.ndarray, envs: Sequence[gym.Env]) -> np.ndarray:
        return self._decide(obs, envs, uncertainty=False).probs

    def uncertainty(self, obs: np.ndarray, envs: Sequence[gym.Env]) -> np.ndarray:
        return np.asarray(self._decide(obs, envs, uncertainty=True).uncertainty)


def registry_entry(env_fn: EnvFn, setup: TrainSetup, budget: Budget) -> TrainResult:
    """What ``agents.registry`` calls: the policy of ``setup.preference`` trained with
    :class:`MORLConfig`'s defaults and ``setup``'s ``[rl]`` (:meth:`MORLConfig.from_rl`) within
    ``budget``; the result's ``agent`` is a :class:`MORLAgent`."""
    config = MORLConfig.from_rl(setup.rl)
    if budget.episodes:
        config = dataclasses.replace(config, episodes=budget.episodes)
    result = train(env_fn, setup.preference, config,
                   multi_objective_config=setup.multi_objective, time_budget_s=budget.seconds,
                   quiet=setup.quiet, action_factors=setup.action_factors)
    policy = result.agent.policy_index(setup.preference)
    return dataclasses.replace(result, agent=MORLAgent(result.agent, policy))
