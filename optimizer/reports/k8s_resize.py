"""A live plan on Kubernetes: a Job whose pod is resized in place per phase.

The pod starts with the requests of the plan's first phase and its limits at the largest
phase; ``python -m optimizer run --plan`` inside it patches the pod's ``resize`` subresource
as the job moves between phases (:mod:`optimizer.trials.live.pod_resize`). What that needs:

* ``resizePolicy: NotRequired`` for CPU and memory: a Job's pod has ``restartPolicy: Never``,
  so ``RestartContainer`` would end the run (the API server refuses it there anyway);
* limits fixed at the largest phase: a resize may not change the pod's QoS class, and only
  a Burstable pod's requests can move under fixed limits;
* the pod's name and namespace through the downward API, and a ServiceAccount whose Role may
  get and patch ``pods/resize`` (and get ``pods``, to read the outcome), held to the pod's
  own resize by an admission policy; its token only in a proxy sidecar, never in the
  container running the script (:mod:`optimizer.reports.k8s_access`);
* a pod the Pod Security Standards' ``restricted`` profile admits, a deadline and a TTL
  (:mod:`optimizer.reports.k8s_security`);
* no VerticalPodAutoscaler: in ``Initial`` mode it rewrites the first requests (and scales the
  limits with them); ``Recreate``, ``Auto`` and ``InPlaceOrRecreate`` evict, ending the run.

The YAML is emitted from plain dicts by :mod:`optimizer.reports.k8s_yaml` (every string a
JSON string, a valid YAML double-quoted scalar), so no YAML library is needed at run time.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping
from typing import Any

from optimizer.foundation.memory import memory_quantity
from optimizer.reports.k8s import dns_label
from optimizer.reports.k8s_access import (
    PROXY_NAME,
    access_header,
    access_objects,
    object_meta,
    proxy_kubeconfig,
    proxy_sidecar,
    proxy_volumes,
    service_account_name,
)
from optimizer.reports.k8s_security import (
    PLACEHOLDER_IMAGE,
    PULL_POLICY,
    TTL_AFTER_FINISHED_S,
    container_security_context,
    home_env,
    job_lifetime,
    pinned_image,
    pod_security_context,
    scratch_volume,
    security_note,
    shm_size,
    shm_volume,
    writable_dirs,
)
from optimizer.reports.k8s_yaml import to_yaml
from optimizer.trials.live.plan import PLAN_FILE, LivePlan
from optimizer.trials.live.pod_spec import parse_quantity, pod_requests, resize_patch
from optimizer.trials.resources import THREAD_VARS

PLAN_DIR = "/plan"
"""Where the ConfigMap holding ``live-plan.json`` is mounted."""
LOG_DIR = "/cloudopt-log"
"""The wrapper's ``--log-dir`` (an emptyDir: the ConfigMap's mount is read-only)."""
RESIZE_POLICY = [{"resourceName": "cpu", "restartPolicy": "NotRequired"},
                 {"resourceName": "memory", "restartPolicy": "NotRequired"}]
LOG_SIZE = "1Gi"
"""The log emptyDir's ``sizeLimit`` (changes.jsonl, trace.csv, probe.jsonl: small files)."""
KUBECONFIG_KEY = "kubeconfig"
KUBECONFIG_PATH = f"{PLAN_DIR}/{KUBECONFIG_KEY}"
"""The job container's kubeconfig (in the plan's ConfigMap): the API proxy, no credentials."""
# Set by the manifest, not the job's environment: the resizer depends on them.
_RESERVED_ENV = ("POD_NAME", "POD_NAMESPACE", "CONTAINER_NAME", "KUBECONFIG")


def live_limits(plan: LivePlan) -> dict[str, str]:
    """The container's limits: the largest phase's cores and memory (``memory_max_gb``, or
    the largest phase's memory where larger). No memory limit when no phase names one."""
    most = plan.largest()
    out = {"cpu": str(most.cpus)}
    if most.memory_gb:
        out["memory"] = memory_quantity(most.memory_gb)
    return out


