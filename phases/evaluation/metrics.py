"""Metrics of autoscaling plans replayed on test executions, and the result they make.

For each resource and policy, over all test samples ``t`` with use ``u_t`` and allocation
``a_t``:

* over-allocation ``= 100 · Σ max(a_t − u_t, 0) / Σ u_t`` (% of the total use), also as a
  ratio to ``oracle-rules``;
* under-provisioning ``= 100 · mean(u_t > a_t · (1 + tolerance))`` (% of samples; tolerance
  5% by default, the paper's tolerance range) and the shortfall volume
  ``= 100 · Σ max(u_t − a_t, 0) / Σ u_t``;
* rescales: cycle boundaries at which the allocation changes;
* the reduction of over-allocation against ``reactive-rules``, as measured and at the
  policy's own under-provisioning level (``reactive-rules`` scaled by the smallest factor
  that brings its under-provisioning down to the policy's, found by bisection).
The same figures restricted to cycles after the first (``steady_*``) separate the policies
from the shared cold-start rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from phases.policies import Execution

METRIC_KEYS = ("over_allocation_pct", "under_provisioned_pct", "shortfall_pct", "rescales")


def allocation_metrics(
    usage: np.ndarray, alloc: np.ndarray, tolerance: float = 0.05
) -> dict[str, np.ndarray]:
    """Over-allocation, under-provisioning and shortfall per resource.

    Parameters
    ----------
    usage, alloc : ndarray of shape (n_samples, n_resources)
    tolerance : float
        A sample is under-provisioned when ``usage > alloc * (1 + tolerance)``.

    Returns
    -------
    dict of str to ndarray of shape (n_resources,)
        ``over_allocation_pct``, ``under_provisioned_pct``, ``shortfall_pct``.
    """
    total = np.maximum(usage.sum(axis=0), 1e-300)
    return {
        "over_allocation_pct": 100.0 * np.clip(alloc - usage, 0, None).sum(axis=0) / total,
        "under_provisioned_pct": 100.0 * (usage > alloc * (1.0 + tolerance)).mean(axis=0),
        "shortfall_pct": 100.0 * np.clip(usage - alloc, 0, None).sum(axis=0) / total,
    }


def count_rescales(plans: Sequence[np.ndarray]) -> np.ndarray:
    """Cycle boundaries where the allocation changes (relative change > 1e-9), per resource."""
    total = np.zeros(plans[0].shape[1], dtype=np.int64)
    for p in plans:
        if len(p) > 1:
            scale = np.maximum(np.abs(p[:-1]), 1e-12)
            total += (np.abs(np.diff(p, axis=0)) > 1e-9 * scale).sum(axis=0)
    return total


def matched_over_allocation(
    usage: np.ndarray, alloc: np.ndarray, target_under_pct: float, tolerance: float
) -> float:
    """Over-allocation % of ``alloc · s`` for the smallest ``s`` with under-provisioning ≤ target.

    ``usage`` and ``alloc`` are one resource's columns, ``(n_samples,)``. Under-provisioning
    falls as ``s`` grows, so ``s`` is found by bisection on a log scale.
    """

    def under(s: float) -> float:
        return 100.0 * np.mean(usage > alloc * s * (1.0 + tolerance))

    lo, hi = 1e-3, 1e3
    if under(hi) > target_under_pct:
        return float("nan")
    for _ in range(60):
        mid = np.sqrt(lo * hi)
        lo, hi = (lo, mid) if under(mid) <= target_under_pct else (mid, hi)
    return float(100.0 * np.clip(alloc * hi - usage, 0, None).sum() / max(usage.sum(), 1e-300))


@dataclass
class EvaluationResult:
    """Everything one evaluation produced.

    Attributes
    ----------
    metrics : dict
        policy → resource → metric name → value (the content of ``metrics.json``).
    plans : dict of str to list of ndarray of shape (n_cycles, n_resources)
        Each policy's allocation per cycle, one array per test execution.
    train, test : list of Execution
    resources : list of str
    settings : dict
        Cycle, tolerance, seed, split, phase model and timing details.
    """

    metrics: dict[str, dict[str, dict[str, float]]]
    plans: dict[str, list[np.ndarray]]
    train: list[Execution]
    test: list[Execution]
    resources: list[str]
    settings: dict[str, Any] = field(default_factory=dict)


def _policy_metrics(
    usage: np.ndarray,
    alloc: np.ndarray,
    steady: np.ndarray,
    plans: list[np.ndarray],
    tolerance: float,
) -> dict[str, np.ndarray]:
    out = allocation_metrics(usage, alloc, tolerance)
    out["rescales"] = count_rescales(plans)
    later = allocation_metrics(usage[steady], alloc[steady], tolerance) if steady.any() else None
    for key in ("over_allocation_pct", "under_provisioned_pct"):
        out[f"steady_{key}"] = later[key] if later else np.full(usage.shape[1], np.nan)
    return out


def score_plans(
    plans: dict[str, list[np.ndarray]],
    test: Sequence[Execution],
    *,
    tolerance: float = 0.05,
    train: Sequence[Execution] = (),
) -> EvaluationResult:
    """Metrics of every policy's plans over all samples of the test executions."""
    resources = list(test[0].resources)
    usage = np.concatenate([e.usage for e in test])
    steady = np.concatenate([e.cycle >= 1 for e in test])
    allocs = {
        name: np.concatenate([p[e.cycle] for p, e in zip(ps, test, strict=True)])
        for name, ps in plans.items()
    }
    raw = {
        name: _policy_metrics(usage, allocs[name], steady, plans[name], tolerance) for name in plans
    }
    _add_comparisons(raw, allocs, usage, tolerance)
    metrics = {
        name: {
            r: {k: (int(v[i]) if k == "rescales" else float(v[i])) for k, v in m.items()}
            for i, r in enumerate(resources)
        }
        for name, m in raw.items()
    }
    return EvaluationResult(
        metrics, plans, list(train), list(test), resources, {"tolerance": tolerance}
    )


def _add_comparisons(
    raw: dict[str, dict[str, np.ndarray]],
    allocs: dict[str, np.ndarray],
    usage: np.ndarray,
    tolerance: float,
) -> None:
    """Add ratios to oracle-rules, and reductions against reactive-rules (measured and at
    matched under-provisioning) and against vpa (at matched under-provisioning), where the
    reference policies ran."""
    oracle = raw.get("oracle-rules")
    reactive = raw.get("reactive-rules")
    for m in raw.values():
        oa = m["over_allocation_pct"]
        with np.errstate(divide="ignore", invalid="ignore"):
            if oracle is not None:
                m["over_allocation_vs_oracle"] = oa / oracle["over_allocation_pct"]
            if reactive is not None:
                m["reduction_vs_reactive_pct"] = 100.0 * (
                    1.0 - oa / reactive["over_allocation_pct"]
                )
        for ref, key in (("reactive-rules", "reactive"), ("vpa", "vpa")):
            if ref not in allocs:
                continue
            matched = np.array(
                [
                    matched_over_allocation(
                        usage[:, r], allocs[ref][:, r], m["under_provisioned_pct"][r], tolerance
                    )
                    for r in range(usage.shape[1])
                ]
            )
            with np.errstate(divide="ignore", invalid="ignore"):
                m[f"{key}_matched_over_allocation_pct"] = matched
                m[f"reduction_vs_{key}_matched_pct"] = 100.0 * (1.0 - oa / matched)
