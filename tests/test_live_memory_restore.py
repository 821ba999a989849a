"""A controller that dies mid-stage never leaves a later, larger stage to be killed (issue 62
part 3): the job gets the plan's largest allocation back (cores and memory limit) whether the
controller's loop raised, its thread hung, or it died before it could restore (the watchdog
does it then), and the job completes under the real monitor's limit."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from types import SimpleNamespace

import pytest

from optimizer.trials.live import LiveTrial, read_changes
from optimizer.trials.live.controller import Controller, PlanDecider, wait_for
from optimizer.trials.live.memory_rules import MemoryPolicy
from optimizer.trials.live.plan import LivePlan, PhaseAllocation, PhaseEntry
from optimizer.trials.monitor import ProcessMonitor

needs_two_cores = pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs CPU affinity and two cores")

JOB = textwrap.dedent("""
    import os, sys, time
    stage, go = sys.argv[1], sys.argv[2]
    def enter(name):  # the stage the controller reads (the probe's, in a real job)
        with open(stage + ".tmp", "w") as fh:
            fh.write(name)
        os.replace(stage + ".tmp", stage)
    enter("small")
    end = time.time() + 20
    while not os.path.exists(go) and time.time() < end:
        time.sleep(0.02)
    enter("large")
    held = b"x" * (200 * 2**20)  # the larger stage: 200 MB more, at once
    time.sleep(0.6)
    print("done", flush=True)
""")

PLAN = LivePlan(phases={"small": PhaseEntry(PhaseAllocation(1, 0.08)),
                        "large": PhaseEntry(PhaseAllocation(2, 0.5))},
                fallback=PhaseAllocation(2, 0.5), interval_s=0.05, source="test")
"""``small`` fits a bare interpreter; 200 MB more is killed at its limit, not at the plan's
largest (0.5 GB)."""


class Dying:
    """The plan's decider until ``die`` is set; then it raises, or hangs until ``release``."""

    name = "plan"

    def __init__(self, how: str) -> None:
        self.plan = PLAN
        self.inner = PlanDecider(PLAN)
        self.how = how
        self.die = threading.Event()
        self.release = threading.Event()

    def decide(self, phase, usage, elapsed_s, held):
        if self.die.is_set():
            if self.how == "hung":
                self.release.wait(30)
            raise RuntimeError("the controller's model is gone")
        return self.inner.decide(phase, usage, elapsed_s, held)


class RestoreFailsOnce(LiveTrial):
    """The actuator fails the first restore (the controller's own, in its ``finally``): its
    thread ends with the job still small, as a thread killed mid-way would leave it."""

    failed = False

    def set_cpus(self, cores, *, cause, phase=None):
        if "restore" in cause and not self.failed:
            self.failed = True
            raise OSError("affinity: the controller's thread was killed here")
        return super().set_cpus(cores, cause=cause, phase=phase)


def _stage(path):
    def read():
        try:
            return path.read_text() or None
        except OSError:
            return None
    return read


@needs_two_cores
@pytest.mark.parametrize("how", ["exception", "hung", "restore-fails"])
def test_a_controller_killed_mid_stage_leaves_the_job_its_largest_allocation(tmp_path, how):
    script = tmp_path / "job.py"
    stage = tmp_path / "stage"
    go = tmp_path / "go"
    script.write_text(JOB)
    cores = sorted(os.sched_getaffinity(0))[:2]
    job = subprocess.Popen([sys.executable, str(script), str(stage), str(go)],
                           stdout=subprocess.PIPE, text=True)
    monitor = ProcessMonitor(job.pid, tmp_path / "trace.csv", interval=0.1,
                             memory_limit_gb=0.5)
    monitor.start()
    decider = Dying(how)
    actuator = RestoreFailsOnce if how == "restore-fails" else LiveTrial
    live = actuator(job.pid, tmp_path, monitor=monitor)
    ctl = Controller(live, decider, _stage(stage), cores=cores,
                     initial=PhaseAllocation(2, 0.5), interval_s=0.05,
                     usage=lambda: monitor.rows, alive=lambda: job.poll() is None,
                     memory_mode="limit", stall_s=0.5 if how == "hung" else 30.0,
                     memory_policy=MemoryPolicy(hold_s=0.3, window_s=0.3, min_samples=2))
    try:
        ctl.start()
        # The small stage: one core, and after the hold-down the small memory limit.
        assert wait_for(lambda: ctl.held == PhaseAllocation(1, 0.08), 10.0), ctl.held
        assert monitor.memory_limit_gb == 0.08 and os.sched_getaffinity(job.pid) == {cores[0]}
        decider.die.set()  # mid-stage
        assert wait_for(lambda: monitor.memory_limit_gb == 0.5, 10.0), "not restored"
        assert wait_for(lambda: os.sched_getaffinity(job.pid) == set(cores), 5.0)
        go.touch()  # the larger stage, with no controller to raise anything
        out, _ = job.communicate(timeout=30)
        assert job.returncode == 0 and out.strip() == "done", "the larger stage was killed"
        assert not monitor.oom
        restores = [c for c in read_changes(tmp_path) if "restore the largest" in c.cause]
        assert any(c.memory_limit_gb == 0.5 for c in restores)
        if how == "exception":
            assert "the controller's model is gone" in (ctl.error or "")
            assert ctl.watchdog.fired is None  # the controller's own finally restored
        else:
            assert ctl.watchdog.fired is not None  # the watchdog noticed and restored
            assert ("hung" in ctl.watchdog.fired) == (how == "hung")
    finally:
        decider.release.set()
        if job.poll() is None:
            job.kill()
        job.wait()
        ctl.stop()
        monitor.stop()


def test_the_process_exiting_restores_the_largest_allocation(tmp_path):
    """The wrapper's process exiting with the job still running (its atexit hook): the job
    gets the largest memory limit back, and the controller stops acting."""
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        monitor = SimpleNamespace(memory_limit_gb=0.5, rows=[])
        live = LiveTrial(job.pid, tmp_path, monitor=monitor)
        ctl = Controller(live, PlanDecider(PLAN), lambda: "small", cores=[0],
                         initial=PhaseAllocation(1, 0.5), memory_mode="limit",
                         memory_policy=MemoryPolicy(hold_s=0.0, window_s=1.0, min_samples=0))
        ctl.step()
        assert monitor.memory_limit_gb == 0.08
        ctl._at_exit()
        assert monitor.memory_limit_gb == 0.5 and ctl.retired
        assert ctl.step() == []  # retired: it acts no more
    finally:
        job.kill()
        job.wait()
