"""Evaluate autoscaling policies on held-out executions (AI4DL, HotCloud'20, Figure 4).

Executions are split by id with a seed; every policy of :mod:`phases.policies` is fitted on
the training executions and replayed on the test executions, one allocation per cycle, and
scored by :mod:`phases.evaluation.metrics` (over-allocation, under-provisioning, shortfall,
rescales and the comparisons with ``reactive-rules`` and ``vpa``).

:func:`evaluate_file` is the whole pipeline behind ``python -m optimizer autoscale evaluate``;
:func:`write_outputs` writes ``metrics.json``, ``metrics.csv``, ``settings.json``, ``report.md``
and the plots.

This module holds the runner (building, replaying and scoring the policies on one split or
k folds). The steps live beside it and are re-exported here: :mod:`phases.evaluation.data`
(reading and splitting executions), :mod:`phases.evaluation.phase_labels` (the phase model and
its labels), :mod:`phases.evaluation.metrics`, :mod:`phases.evaluation.report` (tables, target
check, ``report.md``, :func:`write_outputs`) and :mod:`phases.evaluation.plots`.
"""

from __future__ import annotations

import time as _time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from optimizer.foundation.errors import CloudoptError
from phases.evaluation.data import (
    attach_previous_runs,
    group_folds,
    kfold_executions,
    load_executions,
    read_groups,
    split_executions,
)
from phases.evaluation.metrics import METRIC_KEYS as METRIC_KEYS
from phases.evaluation.metrics import EvaluationResult, allocation_metrics, score_plans
from phases.evaluation.metrics import count_rescales as count_rescales
from phases.evaluation.metrics import matched_over_allocation as matched_over_allocation
from phases.evaluation.phase_labels import PHASE_FEATURES as PHASE_FEATURES
from phases.evaluation.phase_labels import attach_phases, phases_for_policies, use_phases
from phases.evaluation.phase_labels import detect_phases as detect_phases
from phases.evaluation.phase_labels import fit_phase_model as fit_phase_model
from phases.evaluation.phase_labels import load_phase_model as load_phase_model
from phases.evaluation.phase_labels import phase_inputs as phase_inputs
from phases.evaluation.phase_labels import relative_features as relative_features
from phases.evaluation.plots import plot_allocations as plot_allocations
from phases.evaluation.plots import plot_policy_bars as plot_policy_bars
from phases.evaluation.report import TABLE_COLUMNS as TABLE_COLUMNS
from phases.evaluation.report import format_table, write_outputs
from phases.evaluation.report import render_report as render_report
from phases.evaluation.report import target_verdict as target_verdict
from phases.policies import AutoscalingPolicy, Execution, HistoryPolicy, make_policy

__all__ = [
    "DEFAULT_POLICIES",
    "EvaluationResult",
    "load_executions",
    "split_executions",
    "attach_phases",
    "allocation_metrics",
    "evaluate_policies",
    "evaluate_file",
    "write_outputs",
    "format_table",
]

DEFAULT_POLICIES = (
    "oracle-max",
    "oracle-rules",
    "reactive-max",
    "reactive-rules",
    "reactive-trend",
    "phase-rules",
    "phase-proactive",
    "phase-rules-pooled",
    "phase-adaptive",
    "phase-window",
    "vpa",
    "static-peak",
)


def build_policies(
    names: Sequence[str],
    policy_params: dict[str, dict[str, Any]] | None = None,
    *,
    phase_features: str | None = None,
    cold_start: str | None = None,
) -> list[AutoscalingPolicy]:
    """Policies by name, each with its keyword arguments from ``policy_params``.

    ``phase_features`` is the phase model read by phase policies that name none;
    ``cold_start`` overrides the first-cycle rule of every practical policy alike.
    """
    params = policy_params or {}
    try:
        built = [make_policy(n, **params.get(n, {})) for n in names]
    except (TypeError, ValueError) as exc:
        raise CloudoptError(f"bad policy list or parameters: {exc}") from None
    for p in built:
        if p.needs_phases and p.phase_features is None:
            p.phase_features = phase_features
        if cold_start is not None and isinstance(p, HistoryPolicy):
            p.cold_start = cold_start
    return built


def replay_policies(
    policies: Sequence[AutoscalingPolicy], train: Sequence[Execution], test: Sequence[Execution]
) -> dict[str, list[np.ndarray]]:
    """Fit every policy on ``train``; its plan ``(n_cycles, n_resources)`` per test execution."""
    plans: dict[str, list[np.ndarray]] = {}
    for policy in policies:
        use_phases(policy, [*train, *test])
        policy.fit(train)
        plans[policy.name] = [policy.plan(e) for e in test]
    return plans


def evaluate_policies(
    policies: Sequence[AutoscalingPolicy],
    train: Sequence[Execution],
    test: Sequence[Execution],
    *,
    tolerance: float = 0.05,
) -> EvaluationResult:
    """Fit every policy on ``train``, replay it on ``test`` and compute the metrics."""
    plans = replay_policies(policies, train, test)
    return score_plans(plans, test, tolerance=tolerance, train=train)


