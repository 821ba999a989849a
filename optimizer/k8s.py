"""The recommendation as Kubernetes container ``resources`` plus the environment to set.

The YAML is written by hand for one fixed shape (no YAML library at run time): every scalar is
emitted as a JSON string, which is a valid YAML double-quoted scalar, so names and values never
need escaping rules of their own. GPUs go in ``limits`` only, as the NVIDIA device plugin
requires (an extended resource's request defaults to its limit).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping

from optimizer.allocation import Allocation

_NAME_OK = re.compile(r"[^a-z0-9-]+")


def dns_label(name: str) -> str:
    """A container name Kubernetes accepts (RFC 1123 label: lower-case, digits, '-', ≤ 63)."""
    label = _NAME_OK.sub("-", name.lower()).strip("-")[:63].strip("-")
    return label or "training"


def memory_quantity(gb: float) -> str:
    """Memory as a Kubernetes quantity in MiB, rounded up (``4.5`` GB -> ``"4608Mi"``)."""
    return f"{int(math.ceil(gb * 1024))}Mi"


def cpu_quantity(cpus: float) -> str:
    """CPU as whole cores, or millicores when fractional."""
    if float(cpus).is_integer():
        return str(int(cpus))
    return f"{int(math.ceil(cpus * 1000))}m"


def _q(value: object) -> str:
    return json.dumps(str(value))


def k8s_resources_yaml(
    allocation: Allocation,
    env: Mapping[str, str],
    name: str = "training",
    comment: str = "",
    args: list[str] | None = None,
) -> str:
    """A container snippet (``name``, ``resources``, ``env``) for a pod spec's ``containers``.

    Requests equal limits for CPU and memory (Guaranteed QoS), because the optimizer measured
    the job with exactly that much; ``env`` holds the thread, batch-size and device variables
    the measured run used; ``args`` the script's arguments when its batch size is a flag.
    """
    lines = []
    for text in comment.splitlines():
        lines.append(f"# {text}".rstrip())
    cpu, mem = cpu_quantity(allocation.cpus), memory_quantity(allocation.memory_gb)
    lines += [
        f"name: {_q(dns_label(name))}",
        "resources:",
        "  requests:",
        f"    cpu: {_q(cpu)}",
        f"    memory: {_q(mem)}",
        "  limits:",
        f"    cpu: {_q(cpu)}",
        f"    memory: {_q(mem)}",
    ]
    if allocation.gpus > 0:
        lines.append(f"    nvidia.com/gpu: {_q(allocation.gpus)}")
    if env:
        lines.append("env:")
        for key in sorted(env):
            lines.append(f"  - name: {_q(key)}")
            lines.append(f"    value: {_q(env[key])}")
    else:
        lines.append("env: []")
    if args:
        lines.append("args:")
        lines += [f"  - {_q(a)}" for a in args]
    return "\n".join(lines) + "\n"
