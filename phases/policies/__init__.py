"""Autoscaling policies that set each execution's CPU and memory allocation once per cycle.

The set-up follows the evaluation of AI4DL (Berral, Wang & Youssef, "AI4DL: Mining behaviors
of deep learning workloads for resource management", HotCloud'20, Figure 4; the proactive
policy follows the idea of Buchaca, Berral, Wang & Youssef, "Proactive container auto-scaling
for cloud native machine learning services", IEEE CLOUD 2020): every ``cycle`` seconds a
policy fixes the allocation of every resource for the coming cycle, and the allocation is held
until the next cycle starts.

Every policy is an :class:`AutoscalingPolicy`: ``fit(train)`` learns what it needs from the
training executions and ``plan(execution)`` returns one allocation per cycle,
``(n_cycles, n_resources)``. Practical policies derive from :class:`HistoryPolicy`, whose
``plan`` shows them only the samples *before* each cycle (a :class:`History`), so they cannot
look ahead by construction; they implement ``allocate(history) -> (n_resources,)``.

Policies (``name`` → class)
---------------------------
``oracle-max`` / ``oracle-rules``
    Know the coming cycle: its maximum, or its mean + 2 std (the paper's ``current.step``).
``reactive-max`` / ``reactive-rules``
    The cycle just observed: its maximum, or its mean + 2 std (the paper's ``prev.step``).
``reactive-trend``
    The cycle just observed: its maximum, or its last sample carried on by its recent slope
    (the level ``phase-adaptive`` uses for memory, without the phases).
``phase-rules`` / ``phase-rules-pooled``
    The mean + 2 std of the phase detected at the last sample before the cycle (the paper's
    ``phase.rule``), relative to the execution's level or pooled (:mod:`.phase_rules`).
``phase-proactive``
    As ``phase-rules``, but allocates the upper envelope over the current phase and every phase
    the transition graph reaches within the coming cycle with probability ≥ ``threshold``.
``phase-adaptive``
    Per-phase ratios to the job's own level (learned on the training executions) times the
    level this job has shown so far (its last peak; for memory, its recent trend), enveloped
    over the phases the transition graph expects within the coming cycle, given the time
    already spent in the current one (:mod:`.phase_adaptive`).
``phase-window``
    The level of ``reactive-max`` (CPU) or ``reactive-trend`` (memory), read only from the
    current phase's run once the job has left the phase of the last cycle's peak, with a
    headroom calibrated on the training executions so that they are short no more often
    than under that phase-free level (:mod:`.phase_window`).
``vpa``
    The Kubernetes Vertical Pod Autoscaler recommender's scheme (see :class:`VPAPolicy`).
``static-peak``
    The peak of the whole execution, as if requested up front (knows the future).

Cold start: a history policy has nothing to go on in an execution's first cycle. All of them
then allocate the same ``cold_start`` rule learned on the training executions: ``"pooled"``
(default; mean + 2 std of all training samples, the rule of the reference figures in
``../shared/data/README.md``) or ``"first-cycle"`` (mean + 2 std of the training samples that
fall in their execution's first cycle).

Layout: :mod:`~phases.policies.execution` (:class:`Execution`, :class:`History`),
:mod:`~phases.policies.base` (the base classes, per-cycle statistics), one module per policy,
:mod:`~phases.policies.phase_statistics` (shared by the phase policies), and the registry here.

To add a policy, copy the module of the closest one (``reactive_max.py`` for a history
policy), rename the class and its ``name``, and register it below: import it and add one
line to :data:`POLICIES`.
"""

from __future__ import annotations

from phases.policies.base import AutoscalingPolicy, HistoryPolicy, cycle_stats
from phases.policies.base import mean_plus_std as mean_plus_std
from phases.policies.execution import WARM_UP as WARM_UP
from phases.policies.execution import Execution, History
from phases.policies.oracle_max import OracleMaxPolicy
from phases.policies.oracle_rules import OracleRulesPolicy
from phases.policies.phase_adaptive import PhaseAdaptivePolicy, job_levels
from phases.policies.phase_proactive import (
    PhaseProactivePolicy,
    transition_matrix,
    visit_probabilities,
)
from phases.policies.phase_rules import PhaseRulesPolicy
from phases.policies.phase_statistics import LEVELS as LEVELS
from phases.policies.phase_statistics import PhaseStatistics, cycle_level
from phases.policies.phase_window import PhaseWindowPolicy, window_level
from phases.policies.reactive_max import ReactiveMaxPolicy
from phases.policies.reactive_rules import ReactiveRulesPolicy
from phases.policies.reactive_trend import ReactiveTrendPolicy
from phases.policies.static_peak import StaticPeakPolicy
from phases.policies.vpa import VPAPolicy, decaying_percentile

__all__ = [
    "Execution",
    "History",
    "AutoscalingPolicy",
    "HistoryPolicy",
    "OracleMaxPolicy",
    "OracleRulesPolicy",
    "ReactiveMaxPolicy",
    "ReactiveRulesPolicy",
    "ReactiveTrendPolicy",
    "StaticPeakPolicy",
    "PhaseRulesPolicy",
    "PhaseProactivePolicy",
    "PhaseAdaptivePolicy",
    "PhaseWindowPolicy",
    "VPAPolicy",
    "PhaseStatistics",
    "POLICIES",
    "make_policy",
    "cycle_stats",
    "cycle_level",
    "job_levels",
    "window_level",
    "decaying_percentile",
    "transition_matrix",
    "visit_probabilities",
]


POLICIES: dict[str, type[AutoscalingPolicy] | tuple[type[AutoscalingPolicy], dict]] = {
    "oracle-max": OracleMaxPolicy,
    "oracle-rules": OracleRulesPolicy,
    "reactive-max": ReactiveMaxPolicy,
    "reactive-rules": ReactiveRulesPolicy,
    "reactive-trend": ReactiveTrendPolicy,
    "phase-rules": PhaseRulesPolicy,
    "phase-proactive": PhaseProactivePolicy,
    "phase-rules-pooled": (
        PhaseRulesPolicy,
        {"stats": "absolute", "conditioning": "sample", "phase_features": "raw"},
    ),
    "phase-adaptive": PhaseAdaptivePolicy,
    "phase-window": PhaseWindowPolicy,
    "vpa": VPAPolicy,
    "static-peak": StaticPeakPolicy,
}
"""Policy name → class, or (class, fixed keyword arguments)."""


def make_policy(name: str, **kwargs) -> AutoscalingPolicy:
    """A fresh policy by its registered name, e.g. ``make_policy("vpa", half_life_s=5)``."""
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}")
    entry = POLICIES[name]
    cls, fixed = entry if isinstance(entry, tuple) else (entry, {})
    return cls(**{**fixed, **kwargs})
