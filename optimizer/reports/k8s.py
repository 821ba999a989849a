"""The recommendation as Kubernetes container ``resources`` plus the environment to set.

The YAML is written without a YAML library at run time: every scalar is emitted as a JSON
string, which is a valid YAML double-quoted scalar, so names and values never need escaping
rules of their own (the Job through :mod:`optimizer.reports.k8s_yaml`). GPUs go in ``limits``
only, as the NVIDIA device plugin requires (an extended resource's request defaults to its
limit). The Job's pod settings (security context, writable emptyDirs, image, deadline) are
:mod:`optimizer.reports.k8s_security`'s.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import textwrap
from collections.abc import Mapping
from typing import Any

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.memory import memory_quantity
from optimizer.reports.k8s_security import (
    PLACEHOLDER_IMAGE,
    PULL_POLICY,
    TTL_AFTER_FINISHED_S,
    container_security_context,
    home_env,
    job_lifetime,
    pinned_image,
    pod_security_context,
    security_note,
    shm_volume,
    writable_dirs,
)
from optimizer.reports.k8s_yaml import comment_lines, to_yaml

_NAME_OK = re.compile(r"[^a-z0-9-]+")


def dns_label(name: str) -> str:
    """A name every object accepts: an RFC 1035 label (lower-case letters, digits and '-',
    at most 63, starting with a letter). The TrainJob CRD refuses a name starting with a
    digit, which a run folder's timestamp does: such a name gets the prefix ``run-``."""
    label = _NAME_OK.sub("-", name.lower()).strip("-")
    if label[:1].isdigit():
        label = "run-" + label
    return label[:63].strip("-") or "training"


def unique_name(label: str, content: Any) -> str:
    """``label`` with a digest of ``content``: objects that find each other by name (a VPA's
    ``targetRef``) then never find those of another recommendation written under the same
    run name, and the same recommendation applied again is the same object."""
    digest = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:6]
    return f"{label[:56].rstrip('-')}-{digest}"


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


def _container(allocation: Allocation, env: Mapping[str, str], name: str, image: str,
               command: list[str], args: list[str] | None,
               mounts: list[dict[str, Any]]) -> dict[str, Any]:
    cpu, mem = cpu_quantity(allocation.cpus), memory_quantity(allocation.memory_gb)
    limits = {"cpu": cpu, "memory": mem}
    if allocation.gpus > 0:
        limits["nvidia.com/gpu"] = str(allocation.gpus)  # extended resources: limits only
    container: dict[str, Any] = {"name": dns_label(name), "image": image,
                                 "imagePullPolicy": PULL_POLICY, "command": list(command)}
    if args:
        container["args"] = list(args)
    container["resources"] = {"requests": {"cpu": cpu, "memory": mem}, "limits": limits}
    env_list = [{"name": k, "value": str(env[k])} for k in sorted(env)]
    container["env"] = env_list + home_env(env)
    container["securityContext"] = container_security_context()
    container["volumeMounts"] = mounts
    return container


