"""Invalid-action masks: the environment's, the lockstep batches', and REINFORCE's use of them."""

import gymnasium as gym
import numpy as np

from agents.evaluate import evaluate, heldout_seeds, reinforce_act
from agents.recipes import cloud_action_factors
from agents.reinforce import SimplePolicy
from agents.toy_envs import ChainMDP
from agents.train import train_reinforce
from envs import CloudEnvironment, EnvConfig, lockstep
from optimizer.config import RLConfig


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
    agent = SimplePolicy(4, 6, RLConfig(seed=0, exploration_noise=1.0))  # all exploration
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
    result = train_reinforce(env_fn, RLConfig(seed=0), episodes=64, n_envs=16,
                             action_factors=cloud_action_factors(env_fn()))
    ooms = [info["oom"] for info in
            evaluate(reinforce_act(result.agent), env_fn, heldout_seeds(8)).final_infos]
    assert not any(ooms)
