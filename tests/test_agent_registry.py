"""One agent interface and a registry: ``recommend`` trains and grades whatever is registered.

A third agent is one module and one :func:`agents.registry.register` line; here a uniformly
random agent defined in this file is registered at run time and ``recommend`` trains, replays
and evaluates it beside REINFORCE and the multi-objective agent, with no edit to
``optimizer/search/recommend.py``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from agents.registry import (
    REGISTRY,
    AgentSpec,
    Budget,
    TrainedAgent,
    TrainSetup,
    register,
    registered,
    unregister,
)
from agents.train import (
    TrainResult,
    cloud_action_factors,
    evaluate,
    heldout_seeds,
    morl_act,
    reinforce_act,
)
from envs import CloudEnvironment, stacked_masks
from envs.model import EnvConfig
from optimizer.foundation.config import load_config
from optimizer.search.recommend import AGENTS, BEST_STATIC, OPTIMAL, recommend

ROOT = Path(__file__).resolve().parents[1]
TINY = EnvConfig(workload="mlp-cpu", preference="cost", n_steps=5)
"""A five-interval job: the built-in agents train on it in about a second."""


class UniformAgent(TrainedAgent):
    """Every valid action equally likely; greedily, the first valid one."""

    def action_probabilities(self, obs: np.ndarray, envs: Sequence) -> np.ndarray:
        masks = stacked_masks(envs)
        if masks is None:
            masks = np.ones((len(obs), envs[0].action_space.n), dtype=bool)
        return masks / masks.sum(axis=1, keepdims=True)

    def act(self, obs: np.ndarray, envs: Sequence) -> np.ndarray:
        return self.action_probabilities(obs, envs).argmax(axis=1)


def train_uniform(env_fn, setup: TrainSetup, budget: Budget) -> TrainResult:
    """Nothing to learn: one row of curve so the report has something to draw."""
    return TrainResult(UniformAgent(), pd.DataFrame({"episode": [0]}), 0.0, 0)


@pytest.fixture
def uniform():
    spec = register(AgentSpec("uniform", train_uniform))
    yield spec
    unregister(spec.name)


def test_a_registered_agent_is_trained_and_graded_beside_the_others(uniform):
    assert list(AGENTS) == ["reinforce", "morl", "uniform"]  # a live view of the registry
    r = recommend(TINY, load_config(None), time_budget_s=None, episodes=16)
    assert [o.name for o in r.outcomes] == ["reinforce", "morl", "uniform", BEST_STATIC, OPTIMAL]
    out = r.outcome("uniform")
    assert out.allocations and math.isfinite(out.total_return)
    assert math.isfinite(out.heldout_return)  # evaluated on the held-out seeds as well
    assert set(r.plans) == {"reinforce", "morl", "uniform", BEST_STATIC, OPTIMAL}
    assert list(r.curves) == ["reinforce", "morl", "uniform"]
    row = r.plans["uniform"][0]
    env = CloudEnvironment(TINY.replace(noise=0.0))
    env.reset(seed=0)
    assert row["confidence"] == pytest.approx(1 / env.action_masks().sum())
    assert row["uncertainty"] is None  # the interface's default: no measure of it
    assert r.outcome("morl").allocations and r.plans["morl"][0]["uncertainty"] is not None


def test_unregistered_agents_are_gone_and_names_are_unique(uniform):
    with pytest.raises(ValueError, match="already registered"):
        register(AgentSpec("uniform", train_uniform))
    unregister("uniform")
    assert "uniform" not in AGENTS
    register(uniform)  # for the fixture to take away
    assert [s.name for s in registered()] == list(REGISTRY) == list(AGENTS)


def test_recommend_names_no_agent():
    """The branch on agent names (and its lambdas) is gone: what recommend trains is the
    registry's business."""
    source = (ROOT / "optimizer" / "search" / "recommend.py").read_text(encoding="utf-8")
    for spec in registered():
        assert f'"{spec.name}"' not in source and f"'{spec.name}'" not in source
    assert "noqa" not in source


def test_seeded_recommendation_with_fixed_episodes_repeats():
    config = load_config(None)
    first = recommend(TINY, config, time_budget_s=None, episodes=16)
    again = recommend(TINY, config, time_budget_s=None, episodes=16)
    assert first.agent == again.agent and first.allocation == again.allocation
    assert [o.total_return for o in first.outcomes] == [o.total_return for o in again.outcomes]
    assert first.plans == again.plans


def test_adapters_answer_as_the_agents_do():
    """The built-in agents behind the interface act as their own greedy policies did."""
    noisy = TINY.replace(noise=0.05)

    def env_fn():
        return CloudEnvironment(noisy)

    config = load_config(None)
    setup = TrainSetup(noisy.preference, config.rl, config.multi_objective,
                       cloud_action_factors(env_fn()))
    seeds = heldout_seeds(4)
    envs = [env_fn() for _ in seeds]
    obs = np.stack([e.reset(seed=s)[0] for e, s in zip(envs, seeds, strict=True)])
    for spec in registered():
        result = spec.train(env_fn, setup, Budget(episodes=16))
        agent = result.agent
        assert isinstance(agent, TrainedAgent) and result.episodes == 16
        probs = agent.action_probabilities(obs, envs)
        np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
        actions = agent.act(obs, envs)
        np.testing.assert_array_equal(actions, probs.argmax(axis=1))
        assert stacked_masks(envs)[np.arange(len(envs)), actions].all()  # valid moves only
        own = (reinforce_act(agent.policy) if spec.name == "reinforce"
               else morl_act(agent.agent, agent.policy))
        np.testing.assert_array_equal(evaluate(agent.act, env_fn, seeds).returns,
                                      evaluate(own, env_fn, seeds).returns)
        spread = agent.uncertainty(obs, envs)
        if spec.name == "reinforce":
            assert spread is None
        else:
            assert spread.shape == (len(envs),) and (spread >= 0).all()