def evaluate_split(
    train: Sequence[Execution],
    test: Sequence[Execution],
    *,
    policies: Sequence[str] = DEFAULT_POLICIES,
    policy_params: dict[str, dict[str, Any]] | None = None,
    phase_features: str = "relative",
    window_s: float = 600.0,
    detector_params: dict[str, Any] | None = None,
    seed: int = 0,
    tolerance: float = 0.05,
    cold_start: str | None = None,
) -> EvaluationResult:
    """Evaluate named policies on one split already in memory (phase models fitted on
    ``train``); e.g. a validation split carved out of the training executions."""
    built = build_policies(
        policies, policy_params, phase_features=phase_features, cold_start=cold_start
    )
    notes = phases_for_policies(
        built,
        train,
        test,
        phase_features=phase_features,
        window_s=window_s,
        detector_params=detector_params,
        seed=seed,
        quiet=True,
    )
    result = score_plans(
        replay_policies(built, train, test), test, tolerance=tolerance, train=train
    )
    result.settings["phase_model"] = " | ".join(notes) if notes else "not used"
    return result


def evaluate_file(
    traces: str | Path,
    exec_id: str,
    features: Sequence[str],
    *,
    resources: Sequence[str] | None = None,
    time: str | None = None,
    cycle_s: float = 600.0,
    test_fraction: float = 0.1,
    seed: int = 0,
    tolerance: float = 0.05,
    policies: Sequence[str] = DEFAULT_POLICIES,
    policy_params: dict[str, dict[str, Any]] | None = None,
    model: str | Path | None = None,
    detector_params: dict[str, Any] | None = None,
    phase_features: str | None = None,
    folds: int = 0,
    group: str | None = None,
    cold_start: str | None = None,
    job: str | None = None,
    quiet: bool = True,
) -> EvaluationResult:
    """Read a trace file, split it, fit or load the phase model, and evaluate the policies.

    Without ``model`` a phase detector is fitted on the training executions only
    (``detector_params``, e.g. ``{"epochs": 50}``; ``random_state`` defaults to ``seed``). A
    loaded model may have seen the test executions; the settings record where it came from.
    ``phase_features`` defaults to ``"relative"`` for a fitted model and ``"raw"`` for a
    loaded one. ``folds >= 2`` replaces the single split by k-fold cross-validation over executions (each
    execution is tested once, by policies and phase models fitted on the other folds) and
    pools the test samples of all folds; for data sets with a handful of executions.
    ``group`` (a column of the trace file, e.g. ``"workload"``) replaces both by
    leave-one-group-out: one fold per group, tested by policies and phase models fitted on the
    other groups' executions only (``settings["groups"]`` maps each execution to its group).
    ``cold_start="previous-run"`` reads which job each execution is a run of from the column
    ``job`` (default: ``group``) and gives every practical policy the previous run's peak as
    the first cycle's allocation.
    """
    started = _time.perf_counter()
    # a saved model (``phases fit``) was fitted on the features as read
    phase_features = phase_features or ("raw" if model is not None else "relative")
    executions = load_executions(
        traces, exec_id, features, resources=resources, time=time, cycle_s=cycle_s
    )
    built = build_policies(
        policies, policy_params, phase_features=phase_features, cold_start=cold_start
    )
    groups = read_groups(traces, exec_id, group) if group else None
    with_prior = None
    if cold_start == "previous-run":
        if not (job or group):
            raise CloudoptError(
                "cold_start='previous-run' needs the column naming each execution's job "
                "(job=... or group=...)"
            )
        with_prior = attach_previous_runs(executions, read_groups(traces, exec_id, job or group))
    if groups is not None:
        splits = group_folds(executions, groups)
    elif folds >= 2:
        splits = kfold_executions(executions, folds, seed)
    else:
        splits = [split_executions(executions, test_fraction, seed)]
    periods = [np.diff(e.time) for e in executions if len(e.time) > 1]
    settings: dict[str, Any] = {
        "traces": str(traces),
        "exec_id": exec_id,
        "features": list(features),
        "resources": list(resources or features),
        "time": time,
        "cycle_s": cycle_s,
        "test_fraction": None if folds >= 2 or group else test_fraction,
        "folds": folds if folds >= 2 and not group else None,
        "group": group,
        "groups": {e.exec_id: groups[e.exec_id] for e in executions} if groups else None,
        "seed": seed,
        "tolerance": tolerance,
        "cold_start": cold_start or "pooled",
        "with_previous_run": with_prior,
        "train_ids": [[e.exec_id for e in tr] for tr, _ in splits],
        "test_ids": [e.exec_id for _, te in splits for e in te],
        "sampling_period_s": float(np.median(np.concatenate(periods))) if periods else None,
    }
    phase_started = _time.perf_counter()
    plans, test_all, notes = _replay_splits(
        built,
        splits,
        phase_features=phase_features,
        model=model,
        window_s=cycle_s,
        detector_params=detector_params,
        seed=seed,
        quiet=quiet,
    )
    result = score_plans(plans, test_all, tolerance=tolerance, train=splits[-1][0])
    settings["phase_model"] = " | ".join(notes) if notes else "not used"
    settings["replay_s"] = _time.perf_counter() - phase_started
    result.settings.update(settings)
    result.settings["wall_s"] = _time.perf_counter() - started
    return result


def _replay_splits(
    built: Sequence[AutoscalingPolicy],
    splits: Sequence[tuple[list[Execution], list[Execution]]],
    **phase_kw: Any,
) -> tuple[dict[str, list[np.ndarray]], list[Execution], list[str]]:
    """Phase models and policy plans for every (train, test) split, test executions pooled."""
    plans: dict[str, list[np.ndarray]] = {}
    test_all: list[Execution] = []
    notes: list[str] = []
    for train, test in splits:
        notes = phases_for_policies(built, train, test, **phase_kw)
        for name, ps in replay_policies(built, train, test).items():
            plans.setdefault(name, []).extend(ps)
        test_all.extend(test)
    return plans, test_all, notes