def start_phase(plan: LivePlan) -> str | None:
    """The phase the job starts in (the schedule's first); None: the fallback's."""
    return plan.schedule[0] if plan.schedule else None


def phase_requests(plan: LivePlan, phase: str | None) -> dict[str, str]:
    """The container's requests while the job is in ``phase`` (None or an unknown phase: the
    fallback's). A phase without memory is shown with the fallback's; live, the controller
    keeps the memory it holds there (the main job's plans name memory in every phase)."""
    alloc = plan.allocation_for(phase)
    limits = live_limits(plan)
    memory = alloc.memory_gb or plan.fallback.memory_gb
    if memory is None and "memory" in limits:
        memory = parse_quantity(limits["memory"]) / 1024**3
    return pod_requests(alloc.cpus, memory, limits)


def live_requests(plan: LivePlan) -> dict[str, dict[str, str]]:
    """Phase → requests (``{"cpu": "2", "memory": "400Mi"}``) for ``recommendation.json``."""
    return {name: phase_requests(plan, name) for name in plan.phases}


def live_transitions(plan: LivePlan) -> list[dict[str, Any]]:
    """Each change of phase in the schedule, and whether the pod grows there (a grow can be
    Deferred by the node; a shrink always fits)."""
    out = []
    for a, b in zip(plan.schedule, plan.schedule[1:], strict=False):
        before, after = phase_requests(plan, a), phase_requests(plan, b)
        grows = [k for k in ("cpu", "memory") if k in before and k in after
                 and parse_quantity(after[k]) > parse_quantity(before[k])]
        if before != after:
            out.append({"from": a, "to": b, "requests": after, "grows": grows})
    return out


def live_recommendation(plan: LivePlan) -> dict[str, Any]:
    """The Kubernetes side of a live plan, for ``recommendation.json``."""
    return {"start_phase": start_phase(plan), "schedule": list(plan.schedule),
            "start_requests": phase_requests(plan, start_phase(plan)),
            "limits": live_limits(plan), "requests": live_requests(plan),
            "fallback_requests": phase_requests(plan, None),
            "transitions": live_transitions(plan), "qos_class": "Burstable",
            "resize_policy": "NotRequired"}


def resize_bounds(plan: LivePlan) -> dict[str, str]:
    """The smallest and largest cpu and memory request the plan's resizes ask (every phase,
    the fallback, the restore to the largest; the memory rules lower a request only to a
    phase's own memory and raise it at most to the limit), for the admission policy that
    holds a resize to them: ``cpuMin``, ``cpuMax``, and ``memoryMin``, ``memoryMax`` where
    the pod has a memory limit."""
    asked = [phase_requests(plan, p) for p in [*plan.phases, None]]
    limits = live_limits(plan)
    out = {"cpuMin": min((a["cpu"] for a in asked), key=parse_quantity),
           "cpuMax": limits["cpu"]}
    memories = [a["memory"] for a in asked if "memory" in a]
    if "memory" in limits and memories:
        out["memoryMin"] = min(memories, key=parse_quantity)
        out["memoryMax"] = limits["memory"]
    return out


def resize_patch_json(plan: LivePlan, phase: str | None, *, container: str) -> str:
    """The body of ``kubectl patch pod P --subresource resize --type strategic --patch``
    moving ``container`` (a name as given to :func:`k8s_live_job_yaml`) to ``phase``."""
    return json.dumps(resize_patch(dns_label(container), phase_requests(plan, phase)))


