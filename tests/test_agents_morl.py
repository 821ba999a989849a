import numpy as np
import pytest
import torch
from torch import nn
from toy_envs import ChainMDP

from agents.evaluate import evaluate, heldout_seeds
from agents.morl import MORLAgent, MORLConfig
from agents.morl import train as train_morl
from agents.morl_agent import MultiObjectiveRLAgent
from agents.policy_pair import soft_update
from optimizer.foundation.config import MultiObjectiveConfig
from optimizer.foundation.errors import ConfigError, ModelFileError

torch.set_num_threads(1)
DESIGN = dict(
    actor_activation="relu", dropout_rate=0.1, critic_dropout=None, entropy_coef=0.01,
    exploration_noise=0.1, actor_update="projection", critic_fit_epochs=0, n_envs=8,
    updates_per_step=2, learning_starts=256, anneal_fraction=0.0, anneal_power=1.0,
    anneal_lr=False, exploring_starts=0.0,
)
"""The design's agent and the plain loop: replayed actor updates, no annealing."""
FAST = dict(
    hidden_dim=32,
    lr_actor=1e-3,
    lr_critic=1e-3,
    gamma=1.0,
    tau=0.05,
    batch_size=64,
    buffer_size=5000,
)


def design(**kw) -> MORLConfig:
    return MORLConfig(**{**DESIGN, **FAST, **kw})


def _agent(**kw) -> MultiObjectiveRLAgent:
    return MultiObjectiveRLAgent(4, 3, design(**kw), MultiObjectiveConfig())


def _greedy(result, policy):
    return MORLAgent(result.agent, result.agent.policy_index(policy)).act


def test_soft_update_arithmetic():
    target, source = nn.Linear(2, 2), nn.Linear(2, 2)
    with torch.no_grad():
        for p in target.parameters():
            p.fill_(1.0)
        for p in source.parameters():
            p.fill_(3.0)
    soft_update(target, source, 0.25)
    for p in target.parameters():
        torch.testing.assert_close(p, torch.full_like(p, 0.25 * 3 + 0.75 * 1))
    soft_update(target, source, 1.0)
    for p in target.parameters():
        torch.testing.assert_close(p, torch.full_like(p, 3.0))


def test_one_pair_per_preference_with_targets():
    agent = _agent()
    assert agent.policy_names == ["cost", "time", "resource", "balanced"]
    assert len(agent.actors) == len(agent.critics) == len(agent.replay_buffers) == 4
    assert agent.replay_buffers[0] is not agent.replay_buffers[1]
    for actor, target in zip(agent.actors, agent.target_actors, strict=True):
        for a, b in zip(actor.parameters(), target.parameters(), strict=True):
            assert torch.equal(a, b) and a is not b
    # a train step moves the online critic and pulls the target by tau only
    rng = np.random.default_rng(0)
    agent.add_experience(
        "time",
        rng.random((100, 4)),
        rng.integers(0, 3, 100),
        rng.random(100),
        rng.random((100, 4)),
        np.zeros(100, bool),
    )
    t_before = [p.clone() for p in agent.target_critics[1].parameters()]
    c_before = [p.clone() for p in agent.critics[1].parameters()]
    assert agent.train("time") is not None
    assert agent.train("cost") is None  # its own buffer is still empty
    for tb, cb, t, c in zip(
        t_before,
        c_before,
        agent.target_critics[1].parameters(),
        agent.critics[1].parameters(),
        strict=True,
    ):
        torch.testing.assert_close(t, 0.95 * tb + 0.05 * c.detach())
        assert not torch.equal(c, cb) or cb.numel() == 0


def test_select_policy_switches_when_sla_at_risk():
    agent = _agent()
    assert agent.select_policy("cost") == 0
    assert agent.select_policy("cost", {"time": True, "cost": True}) == 0
    # a cost-focused run about to miss its time limit switches to the time-focused policy
    assert agent.select_policy("cost", {"time": False, "cost": True}) == 1
    assert agent.active_policy == 1
    assert agent.select_policy("balanced", {"time": True, "cost": False}) == 0
    assert agent.select_policy([0.3, 0.3, 0.4]) == 3  # nearest vector is "balanced"
    with pytest.raises(ConfigError, match="unknown preference"):
        agent.select_policy("speed")


