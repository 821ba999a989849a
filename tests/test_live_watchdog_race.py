"""A restore never lands under a resize in flight (issue 73): when the watchdog (or the
process exiting) restores the largest allocation while the controller's resize patch is
still with kubectl, the old resize is cancelled and its patch waited for, so the restore's
patch is the later one, and nothing of the old resize (status reads, threads, affinity)
happens after it."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest

from optimizer.trials.live import LiveTrial
from optimizer.trials.live.controller import Controller
from optimizer.trials.live.plan import PhaseAllocation
from optimizer.trials.live.pod_resize import CANCELLED, PodResizer, ResizingTrial
from optimizer.trials.live.pod_spec import parse_quantity


class _SlowKubectl:
    """One pod; a patch asking for ``slow_cpu`` blocks until :attr:`release` is set, as a
    patch stuck on a slow API server would."""

    def __init__(self, slow_cpu: str, lag: bool = False) -> None:
        self.requests = {"cpu": "2", "memory": "4Gi"}
        self.lag = lag
        """The kubelet never catches up: the status keeps the first requests."""
        self.slow_cpu = slow_cpu
        self.release, self.blocked = threading.Event(), threading.Event()
        self.log: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def __call__(self, cmd, **kw):
        if cmd[1] == "patch":
            asked = json.loads(cmd[cmd.index("--patch") + 1])
            requests = asked["spec"]["containers"][0]["resources"]["requests"]
            if requests.get("cpu") == self.slow_cpu:
                self.blocked.set()
                assert self.release.wait(10)
            with self._lock:
                self.log.append(("patch", requests["cpu"]))
                self.requests.update(requests)  # the API server: the last patch holds
            return subprocess.CompletedProcess(cmd, 0, "patched", "")
        with self._lock:
            self.log.append(("get", self.requests["cpu"]))
            resources = {"limits": {"cpu": "2", "memory": "4Gi"},
                         "requests": dict(self.requests)}
        held = {"cpu": "2", "memory": "4Gi"} if self.lag else dict(resources["requests"])
        pod = {"spec": {"containers": [{"name": "training", "resources": resources}]},
               "status": {"containerStatuses": [{"name": "training", "resources": {
                   "requests": held}}]}}
        return subprocess.CompletedProcess(cmd, 0, json.dumps(pod), "")


class _Shrink:
    name = "shrink"

    def decide(self, phase, usage, elapsed_s, held):
        return PhaseAllocation(1, None), "a small stage"


@pytest.fixture
def job():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def test_the_restore_waits_for_the_patch_in_flight_and_lands_after_it(tmp_path, job):
    kubectl = _SlowKubectl(slow_cpu="1")
    live = LiveTrial(job.pid, tmp_path, monitor=SimpleNamespace(memory_limit_gb=None, rows=[]))
    resizer = PodResizer("job-x", "default", "training", runner=kubectl, trial_dir=tmp_path,
                         retries=2, interval_s=0.01, timeout_s=5.0)
    trial = ResizingTrial(live, resizer)
    ctl = Controller(trial, _Shrink(), lambda: "eval", cores=[0, 1],
                     initial=PhaseAllocation(2, None), largest=PhaseAllocation(2, None))
    changes: list = []
    step = threading.Thread(target=lambda: changes.extend(ctl.step()))
    step.start()
    assert kubectl.blocked.wait(5)  # the shrink's patch is with kubectl
    restored: list = []
    restore = threading.Thread(target=lambda: restored.extend(
        ctl.restore_largest("watchdog: hung", lock_timeout=0.05)))
    restore.start()
    time.sleep(0.3)
    # The restore neither went ahead of the patch in flight nor gave up on it.
    assert restore.is_alive() and [e for e in kubectl.log if e[0] == "patch"] == []
    kubectl.release.set()
    step.join(5)
    restore.join(5)
    assert not step.is_alive() and not restore.is_alive()
    patches = [cpu for verb, cpu in kubectl.log if verb == "patch"]
    assert patches[0] == "1" and parse_quantity(patches[-1]) > 1.5
    assert parse_quantity(kubectl.requests["cpu"]) > 1.5  # the pod ends at the largest
    # The shrink stopped at its patch: no status read of it, no threads moved for it.
    (shrink,) = changes
    assert shrink.status == CANCELLED and shrink.tasks == 0
    after = kubectl.log[kubectl.log.index(("patch", "1")) + 1:]
    assert after[0][0] == "patch" and parse_quantity(after[0][1]) > 1.5  # the restore's
    assert ctl.held.cpus == 2 and restored


def test_a_cancelled_resize_reads_no_status_after_its_patch(tmp_path):
    kubectl = _SlowKubectl(slow_cpu="never", lag=True)
    resizer = PodResizer("job-x", "default", "training", runner=kubectl, retries=3,
                         interval_s=0.01, sleep=lambda s: resizer.cancel())
    change = resizer.resize_to(1, None, cause="shrink")
    # One read of the spec before, the patch, one status read, then the cancel: no more.
    assert change.status == CANCELLED
    assert [v for v, _ in kubectl.log] == ["get", "patch", "get"]
    kubectl.lag = False
    assert resizer.resize_to(2, None, cause="restore").status == "applied"