def live_job_objects(plan: LivePlan, env: Mapping[str, str], *, name: str,
                     command: list[str], args: list[str] | None = None,
                     image: str | None = None, namespace: str | None = None,
                     sla_time_s: float | None = None, predicted_time_s: float | None = None,
                     ttl_s: int = TTL_AFTER_FINISHED_S,
                     shm: bool = False) -> list[dict[str, Any]]:
    """A ConfigMap holding the plan (and the kubeconfig of the API proxy) and the
    ``batch/v1`` Job running ``command`` under it, beside the proxy sidecar; ``shm``: a
    memory-backed ``/dev/shm`` for DataLoader workers (sized from the largest phase)."""
    label = dns_label(name)
    first = plan.allocation_for(start_phase(plan))
    limits = live_limits(plan)
    gpus = int(plan.static.get("gpus") or 0)
    if gpus > 0:
        limits["nvidia.com/gpu"] = str(gpus)  # extended resources: limits only
    field = [("POD_NAME", "metadata.name"), ("POD_NAMESPACE", "metadata.namespace")]
    env_list: list[dict[str, Any]] = [
        {"name": k, "valueFrom": {"fieldRef": {"fieldPath": p}}} for k, p in field]
    env_list.append({"name": "CONTAINER_NAME", "value": label})
    # The wrapper's kubectl talks to the proxy sidecar: this container holds no token.
    env_list.append({"name": "KUBECONFIG", "value": KUBECONFIG_PATH})
    # The wrapper moves the threads from here on; they start at the first phase's cores.
    env_list += [{"name": k, "value": str(first.cpus) if k in THREAD_VARS else str(env[k])}
                 for k in sorted(env) if k not in _RESERVED_ENV]
    env_list += home_env(env)
    wrapper = ["python", "-m", "optimizer", "run", "--plan", f"{PLAN_DIR}/{PLAN_FILE}",
               "--kubernetes", "on", "--log-dir", LOG_DIR, "--"]
    chosen, _ = pinned_image(image)
    container: dict[str, Any] = {"name": label, "image": chosen,
                                 "imagePullPolicy": PULL_POLICY,
                                 "command": wrapper + list(command)}
    if args:
        container["args"] = list(args)
    scratch, scratch_mounts = writable_dirs()
    if shm:
        volume, mount = shm_volume(shm_size(plan.largest().memory_gb or first.memory_gb or 1.0))
        scratch, scratch_mounts = [*scratch, volume], [*scratch_mounts, mount]
    log_volume, log_mount = scratch_volume("live-log", LOG_DIR, LOG_SIZE)
    plan_mount = {"name": "live-plan", "mountPath": PLAN_DIR, "readOnly": True}
    container.update({
        "resizePolicy": [dict(p) for p in RESIZE_POLICY],
        "resources": {"requests": phase_requests(plan, start_phase(plan)), "limits": limits},
        "env": env_list,
        "securityContext": container_security_context(),
        "volumeMounts": [plan_mount, log_mount, *scratch_mounts]})
    sidecar = proxy_sidecar(chosen, kubeconfig=KUBECONFIG_PATH, plan_mount=plan_mount,
                            taken=label)
    config = f"{label[:52].rstrip('-')}-live-plan"
    pod_labels = {"app.kubernetes.io/name": label}
    configmap = {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": object_meta(config, label, namespace),
                 "data": {PLAN_FILE: json.dumps(plan.to_dict(), indent=2) + "\n",
                          KUBECONFIG_KEY: proxy_kubeconfig()}}
    lifetime, _ = job_lifetime(sla_time_s, predicted_time_s, ttl_s)
    pod = {"serviceAccountName": service_account_name(name),
           # No token in the job's container: only the sidecar mounts one (api-token).
           "automountServiceAccountToken": False,
           "restartPolicy": "Never", "securityContext": pod_security_context(),
           "initContainers": [sidecar], "containers": [container],
           "volumes": [{"name": "live-plan", "configMap": {"name": config}}, log_volume,
                       *scratch, *proxy_volumes()]}
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": object_meta(label, label, namespace),
           "spec": {**lifetime, "template": {"metadata": {"labels": pod_labels},
                                             "spec": pod}}}
    return [configmap, job]


def live_rbac_objects(name: str, plan: LivePlan, *,
                      namespace: str | None = None) -> list[dict[str, Any]]:
    """The ServiceAccount the Job's pod runs as, a Role that may get and patch
    ``pods/resize`` and get ``pods``, the RoleBinding between them, and the admission
    policies (with their bindings and the ConfigMap of the plan's bounds,
    :func:`resize_bounds`) that let the account resize its own pod's training container
    only, within the plan (:func:`optimizer.reports.k8s_access.access_objects`)."""
    return access_objects(name, bounds=resize_bounds(plan), namespace=namespace)


