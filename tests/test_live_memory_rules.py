"""Live memory changes never kill a job whose peak fits (issue 62 part 3, VPA's habits): the
rules one by one, a resident-memory trace that dips then spikes driven through the controller
and the actuator, raises at once (a stage that needs more, a job growing into its limit), no
limit where there was none, and a pod's request never under resident memory with headroom."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from optimizer.foundation.memory import right_size_memory
from optimizer.trials.live import LiveTrial, read_changes
from optimizer.trials.live.controller import Controller, PlanDecider, wait_for
from optimizer.trials.live.memory_rules import (
    HEADROOM,
    MemoryPolicy,
    grow_to,
    memory_target,
    window_samples,
)
from optimizer.trials.live.plan import LivePlan, PhaseAllocation, PhaseEntry
from optimizer.trials.live.pod_resize import PodResizer, ResizingTrial
from optimizer.trials.live.pod_spec import parse_quantity

POLICY = MemoryPolicy(hold_s=2.0, window_s=2.0, min_samples=3)
ONE_SAMPLE = MemoryPolicy(hold_s=0.0, window_s=0.0, min_samples=1)
"""The rule the review found: a lower limit judged on the last sample alone."""


def _plan(fallback_gb: float, **phases: tuple[int, float | None]) -> LivePlan:
    return LivePlan(phases={k: PhaseEntry(PhaseAllocation(c, m)) for k, (c, m) in phases.items()},
                    fallback=PhaseAllocation(1, fallback_gb), interval_s=0.1, source="test")


# -- the rules, as numbers --------------------------------------------------------------------
def test_memory_target_raises_at_once_and_lowers_only_after_the_hold_down():
    # A stage that needs more gets it in the same decision, whatever the hold.
    assert memory_target(0.5, 1.0, 0.3, [0.3], True, 0.0, policy=POLICY)[0] == 1.0
    # ...but never above the largest allocation.
    assert memory_target(0.5, 3.0, 0.3, [0.3], True, 0.0, ceiling=2.0, policy=POLICY)[0] == 2.0
    # A job that has eaten its headroom is raised, by at least VPA's bump, before any stage.
    new, why = memory_target(1.0, 1.0, 0.9, [0.8, 0.9], True, 0.0, policy=POLICY)
    assert new == grow_to(1.0, 0.9) >= 1.2 and "raised at once" in why
    # Lower: not before the hold-down, nor on too few samples.
    assert memory_target(1.0, 0.2, 0.6, [0.6, 0.6, 0.6], True, 1.0, policy=POLICY)[0] == 1.0
    assert memory_target(1.0, 0.2, 0.6, [0.6, 0.6], True, 5.0, policy=POLICY)[0] == 1.0
    # Then to the stage's peak with headroom, not to what was asked...
    assert memory_target(1.0, 0.2, 0.6, [0.5, 0.5, 0.5], True, 5.0, policy=POLICY)[0] == \
        right_size_memory(0.6)
    # ...nor under the window's largest sample when the dip is the last one.
    assert memory_target(1.0, 0.2, None, [0.6, 0.6, 0.15], True, 5.0, policy=POLICY)[0] == \
        right_size_memory(0.6)
    # The stage's own value where its peak with headroom is below it.
    assert memory_target(1.0, 0.5, 0.1, [0.1, 0.1, 0.1], True, 5.0, policy=POLICY)[0] == 0.5
    # No limit at the start: none, whatever is asked or measured.
    assert memory_target(None, 0.5, 0.9, [0.9], False, 9.0, policy=POLICY)[0] is None
    assert memory_target(1.0, 0.5, 0.9, [0.9], False, 9.0, policy=POLICY)[0] is None


def test_the_window_is_the_last_seconds_of_samples():
    rows = [{"time_s": t, "mem_gb": m} for t, m in ((1.0, 0.9), (2.0, 0.5), (2.5, 0.2))]
    assert window_samples(rows, 3.0, 1.0) == [0.5, 0.2]
    assert window_samples(rows, 3.0, 5.0) == [0.9, 0.5, 0.2]
    assert window_samples([], 3.0, 5.0) == []


# -- a trace driven through the controller and the actuator -----------------------------------
class _Clock:
    t = 0.0


class _Monitor:
    """The trial monitor on a recorded trace: it kills the job, as the real one does, when a
    sample is above the limit."""

    def __init__(self, limit_gb: float | None) -> None:
        self.memory_limit_gb = limit_gb
        self.rows: list[dict[str, float]] = []
        self.killed_at: float | None = None

    def sample(self, t: float, mem_gb: float) -> None:
        self.rows.append({"time_s": t, "cpu_cores": 1.0, "mem_gb": mem_gb})
        if self.memory_limit_gb is not None and mem_gb > self.memory_limit_gb:
            self.killed_at = t


class _TraceTrial(LiveTrial):
    """A :class:`LiveTrial` whose clock and resident memory are a trace's."""

    def __init__(self, trial_dir, monitor: _Monitor, clock: _Clock) -> None:
        self.clock = clock
        super().__init__(os.getpid(), trial_dir, monitor=monitor, t0=0.0)

    def now(self) -> float:
        return round(self.clock.t, 3)

    def resident_gb(self) -> float | None:
        return self.monitor.rows[-1]["mem_gb"] if self.monitor.rows else None

    def set_cpus(self, cores, *, cause, phase=None):
        raise AssertionError("the trace tests keep one core")


