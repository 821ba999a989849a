"""A data-parallel recommendation as a Kubeflow Trainer ``TrainJob``, and its schema check.

A job of ``replicas`` torchrun workers runs on Kubernetes as a ``trainer.kubeflow.org/v1alpha1``
TrainJob (Kubeflow Trainer v2.2) on the ``torch-distributed`` ClusterTrainingRuntime: one node
(pod) per worker, ``numProcPerNode`` 1 (left unset, the runtime would start one process per
CPU on a CPU node), each node with the allocation's even share of CPUs and GPUs. Memory comes
from the ranks' own peaks where the records hold them (rank 0, which evaluates and saves,
often holds more): requests at the largest other rank's need, limits at the largest need, so
rank 0 is not killed at an even share; else the even share.

The TrainJob names its image, command, env and resources itself; the pod settings of the
single-pod Job (:mod:`optimizer.reports.k8s_security`: restricted security contexts, a
read-only root with bounded emptyDirs) reach the runtime's ``node`` job through
``spec.runtimePatches``. What the CRD has no field for is listed in :data:`NOT_CARRIED` and in
the YAML's header. :func:`validate_trainjob` checks an object against the CRD's schema as
published (``schemas/trainjob-v1alpha1.json``, written by ``optimizer/reports/schemas/vendor_trainjob_schema.py``).
"""

from __future__ import annotations

import functools
import json
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.memory import memory_quantity
from optimizer.reports.k8s import cpu_quantity, dns_label
from optimizer.reports.k8s_security import (
    container_security_context,
    home_env,
    job_deadline,
    pinned_image,
    pod_security_context,
    security_note,
    shm_volume,
    writable_dirs,
)
from optimizer.reports.k8s_yaml import comment_lines, to_yaml

API_VERSION = "trainer.kubeflow.org/v1alpha1"
RUNTIME = {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime",
           "name": "torch-distributed"}
NODE = "node"
"""The runtime's replicated job and its trainer container: both are called ``node``."""
PATCH_MANAGER = "cloudopt.io/optimizer"
"""``runtimePatches[].manager``: who owns the patch (Kueue, say, adds its own beside it).
Trainer's webhook refuses a manager that is not a domain-prefixed path (``kueue.x-k8s.io/
manager``); :mod:`optimizer.reports.cluster.trainer_rules` holds its rules."""
RESERVED_ENV = frozenset({"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK",
                          "PET_MASTER_ADDR", "PET_MASTER_PORT"})
"""Set by the torch runtime for torchrun; Trainer refuses a TrainJob that sets them."""
SCHEMA_FILE = Path(__file__).with_name("schemas") / "trainjob-v1alpha1.json"
NOT_CARRIED = (
    "imagePullPolicy (no TrainJob field; Kubernetes' default for a tagged image is "
    "IfNotPresent, as the single-pod Job sets it; an untagged or :latest image gets Always)",
    "automountServiceAccountToken (runtimePatches cannot set it: the pods mount the token of "
    "their service account unless that account disables it)",
    "ttlSecondsAfterFinished (delete the TrainJob once its logs are read)",
    "backoffLimit and restartPolicy (the runtime's own)",
)
"""The single-pod Job's settings the v2.2 TrainJob CRD cannot carry."""


def node_share(allocation: Allocation) -> Allocation:
    """One worker's even share of the whole job's ``allocation`` (``replicas`` 1)."""
    n = int(allocation.replicas)
    if n < 1:
        raise ValueError(f"replicas must be at least 1, got {n}")
    if allocation.gpus % n:
        raise ValueError(f"{allocation.gpus} GPUs do not split evenly between {n} workers")
    return replace(allocation, gpus=allocation.gpus // n, cpus=allocation.cpus / n,
                   memory_gb=allocation.memory_gb / n, replicas=1)


def resources_per_node(allocation: Allocation,
                       rank_memory_gb: Sequence[float] | None = None) -> dict[str, Any]:
    """``trainer.resourcesPerNode``: CPU requests equal limits, GPUs in limits only, as in the
    single-pod Job. Memory: with ``rank_memory_gb`` (each rank's need, rank 0 first, peaks
    with their margin), requests at the largest need of the ranks after 0 and limits at the
    largest of all (one size fits every node, so every node may grow to rank 0's); without,
    the even share as request and limit (Guaranteed QoS)."""
    share = node_share(allocation)
    cpu, mem = cpu_quantity(share.cpus), memory_quantity(share.memory_gb)
    mem_request = mem_limit = mem
    needs = [float(g) for g in rank_memory_gb or () if g and g > 0]
    if len(needs) == int(allocation.replicas) and needs:
        rest = needs[1:] or needs
        mem_request, mem_limit = memory_quantity(max(rest)), memory_quantity(max(needs))
    limits = {"cpu": cpu, "memory": mem_limit}
    if share.gpus > 0:
        limits["nvidia.com/gpu"] = str(share.gpus)
    return {"requests": {"cpu": cpu, "memory": mem_request}, "limits": limits}


