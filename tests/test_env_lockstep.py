import gymnasium as gym
import numpy as np
import pytest
from toy_envs import ChainMDP

from envs import ENV_ID, CloudEnvironment, EnvConfig
from envs.lockstep import CloudLockstep, GymLockstep, lockstep


def _run_both(cfg: EnvConfig, n: int, seeds: list[int], starts: list, action_seed: int):
    """Step a CloudLockstep and n CloudEnvironments with the same random actions."""
    batch = lockstep(lambda: CloudEnvironment(cfg), n)
    assert isinstance(batch, CloudLockstep)
    envs = [CloudEnvironment(cfg) for _ in range(n)]
    options = [None if s is None else {"allocation": s} for s in starts]
    obs = batch.reset(seeds, options)
    ref = np.stack(
        [e.reset(seed=s, options=o)[0] for e, s, o in zip(envs, seeds, options, strict=True)]
    )
    np.testing.assert_array_equal(obs, ref)
    rng = np.random.default_rng(action_seed)
    alive, ooms, steps = np.arange(n), 0, 0
    while len(alive):
        actions = rng.integers(0, envs[0].action_space.n, size=len(alive))
        masks = batch.action_masks(alive)
        obs, rewards, terminated, over = batch.step(alive, actions)
        for j, i in enumerate(alive):
            np.testing.assert_array_equal(masks[j], envs[i].action_masks())
            o, r, term, trunc, info = envs[i].step(int(actions[j]))
            np.testing.assert_array_equal(obs[j], o)
            assert rewards[j] == r and terminated[j] == term and over[j] == (term or trunc)
            # A move the mask rules out runs out of memory; one it allows does not (unless
            # every move does, when the mask allows them all).
            if not masks[j].all():
                assert info["oom"] == (not masks[j][actions[j]])
            ooms += info["oom"]
        steps += len(alive)
        alive = alive[~over]
    return ooms, steps


@pytest.mark.parametrize("noise", [0.0, 0.05])
def test_cloud_lockstep_matches_the_env_step_for_step(noise):
    cfg = EnvConfig(workload="vgg16-v100", preference="cost", noise=noise)
    env = CloudEnvironment(cfg)
    starts = [None, None, None, int(env.start_candidates()[3]), None, None]
    total_ooms = 0
    for round_ in range(4):  # the same copies, reset again: no state leaks between episodes
        ooms, steps = _run_both(cfg, 6, [100 * round_ + i for i in range(6)], starts, round_)
        total_ooms += ooms
        assert steps > 6
    assert total_ooms > 0  # random moves run out of memory: that path is compared too


def test_cloud_lockstep_other_preset_and_partial_reset():
    cfg = EnvConfig(workload="resnet50-p100", preference="time", noise=0.1)
    _run_both(cfg, 3, [7, 8, 9], [None] * 3, 1)
    batch = CloudLockstep(CloudEnvironment(cfg), 4)
    assert batch.reset([1, 2]).shape == (2, batch.env.state_dim)  # the first two copies only
    moved = int(batch.env.start_candidates()[0])
    before = batch.a.copy()
    with pytest.raises(ValueError, match="outside the grid"):
        batch.reset([1, 2], [{"allocation": moved}, {"allocation": 10**6}])
    np.testing.assert_array_equal(batch.a, before)  # a bad option resets nothing
    with pytest.raises(ValueError, match="5 seeds for 4"):
        batch.reset([1, 2, 3, 4, 5])
    with pytest.raises(ValueError, match="1 options for 2 seeds"):
        batch.reset([1, 2], [None])


def test_gym_lockstep_for_other_and_wrapped_envs():
    chain = lockstep(ChainMDP, 3)
    assert isinstance(chain, GymLockstep) and chain.n == 3
    obs = chain.reset([1, 2, 3])
    assert obs.shape == (3, 5)
    obs, rewards, terminated, over = chain.step(np.arange(3), np.ones(3, dtype=int))
    assert obs.shape == (3, 5) and rewards.shape == (3,) and not over.any()
    # gymnasium.make wraps the env; a wrapper may change steps, so it is stepped as it is
    wrapped = lockstep(lambda: gym.make(ENV_ID, workload="mlp-cpu"), 2)
    assert isinstance(wrapped, GymLockstep)
    with pytest.raises(ValueError, match="n_envs"):
        lockstep(ChainMDP, 0)
