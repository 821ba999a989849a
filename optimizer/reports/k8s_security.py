"""What makes a generated Job acceptable to a platform team.

A namespace that enforces the Pod Security Standards' ``restricted`` profile refuses a pod
unless it runs as non-root, with the ``RuntimeDefault`` (or a ``Localhost``) seccomp profile,
every container without privilege escalation and with all capabilities dropped
(https://kubernetes.io/docs/concepts/security/pod-security-standards/). Beyond the profile,
the pod's root filesystem is read-only, so what the job writes goes to emptyDirs with a
``sizeLimit`` (a runaway cache is evicted with its pod instead of filling the node's disk);
the image is pinned and pulled only when missing; the Job ends at a deadline and is deleted a
while after it finishes. Both Jobs, the static one (:mod:`optimizer.reports.k8s`) and the live
one (:mod:`optimizer.reports.k8s_resize`), take their pod settings from here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

PLACEHOLDER_IMAGE = "registry.example.com/replace-with-your-training-image:v1"
"""The image when ``--image`` is not given: valid, plainly a placeholder, and pinned to a tag
(``IfNotPresent`` would keep a node's first copy of ``:latest`` forever)."""
PULL_POLICY = "IfNotPresent"
RUN_AS_ID = 1000
"""User, group and fsGroup of every container: non-root, and the owner of the emptyDirs."""
TMP_DIR = "/tmp"
HOME_DIR = "/home/cloudopt"
"""``HOME``: pip, torch, Hugging Face, matplotlib and kubectl cache under it."""
SCRATCH_SIZES = {"tmp": "4Gi", "home": "8Gi"}
"""The emptyDirs' ``sizeLimit``: past it the kubelet evicts the pod, not the node's disk."""
TTL_AFTER_FINISHED_S = 86400
"""A finished Job (and its pod and logs) is kept a day for reading, then deleted."""
DEADLINE_FACTOR = 3
MIN_DEADLINE_S = 3600
"""A deadline from a predicted time is never under this: scheduling and pulling a training
image can take minutes, which the deadline counts and the prediction does not."""
DEFAULT_DEADLINE_S = 7 * 86400
"""The deadline when neither an SLA time nor a predicted job time is known: long enough for a
real training job, short enough that a hung one does not hold its GPUs for good."""


def pod_security_context() -> dict[str, Any]:
    """The pod-level half of the restricted profile: non-root, seccomp ``RuntimeDefault``."""
    return {"runAsNonRoot": True, "runAsUser": RUN_AS_ID, "runAsGroup": RUN_AS_ID,
            "fsGroup": RUN_AS_ID, "seccompProfile": {"type": "RuntimeDefault"}}


def container_security_context() -> dict[str, Any]:
    """The container-level half: no privilege escalation, no capabilities, read-only root."""
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True}