def test_uncertainty_reported_with_each_decision():
    agent = _agent(dropout_rate=0.3)
    state = np.random.default_rng(0).random((5, 4))
    dec = agent.select_action(state, "cost", evaluate=True)
    assert dec.action.shape == (5,) and dec.probs.shape == (5, 3)
    assert (dec.uncertainty > 0).all()
    assert (
        agent.select_action(state, "cost", evaluate=True, uncertainty=False).uncertainty.max() == 0
    )
    one = agent.select_action(state[0], "cost", evaluate=True)
    assert isinstance(one.action, int) and isinstance(one.uncertainty, float)
    no_dropout = _agent(dropout_rate=0.0).select_action(state, "cost", evaluate=True)
    assert no_dropout.uncertainty.max() == 0


def test_adaptive_reset_reinitialises_critic():
    agent = _agent(reset_interval=3, reset_probability=1.0)
    before = [p.clone() for p in agent.critics[2].parameters()]
    assert agent.check_adaptive_reset("resource", True) is False
    assert (
        agent.check_adaptive_reset("resource", False) is False
    )  # a compliant step breaks the streak
    assert [agent.check_adaptive_reset("resource", True) for _ in range(3)] == [False, False, True]
    after = list(agent.critics[2].parameters())
    assert all(not torch.equal(a, b) for a, b in zip(before, after, strict=True))
    for a, b in zip(
        agent.critics[2].parameters(), agent.target_critics[2].parameters(), strict=True
    ):
        assert torch.equal(a, b)
    assert agent.reset_counters == [0, 0, 1, 0]
    never = _agent(reset_interval=2, reset_probability=0.0)
    assert not any(never.check_adaptive_reset(0, True) for _ in range(10))


def test_save_load_round_trip_gives_identical_actions(tmp_path):
    agent = _agent(seed=1)
    other = _agent(seed=2)
    state = np.random.default_rng(1).random((20, 4))
    path = tmp_path / "morl.pt"
    agent.save(path)
    other.load(path)
    for name in agent.policy_names:
        a = agent.select_action(state, name, evaluate=True, uncertainty=False)
        b = other.select_action(state, name, evaluate=True, uncertainty=False)
        np.testing.assert_array_equal(a.action, b.action)
        np.testing.assert_array_equal(a.probs, b.probs)
    with pytest.raises(ModelFileError):
        MultiObjectiveRLAgent(5, 3, design()).load(path)


def test_learns_chain_mdp():
    env = ChainMDP()
    cfg = design(exploration_noise=0.2, seed=0, episodes=600, n_envs=8)
    result = train_morl(ChainMDP, "balanced", cfg)
    ev = evaluate(_greedy(result, "balanced"), ChainMDP, heldout_seeds(2))
    assert ev.mean_return == pytest.approx(env.optimal_return)


def test_config_defaults_are_the_recipe_and_bad_values_are_refused():
    """The defaults are the recipe that was measured (agents_quality); a setting out of range
    is one ValueError naming the field and the value."""
    recipe = {"hidden_dim": 64, "actor_activation": "tanh", "lr_actor": 1e-2, "lr_critic": 1e-2,
              "gamma": 1.0, "tau": 0.02, "batch_size": 256, "entropy_coef": 0.3,
              "exploration_noise": 0.0, "n_envs": 32, "episodes": 200_000,
              "updates_per_step": 0.1, "anneal_fraction": 0.8, "anneal_lr": True,
              "critic_dropout": 0.0, "actor_update": "advantage", "gae_lambda": 1.0,
              "exploring_starts": 0.5, "critic_fit_epochs": 1, "anneal_power": 2.0,
              "learning_starts": 256, "n_step": 1, "critic_combine": "min",
              "target_entropy": None}
    config = MORLConfig()
    assert {k: getattr(config, k) for k in recipe} == recipe
    with pytest.raises(ValueError, match=r"MORLConfig\.n_step must be >= 1 \(got 0\)"):
        MORLConfig(n_step=0)
    with pytest.raises(ValueError, match="actor_update must be one of"):
        MORLConfig(actor_update="ppo")


