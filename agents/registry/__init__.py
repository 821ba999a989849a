"""The agents the orchestrator trains and compares, by name, in the order they were registered.

Everything that trains an agent gets it here: the static plan
(:func:`optimizer.search.recommend.recommend` trains every agent of :data:`REGISTRY` the same
way and replays each on the noise-free model), the live plan's phase-blind peer
(:func:`optimizer.search.live.live_plan.hidden_phase_schedule` asks for ``reinforce`` by name)
and the benchmarks. Each entry is an :class:`~agents.registry.interface.AgentSpec`: a name and
``train(env_fn, setup, budget)``, which returns a
:class:`~agents.registry.interface.TrainResult` holding a
:class:`~agents.registry.interface.TrainedAgent`.

To add an agent: one file (``agents/reinforce.py`` is the model: its config, networks, agent,
training loop and ``registry_entry``) and one :func:`register` line below. An agent registered
at run time (a test's, say) is trained too.
"""

from __future__ import annotations

from agents.registry.interface import (
    AgentSpec,
    Budget,
    EnvFn,
    TrainedAgent,
    TrainResult,
    TrainSetup,
    cloud_action_factors,
)

__all__ = [
    "REGISTRY",
    "AgentSpec",
    "Budget",
    "EnvFn",
    "TrainResult",
    "TrainSetup",
    "TrainedAgent",
    "cloud_action_factors",
    "get",
    "register",
    "registered",
    "unregister",
]

REGISTRY: dict[str, AgentSpec] = {}
"""The registered agents by name (insertion order: the order they are trained and listed)."""


def register(spec: AgentSpec) -> AgentSpec:
    """Add ``spec``; a name already taken is a ValueError (its outcomes would be mixed up)."""
    if spec.name in REGISTRY:
        raise ValueError(f"an agent named {spec.name!r} is already registered")
    REGISTRY[spec.name] = spec
    return spec


def unregister(name: str) -> AgentSpec:
    """Remove the agent called ``name`` (a test's, when it is done)."""
    return REGISTRY.pop(name)


def registered() -> tuple[AgentSpec, ...]:
    """The registered agents, in order."""
    return tuple(REGISTRY.values())


def get(name: str) -> AgentSpec:
    """The agent called ``name``; an unknown name is a ValueError that lists the known ones."""
    if name not in REGISTRY:
        raise ValueError(f"no agent named {name!r} is registered; known: {', '.join(REGISTRY)}")
    return REGISTRY[name]


register(AgentSpec("reinforce", "agents.reinforce:registry_entry"))
register(AgentSpec("morl", "agents.morl:registry_entry"))
