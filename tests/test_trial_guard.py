"""No training process outlives the optimizer: kill -9, SIGINT, SIGTERM, stale work folders."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest

from optimizer.trials.guard import OWNER_FILE, clean_stale_work

# A script that would run for minutes and has a child of its own (like DataLoader workers).
SLOW = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
print(f"child_pid={child.pid}", flush=True)
for i in range(3000):
    time.sleep(0.1)
    print(f"step {i} 100.0 samples/s", flush=True)
"""

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux process API")


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _running_trial(out):
    """(script pid, its child's pid) once the first trial has started its child."""
    for owner in out.glob("trials/*/.work/" + OWNER_FILE):
        log = (owner.parent / "stdout.log")
        found = re.search(r"child_pid=(\d+)", log.read_text()) if log.exists() else None
        if found:
            return json.loads(owner.read_text())["pid"], int(found.group(1))
    return None


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_no_training_process_outlives_the_optimizer(tmp_path, repo_root, sig):
    script = tmp_path / "slow.py"
    script.write_text(SLOW)
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "optimizer", "--train-file", str(script), "--preference", "cost",
         "--baseline-samples", "2", "--probe-seconds", "120", "--total-samples", "1000",
         "--output", str(out), "--quiet"],
        cwd=repo_root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        # Ctrl-C as a terminal delivers it: a suite started in the background of a
        # non-interactive shell inherits SIGINT ignored, and Python keeps it ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    script_pid = child_pid = None
    try:
        script_pid, child_pid = _wait_for(lambda: _running_trial(out), 60, "the first trial")
        assert _alive(script_pid) and _alive(child_pid)
        os.kill(proc.pid, sig)  # the optimizer alone, not its process group
        proc.wait(timeout=30)
        _wait_for(lambda: not _alive(script_pid) and not _alive(child_pid), 10,
                  f"the training processes to end after {sig.name}")
    finally:
        for pid in (proc.pid, script_pid, child_pid):
            if pid and _alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def sleeper():
    """A process in its own session, as a training process left behind would be."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                            start_new_session=True)
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def _owned_work(tmp_path, name: str, pid: int, created: float):
    work = tmp_path / "trials" / name / ".work"
    work.mkdir(parents=True)
    (work / OWNER_FILE).write_text(json.dumps({"pid": pid, "pgid": pid, "created": created}))
    return work


def test_stale_work_folder_is_ended_and_removed(tmp_path, sleeper):
    # A training process left by an optimizer killed before the guards existed.
    work = _owned_work(tmp_path, "00-g0-c1-m4-b32", sleeper.pid,
                       psutil.Process(sleeper.pid).create_time())
    done = tmp_path / "trials" / "01-g0-c2-m8-b32"
    done.mkdir()
    (done / "summary.json").write_text("{}")
    lines = clean_stale_work(tmp_path / "trials")
    assert sleeper.wait(timeout=10) == -signal.SIGKILL
    assert not work.exists() and done.exists()
    assert len(lines) == 1 and "00-g0-c1-m4-b32" in lines[0] and str(sleeper.pid) in lines[0]


def test_owner_of_another_process_is_not_killed(tmp_path, sleeper):
    """A recorded pid that now belongs to another process (reused) is left alone."""
    work = _owned_work(tmp_path, "t", sleeper.pid, created=1.0)
    lines = clean_stale_work(tmp_path / "trials")
    assert sleeper.poll() is None and not work.exists()
    assert "ended" not in lines[0]
