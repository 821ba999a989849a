"""The agents the orchestrator trains and compares, by name, in the order they were registered.

:func:`optimizer.search.recommend.recommend` trains every agent of :data:`REGISTRY` the same way
(:class:`~agents.registry.interface.AgentSpec`'s ``train(env_fn, setup, budget)``), replays
each trained one (:class:`~agents.registry.interface.TrainedAgent`) on the noise-free model and
compares them with the best static allocation and the DP optimum; it names no agent itself.

To add an agent: one module in this folder whose ``train`` returns a
:class:`agents.train.TrainResult` holding a :class:`~agents.registry.interface.TrainedAgent`
(``reinforce_adapter.py`` puts an existing algorithm behind the interface), and one
:func:`register` line below. An agent registered at run time (a test's, say) is trained too.
"""

from __future__ import annotations

from agents.registry import morl_adapter, reinforce_adapter
from agents.registry.interface import AgentSpec, Budget, TrainedAgent, TrainSetup

__all__ = [
    "REGISTRY",
    "AgentSpec",
    "Budget",
    "TrainSetup",
    "TrainedAgent",
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


register(AgentSpec("reinforce", reinforce_adapter.train))
register(AgentSpec("morl", morl_adapter.train))
