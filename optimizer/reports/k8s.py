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

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.memory import memory_quantity

_NAME_OK = re.compile(r"[^a-z0-9-]+")


def dns_label(name: str) -> str:
    """A container name Kubernetes accepts (RFC 1123 label: lower-case, digits, '-', ≤ 63)."""
    label = _NAME_OK.sub("-", name.lower()).strip("-")[:63].strip("-")
    return label or "training"


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


PLACEHOLDER_IMAGE = "registry.example.com/replace-with-your-training-image:latest"
"""The image when ``--image`` is not given: valid, and plainly a placeholder."""


def _container_lines(allocation: Allocation, env: Mapping[str, str], name: str,
                     image: str, command: list[str], args: list[str] | None,
                     indent: str) -> list[str]:
    cpu, mem = cpu_quantity(allocation.cpus), memory_quantity(allocation.memory_gb)
    lines = [f"- name: {_q(dns_label(name))}", f"  image: {_q(image)}",
             "  command:"] + [f"    - {_q(c)}" for c in command]
    if args:
        lines += ["  args:"] + [f"    - {_q(a)}" for a in args]
    lines += ["  resources:", "    requests:", f"      cpu: {_q(cpu)}",
              f"      memory: {_q(mem)}", "    limits:", f"      cpu: {_q(cpu)}",
              f"      memory: {_q(mem)}"]
    if allocation.gpus > 0:
        lines.append(f"      nvidia.com/gpu: {_q(allocation.gpus)}")
    if env:
        lines.append("  env:")
        for key in sorted(env):
            lines += [f"    - name: {_q(key)}", f"      value: {_q(env[key])}"]
    return [indent + ln for ln in lines]


def k8s_job_yaml(allocation: Allocation, env: Mapping[str, str], *, name: str,
                 command: list[str], args: list[str] | None = None,
                 image: str | None = None, memory_bounds_gb: tuple[float, float],
                 cpu_bounds: tuple[float, float], comment: str = "") -> str:
    """Two complete objects: a ``batch/v1`` Job running the script with the recommended
    requests and limits, and an ``autoscaling.k8s.io/v1`` VerticalPodAutoscaler for it.

    The VPA's ``updateMode`` is ``Initial`` (a Job's pods are not evicted to be resized), and
    its bounds come from what was measured: memory from the recommended trial's peak to the
    largest request any trial's peak would need, CPU from the cores it used to the cores
    allowed.
    """
    label = dns_label(name)
    lines = [f"# {t}".rstrip() for t in comment.splitlines()]
    lines += ["apiVersion: batch/v1", "kind: Job", "metadata:", f"  name: {_q(label)}",
              "  labels:", f"    app.kubernetes.io/name: {_q(label)}",
              "    app.kubernetes.io/managed-by: \"cloudopt\"", "spec:", "  backoffLimit: 0",
              "  template:", "    metadata:", "      labels:",
              f"        app.kubernetes.io/name: {_q(label)}", "    spec:",
              "      restartPolicy: \"Never\"", "      containers:"]
    lines += _container_lines(allocation, env, name, image or PLACEHOLDER_IMAGE, command, args,
                              "        ")
    (mem_lo, mem_hi), (cpu_lo, cpu_hi) = memory_bounds_gb, cpu_bounds
    lines += ["---", "apiVersion: autoscaling.k8s.io/v1", "kind: VerticalPodAutoscaler",
              "metadata:", f"  name: {_q(label + '-vpa')}", "spec:", "  targetRef:",
              "    apiVersion: \"batch/v1\"", "    kind: \"Job\"", f"    name: {_q(label)}",
              "  updatePolicy:", "    updateMode: \"Initial\"", "  resourcePolicy:",
              "    containerPolicies:", f"      - containerName: {_q(label)}",
              "        minAllowed:", f"          cpu: {_q(cpu_quantity(max(cpu_lo, 0.1)))}",
              f"          memory: {_q(memory_quantity(mem_lo))}", "        maxAllowed:",
              f"          cpu: {_q(cpu_quantity(cpu_hi))}",
              f"          memory: {_q(memory_quantity(max(mem_hi, mem_lo)))}",
              "        controlledResources: [\"cpu\", \"memory\"]"]
    return "\n".join(lines) + "\n"
