import torch

from agents.networks import Actor, Critic, mc_dropout_probs


def test_actor_outputs_probabilities():
    torch.manual_seed(0)
    actor = Actor(4, 6, hidden_dim=16, dropout_rate=0.2)
    probs = actor(torch.randn(5, 4))
    assert probs.shape == (5, 6)
    torch.testing.assert_close(probs.sum(dim=1), torch.ones(5))
    assert (probs > 0).all()


def test_mc_dropout_spread_zero_off_positive_on():
    torch.manual_seed(0)
    actor = Actor(4, 6, hidden_dim=32, dropout_rate=0.3)
    x = torch.randn(3, 4)
    off = mc_dropout_probs(actor, x, n_samples=8)
    assert torch.count_nonzero(off.std_probs) == 0
    actor.enable_dropout = True
    on = mc_dropout_probs(actor, x, n_samples=8)
    assert (on.std_probs.sum(dim=1) > 1e-4).all()
    assert on.mean_probs.shape == (3, 6)
    # the helper leaves the module's own mode as it found it
    assert actor.training
    # with a dropout rate of 0 there is nothing to sample even when enabled
    still = Actor(4, 6, hidden_dim=32, dropout_rate=0.0, enable_dropout=True)
    assert torch.count_nonzero(mc_dropout_probs(still, x, 5).std_probs) == 0


def test_critic_all_actions_and_pairs():
    torch.manual_seed(0)
    critic = Critic(3, 5, hidden_dim=8, dropout_rate=0.1).eval()
    s = torch.randn(4, 3)
    q = critic(s)
    assert q.shape == (4, 5)
    a = torch.tensor([0, 4, 2, 2])
    torch.testing.assert_close(critic.q_value(s, a), q[torch.arange(4), a])
    assert set(dict(critic.named_children())) == {"l1", "drop1", "l2", "drop2", "l3"}


def test_joint_log_probs_is_product_of_factor_softmaxes():
    from agents.networks import joint_log_probs

    torch.manual_seed(0)
    raw = torch.randn(2, 3 + 2)
    joint = joint_log_probs(raw, (3, 2)).exp()
    assert joint.shape == (2, 6)
    torch.testing.assert_close(joint.sum(dim=1), torch.ones(2))
    p1, p2 = torch.softmax(raw[:, :3], 1), torch.softmax(raw[:, 3:], 1)
    # index = d0 * 2 + d1 (first factor most significant)
    torch.testing.assert_close(joint[:, 1 * 2 + 0], p1[:, 1] * p2[:, 0])
    torch.testing.assert_close(joint[:, 2 * 2 + 1], p1[:, 2] * p2[:, 1])
    actor = Actor(4, 81, hidden_dim=8, dropout_rate=0.0, action_factors=(3, 3, 3, 3))
    assert actor.net[-1].out_features == 12
    torch.testing.assert_close(actor(torch.randn(3, 4)).sum(1), torch.ones(3))


def test_twin_critic_minimum():
    from agents.networks import TwinCritic

    torch.manual_seed(0)
    twin = TwinCritic(3, 4, hidden_dim=8, dropout_rate=0.0)
    s = torch.randn(5, 3)
    q1, q2 = twin(s)
    torch.testing.assert_close(twin.min_q(s), torch.minimum(q1, q2))
    torch.testing.assert_close(twin.combined_q(s, "mean"), (q1 + q2) / 2)
    assert not torch.equal(q1, q2)  # independently initialised


def test_deterministic_logits_skip_dropout_in_any_mode():
    actor = Actor(4, 81, 16, dropout_rate=0.5, action_factors=(3, 3, 3, 3))
    x = torch.randn(7, 4)
    actor.eval()
    expected = actor.logits(x)
    actor.train()  # dropout active for logits(), not for deterministic_logits()
    assert not torch.allclose(actor.logits(x), expected)
    torch.testing.assert_close(actor.deterministic_logits(x), expected)
    assert actor.training


def test_actor_activation_choice():
    import pytest
    from torch import nn

    from optimizer.foundation.config import RLConfig
    from optimizer.foundation.errors import ConfigError

    assert any(isinstance(m, nn.ReLU) for m in Actor(4, 3, 8).modules())  # the design's default
    tanh = Actor(4, 3, 8, activation="tanh")
    assert any(isinstance(m, nn.Tanh) for m in tanh.modules())
    assert not any(isinstance(m, nn.ReLU) for m in tanh.modules())
    with pytest.raises(ValueError, match="activation"):
        Actor(4, 3, 8, activation="gelu")
    with pytest.raises(ConfigError, match="actor_activation"):
        RLConfig(actor_activation="gelu")