def test_n_step_accumulator():
    from agents.buffer import NStepAccumulator

    acc = NStepAccumulator(2, gamma=0.5)
    s = [np.full(1, i, dtype=np.float32) for i in range(4)]
    assert acc.push(s[0], 0, 1.0, s[1], False, False) == []
    (t,) = acc.push(s[1], 1, 2.0, s[2], False, False)
    assert t[1] == 0 and t[2] == pytest.approx(1.0 + 0.5 * 2.0) and t[3][0] == 2 and t[5] == 0.25
    out = acc.push(s[2], 2, 4.0, s[3], True, True)  # episode ends: flush what is pending
    assert [o[1] for o in out] == [1, 2]
    assert out[0][2] == pytest.approx(2.0 + 0.5 * 4.0) and out[0][5] == 0.25 and out[0][4]
    assert out[1][2] == pytest.approx(4.0) and out[1][5] == 0.5 and out[1][3][0] == 3
    assert acc.pending == []


def test_automatic_temperature_follows_target_entropy():
    rng = np.random.default_rng(0)

    def trained_alphas(target: float, peaked: bool) -> list[float]:
        agent = MultiObjectiveRLAgent(4, 3, design(target_entropy=target))
        if peaked:  # a near-deterministic actor: entropy far below any sizeable target
            with torch.no_grad():
                agent.actors[0].net[-1].bias.copy_(torch.tensor([20.0, 0.0, 0.0]))
        agent.add_experience(
            0,
            rng.random((200, 4)),
            np.zeros(200, int),
            np.ones(200),
            rng.random((200, 4)),
            np.ones(200, bool),
        )
        return [agent.train(0)["alpha"] for _ in range(20)]

    up = trained_alphas(0.9, peaked=True)
    assert up[-1] > up[0]
    down = trained_alphas(0.01, peaked=False)
    assert down[-1] < down[0]
    agent = MultiObjectiveRLAgent(4, 3, design(target_entropy=0.5))
    agent.set_exploration(0.0)
    assert agent.target_entropy == 0.0


@pytest.mark.parametrize("factors", [None, (2, 2)])
def test_projection_actor_follows_the_critic_from_a_saturated_start(factors):
    # The critic is (all but) frozen and prefers action 3; the actor starts almost surely on 0.
    cfg = design(lr_critic=1e-12, lr_actor=1e-2, entropy_coef=0.01, dropout_rate=0.0)
    agent = MultiObjectiveRLAgent(4, 4, cfg, MultiObjectiveConfig(), action_factors=factors)
    pair = agent.pairs[0]
    with torch.no_grad():
        for critic in (pair.critic, pair.target_critic):
            for q in (critic.q1, critic.q2):
                q.l3.weight.zero_()
                q.l3.bias.copy_(torch.tensor([0.0, 0.2, 0.1, 1.0]))
        last = pair.actor.net[-1]
        last.weight.zero_()
        last.bias.copy_(torch.tensor([8.0, 0.0, 8.0, 0.0] if factors else [12.0, 0.0, 0.0, 0.0]))
    rng = np.random.default_rng(0)
    states = rng.random((256, 4))
    agent.add_experience(0, states, rng.integers(0, 4, 256), 0.0, states, True)
    before = agent.select_action(states[:32], 0, evaluate=True, uncertainty=False)
    assert (before.action == 0).all() and before.probs[:, 0].min() > 0.99
    for _ in range(150):
        agent.train(0)
    after = agent.select_action(states[:32], 0, evaluate=True, uncertainty=False)
    assert (after.action == 3).all()
    assert after.probs[:, 3].mean() > 0.9


def test_lambda_advantages_by_hand():
    from agents.episode import lambda_advantages

    r, v = np.array([1.0, 2.0, 3.0]), np.array([0.5, 1.0, 1.5])
    # lam = 1: Monte Carlo return minus the baseline (terminal: last value 0)
    np.testing.assert_allclose(lambda_advantages(r, v, 0.0, 1.0, 1.0), [6 - 0.5, 5 - 1.0, 3 - 1.5])
    # lam = 0: one-step TD errors, bootstrapping from the last value when truncated
    np.testing.assert_allclose(
        lambda_advantages(r, v, 4.0, 0.5, 0.0), [1 + 0.5 - 0.5, 2 + 0.75 - 1.0, 3 + 2.0 - 1.5]
    )
    # lam = 0.5, gamma = 0.5: A_1 = delta_1 + 0.25 delta_2, A_0 = delta_0 + 0.25 A_1
    d = np.array([1.0, 1.75, 3.5])
    a1 = d[1] + 0.25 * d[2]
    np.testing.assert_allclose(lambda_advantages(r, v, 4.0, 0.5, 0.5), [d[0] + 0.25 * a1, a1, d[2]])