def scratch_volume(name: str, path: str, size: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """An emptyDir of at most ``size`` and its mount at ``path``."""
    return ({"name": name, "emptyDir": {"sizeLimit": size}}, {"name": name, "mountPath": path})


SHM_DIR = "/dev/shm"
SHM_SHARE = 0.25
"""The share of the container's memory ``/dev/shm`` may fill (its pages count against the
memory limit, so it is bounded by it): DataLoader workers hand each batch to the training
process through shared memory, and a container's own ``/dev/shm`` is 64 MiB, which a few
prefetched batches of images outgrow (``Bus error`` in the worker)."""
MIN_SHM_MIB = 64


def shm_size(memory_gb: float) -> str:
    """``/dev/shm``'s ``sizeLimit`` for a container of ``memory_gb``: :data:`SHM_SHARE` of it
    in MiB, never under the runtime's own 64 MiB."""
    return f"{max(MIN_SHM_MIB, int(memory_gb * 1024 * SHM_SHARE))}Mi"


def shm_volume(size: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A memory-backed emptyDir of at most ``size`` and its mount on ``/dev/shm``."""
    return ({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": size}},
            {"name": "dshm", "mountPath": SHM_DIR})


def writable_dirs() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Volumes and mounts for what any Python job writes under a read-only root: ``/tmp``
    (``tempfile``, DataLoader workers' shared files) and ``HOME`` (caches)."""
    pairs = [scratch_volume("tmp", TMP_DIR, SCRATCH_SIZES["tmp"]),
             scratch_volume("home", HOME_DIR, SCRATCH_SIZES["home"])]
    return [v for v, _ in pairs], [m for _, m in pairs]


def home_env(env: Mapping[str, str]) -> list[dict[str, str]]:
    """``HOME`` on the writable emptyDir, unless the job's own environment sets it: a uid
    the image does not know gets ``HOME=/``, which is read-only here."""
    return [] if "HOME" in env else [{"name": "HOME", "value": HOME_DIR}]


def image_tag(image: str) -> str | None:
    """The tag of ``image`` (``@...`` for a digest), None when it has none."""
    if "@" in image:
        return "@" + image.split("@", 1)[1]
    last = image.rsplit("/", 1)[-1]  # a registry's port is before the last '/'
    return last.split(":", 1)[1] if ":" in last else None


def pinned_image(image: str | None) -> tuple[str, list[str]]:
    """The image to run (the placeholder when None) and what the header should warn of it.
    An image given without a tag, or as ``:latest``, is kept (it is the user's choice) and
    flagged: with ``IfNotPresent`` each node keeps whichever copy it pulled first."""
    chosen = image or PLACEHOLDER_IMAGE
    notes = []
    if image_tag(chosen) in (None, "latest"):
        notes.append(f"image {chosen} is not pinned: with imagePullPolicy {PULL_POLICY} a "
                     "node keeps whichever copy it pulled first; give a tag or a digest")
    return chosen, notes


def job_deadline(sla_time_s: float | None = None,
                 predicted_time_s: float | None = None) -> tuple[int, str]:
    """``activeDeadlineSeconds`` and why: the largest of the SLA's time limit,
    ``DEADLINE_FACTOR`` times the predicted job time and ``MIN_DEADLINE_S``.

    A deadline is there so that a hung job releases its nodes, not to end a slow one: a
    job killed at its deadline loses all its work, and the SLA derived from a forecast can
    be seconds (a deadline at it ended the bundled example's Job after 1 s). Neither an
    SLA nor a prediction known: ``DEFAULT_DEADLINE_S``.
    """
    predicted, sla = _positive(predicted_time_s), _positive(sla_time_s)
    if predicted is None and sla is None:
        return DEFAULT_DEADLINE_S, ("7 days: no SLA time or predicted job time was given; set it "
                                    "to the job's own deadline")
    parts = [(MIN_DEADLINE_S, f"{MIN_DEADLINE_S} s at least")]
    if sla is not None:
        parts.append((math.ceil(sla), f"the SLA's time limit ([sla].time_max = {sla:g} s)"))
    if predicted is not None:
        parts.append((math.ceil(DEADLINE_FACTOR * predicted),
                      f"{DEADLINE_FACTOR}x the predicted job time ({predicted:.0f} s)"))
    deadline, why = max(parts, key=lambda p: p[0])
    return deadline, (f"{why}, the largest of the SLA's limit, {DEADLINE_FACTOR}x the "
                      f"predicted time and {MIN_DEADLINE_S} s: a hung job releases its nodes, "
                      "a slow one still finishes")


def _positive(value: float | None) -> float | None:
    if value is None or not math.isfinite(value) or value <= 0:
        return None
    return float(value)


def job_lifetime(sla_time_s: float | None = None, predicted_time_s: float | None = None,
                 ttl_s: int = TTL_AFTER_FINISHED_S) -> tuple[dict[str, Any], str]:
    """The Job spec's ``backoffLimit`` (0: a failed training run is not silently rerun from
    scratch), ``activeDeadlineSeconds`` and ``ttlSecondsAfterFinished``, with a header line."""
    deadline, why = job_deadline(sla_time_s, predicted_time_s)
    fields = {"backoffLimit": 0, "activeDeadlineSeconds": deadline,
              "ttlSecondsAfterFinished": int(ttl_s)}
    return fields, (f"activeDeadlineSeconds {deadline}: {why}. ttlSecondsAfterFinished "
                    f"{int(ttl_s)}: the finished Job and its pod are deleted after that.")


def security_note() -> str:
    """The header line on what the pod may do and where it may write."""
    return (f"Pod Security Standard 'restricted': uid/gid {RUN_AS_ID}, no privilege "
            "escalation, no capabilities, seccomp RuntimeDefault, read-only root filesystem. "
            f"Writable: {TMP_DIR} ({SCRATCH_SIZES['tmp']}) and HOME={HOME_DIR} "
            f"({SCRATCH_SIZES['home']}), emptyDirs; a job that writes elsewhere (beside its "
            "script, an output folder) needs a volume mounted there.")


__all__ = ["DEADLINE_FACTOR", "DEFAULT_DEADLINE_S", "HOME_DIR", "MIN_DEADLINE_S",
           "PLACEHOLDER_IMAGE", "PULL_POLICY", "RUN_AS_ID", "SCRATCH_SIZES", "SHM_DIR", "TMP_DIR",
           "TTL_AFTER_FINISHED_S", "container_security_context", "home_env", "image_tag",
           "job_deadline", "job_lifetime", "pinned_image", "pod_security_context",
           "scratch_volume", "security_note", "shm_size", "shm_volume", "writable_dirs"]