def _runtime_patch(label: str, shm: str | None = None) -> dict[str, Any]:
    """The restricted pod settings and writable emptyDirs (``/dev/shm`` too with ``shm``),
    patched onto the ``node`` job."""
    volumes, mounts = writable_dirs()
    if shm:
        volume, mount = shm_volume(shm)
        volumes, mounts = [*volumes, volume], [*mounts, mount]
    pod = {"securityContext": pod_security_context(), "volumes": volumes,
           "containers": [{"name": NODE, "securityContext": container_security_context(),
                           "volumeMounts": mounts}]}
    job = {"name": NODE, "template": {"spec": {"template": {
        "metadata": {"labels": {"app.kubernetes.io/name": label}}, "spec": pod}}}}
    return {"manager": PATCH_MANAGER,
            "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [job]}}}}


def trainjob_object(allocation: Allocation, env: Mapping[str, str], *, name: str,
                    image: str | None = None, namespace: str | None = None,
                    command: Sequence[str] = ("torchrun", "train.py"),
                    args: Sequence[str] | None = None, sla_time_s: float | None = None,
                    predicted_time_s: float | None = None,
                    rank_memory_gb: Sequence[float] | None = None,
                    shm: str | None = None) -> dict[str, Any]:
    """The TrainJob as a dict: ``allocation.replicas`` nodes of one torchrun worker each
    (``rank_memory_gb``: see :func:`resources_per_node`; ``shm``: a ``/dev/shm`` of that
    size for DataLoader workers).

    ``command`` starts with ``torchrun``: the runtime passes the nodes, rank and rendezvous
    through ``PET_*`` variables, which torchrun reads. ``env`` is the measured run's (thread,
    batch-size and device variables), plus ``HOME`` on the writable emptyDir.
    """
    reserved = sorted(RESERVED_ENV & set(env))
    if reserved:
        raise ValueError(f"env sets {reserved}: the torch runtime sets them for torchrun")
    label = dns_label(name)
    chosen, _ = pinned_image(image)
    deadline, _ = job_deadline(sla_time_s, predicted_time_s)
    trainer: dict[str, Any] = {"image": chosen, "command": list(command)}
    if args:
        trainer["args"] = list(args)
    trainer["env"] = [{"name": k, "value": str(env[k])} for k in sorted(env)] + home_env(env)
    trainer.update(numNodes=int(allocation.replicas), numProcPerNode=1,
                   resourcesPerNode=resources_per_node(allocation, rank_memory_gb))
    metadata: dict[str, Any] = {"name": label}
    if namespace:
        metadata["namespace"] = namespace
    metadata["labels"] = {"app.kubernetes.io/name": label,
                          "app.kubernetes.io/managed-by": "cloudopt"}
    return {"apiVersion": API_VERSION, "kind": "TrainJob", "metadata": metadata,
            "spec": {"runtimeRef": dict(RUNTIME), "trainer": trainer,
                     "activeDeadlineSeconds": deadline,
                     "runtimePatches": [_runtime_patch(label, shm)]}}


def _header(allocation: Allocation, obj: dict[str, Any], comment: str, why: str,
            image_notes: Iterable[str]) -> list[str]:
    trainer, n = obj["spec"]["trainer"], int(allocation.replicas)
    res = trainer["resourcesPerNode"]
    each = ", ".join(f"{v} {k}" for k, v in res["limits"].items())
    if res["requests"]["memory"] != res["limits"]["memory"]:
        each += (f" (memory requested {res['requests']['memory']}: the other ranks' peak; "
                 "the limit is rank 0's)")
    batch = ("the script's own batch per worker" if allocation.batch_size is None else
             f"batch {allocation.batch_size} per worker ({allocation.batch_size * n} in all)")
    ns = f" -n {obj['metadata']['namespace']}" if "namespace" in obj["metadata"] else ""
    name = obj["metadata"]["name"]
    lines = [
        f"Kubeflow Trainer TrainJob ({API_VERSION}, Trainer v2.2) on the ClusterTrainingRuntime "
        f"{RUNTIME['name']}: {n} nodes x 1 torchrun worker, each node {each}; {batch}.",
        f"Apply: kubectl apply -f trainjob.yaml; follow: kubectl get trainjob{ns} {name}. "
        "Needs Kubeflow Trainer v2.2 with its torch-distributed runtime installed.",
        security_note() + f" Set through spec.runtimePatches (manager {PATCH_MANAGER}) on "
        f"the runtime's '{NODE}' job.",
        f"activeDeadlineSeconds {obj['spec']['activeDeadlineSeconds']}: {why}.",
        "Not carried (the TrainJob CRD has no field for it): " + "; ".join(NOT_CARRIED) + ".",
        *image_notes]
    return comment_lines(comment) + [f"# {w}" for t in lines
                                      for w in textwrap.wrap(t, 96, break_on_hyphens=False)]


def k8s_trainjob_yaml(allocation: Allocation, env: Mapping[str, str], *, name: str,
                      image: str | None = None, namespace: str | None = None,
                      command: Sequence[str] = ("torchrun", "train.py"),
                      args: Sequence[str] | None = None, comment: str = "",
                      sla_time_s: float | None = None,
                      predicted_time_s: float | None = None,
                      rank_memory_gb: Sequence[float] | None = None,
                      shm: str | None = None) -> str:
    """``trainjob.yaml``: :func:`trainjob_object` after a header saying what it runs, how to
    apply it and which of the single-pod Job's settings it cannot carry."""
    obj = trainjob_object(allocation, env, name=name, image=image, namespace=namespace,
                          command=command, args=args, sla_time_s=sla_time_s,
                          predicted_time_s=predicted_time_s, rank_memory_gb=rank_memory_gb,
                          shm=shm)
    _, why = job_deadline(sla_time_s, predicted_time_s)
    _, image_notes = pinned_image(image)
    return to_yaml([obj], header=_header(allocation, obj, comment, why, image_notes))


# ------------------------------------------------------------------------- schema check
def _strict(node: dict[str, Any]) -> dict[str, Any]:
    """A CRD schema node as plain JSON Schema: int-or-string made explicit, unknown fields
    refused (the API server's strict field validation), ``x-`` extensions dropped."""
    out = {k: v for k, v in node.items() if not k.startswith("x-")}
    if node.get("x-kubernetes-int-or-string") and "anyOf" not in out:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if "properties" in out:
        out["properties"] = {k: _strict(v) for k, v in out["properties"].items()}
        if ("additionalProperties" not in out
                and not node.get("x-kubernetes-preserve-unknown-fields")):
            out["additionalProperties"] = False
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = _strict(out["additionalProperties"])
    if isinstance(out.get("items"), dict):
        out["items"] = _strict(out["items"])
    for key in ("anyOf", "allOf", "oneOf"):
        if key in out:
            out[key] = [_strict(s) for s in out[key]]
    if out.get("format") == "int32":
        out.setdefault("minimum", -(2**31))
        out.setdefault("maximum", 2**31 - 1)
    if out.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


@functools.lru_cache(maxsize=1)
def _schema() -> dict[str, Any]:
    return _strict(json.loads(SCHEMA_FILE.read_text()))


def _path(parts: Iterable[Any]) -> str:
    text = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)
    return text.lstrip(".") or "(root)"


