"""Oracle: exact DP checked by brute force over every action sequence on tiny configurations."""

import itertools

import numpy as np
import pytest

from envs import CloudEnvironment, EnvConfig, build_env_model, oracle
from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import ResourceConfig, SLAConfig


def tiny(n_steps=3, batch_actions=False, **kw):
    res = ResourceConfig(
        gpu_count_min=1,
        gpu_count_max=2,
        cpu_count_min=4,
        cpu_count_max=8,
        memory_min=8.0,
        memory_max=16.0,
        memory_step=8.0,
    )
    return EnvConfig(
        workload="resnet50-v100",
        resources=res,
        n_steps=n_steps,
        batch_sizes=(64, 128),
        cpu_step=4,
        batch_actions=batch_actions,
        initial=Allocation(1, 4, 8.0, 64),
        total_samples=1e6,
        sla=SLAConfig(time_max=3000.0, cost_max=3.0, memory_max=64.0),
        **kw,
    )


def brute_force(config):
    env = CloudEnvironment(config)
    best, best_seq = -np.inf, None
    for seq in itertools.product(range(env.action_space.n), repeat=env.model.n_steps):
        env.reset(seed=0)
        total = 0.0
        for a in seq:
            _, r, term, _, _ = env.step(a)
            total += r
            if term:
                break
        if total > best + 1e-12:
            best, best_seq = total, seq
    return best, best_seq


@pytest.mark.parametrize("pref", ["cost", "time", "resource"])
def test_dp_matches_brute_force_27_actions(pref):
    cfg = tiny(n_steps=3, preference=pref)
    best, _ = brute_force(cfg)
    result = oracle.optimal_policy(cfg)
    assert result.total_return == pytest.approx(best, abs=1e-9)


def test_dp_matches_brute_force_81_actions_with_oom_and_phases():
    # memory 8 GB cannot hold batch 128 (6 + 0.03 * 128 GB): doubling the batch without memory
    # runs out of memory, and the last phase needs 25% more memory
    cfg = tiny(
        n_steps=2, batch_actions=True, preference="balanced", phase_sequence=[(0, 0.5), (2, 0.5)]
    )
    model = build_env_model(cfg)
    assert model.oom.any() and not model.oom.all()
    best, _ = brute_force(cfg)
    result = oracle.optimal_policy(cfg)
    assert result.total_return == pytest.approx(best, abs=1e-9)


def test_optimal_actions_replayed_in_env_give_the_optimal_return():
    cfg = EnvConfig(preference="time")
    result = oracle.optimal_policy(cfg)
    env = CloudEnvironment(cfg)
    env.reset(seed=0)
    total = 0.0
    for a in result.actions:
        _, r, term, _, info = env.step(a)
        total += r
    assert term and not info["oom"]
    assert total == pytest.approx(result.total_return, abs=1e-6)
    assert result.policy.shape == (env.model.n_steps, env.model.n_alloc)


@pytest.mark.parametrize("workload", ["resnet50-v100", "vgg16-p100"])
def test_best_static_never_beats_optimum_and_beats_doing_nothing(workload):
    for pref in ("cost", "time", "balanced"):
        cfg = EnvConfig(workload=workload, preference=pref)
        opt = oracle.optimal_policy(cfg).total_return
        static = oracle.best_static(cfg)
        assert static.total_return <= opt + 1e-9
        assert static.total_return >= oracle.noop_return(cfg) - 1e-9
        assert opt > 0  # a sensible policy's return is positive


def test_preference_changes_the_optimum():
    cfg = EnvConfig()
    fast = oracle.optimal_policy(cfg, "time")
    cheap = oracle.optimal_policy(cfg, "cost")
    assert fast.total_time_s < cheap.total_time_s
    assert cheap.total_cost < fast.total_cost