def job_objects(allocation: Allocation, env: Mapping[str, str], *, name: str,
                command: list[str], args: list[str] | None = None, image: str | None = None,
                memory_bounds_gb: tuple[float, float], cpu_bounds: tuple[float, float],
                sla_time_s: float | None = None, predicted_time_s: float | None = None,
                ttl_s: int = TTL_AFTER_FINISHED_S,
                shm: str | None = None) -> list[dict[str, Any]]:
    """The Job and its VerticalPodAutoscaler as dicts (see :func:`k8s_job_yaml`); ``shm``:
    the ``sizeLimit`` of a memory-backed ``/dev/shm`` (a job with DataLoader workers)."""
    label = dns_label(name)
    volumes, mounts = writable_dirs()
    if shm:
        volume, mount = shm_volume(shm)
        volumes, mounts = [*volumes, volume], [*mounts, mount]
    chosen, _ = pinned_image(image)
    lifetime, _ = job_lifetime(sla_time_s, predicted_time_s, ttl_s)
    pod = {"restartPolicy": "Never",
           # The script never calls the API: no token in its container at all.
           "automountServiceAccountToken": False,
           "securityContext": pod_security_context(),
           "containers": [_container(allocation, env, name, chosen, command, args, mounts)],
           "volumes": volumes}
    (mem_lo, mem_hi), (cpu_lo, cpu_hi) = memory_bounds_gb, cpu_bounds
    # The floor is the recommended request, margin included: a bare peak as the floor lets
    # the VPA take the headroom away, and its limit (scaled with the request) with it.
    memory_floor = max(mem_lo, allocation.memory_gb)
    policy = {"containerName": label,
              "minAllowed": {"cpu": cpu_quantity(max(cpu_lo, 0.1)),
                             "memory": memory_quantity(memory_floor)},
              "maxAllowed": {"cpu": cpu_quantity(cpu_hi),
                             "memory": memory_quantity(max(mem_hi, memory_floor))},
              "controlledResources": ["cpu", "memory"],
              # Limits move with the requests (their ratio kept, 1 here): never under the
              # floor, and the pod stays Guaranteed.
              "controlledValues": "RequestsAndLimits"}
    spec = {**lifetime, "template": {
        "metadata": {"labels": {"app.kubernetes.io/name": label}}, "spec": pod}}
    job_name = unique_name(label, {"spec": spec, "vpa": policy})
    meta = {"labels": {"app.kubernetes.io/name": label,
                       "app.kubernetes.io/managed-by": "cloudopt"}}
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": job_name, **meta}, "spec": spec}
    vpa = {"apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler",
           "metadata": {"name": job_name + "-vpa", **meta},
           "spec": {"targetRef": {"apiVersion": "batch/v1", "kind": "Job", "name": job_name},
                    "updatePolicy": {"updateMode": "Initial"},
                    "resourcePolicy": {"containerPolicies": [policy]}}}
    return [job, vpa]


def k8s_job_yaml(allocation: Allocation, env: Mapping[str, str], *, name: str,
                 command: list[str], args: list[str] | None = None,
                 image: str | None = None, memory_bounds_gb: tuple[float, float],
                 cpu_bounds: tuple[float, float], comment: str = "",
                 sla_time_s: float | None = None, predicted_time_s: float | None = None,
                 ttl_s: int = TTL_AFTER_FINISHED_S, shm: str | None = None) -> str:
    """Two complete objects: a ``batch/v1`` Job running the script with the recommended
    requests and limits, and an ``autoscaling.k8s.io/v1`` VerticalPodAutoscaler for it.

    The VPA's ``updateMode`` is ``Initial`` (a Job's pods are not evicted to be resized), and
    its bounds come from what was measured: memory from the recommended request (the whole
    job's peak with its margin) to the largest request any trial's peak would need, CPU from
    the cores it used to the cores allowed; limits follow the requests
    (``RequestsAndLimits``), so they never fall under the floor either. The Job's name ends
    in a digest of what it runs and the VPA's bounds: a VPA left behind by an earlier
    recommendation of the same run name never targets this Job (a VPA cannot be owned by a
    Job not yet created: an owner reference needs the Job's uid). ``kubectl delete -f``
    removes both. ``shm``: see :func:`job_objects`. The pod passes the Pod Security
    Standards' ``restricted`` profile, and the Job ends at a deadline from ``sla_time_s`` or
    ``predicted_time_s``
    (:func:`optimizer.reports.k8s_security.job_deadline`).
    """
    objects = job_objects(allocation, env, name=name, command=command, args=args,
                          image=image, memory_bounds_gb=memory_bounds_gb,
                          cpu_bounds=cpu_bounds, sla_time_s=sla_time_s,
                          predicted_time_s=predicted_time_s, ttl_s=ttl_s, shm=shm)
    _, image_notes = pinned_image(image)
    _, lifetime = job_lifetime(sla_time_s, predicted_time_s, ttl_s)
    header = comment_lines(comment)
    notes = [f"/dev/shm: a memory-backed emptyDir of {shm} for the DataLoader workers' batches "
             "(it counts against the memory limit)."] if shm else []
    for text in [security_note(), lifetime, *notes, *image_notes]:
        header += [f"# {w}" for w in textwrap.wrap(text, 96, break_on_hyphens=False)]
    return to_yaml(objects, header=header)


__all__ = ["PLACEHOLDER_IMAGE", "cpu_quantity", "dns_label", "job_objects", "k8s_job_yaml",
           "k8s_resources_yaml", "unique_name"]