def _drive(tmp_path, plan: LivePlan, stages, trace, *, limit_gb: float | None,
           policy: MemoryPolicy = POLICY):
    """Run ``trace`` (``(t, mem_gb)`` samples every 0.5 s) under ``plan`` with the stages
    ``[(t_start, name), ...]``; the controller decides every 0.1 s. Returns the monitor, the
    controller and ``(t, limit)`` after each decision."""
    clock = _Clock()
    monitor = _Monitor(limit_gb)
    live = _TraceTrial(tmp_path, monitor, clock)

    def stage_now():
        return [name for start, name in stages if start <= clock.t + 1e-9][-1]

    ctl = Controller(live, PlanDecider(plan), stage_now, cores=[0],
                     initial=PhaseAllocation(1, limit_gb), usage=lambda: monitor.rows,
                     memory_mode="limit", memory_policy=policy)
    samples = dict(trace)
    limits = []
    for tick in range(int(round(trace[-1][0] * 10)) + 1):
        clock.t = tick / 10
        if clock.t in samples:
            monitor.sample(clock.t, samples[clock.t])
            if monitor.killed_at is not None:
                break
        ctl.step()
        limits.append((clock.t, monitor.memory_limit_gb))
    return monitor, ctl, limits


def _trace(*spans: tuple[float, float, float]) -> list[tuple[float, float]]:
    """Samples every 0.5 s: ``(start, end, mem_gb)`` spans, end excluded."""
    out = []
    for start, end, mem in spans:
        t = start
        while t < end - 1e-9:
            out.append((round(t, 1), mem))
            t += 0.5
    return out


def test_a_dip_then_a_spike_is_never_killed(tmp_path):
    """Eval asks for 0.2 GB. At its start the job's memory dips to 0.15 GB for one sample and
    comes back to 0.65 GB within the hold-down; later in the stage, after the limit came down
    to the stage's peak with headroom, it dips and rebounds again. The limit is never below
    the rebound, and the job is never killed. The one-sample rule would have been."""
    plan = _plan(1.0, train=(1, 1.0), eval=(1, 0.2))
    stages = [(0.0, "train"), (6.0, "eval")]
    trace = _trace((0.0, 6.0, 0.6), (6.0, 6.5, 0.6), (6.5, 7.0, 0.15), (7.0, 12.0, 0.65),
                   (12.0, 12.5, 0.15), (12.5, 13.0, 0.7), (13.0, 16.0, 0.6))
    monitor, ctl, limits = _drive(tmp_path, plan, stages, trace, limit_gb=1.0)
    assert monitor.killed_at is None
    at = dict(limits)
    assert at[6.5] == 1.0 and at[7.0] == 1.0  # the dip at the stage's start let nothing in
    assert min(lim for t, lim in limits if t >= 6.0) >= right_size_memory(0.65) > 0.7
    assert limits[-1][1] < 1.0  # it did come down, to the stage's peak with headroom
    moves = [c for c in read_changes(tmp_path) if c.memory_limit_gb is not None]
    assert moves and all("peak" in c.cause or "raised at once" in c.cause for c in moves)
    # The rule the review found lowers to 0.2 GB at the dip, under the 0.65 GB rebound.
    assert memory_target(1.0, 0.2, None, [0.15], True, 0.5, policy=ONE_SAMPLE)[0] == 0.2


def test_a_job_growing_into_its_limit_is_raised_before_its_stage_is_reported(tmp_path):
    """The probe still says ``train`` while the job grows from 0.3 to 0.9 GB under a 0.5 GB
    limit: the limit is raised as it grows, never killed, up to the largest allocation."""
    plan = _plan(2.0, train=(1, 0.5))
    trace = [(round(0.5 * i, 1), round(0.3 + 0.025 * i, 4)) for i in range(25)]
    monitor, ctl, limits = _drive(tmp_path, plan, [(0.0, "train")], trace, limit_gb=0.5)
    assert monitor.killed_at is None and trace[-1][1] == pytest.approx(0.9)
    moves = [c for c in read_changes(tmp_path) if c.memory_limit_gb]
    assert all(c.phase == "train" for c in moves)  # no stage was ever reported but train
    raises = [c for c in moves if "raised at once" in c.cause]
    assert len(raises) >= 3 and raises[0].memory_limit_gb > 0.5
    assert max(lim for _, lim in limits) <= 2.0


def test_a_stage_that_needs_more_gets_it_in_the_same_decision(tmp_path):
    plan = _plan(2.0, startup=(1, 0.5), train=(1, 1.5))
    trace = _trace((0.0, 1.0, 0.3), (1.0, 2.0, 1.2))
    monitor, ctl, limits = _drive(tmp_path, plan, [(0.0, "startup"), (0.9, "train")], trace,
                                  limit_gb=0.5)
    assert monitor.killed_at is None
    assert dict(limits)[0.9] == 1.5  # the decision that saw the stage, no hold-down


