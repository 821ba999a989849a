"""Invalid-action masks: the environment's, the lockstep batches', and the agents' use of them."""

import gymnasium as gym
import numpy as np
import pytest
from toy_envs import ChainMDP

from agents.buffer import NStepAccumulator, ReplayBuffer
from agents.evaluate import evaluate, heldout_seeds
from agents.morl import MORLAgent, MORLConfig
from agents.morl import train as train_morl
from agents.morl_agent import MultiObjectiveRLAgent
from agents.registry import cloud_action_factors
from agents.reinforce import ReinforceAgent, ReinforceConfig, SimplePolicy
from agents.reinforce import train as train_reinforce
from envs import CloudEnvironment, EnvConfig, lockstep


def _phased() -> EnvConfig:
    return EnvConfig(workload="autoencoder-stream-cpu", preference="resource", noise=0.05)


def test_masks_rule_out_exactly_the_moves_that_run_out_of_memory():
    env = CloudEnvironment(_phased())
    rng = np.random.default_rng(0)
    ruled_out = ooms = 0
    for episode in range(30):
        env.reset(seed=episode, options={"allocation": int(rng.choice(env.start_candidates()))})
        done = False
        while not done:
            mask = env.action_masks()
            assert mask.shape == (env.action_space.n,) and mask.any()
            ruled_out += int((~mask).sum())
            action = int(rng.integers(env.action_space.n))
            _, _, done, _, info = env.step(action)
            ooms += info["oom"]
            if not mask.all():
                assert info["oom"] == (not mask[action])
    # The train and done phases need more memory than the smallest levels: moves are ruled
    # out, and random ones run out of memory, so both branches above were taken.
    assert ruled_out > 0 and ooms > 0


def test_gym_lockstep_reads_masks_through_wrappers_and_none_without():
    wrapped = lockstep(lambda: gym.wrappers.RecordEpisodeStatistics(CloudEnvironment(_phased())),
                       2)
    wrapped.reset([0, 1])
    masks = wrapped.action_masks(np.arange(2))
    assert masks.shape == (2, 81) and masks.dtype == bool
    plain = CloudEnvironment(_phased())
    plain.reset(seed=0)
    np.testing.assert_array_equal(masks[0], plain.action_masks())
    chain = lockstep(lambda: ChainMDP(), 2)
    chain.reset([0, 1])
    assert chain.action_masks(np.arange(2)) is None


def test_reinforce_acts_only_among_valid_actions():
    agent = SimplePolicy(4, 6, ReinforceConfig(seed=0, exploration_noise=1.0))  # all exploration
    states = np.zeros((500, 4), dtype=np.float32)
    mask = np.zeros((500, 6), dtype=bool)
    mask[:, [1, 4]] = True
    sampled = agent.select_action(states, mask=mask)
    assert set(np.unique(sampled)) == {1, 4}
    assert set(agent.select_action(states, evaluate=True, mask=mask)) <= {1, 4}
    agent.add_experience(states[:3], sampled[:3], [1.0, 0.0, 2.0], [False, False, True],
                         mask=mask[:3])
    stats = agent.train()
    assert np.isfinite(stats["policy_loss"]) and np.isfinite(stats["entropy"])


def test_masked_reinforce_plans_never_run_out_of_memory():
    env_fn = lambda: CloudEnvironment(_phased())  # noqa: E731
    # The design's generic settings and the plain loop (no annealing, no exploring starts).
    config = ReinforceConfig(seed=0, hidden_dim=128, gamma=0.99, lr_actor=3e-4, lr_critic=1e-3,
                             entropy_coef=0.01, exploration_noise=0.1, episodes=64, n_envs=16,
                             anneal_fraction=0.0, anneal_lr=False, exploring_starts=0.0)
    result = train_reinforce(env_fn, config, action_factors=cloud_action_factors(env_fn()))
    ooms = [info["oom"] for info in
            evaluate(ReinforceAgent(result.agent).act, env_fn, heldout_seeds(8)).final_infos]
    assert not any(ooms)


def test_morl_acts_and_reports_probabilities_only_among_valid_actions():
    agent = MultiObjectiveRLAgent(4, 6, MORLConfig(seed=0, exploration_noise=1.0))
    states = np.zeros((500, 4), dtype=np.float32)
    mask = np.zeros((500, 6), dtype=bool)
    mask[:, [1, 4]] = True
    decision = agent.select_action(states, "balanced", uncertainty=False, mask=mask)
    assert set(np.unique(decision.action)) == {1, 4}  # epsilon-exploration stays inside too
    assert np.allclose(decision.probs[:, [0, 2, 3, 5]], 0.0)
    assert np.allclose(decision.probs.sum(axis=1), 1.0)
    greedy = agent.select_action(states, "balanced", evaluate=True, uncertainty=False, mask=mask)
    assert set(greedy.action) <= {1, 4}


def test_replay_buffer_and_n_step_transitions_carry_masks():
    acc = NStepAccumulator(2, gamma=1.0)
    s = [np.full(2, i, dtype=np.float32) for i in range(3)]
    m = [np.array([True, i % 2 == 0, True]) for i in range(3)]
    assert acc.push(s[0], 0, 1.0, s[1], False, False, m[0], m[1]) == []
    (t,) = acc.push(s[1], 2, 1.0, s[2], False, False, m[1], m[2])
    np.testing.assert_array_equal(t[6], m[0])  # the first state's mask, the last next state's
    np.testing.assert_array_equal(t[7], m[2])
    buffer = ReplayBuffer(8, 2, seed=0, action_dim=3)
    states = np.arange(5, dtype=np.float32).repeat(2).reshape(5, 2)  # row i holds i
    masks = np.array([[True, False, True]] * 2 + [[False, True, True]] * 2)
    buffer.add(states[:4], 0, 0.0, states[:4], False, 1.0, masks, masks[::-1])
    buffer.add(states[4], 0, 0.0, states[4], False)  # no masks: every action counts valid
    sample = buffer.sample(64)
    rows = sample.states[:, 0].long().numpy()
    assert set(rows) == set(range(5))
    every = np.ones((1, 3), dtype=bool)
    np.testing.assert_array_equal(sample.masks.numpy(), np.vstack([masks, every])[rows])
    np.testing.assert_array_equal(sample.next_masks.numpy(), np.vstack([masks[::-1], every])[rows])
    with pytest.raises(ValueError, match="action_dim"):
        ReplayBuffer(4, 2).add(states[0], 0, 0.0, states[0], False, 1.0, masks[0])


@pytest.mark.parametrize("actor_update", ["advantage", "projection"])
def test_masked_morl_plans_never_run_out_of_memory(actor_update):
    env_fn = lambda: CloudEnvironment(_phased())  # noqa: E731
    kwargs = {"n_envs": 16, "learning_starts": 64, "episodes": 64}
    if actor_update == "projection":  # the replayed actor update, n-step transitions
        kwargs.update(actor_update="projection", n_step=3, updates_per_step=1)
    result = train_morl(env_fn, "resource", MORLConfig(seed=0, **kwargs),
                        action_factors=cloud_action_factors(env_fn()))
    # Masked actions weigh nothing in the losses: a masked logit (-1e9) that leaked into one
    # would put the loss near 1e9.
    losses = result.curve.dropna()[["actor_loss", "critic_loss"]].to_numpy()
    assert len(losses) and np.isfinite(losses).all() and np.abs(losses).max() < 1e3
    greedy = MORLAgent(result.agent, result.agent.policy_index("resource")).act
    ooms = [info["oom"] for info in evaluate(greedy, env_fn, heldout_seeds(8)).final_infos]
    assert not any(ooms)
