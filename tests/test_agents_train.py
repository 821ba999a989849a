import numpy as np
import pandas as pd
import pytest
import torch
from toy_envs import ChainMDP

from agents.baselines import cloud_action_index, static_act
from agents.evaluate import evaluate, heldout_seeds, random_act
from agents.exploration import ExploringStarts, exploration_scale
from agents.metrics import RLMetricsTracker
from agents.morl import MORLConfig
from agents.reinforce import ReinforceConfig
from agents.reinforce import train as train_reinforce
from optimizer.foundation.config import RLConfig

torch.set_num_threads(1)


def test_exploration_schedule():
    assert exploration_scale(0.0, 0.8) == 1.0
    assert exploration_scale(0.4, 0.8) == pytest.approx(0.5)
    assert exploration_scale(0.9, 0.8) == 0.0
    assert exploration_scale(0.9, 0.8, floor=0.1) == pytest.approx(0.1)
    assert exploration_scale(0.5, 0.0) == 1.0
    assert exploration_scale(0.4, 0.8, power=2.0) == pytest.approx(0.25)
    assert exploration_scale(0.4, 0.8, floor=0.2, power=2.0) == pytest.approx(0.4)
    assert exploration_scale(0.0, 0.8, power=2.0) == 1.0
    with pytest.raises(ValueError, match="anneal_power"):
        exploration_scale(0.5, 0.8, power=0.0)


def test_evaluate_same_seeds_same_episodes_and_heldout():
    seeds = heldout_seeds(5)
    assert min(seeds) > 10**9  # far above training seeds seed * 1_000_003 + k
    a = evaluate(random_act(1), ChainMDP, seeds)
    b = evaluate(random_act(1), ChainMDP, seeds)
    np.testing.assert_array_equal(a.returns, b.returns)
    assert a.returns.shape == (5,) and (a.lengths >= 1).all()
    assert a.reward_vector_sums.shape == (5, 2)
    # replaying "always right" reaches the goal in n - 1 steps
    right = evaluate(static_act([1] * 10, fallback=1), ChainMDP, seeds)
    assert np.allclose(right.returns, ChainMDP().optimal_return)
    assert (right.lengths == 4).all()


def test_learning_curve_and_annealing(tmp_path):
    cfg = ReinforceConfig(hidden_dim=16, lr_actor=3e-3, lr_critic=3e-3, gamma=1.0, seed=0,
                          entropy_coef=0.01, exploration_noise=0.1, episodes=64, n_envs=8,
                          anneal_fraction=0.5, anneal_lr=False, exploring_starts=0.0)
    result = train_reinforce(ChainMDP, cfg)
    assert result.episodes == 64 and len(result.curve) == 8
    assert {"episode", "wall_s", "policy_loss", "entropy", "episode_return"} <= set(result.curve)
    assert result.agent.epsilon == 0.0 and result.agent.entropy_coef == 0.0
    result.save_curve(tmp_path / "curve.csv")
    assert len(pd.read_csv(tmp_path / "curve.csv")) == 8


def test_cloud_action_index_layout():
    assert cloud_action_index((0, 0, 0), batch_actions=True) == 40  # keep everything
    assert cloud_action_index((0, 0, 0), batch_actions=False) == 13
    assert cloud_action_index((1, 1, 0, 1), batch_actions=True) == 77
    assert cloud_action_index((-1, -1, -1, -1), batch_actions=True) == 0


def test_agent_configs_keep_what_rl_sets_and_their_defaults_otherwise():
    """Each agent's defaults are its recipe; from [rl] it takes the seed and, for the
    multi-objective agent, what the recipe leaves alone (dropout, buffer, SLA resets)."""
    base = RLConfig(seed=3, reset_interval=7, dropout_rate=0.2, buffer_size=500, gamma=0.5,
                    hidden_dim=256)
    morl = MORLConfig.from_rl(base)
    assert (morl.seed, morl.reset_interval, morl.dropout_rate, morl.buffer_size) == \
        (3, 7, 0.2, 500)
    assert (morl.gamma, morl.hidden_dim) == (1.0, 64)
    assert ReinforceConfig.from_rl(base) == ReinforceConfig(seed=3)