def _job_comment(plan: LivePlan, comment: str, image: str | None, lifetime: str) -> list[str]:
    start = start_phase(plan) or "the fallback"
    _, image_notes = pinned_image(image)
    if image is None:
        image_notes.insert(0, f"image: {PLACEHOLDER_IMAGE} is a placeholder; set --image.")
    lines = comment.splitlines() + [
        f"Live plan ({plan.source or 'cloudopt'}): requests start at phase {start}, limits "
        "stay at the largest phase (Burstable in every phase: a resize cannot change QoS).",
        "Apply k8s-live-rbac.yaml first (the pod patches its own pods/resize). Needs "
        "Kubernetes >= 1.33, and kubectl >= 1.32 and cloudopt installed in the image.",
        f"API access: the job's container has no service-account token; its kubectl "
        f"({KUBECONFIG_PATH}) goes through the {PROXY_NAME} sidecar, which alone mounts the "
        "token and forwards only this pod's own paths (k8s-live-rbac.yaml says what each "
        "object allows).",
        security_note(), lifetime, *image_notes,
        "No VerticalPodAutoscaler: Initial would rewrite the first requests, the other modes "
        "evict, which ends a Job's run."]
    for t in live_transitions(plan):
        grow = (f"grows {', '.join(t['grows'])}: the node may defer it (the old requests "
                "hold until it has room; logged)" if t["grows"] else "shrinks: always fits")
        lines.append(f"  {t['from']} -> {t['to']}: {json.dumps(t['requests'], sort_keys=True)}"
                     f", {grow}")
    lines.append(f"Logs: {LOG_DIR} is an emptyDir ({LOG_SIZE}); mount a volume there to keep "
                 "changes.jsonl.")
    return [f"# {w}".rstrip() for t in lines
            for w in textwrap.wrap(t, 96, subsequent_indent="    ",
                                   break_on_hyphens=False) or [""]]


def k8s_live_job_yaml(plan: LivePlan, env: Mapping[str, str], *, name: str,
                      command: list[str], args: list[str] | None = None,
                      image: str | None = None, namespace: str | None = None,
                      comment: str = "", sla_time_s: float | None = None,
                      predicted_time_s: float | None = None,
                      ttl_s: int = TTL_AFTER_FINISHED_S, shm: bool = False) -> str:
    """``k8s-job.yaml`` for a live plan: the plan's ConfigMap and the Job (see
    :func:`live_job_objects`), with a comment on which phase changes grow the pod."""
    objects = live_job_objects(plan, env, name=name, command=command, args=args, image=image,
                               namespace=namespace, sla_time_s=sla_time_s,
                               predicted_time_s=predicted_time_s, ttl_s=ttl_s, shm=shm)
    _, lifetime = job_lifetime(sla_time_s, predicted_time_s, ttl_s)
    return to_yaml(objects, header=_job_comment(plan, comment, image, lifetime))


def k8s_live_rbac_yaml(name: str, plan: LivePlan, *, namespace: str | None = None) -> str:
    """``k8s-live-rbac.yaml``: :func:`live_rbac_objects` as one multi-document YAML, after a
    header saying what each object allows."""
    return to_yaml(live_rbac_objects(name, plan, namespace=namespace),
                   header=access_header(name, namespace))


__all__ = ["KUBECONFIG_PATH", "LOG_DIR", "PLAN_DIR", "RESIZE_POLICY", "k8s_live_job_yaml", "k8s_live_rbac_yaml",
           "live_job_objects", "live_limits", "live_rbac_objects", "live_recommendation",
           "live_requests", "live_transitions", "phase_requests", "resize_bounds",
           "resize_patch_json",
           "service_account_name", "start_phase", "to_yaml"]
