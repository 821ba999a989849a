import numpy as np
import pytest
import torch
from toy_envs import ChainMDP, TwoArmedBandit

from agents.evaluate import evaluate, heldout_seeds, random_act
from agents.reinforce import ReinforceAgent, ReinforceConfig, SimplePolicy, discounted_returns
from agents.reinforce import train as train_reinforce
from optimizer.foundation.config import RLConfig
from optimizer.foundation.errors import ModelFileError

torch.set_num_threads(1)
FAST = dict(hidden_dim=32, lr_actor=3e-3, lr_critic=3e-3, exploration_noise=0.05, gamma=1.0,
            entropy_coef=0.01, anneal_fraction=0.0, anneal_lr=False, exploring_starts=0.0)
"""Small networks, a little epsilon, the plain loop (no annealing, no exploring starts)."""


def cfg(**kw) -> ReinforceConfig:
    return ReinforceConfig(**{**FAST, **kw})


def test_discounted_returns():
    np.testing.assert_allclose(
        discounted_returns(np.array([1.0, 0.0, 2.0]), 0.5), [1 + 0.25 * 2, 0.5 * 2, 2.0]
    )
    assert discounted_returns(np.array([]), 0.9).shape == (0,)


def test_learns_two_armed_bandit():
    # arm 0 pays 0.2, arm 1 pays 1.0, both with noise 0.5: the policy must settle on arm 1
    result = train_reinforce(TwoArmedBandit, cfg(seed=3, episodes=400, n_envs=8))
    probs = result.agent.action_probabilities(np.ones((1, 1), dtype=np.float32))[0]
    assert probs[1] > 0.9
    curve = result.curve["episode_return"]
    assert curve.tail(10).mean() > curve.head(5).mean()


def test_learns_chain_mdp_past_the_trap():
    # stepping left at the start pays 0.2 at once; walking right pays 1 - 4 * 0.02 = 0.92
    env = ChainMDP()
    result = train_reinforce(ChainMDP, cfg(seed=1, episodes=1600, n_envs=16))
    ev = evaluate(ReinforceAgent(result.agent).act, ChainMDP, heldout_seeds(4))
    assert ev.mean_return == pytest.approx(env.optimal_return)
    rnd = evaluate(random_act(0), ChainMDP, heldout_seeds(4))
    assert ev.mean_return > rnd.mean_return


def test_save_load_round_trip_gives_identical_actions(tmp_path):
    result = train_reinforce(ChainMDP, cfg(seed=2, episodes=80, n_envs=8))
    path = tmp_path / "reinforce.pt"
    result.agent.save(path)
    fresh = SimplePolicy(5, 2, cfg(seed=99))
    states = np.eye(5, dtype=np.float32)
    fresh.load(path)
    np.testing.assert_array_equal(
        fresh.action_probabilities(states), result.agent.action_probabilities(states)
    )
    np.testing.assert_array_equal(
        fresh.select_action(states, evaluate=True),
        result.agent.select_action(states, evaluate=True),
    )
    assert fresh.train_steps == result.agent.train_steps
    with pytest.raises(ModelFileError, match="saved for"):
        SimplePolicy(4, 2, cfg()).load(path)
    with pytest.raises(ModelFileError, match="not found"):
        fresh.load(tmp_path / "missing.pt")


def test_reset_clears_buffers_and_can_reinitialise():
    agent = SimplePolicy(2, 3, cfg(seed=0))
    agent.add_experience(np.zeros((2, 2)), [0, 1], [1.0, 2.0], [True, False], env_id=[0, 1])
    assert agent.n_complete_episodes == 1 and len(agent.memory.running) == 1
    before = [p.clone() for p in agent.policy_network.parameters()]
    agent.reset()
    assert agent.n_complete_episodes == 0 and not agent.memory.running
    assert agent.train() is None
    agent.reset(reinitialize=True)
    after = list(agent.policy_network.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))


def test_parallel_episodes_kept_apart():
    agent = SimplePolicy(1, 2, cfg())
    for t in range(3):
        agent.add_experience(np.zeros((2, 1)), [0, 1], [1.0, 10.0], [t == 2, t == 1], env_id=[0, 1])
    # env 1 finished after two steps, env 0 after three
    lengths = sorted(len(ep.rewards) for ep in agent.memory.finished)
    assert lengths == [2, 3]
    assert sorted(sum(ep.rewards) for ep in agent.memory.finished) == [3.0, 20.0]


def test_add_experience_copies_states():
    # the training loop overwrites its observation array in place after each step
    agent = SimplePolicy(2, 2, cfg())
    obs = np.zeros((1, 2), dtype=np.float32)
    agent.add_experience(obs[0], 0, 1.0, False)
    obs[0] = 7.0
    agent.add_experience(obs[0], 1, 1.0, True)
    np.testing.assert_array_equal(agent.memory.finished[0].states[0], [0.0, 0.0])


def test_a_redirected_run_draws_no_progress_bar(capsys):
    """Not quiet, but stderr is not a terminal (capsys): tqdm draws nothing, so a log
    redirected to a file holds lines a person can read, not bar frames."""
    train_reinforce(TwoArmedBandit, cfg(seed=3, episodes=16, n_envs=8), quiet=False)
    assert "reinforce" not in capsys.readouterr().err


def test_config_defaults_take_the_seed_from_rl_and_refuse_bad_values():
    """The [rl] table's generic fields do not reach REINFORCE (its defaults are its recipe);
    its seed does."""
    assert ReinforceConfig.from_rl(RLConfig(seed=3, hidden_dim=256, gamma=0.9)) == \
        ReinforceConfig(seed=3)
    with pytest.raises(ValueError, match=r"ReinforceConfig\.n_envs must be >= 1 \(got 0\)"):
        ReinforceConfig(n_envs=0)
    with pytest.raises(ValueError, match="exploring_starts must be in"):
        ReinforceConfig(exploring_starts=1.5)