def _train_advantage(env_fn, policy, seed, **kw):
    return train_morl(env_fn, policy, design(lr_actor=1e-2, seed=seed, actor_update="advantage",
                                             **kw))


def test_advantage_actor_critic_learns_bandit_and_chain():
    from toy_envs import TwoArmedBandit

    result = _train_advantage(
        TwoArmedBandit, "cost", 0, episodes=400, n_envs=8, learning_starts=64, updates_per_step=1
    )
    probs = result.agent.select_action(np.ones((1, 1), dtype=np.float32), "cost").probs[0]
    assert probs[1] > 0.9
    assert result.agent.train_steps[result.agent.policy_index("cost")] > 0  # critic trained

    env = ChainMDP()
    result = _train_advantage(ChainMDP, "balanced", 1, episodes=1600, n_envs=16, gae_lambda=0.9)
    ev = evaluate(_greedy(result, "balanced"), ChainMDP, heldout_seeds(4))
    assert ev.mean_return == pytest.approx(env.optimal_return)
    assert {"critic_loss", "actor_loss", "entropy"} <= set(result.curve.columns)


def test_critic_fit_regresses_q_on_the_batch_returns():
    from agents.episode import Episode

    agent = MultiObjectiveRLAgent(
        4, 3, design(lr_critic=1e-2, actor_update="advantage", critic_fit_epochs=4,
                     critic_dropout=0.0), MultiObjectiveConfig())
    rng = np.random.default_rng(0)
    episodes = []
    for _ in range(8):
        states = rng.random((5, 4)).astype(np.float32)
        states[:, 0] = np.arange(5, 0, -1) / 5  # steps left: the return-to-go is 5 * s[0]
        actions = rng.integers(0, 3, 5)
        rewards = np.ones(5)
        episodes.append(Episode(states, actions, rewards, states[-1], True))
    pair = agent.pairs[0]

    def q_error():
        with torch.no_grad():
            errs = []
            for ep in episodes:
                q = pair.critic.q1(torch.as_tensor(ep.states))
                taken = q.gather(1, torch.as_tensor(ep.actions).view(-1, 1)).squeeze(1).numpy()
                errs.append(taken - np.cumsum(ep.rewards[::-1])[::-1])
            return float(np.mean(np.concatenate(errs) ** 2))

    before = q_error()
    target_before = [p.clone() for p in pair.target_critic.parameters()]
    for _ in range(30):
        stats = agent.train_actor(0, episodes, lam=1.0)
    assert "critic_fit_loss" in stats
    assert q_error() < 0.1 * before
    # the target critic followed by soft updates
    assert any(
        not torch.equal(a, b)
        for a, b in zip(target_before, pair.target_critic.parameters(), strict=True)
    )
    # without fitting, train_actor leaves the critic alone
    plain = MultiObjectiveRLAgent(4, 3, design(actor_update="advantage"), MultiObjectiveConfig())
    critic_before = [p.clone() for p in plain.pairs[0].critic.parameters()]
    assert "critic_fit_loss" not in plain.train_actor(0, episodes)
    assert all(
        torch.equal(a, b)
        for a, b in zip(critic_before, plain.pairs[0].critic.parameters(), strict=True)
    )
    with pytest.raises(ValueError, match="critic_fit_epochs"):
        design(critic_fit_epochs=-1)


def test_advantage_agent_with_critic_fit_learns_the_chain():
    env = ChainMDP()
    result = _train_advantage(
        ChainMDP, "balanced", 2, episodes=1600, n_envs=16, critic_fit_epochs=1, updates_per_step=0.1
    )
    ev = evaluate(_greedy(result, "balanced"), ChainMDP, heldout_seeds(4))
    assert ev.mean_return == pytest.approx(env.optimal_return)
    assert "critic_fit_loss" in result.curve.columns
