"""One agent interface and a registry: ``recommend`` trains and grades whatever is registered.

A third agent is one file and one :func:`agents.registry.register` line; here the uniformly
random agent of ``tests/uniform_agent.py`` is registered by its entry point, and the planning's
path (``recommend`` with an executor's ``map``) trains, replays and evaluates it beside
REINFORCE and the multi-objective agent, with no edit to ``optimizer/search/recommend.py``.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from agents.evaluate import evaluate, heldout_seeds
from agents.registry import (
    REGISTRY,
    AgentSpec,
    Budget,
    TrainedAgent,
    TrainSetup,
    cloud_action_factors,
    get,
    register,
    registered,
    unregister,
)
from envs import CloudEnvironment, stacked_masks
from envs.model import EnvConfig
from optimizer.foundation.config import load_config
from optimizer.search.recommend import AGENTS, BEST_STATIC, OPTIMAL, recommend
from optimizer.trials.executors import make_executor

ROOT = Path(__file__).resolve().parents[1]
TINY = EnvConfig(workload="mlp-cpu", preference="cost", n_steps=5)
"""A five-interval job: the built-in agents train on it in about a second."""


@pytest.fixture
def uniform():
    spec = register(AgentSpec("uniform", "uniform_agent:registry_entry"))  # the one line
    yield spec
    unregister(spec.name)


def test_a_registered_agent_is_trained_and_graded_beside_the_others(uniform):
    assert list(AGENTS) == ["reinforce", "morl", "uniform"]  # a live view of the registry
    # As the planning's round calls it: the agents' trainings through the executor's map.
    r = recommend(TINY, load_config(None), time_budget_s=None, episodes=16,
                  map_fn=make_executor("local").map)
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
        register(AgentSpec("uniform", uniform.entry_point))
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
        own = (_reinforce_greedy(agent.policy) if spec.name == "reinforce"
               else _morl_greedy(agent.agent, agent.policy))
        np.testing.assert_array_equal(evaluate(agent.act, env_fn, seeds).returns,
                                      evaluate(own, env_fn, seeds).returns)
        spread = agent.uncertainty(obs, envs)
        if spec.name == "reinforce":
            assert spread is None
        else:
            assert spread.shape == (len(envs),) and (spread >= 0).all()


def _reinforce_greedy(policy):
    return lambda obs, envs: policy.select_action(obs, evaluate=True, mask=stacked_masks(envs))


def _morl_greedy(agent, policy):
    return lambda obs, envs: agent.select_action(
        obs, policy, evaluate=True, uncertainty=False, mask=stacked_masks(envs)).action


def test_a_function_agent_registered_at_run_time_trains_too():
    """The entry point may be the function itself (a notebook's agent, say)."""
    from uniform_agent import UniformAgent, registry_entry

    spec = register(AgentSpec("inline", registry_entry))
    try:
        setup = TrainSetup("cost", load_config(None).rl, load_config(None).multi_objective)
        assert isinstance(get("inline").train(CloudEnvironment, setup, Budget()).agent,
                          UniformAgent)
    finally:
        unregister(spec.name)


def test_entry_points_and_names_are_checked_with_one_line():
    with pytest.raises(ValueError, match="'module:function'"):
        AgentSpec("broken", "uniform_agent.registry_entry")
    with pytest.raises(ValueError, match="no agent named 'dqn' is registered; known: reinforce"):
        get("dqn")
    assert get("reinforce") is REGISTRY["reinforce"]


def test_the_live_plans_peer_and_the_benchmarks_get_their_agents_from_the_registry():
    """Nothing outside agents/ trains an algorithm directly: the orchestrator and the
    benchmarks import the registry, never an algorithm's module."""
    algorithms = ("agents.reinforce", "agents.morl", "agents.morl_agent", "agents.policy_pair")
    for folder in ("optimizer", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            for module in algorithms:
                for form in (f"from {module} import", f"import {module}"):
                    assert form not in text, f"{path.relative_to(ROOT)} imports {module}"