def validate_trainjob(obj: Mapping[str, Any]) -> list[str]:
    """What in ``obj`` the TrainJob CRD's schema refuses, one ``path: message`` each (empty:
    valid). The CRD's CEL rules and Trainer's webhook are mirrored apart
    (:func:`optimizer.reports.cluster.trainer_rules.trainjob_admission_errors`). Needs
    ``jsonschema`` (a dev dependency)."""
    try:
        import jsonschema
    except ImportError as exc:
        raise ImportError("validate_trainjob needs jsonschema: pip install jsonschema "
                          "(or cloudopt's dev extra)") from exc
    validator = jsonschema.Draft4Validator(_schema())
    out = [f"{_path(e.absolute_path)}: {e.message}" for e in validator.iter_errors(obj)]
    if obj.get("apiVersion") != API_VERSION or obj.get("kind") != "TrainJob":
        out.append(f"(root): not a {API_VERSION} TrainJob")
    if not (obj.get("metadata") or {}).get("name"):
        out.append("metadata.name: a TrainJob needs a name")
    return sorted(out)


__all__ = ["API_VERSION", "NODE", "NOT_CARRIED", "PATCH_MANAGER", "RESERVED_ENV", "RUNTIME",
           "SCHEMA_FILE", "k8s_trainjob_yaml", "node_share", "resources_per_node",
           "trainjob_object", "validate_trainjob"]
