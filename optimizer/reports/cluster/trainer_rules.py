"""What Kubeflow Trainer v2.2 refuses in a ``TrainJob`` beyond its CRD's OpenAPI schema.

The CRD's schema (:func:`optimizer.reports.k8s_trainjob.validate_trainjob`) is only the first
gate. The API server then runs the CRD's CEL rules, and Trainer's validating webhook
(``failurePolicy: Fail``) runs the runtime's plugins on the object; either refusal means
``kubectl apply`` fails. Each rule below is read from Trainer v2.2.0 and written here in our
own words:

* the CRD's CEL rules on ``TrainJob``: ``metadata.name`` is an RFC 1035 label (a letter first)
  of at most 63 characters (``pkg/apis/trainer/v1alpha1/trainjob_types.go``);
* the webhook refuses a runtime it does not know (``pkg/webhooks/trainjob_webhook.go``);
* the JobSet plugin (``pkg/runtime/framework/plugins/jobset/jobset.go``, ``Validate``): each
  ``runtimePatches[].manager`` is a domain-prefixed path (``example.com/name``: a DNS-1123
  subdomain, ``/``, a non-empty path), as apimachinery's ``IsDomainPrefixedPath`` checks; a
  patch names only replicated jobs of the runtime and, in them, only containers and init
  containers the runtime has; a patch sets no ``env`` on the ``node``, dataset- or
  model-initializer containers (the TrainJob's own ``trainer.env`` is the place);
* the Torch plugin (``pkg/runtime/framework/plugins/torch/torch.go``): ``trainer.env`` sets
  none of the ``PET_*`` variables the runtime sets for torchrun;
* ``runtimePatches`` is a list map keyed by ``manager``: two patches of one manager are
  refused by the API server.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from optimizer.reports.k8s_trainjob import NODE, RESERVED_ENV, RUNTIME

RFC1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
HTTP_PATH = re.compile(r"[A-Za-z0-9/\-._~%!$&'()*+,;=:]+")
NO_ENV_CONTAINERS = frozenset({NODE, "dataset-initializer", "model-initializer"})
TORCH_DISTRIBUTED = {"node": {"containers": {NODE}, "initContainers": set()}}
"""The ``torch-distributed`` ClusterTrainingRuntime of Trainer v2.2's manifests: one
replicated job, ``node``, with one container, ``node``."""


def domain_prefixed_path(value: str) -> list[str]:
    """Why ``value`` is not a domain-prefixed path (empty: it is)."""
    if not value:
        return ["required"]
    host, sep, path = value.partition("/")
    if not sep or not host or not path:
        return [f"{value!r} must be a domain-prefixed path (such as 'acme.io/foo')"]
    out = []
    if len(host) > 253 or not DNS1123_SUBDOMAIN.fullmatch(host):
        out.append(f"{host!r} is not a DNS-1123 subdomain")
    if not HTTP_PATH.fullmatch(path):
        out.append(f"{path!r} is not a valid path")
    return out


def _patched_jobs(patch: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = ((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec") or {}
    return list(spec.get("replicatedJobs") or [])


def trainjob_admission_errors(obj: Mapping[str, Any],
                              runtime: Mapping[str, Mapping[str, set[str]]] | None = None,
                              runtime_name: str = RUNTIME["name"]) -> list[str]:
    """What the API server's CEL rules and Trainer's webhook refuse in ``obj`` (a TrainJob on
    the ``runtime_name`` ClusterTrainingRuntime, whose replicated jobs and containers are
    ``runtime``), one ``path: message`` each; empty: admitted."""
    runtime = TORCH_DISTRIBUTED if runtime is None else runtime
    spec, out = obj.get("spec") or {}, []
    name = (obj.get("metadata") or {}).get("name") or ""
    if not RFC1035.fullmatch(name):
        out.append("metadata.name: must match RFC 1035 DNS label format")
    if len(name) > 63:
        out.append("metadata.name: must be no more than 63 characters")
    ref = spec.get("runtimeRef") or {}
    if (ref.get("apiGroup", RUNTIME["apiGroup"]), ref.get("kind"), ref.get("name")) != (
            RUNTIME["apiGroup"], RUNTIME["kind"], runtime_name):
        out.append(f"spec.runtimeRef: unsupported runtime {ref}")
    env = {e.get("name") for e in (spec.get("trainer") or {}).get("env") or []}
    if env & RESERVED_ENV:
        out.append(f"spec.trainer.env: must not have reserved envs {sorted(env & RESERVED_ENV)}")
    managers = [p.get("manager", "") for p in spec.get("runtimePatches") or []]
    if len(set(managers)) != len(managers):
        out.append("spec.runtimePatches: duplicate manager")
    for i, patch in enumerate(spec.get("runtimePatches") or []):
        where = f"spec.runtimePatches[{i}]"
        out += [f"{where}.manager: {e}" for e in domain_prefixed_path(patch.get("manager", ""))]
        for job in _patched_jobs(patch):
            known = runtime.get(job.get("name"))
            if known is None:
                out.append(f"{where}: replicated job {job.get('name')!r} is not in the runtime")
                continue
            pod = ((job.get("template") or {}).get("spec") or {}).get("template") or {}
            for kind in ("initContainers", "containers"):
                for c in (pod.get("spec") or {}).get(kind) or []:
                    if c.get("name") not in known.get(kind, set()) | known.get(
                            "containers" if kind == "initContainers" else "initContainers",
                            set()):
                        out.append(f"{where}: {kind} {c.get('name')!r} is not in the "
                                   f"runtime's {job.get('name')} job")
                    elif c.get("env") and c.get("name") in NO_ENV_CONTAINERS:
                        out.append(f"{where}: must not set env on the {c.get('name')} "
                                   "container")
    return out


__all__ = ["TORCH_DISTRIBUTED", "domain_prefixed_path", "trainjob_admission_errors"]