def test_no_limit_is_introduced_where_there_was_none(tmp_path):
    """A job started without a memory limit keeps running without one: no stage, no growth
    and no restore gives it one."""
    plan = _plan(2.0, startup=(1, 0.3), train=(1, 1.0), eval=(1, 0.2))
    stages = [(0.0, "startup"), (1.0, "train"), (4.0, "eval")]
    trace = _trace((0.0, 1.0, 0.25), (1.0, 4.0, 0.9), (4.0, 8.0, 3.0))
    monitor, ctl, limits = _drive(tmp_path, plan, stages, trace, limit_gb=None)
    assert monitor.killed_at is None and all(lim is None for _, lim in limits)
    ctl.restore_largest("test")
    assert monitor.memory_limit_gb is None
    assert not [c for c in read_changes(tmp_path) if c.memory_limit_gb is not None]


def test_a_running_controller_raises_between_its_decisions(tmp_path):
    """A controller deciding every 30 s still raises a limit the job grows into within a
    fraction of a second: it reads the latest sample between decisions."""
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    monitor = SimpleNamespace(memory_limit_gb=0.5, rows=[])
    try:
        live = LiveTrial(job.pid, tmp_path, monitor=monitor)
        ctl = Controller(live, PlanDecider(_plan(2.0, train=(1, 0.5))), lambda: "train",
                         cores=[0], initial=PhaseAllocation(1, 0.5), interval_s=30.0,
                         usage=lambda: monitor.rows, memory_mode="limit", watch_s=0.02)
        ctl.start()
        time.sleep(0.2)
        monitor.rows.append({"time_s": live.now(), "cpu_cores": 1.0, "mem_gb": 0.47})
        t0 = time.monotonic()
        assert wait_for(lambda: monitor.memory_limit_gb > 0.5, 2.0)
        assert time.monotonic() - t0 < 1.0
        assert monitor.memory_limit_gb >= 0.47 * HEADROOM
        ctl.stop()
    finally:
        job.kill()
        job.wait()


# -- a pod's request ----------------------------------------------------------------------------
class _Kubectl:
    """The smallest kubectl: one pod whose container takes every resize at once."""

    def __init__(self) -> None:
        self.requests = {"cpu": "2", "memory": "4Gi"}
        self.patches: list[dict] = []

    def __call__(self, cmd, **kw):
        if cmd[1] == "patch":
            patch = json.loads(cmd[cmd.index("--patch") + 1])
            self.patches.append(patch)
            self.requests.update(patch["spec"]["containers"][0]["resources"]["requests"])
            return subprocess.CompletedProcess(cmd, 0, "patched", "")
        resources = {"limits": {"cpu": "2", "memory": "4Gi"}, "requests": dict(self.requests)}
        pod = {"spec": {"containers": [{"name": "training", "resources": resources}]},
               "status": {"containerStatuses": [{"name": "training", "resources": {
                   "requests": dict(self.requests)}}]}}
        return subprocess.CompletedProcess(cmd, 0, json.dumps(pod), "")


HOLDER = "\n".join([
    "import time",
    "held = b'x' * (200 * 2**20)  # written, so resident",
    "print('ready', flush=True)",
    "time.sleep(30)",
])


def test_a_pod_request_is_never_below_resident_memory_with_headroom(tmp_path):
    job = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout.readline().strip() == "ready"
        monitor = SimpleNamespace(memory_limit_gb=4.0, rows=[])
        live = LiveTrial(job.pid, tmp_path, monitor=monitor)
        kubectl = _Kubectl()
        trial = ResizingTrial(live, PodResizer("job-x", "default", "training", runner=kubectl,
                                               trial_dir=tmp_path, retries=0))
        held = live.resident_gb()
        assert held > 0.19
        change = trial.set_memory_request(0.05, cause="eval", phase="eval")
        asked = parse_quantity(change.requests["memory"]) / 2**30
        assert asked >= held * HEADROOM and "evicted first" in change.skipped[0]
        change = trial.set_allocation([0], 0.05, cause="save", phase="save")
        assert parse_quantity(change.requests["memory"]) / 2**30 >= held * HEADROOM
        # A recent sample above what the job holds now counts too (a dip is not the size).
        monitor.rows.append({"time_s": live.now(), "cpu_cores": 1.0, "mem_gb": 1.0})
        change = trial.set_memory_request(0.05, cause="eval", phase="eval")
        assert parse_quantity(change.requests["memory"]) / 2**30 >= 1.0 * HEADROOM
        # The monitor's limit in the pod has the same floor; the pod's limit is never patched.
        trial.set_memory_limit(0.05, cause="eval", phase="eval")
        assert monitor.memory_limit_gb >= 1.0 * HEADROOM
        assert all(set(p["spec"]["containers"][0]["resources"]) == {"requests"}
                   for p in kubectl.patches)
        # A request above the floor is asked as it is.
        change = trial.set_memory_request(3.0, cause="train", phase="train")
        assert change.requests["memory"] == "3Gi" and not change.skipped
    finally:
        job.kill()
        job.wait()
