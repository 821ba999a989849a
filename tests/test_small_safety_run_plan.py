"""``run --plan`` (issue 62 part 5): every run starts a fresh log (an earlier run's probe
events and control file are moved aside, not replayed), and the job dies with the wrapper."""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from optimizer.commands.run_plan import LOG_FILES, _set_aside
from optimizer.trials.live.plan import LivePlan, PhaseAllocation, PhaseEntry

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux process API")

# Training as the probe reports it: steps, through the probe's own writer (no torch to import).
STEPS = textwrap.dedent("""
    import time
    import _cloudopt_probe_state as probe
    end = time.time() + 1.5
    while time.time() < end:
        probe.STATE.emit({"e": "steps", "n": 8}, flush=True)
        time.sleep(0.05)
""")

# A job that never steps: it stays in start-up, and says whether it found a control file.
# Its probe's header goes out at once (the probe buffers events that are not stage changes).
IDLE = textwrap.dedent("""
    import os, time
    import _cloudopt_probe_state as probe
    print("control file there:", os.path.exists(os.environ["CLOUDOPT_PROBE_CONTROL"]), flush=True)
    probe.STATE.emit({"e": "mode", "train": False}, flush=True)
    time.sleep(1.0)
""")

# A job with a child of its own (like data-loader workers) that would run for minutes.
SLOW = textwrap.dedent("""
    import os, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    print(f"job={os.getpid()} child={child.pid} pgid={os.getpgrp()}", flush=True)
    time.sleep(300)
""")


def _plan(folder):
    plan = LivePlan(phases={"startup": PhaseEntry(PhaseAllocation(1, 0.5)),
                            "train": PhaseEntry(PhaseAllocation(1, 1.0))},
                    fallback=PhaseAllocation(1, 1.0), interval_s=0.2,
                    schedule=["startup", "train"], memory_max_gb=1.0)
    plan.save(folder)
    return folder


def _run_plan(plan_dir, logs, script):
    return [sys.executable, "-m", "optimizer", "run", "--plan", str(plan_dir), "--log-dir",
            str(logs), "--", sys.executable, str(script)]


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_gone(pids, timeout: float = 10.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids), [p for p in pids if _alive(p)]


def test_a_second_run_into_the_same_log_folder_sees_only_its_own_job(tmp_path):
    plan_dir = _plan(tmp_path / "run")
    logs = tmp_path / "logs"
    steps, idle = tmp_path / "steps.py", tmp_path / "idle.py"
    steps.write_text(STEPS)
    idle.write_text(IDLE)
    first = subprocess.run(_run_plan(plan_dir, logs, steps), capture_output=True, text=True,
                           timeout=120, stdin=subprocess.DEVNULL)
    assert first.returncode == 0, first.stderr
    assert "train" in json.loads((logs / "live-summary.json").read_text())["phases_seen"]
    # The thread order an earlier run's controller left (a plan of one core writes none here)
    (logs / "probe-control.json").write_text(json.dumps({"num_threads": 7, "seq": 3}))

    second = subprocess.run(_run_plan(plan_dir, logs, idle), capture_output=True, text=True,
                            timeout=120, stdin=subprocess.DEVNULL)
    assert second.returncode == 0, second.stderr
    assert "control file there: False" in second.stdout
    summary = json.loads((logs / "live-summary.json").read_text())
    assert set(summary["phases_seen"]) == {"startup"}, summary["phases_seen"]
    events = [json.loads(line) for line in (logs / "probe.jsonl").read_text().splitlines()]
    assert [e["e"] for e in events].count("header") == 1
    assert not any(e["e"] == "steps" for e in events)
    # The first run's log is kept, whole, beside it
    (earlier,) = (logs / "earlier").iterdir()
    assert "moved to" in second.stderr and str(earlier) in second.stderr
    assert {p.name for p in earlier.iterdir()} >= {"probe.jsonl", "probe-control.json",
                                                   "live-summary.json", "trace.csv"}
    old = json.loads((earlier / "live-summary.json").read_text())
    assert "train" in old["phases_seen"]


def test_set_aside_keeps_each_earlier_run_apart(tmp_path):
    assert _set_aside(tmp_path, quiet=True) is None  # a fresh folder: nothing to move
    kept = []
    for run in range(2):  # two runs that ended within the same second
        for name in LOG_FILES:
            (tmp_path / name).write_text(f"run {run}")
            os.utime(tmp_path / name, (1_700_000_000, 1_700_000_000))
        kept.append(_set_aside(tmp_path, quiet=True))
    assert kept[0] != kept[1] and kept[0].parent == kept[1].parent == tmp_path / "earlier"
    assert not any((tmp_path / name).exists() for name in LOG_FILES)
    for run, folder in enumerate(kept):
        assert {p.read_text() for p in folder.iterdir()} == {f"run {run}"}


def test_the_job_and_its_children_die_with_the_wrapper(tmp_path):
    plan_dir = _plan(tmp_path / "run")
    script = tmp_path / "slow.py"
    script.write_text(SLOW)
    wrapper = subprocess.Popen(_run_plan(plan_dir, tmp_path / "logs", script),
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)
    pids = []
    try:
        line = wrapper.stdout.readline()  # the job's own output passes through
        found = re.search(r"job=(\d+) child=(\d+) pgid=(\d+)", line)
        assert found, line
        job, child, pgid = (int(g) for g in found.groups())
        pids = [job, child]
        assert pgid == job != os.getpgrp()  # a group of its own, which the watchdog ends
        os.kill(wrapper.pid, signal.SIGKILL)  # no chance to clean up
        wrapper.wait(timeout=10)
        _wait_gone(pids)
    finally:
        for pid in [wrapper.pid, *pids]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        wrapper.stdout.close()


def test_in_a_terminal_the_job_keeps_the_foreground_group_and_still_dies(tmp_path):
    """A terminal's foreground job: the job stays in the shell's job (Ctrl-C, Ctrl-Z and
    reads of the terminal reach it) and still dies when the wrapper is killed."""
    plan_dir = _plan(tmp_path / "run")
    script = tmp_path / "slow.py"
    script.write_text(SLOW)
    pid, fd = pty.fork()  # the child leads a session on a new terminal: its foreground job
    if pid == 0:  # pragma: no cover - the forked child
        try:
            os.execv(sys.executable, _run_plan(plan_dir, tmp_path / "logs", script))
        finally:
            os._exit(127)
    pids, out = [], b""
    try:
        deadline = time.time() + 60
        while not re.search(rb"job=\d+ child=\d+ pgid=\d+", out) and time.time() < deadline:
            try:
                out += os.read(fd, 4096)
            except OSError:  # the terminal closed: the wrapper is gone
                break
        found = re.search(rb"job=(\d+) child=(\d+) pgid=(\d+)", out)
        assert found, out
        job, child, pgid = (int(g) for g in found.groups())
        pids = [job, child]
        assert pgid == os.getpgid(pid) == pid  # the wrapper's group: the terminal's job
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        _wait_gone([job])  # the parent-death signal; the terminal's hang-up ends the rest
    finally:
        for p in [pid, *pids]:
            if _alive(p):
                os.kill(p, signal.SIGKILL)
        os.close(fd)