def test_metrics_tracker_writes_csvs(tmp_path):
    tracker = RLMetricsTracker(tmp_path / "m")
    tracker.add_adjustment_metrics(
        0,
        77,
        (1, 8, 16, 128),
        (2, 12, 16, 256),
        0.2,
        {"cost": 0.1, "time": 0.2},
        {"time": True, "cost": False},
        description="Increase GPUs by 1",
        policy="cost",
    )
    tracker.add_performance_metrics(throughput=100.0, cost=1.5)
    hv = tracker.add_pareto_front(
        pd.DataFrame(
            {"label": ["a", "b"], "cost": [1.0, 2.0], "time": [2.0, 1.0], "resource": [0.5, 0.5]}
        ),
        reference=[3, 3, 1],
    )
    assert hv == pytest.approx((2 * 1 + 1 * 1) * 0.5)
    written = tracker.save_all_metrics()
    assert set(written) == {
        "allocation_history",
        "reward_components",
        "sla_metrics",
        "performance_metrics",
        "pareto_front",
    }
    alloc = pd.read_csv(written["allocation_history"])
    assert alloc.loc[0, "new_gpus"] == 2 and alloc.loc[0, "description"] == "Increase GPUs by 1"
    assert pd.read_csv(written["sla_metrics"]).loc[0, "cost"] == False  # noqa: E712


def test_exploring_starts_sample_fitting_allocations():
    from envs import CloudEnvironment

    env = CloudEnvironment(workload="vgg16-v100", preference="cost")
    fits = set(env.start_candidates().tolist())
    assert ExploringStarts(env, 0.0, seed=0).options() is None
    always = ExploringStarts(env, 1.0, seed=0)
    picked = [always.options()["allocation"] for _ in range(200)]
    assert set(picked) <= fits and len(set(picked)) > 50
    half = ExploringStarts(env, 0.5, seed=0)
    share = np.mean([half.options() is not None for _ in range(2000)])
    assert 0.45 < share < 0.55
    half.scale = 0.0  # annealed away: every episode from the job's own start
    assert all(half.options() is None for _ in range(100))
    # same seed, same starts; reset() applies them
    a, b = ExploringStarts(env, 1.0, seed=3), ExploringStarts(env, 1.0, seed=3)
    envs = [CloudEnvironment(workload="vgg16-v100", preference="cost") for _ in range(4)]
    obs = a.reset(envs, [0, 1, 2, 3])
    assert obs.shape == (4, env.observation_space.shape[0])
    assert [e.model.grid.index_of(e.current_allocation) for e in envs] == [
        b.options()["allocation"] for _ in range(4)
    ]


def test_exploring_starts_reject_bad_settings():
    from envs import CloudEnvironment

    with pytest.raises(ValueError, match="probability"):
        ExploringStarts(CloudEnvironment(), 1.5, seed=0)
    with pytest.raises(ValueError, match="start_candidates"):
        ExploringStarts(ChainMDP(), 0.5, seed=0)
    ExploringStarts(ChainMDP(), 0.0, seed=0)  # off: any env will do


def test_training_with_exploring_starts_still_learns_the_start():
    # The mlp-cpu job from its own start: half the training episodes start elsewhere, and the
    # greedy policy from the real start must still beat never changing the allocation.
    from envs import CloudEnvironment, EnvConfig
    from envs.oracle import noop_return, optimal_policy

    cfg = EnvConfig(workload="mlp-cpu", preference="cost")
    result = train_reinforce(lambda: CloudEnvironment(cfg), ReinforceConfig(seed=0, episodes=3000))
    ev = evaluate(
        lambda o, e: result.agent.select_action(o, evaluate=True),
        lambda: CloudEnvironment(cfg),
        heldout_seeds(4),
    )
    assert ev.mean_return > noop_return(cfg) + 0.5 * (
        optimal_policy(cfg).total_return - noop_return(cfg)
    )


def test_exploring_starts_with_nowhere_to_start_keep_the_initial_allocation():
    """An environment whose first chunk fits nowhere has no exploring start to draw (the draw
    raised on an empty array); every episode then starts at the initial allocation."""
    from types import SimpleNamespace

    import numpy as np

    from agents.exploration import ExploringStarts

    env = SimpleNamespace(unwrapped=SimpleNamespace(
        start_candidates=lambda: np.empty(0, dtype=np.int64)))
    starts = ExploringStarts(env, prob=1.0, seed=0)
    assert [starts.options() for _ in range(5)] == [None] * 5
