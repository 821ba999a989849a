"""What a pod's ``resize`` subresource takes and says: quantities, a container's
requests for one phase (with the Burstable guard), the strategic merge patch, and where a
resize stands from the pod's conditions.

Shared by the actuator inside the pod (:mod:`optimizer.trials.live.pod_resize`) and the Job
the report writes (:mod:`optimizer.reports.k8s_resize`), so both ask for the same numbers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from optimizer.foundation.memory import memory_quantity

_SUFFIX = {"m": "0.001", "": "1", "k": "1e3", "M": "1e6", "G": "1e9", "T": "1e12", "P": "1e15",
           "E": "1e18", "Ki": "1024", "Mi": "1048576", "Gi": "1073741824",
           "Ti": "1099511627776", "Pi": "1125899906842624", "Ei": "1152921504606846976"}
_QUANTITY = re.compile(r"([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)")
_TOLERANCE = {"cpu": 0.002, "memory": 1048576.0}
"""How far the kubelet's report may be from what was asked (CPU weights round to a share)."""


def parse_quantity(text: str | float) -> float:
    """A Kubernetes quantity as a number: ``"1500m"`` is 1.5, ``"400Mi"`` 419430400."""
    m = _QUANTITY.fullmatch(str(text).strip())
    if m is None or m.group(2) not in _SUFFIX:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    try:
        return float(Decimal(m.group(1)) * Decimal(_SUFFIX[m.group(2)]))
    except InvalidOperation:
        raise ValueError(f"not a Kubernetes quantity: {text!r}") from None


def _cpu(cores: float) -> str:
    return str(int(cores)) if float(cores).is_integer() else f"{math.ceil(cores * 1000)}m"


def same_quantity(resource: str, a: str, b: str) -> bool:
    """True when quantities ``a`` and ``b`` of ``resource`` agree (within what the kubelet
    rounds when it reports a container's resources)."""
    return abs(parse_quantity(a) - parse_quantity(b)) <= _TOLERANCE.get(resource, 0.0)


def pod_requests(cpus: float | None, memory_gb: float | None,
                 limits: Mapping[str, str] | None = None,
                 current: Mapping[str, str] | None = None) -> dict[str, str]:
    """A container's requests for ``cpus`` and ``memory_gb`` (None: as in ``current``),
    capped at ``limits`` (the API server refuses a request above its limit).

    Where the requests would equal the limits in both CPU and memory, the CPU request is one
    millicore under its limit: such a pod would be Guaranteed, and a resize may not change a
    pod's QoS class. CPU rather than memory because a memory request under the job's peak
    puts the pod first in line for eviction under node memory pressure; 1m of CPU weight is
    nothing. A memory request left out defaults to its limit, so it counts as equal.
    """
    limits, current = dict(limits or {}), dict(current or {})
    out = {k: current[k] for k in ("cpu", "memory") if k in current}
    if cpus is not None:
        out["cpu"] = _cpu(float(cpus))
    if memory_gb is not None:
        out["memory"] = memory_quantity(memory_gb)
    for k in ("cpu", "memory"):
        if k in out and k in limits and parse_quantity(out[k]) > parse_quantity(limits[k]):
            out[k] = limits[k]
    if ("cpu" in limits and "memory" in limits and "cpu" in out
            and same_quantity("cpu", out["cpu"], limits["cpu"])
            and ("memory" not in out or same_quantity("memory", out["memory"], limits["memory"]))):
        out["cpu"] = f"{round(parse_quantity(limits['cpu']) * 1000) - 1}m"
    return out


def resize_patch(container: str, requests: Mapping[str, str]) -> dict[str, Any]:
    """The strategic merge patch setting ``container``'s requests; its limits stay (a
    strategic merge matches containers by ``name`` and merges ``resources`` key by key)."""
    return {"spec": {"containers": [{"name": container,
                                     "resources": {"requests": dict(requests)}}]}}


def container_of(pod: Mapping[str, Any], name: str, where: str) -> dict[str, Any] | None:
    """Container ``name`` of ``pod`` in its ``spec`` or its ``status`` (the kubelet's report)."""
    section = pod.get(where) or {}
    key = "containerStatuses" if where == "status" else "containers"
    return next((c for c in section.get(key) or [] if c.get("name") == name), None)


def resize_state(pod: Mapping[str, Any], container: str,
                 requests: Mapping[str, str]) -> tuple[str, str]:
    """Where a resize to ``requests`` stands on ``pod`` (``kubectl get pod -o json``): one of
    ``applied``, ``in-progress``, ``deferred``, ``infeasible``, ``sent`` (the kubelet has
    not taken it up yet), with the kubelet's message."""
    status = pod.get("status") or {}
    conds = {c.get("type"): c for c in status.get("conditions") or []
             if c.get("status", "True") == "True"}
    legacy = status.get("resize")  # 1.27-1.32: one field instead of the conditions
    pending = conds.get("PodResizePending") or (
        {"reason": legacy} if legacy in ("Deferred", "Infeasible") else None)
    if pending is not None:
        state = "infeasible" if pending.get("reason") == "Infeasible" else "deferred"
        return state, str(pending.get("message", ""))
    progress = conds.get("PodResizeInProgress") or ({} if legacy == "InProgress" else None)
    if progress is not None:
        error = "error: " if progress.get("reason") == "Error" else ""
        return "in-progress", error + str(progress.get("message", ""))
    actual = ((container_of(pod, container, "status") or {}).get("resources") or {}).get("requests")
    if actual is None:
        return "applied", "the pod does not report its container's resources: taken as applied"
    if all(k in actual and same_quantity(k, actual[k], v) for k, v in requests.items()):
        return "applied", ""
    return "sent", "the kubelet has not taken the resize up yet"


__all__ = ["container_of", "parse_quantity", "pod_requests", "resize_patch", "resize_state",
           "same_quantity"]
