"""Resizing the job's own pod in place, through its ``resize`` subresource.

Inside a pod, the live controller's changes also go to the container's requests (``kubectl
patch pod P --subresource resize --type strategic``); the limits stay at the plan's largest
phase, so the pod stays Burstable (its QoS class cannot change in place). The kubelet says
how it went in the pod's conditions (Kubernetes 1.33 on; ``status.resize`` in 1.27-1.32):

* ``PodResizePending``, reason ``Deferred``: feasible, not on this node now. The kubelet
  retries by itself, so the resizer only reads the status again, every interval, a few times;
* ``PodResizePending``, reason ``Infeasible``: never on this node. The request goes back to
  what the container has: the job keeps its size;
* ``PodResizeInProgress``: the kubelet is applying it (reason ``Error``: it failed, and retries).

A shrink always fits; a grow can be Deferred. A memory request never goes below the job's
resident memory with headroom (:class:`ResizingTrial`), and the container's limit is never
patched (it stays the plan's largest). The job's intra-op threads (the probe's control
file) and CPU affinity follow unless the pod kept its size: a deferred grow lacks only the
guarantee under contention, as the limit already lets the container use the cores. kubectl
failing (missing, forbidden, an old server) is logged with its stderr, never raised.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from optimizer.foundation.atomic_files import atomic_write_json
from optimizer.trials.live.actuators import Change, LiveTrial, append_change, set_tree_affinity
from optimizer.trials.live.plan import PhaseAllocation
from optimizer.trials.live.pod_spec import container_of, pod_requests, resize_patch, resize_state

KEPT = ("infeasible", "failed")
"""Outcomes after which the container still has its old requests."""
CANCELLED = "cancelled"
"""A resize a restore took over (:meth:`PodResizer.cancel`): its patch went out, nothing
after it (status reads, a put-back, threads) is done."""
_UNSETTLED = ("deferred", "in-progress", "sent")


class KubectlError(RuntimeError):
    """kubectl could not be run, exited non-zero or printed what is not a pod."""


class PodResizer:
    """Resizes one container of a pod in place with kubectl, logging every outcome.

    Parameters
    ----------
    pod, namespace, container
        The pod (the job's own: ``POD_NAME`` and ``POD_NAMESPACE`` from the downward API) and
        the container to resize.
    kubectl
        The kubectl command (1.32 or later: ``--subresource resize``).
    runner
        ``subprocess.run`` or a stand-in with its signature (tests pass a fake kubectl).
    trial_dir
        Where ``changes.jsonl`` goes; None: outcomes are returned, not logged.
    control_file
        The probe's control file: the job's intra-op threads follow the cores asked.
    limits
        The container's limits; None: read from the pod at the first resize.
    retries
        Status reads after the first while the kubelet has not settled the resize.
    interval_s
        Seconds between those reads (the controller's interval).
    """

    def __init__(self, pod: str, namespace: str, container: str, kubectl: str = "kubectl",
                 runner: Callable[..., subprocess.CompletedProcess] = subprocess.run, *,
                 trial_dir: str | os.PathLike | None = None,
                 control_file: str | os.PathLike | None = None,
                 limits: Mapping[str, str] | None = None, retries: int = 3,
                 interval_s: float = 1.0, timeout_s: float = 30.0,
                 sleep: Callable[[float], None] = time.sleep, t0: float | None = None) -> None:
        self.pod, self.namespace, self.container = pod, namespace, container
        self.kubectl, self.runner = kubectl, runner
        self.trial_dir = Path(trial_dir) if trial_dir is not None else None
        self.control_file = Path(control_file) if control_file is not None else None
        self.limits = dict(limits) if limits is not None else None
        self.retries, self.interval_s, self.timeout_s = retries, interval_s, timeout_s
        self.sleep, self.t0 = sleep, time.monotonic() if t0 is None else t0
        self.requests: dict[str, str] | None = None
        """The spec's requests as last patched (None until read or patched)."""
        self._seq = 0
        self._calls = threading.Lock()
        """One kubectl call at a time: a restore's patch reaches the API server after the
        patch in flight, never before it (the later patch is the one that holds)."""
        self._generation = 0

    def cancel(self) -> None:
        """Stop the resize under way after its kubectl call in flight: a restore takes over
        (the watchdog, the process exiting), and a status read, put-back or thread change
        of the old resize must not land after it."""
        self._generation += 1

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 3)

    def resize(self, allocation: PhaseAllocation, *, cause: str,
               phase: int | str | None = None, log: bool = True) -> Change:
        """Ask for ``allocation``'s cores and memory; the outcome is in ``Change.status``."""
        return self.resize_to(allocation.cpus, allocation.memory_gb, cause=cause, phase=phase,
                              log=log)

    def resize_to(self, cpus: int | None, memory_gb: float | None, *, cause: str,
                  phase: int | str | None = None, log: bool = True) -> Change:
        """As :meth:`resize`; None keeps that resource's request as it is."""
        change = Change(self.now(), cause, phase, memory_request_gb=memory_gb,
                        status="failed")
        generation = self._generation
        try:
            if self.limits is None or self.requests is None:
                spec = container_of(self._get(), self.container, "spec")
                if spec is None:
                    raise KubectlError(f"pod {self.pod} has no container {self.container!r} "
                                       "(set CONTAINER_NAME to its name)")
                resources = spec.get("resources") or {}
                self.limits = self.limits if self.limits is not None else dict(
                    resources.get("limits") or {})
                self.requests = dict(resources.get("requests") or {})
            before = dict(self.requests or {})
            change.requests = pod_requests(cpus, memory_gb, self.limits, before)
            self._patch(change.requests)
        except KubectlError as exc:
            change.skipped.append(str(exc))
            return self._done(change, log)
        self.requests = dict(change.requests)
        if generation != self._generation:
            change.status = CANCELLED
            change.skipped.append("patched; a restore took over before its status was read")
            return self._done(change, log)
        change.status, message, pod = self._settle(change, generation)
        if message:
            change.skipped.append(message)
        if change.status == CANCELLED:
            change.skipped.append("a restore took over while its status was read")
        elif change.status == "infeasible":
            self._keep(change, pod, before)
        elif cpus is not None and self.control_file is not None:
            self._seq += 1
            change.num_threads = int(cpus)
            atomic_write_json(self.control_file, {"num_threads": change.num_threads,
                                                  "seq": self._seq})
        return self._done(change, log)

    def _settle(self, change: Change, generation: int | None = None
                ) -> tuple[str, str, dict[str, Any] | None]:
        state, message, pod = "sent", "", None
        for attempt in range(self.retries + 1):
            if attempt:
                self.sleep(self.interval_s)
            if generation is not None and generation != self._generation:
                return CANCELLED, "", pod
            try:
                pod = self._get()
            except KubectlError as exc:
                return "sent", f"patched; its status could not be read: {exc}", None
            change.attempts = attempt + 1
            state, message = resize_state(pod, self.container, change.requests or {})
            if state not in _UNSETTLED:
                break
        return state, message, pod

    def _keep(self, change: Change, pod: dict[str, Any] | None, before: dict[str, str]) -> None:
        """Put the request back to what the container has, so the spec says what it holds."""
        status = (container_of(pod or {}, self.container, "status") or {}).get("resources") or {}
        back = {k: v for k, v in (status.get("requests") or before).items()
                if k in ("cpu", "memory")}
        if not back:
            change.skipped.append("the container's current requests are unknown: not put back")
            return
        try:
            self._patch(back)
            self.requests = back
            change.skipped.append(f"kept at {json.dumps(back, sort_keys=True)}")
        except KubectlError as exc:
            change.skipped.append(f"could not put the request back: {exc}")

    def _patch(self, requests: Mapping[str, str]) -> None:
        self._kubectl("patch", "pod", self.pod, "-n", self.namespace, "--subresource", "resize",
                      "--type", "strategic", "--patch",
                      json.dumps(resize_patch(self.container, requests)))

    def _get(self) -> dict[str, Any]:
        out = self._kubectl("get", "pod", self.pod, "-n", self.namespace, "-o", "json")
        try:
            pod = json.loads(out)
        except ValueError:
            pod = None
        if not isinstance(pod, dict):
            raise KubectlError(f"kubectl get pod {self.pod}: not a pod: {out[:200]!r}")
        return pod

    def _kubectl(self, *args: str) -> str:
        cmd = [self.kubectl, *args]
        try:
            with self._calls:
                proc = self.runner(cmd, capture_output=True, text=True,
                                   timeout=self.timeout_s, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            raise KubectlError(f"kubectl {args[0]}: cannot run {self.kubectl!r}: {exc}") from None
        if proc.returncode != 0:
            err = (proc.stderr or proc.stdout or "").strip()
            raise KubectlError(f"kubectl {args[0]} exited {proc.returncode}: {err}")
        return proc.stdout or ""

    def _done(self, change: Change, log: bool) -> Change:
        if log and self.trial_dir is not None:
            append_change(self.trial_dir, change)
        return change


class ResizingTrial:
    """A :class:`LiveTrial` whose CPU and memory-request changes also resize its pod: the
    actuator ``python -m optimizer run --plan`` hands the controller inside a pod. One line
    per change in ``changes.jsonl``; CPU affinity and threads move unless the pod kept its
    size; a memory limit stays the monitor's (the pod's is the largest phase's).

    A memory request is never asked below the job's resident memory with headroom
    (:meth:`LiveTrial.resident_floor_gb`: now and over the monitor's last samples): under
    node memory pressure the kubelet evicts first the pods above their requests, and a Job
    with ``backoffLimit: 0`` ends with its pod. The monitor's limit has the same floor
    (:meth:`LiveTrial.set_memory_limit`)."""

    request_evicts = True
    """Holding more than its request puts the pod first in line for eviction: the
    controller's memory rules apply to the request (raised at once, lowered late)."""

    def __init__(self, live: LiveTrial, resizer: PodResizer) -> None:
        self.live, self.resizer = live, resizer
        self.root_pid = live.root_pid
        resizer.t0 = live.t0  # one clock for the log

    @property
    def had_limit(self) -> bool:
        return self.live.had_limit

    @property
    def patch_timeout_s(self) -> float:
        """The longest a resize's kubectl call in flight can take (kubectl's time box)."""
        return self.resizer.timeout_s + 1.0

    def cancel_pending(self) -> None:
        """A restore takes over: the resize under way stops after its call in flight."""
        self.resizer.cancel()

    def enforced_limit_gb(self) -> float | None:
        return self.live.enforced_limit_gb()

    def now(self) -> float:
        return self.live.now()

    def log(self, change: Change) -> Change:
        return self.live.log(change)

    def request_floor(self, memory_gb: float | None) -> tuple[float | None, str]:
        """``memory_gb`` raised to the job's resident memory with headroom where it is
        below, and what was done (empty: nothing)."""
        if memory_gb is None:
            return None, ""
        floor = self.live.resident_floor_gb()
        if floor is None or memory_gb >= floor:
            return memory_gb, ""
        return floor, (f"asked a {memory_gb:g} GB request under the job's resident memory "
                       f"with headroom: asked {floor:.3f} GB instead (a pod above its request "
                       "is evicted first)")

    def set_cpus(self, cores: Sequence[int], *, cause: str,
                 phase: int | str | None = None) -> Change:
        return self.set_allocation(cores, None, cause=cause, phase=phase)

    def set_allocation(self, cores: Sequence[int], memory_gb: float | None, *, cause: str,
                       phase: int | str | None = None) -> Change:
        """Cores and memory request in one resize patch (a phase change is one patch, so the
        pod is never seen half-resized); affinity and threads follow unless the pod kept its
        size. The request is never below the job's resident memory with headroom."""
        cores = sorted(set(cores))
        memory_gb, note = self.request_floor(memory_gb)
        change = self.resizer.resize_to(len(cores), memory_gb, cause=cause, phase=phase,
                                        log=False)
        if note:
            change.skipped.insert(0, note)
        if change.status not in (*KEPT, CANCELLED):
            change.tasks, skipped = set_tree_affinity(self.live.root_pid, cores)
            change.cpus = cores
            change.skipped += skipped
        return self.live.log(change)

    def set_memory_request(self, gb: float, *, cause: str,
                           phase: int | str | None = None) -> Change:
        """The pod's memory request, never below the job's resident memory with headroom."""
        asked, note = self.request_floor(gb)
        change = self.resizer.resize_to(None, asked, cause=cause, phase=phase, log=False)
        if note:
            change.skipped.insert(0, note)
        return self.live.log(change)

    def set_memory_limit(self, gb: float, *, cause: str,
                         phase: int | str | None = None) -> Change | None:
        return self.live.set_memory_limit(gb, cause=cause, phase=phase)


__all__ = ["CANCELLED", "KEPT", "KubectlError", "PodResizer", "ResizingTrial"]
