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

from optimizer.trial_guard import OWNER_FILE, clean_stale_work

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
        cwd=repo_root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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


def test_stale_work_folder_is_ended_and_removed(tmp_path):
    work = tmp_path / "trials" / "00-g0-c1-m4-b32" / ".work"
    work.mkdir(parents=True)
    # A training process left by an optimizer killed before the guards existed.
    stale = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                             start_new_session=True)
    try:
        created = psutil.Process(stale.pid).create_time()
        (work / OWNER_FILE).write_text(json.dumps({"pid": stale.pid, "pgid": stale.pid,
                                                   "created": created}))
        done = tmp_path / "trials" / "01-g0-c2-m8-b32"
        done.mkdir()
        (done / "summary.json").write_text("{}")
        lines = clean_stale_work(tmp_path / "trials")
        assert stale.wait(timeout=10) == -signal.SIGKILL
        assert not work.exists() and done.exists()
        assert len(lines) == 1 and "00-g0-c1-m4-b32" in lines[0] and str(stale.pid) in lines[0]
    finally:
        if stale.poll() is None:
            stale.kill()


def test_owner_of_another_process_is_not_killed(tmp_path):
    """A recorded pid that now belongs to another process (reused) is left alone."""
    work = tmp_path / "trials" / "t" / ".work"
    work.mkdir(parents=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                             start_new_session=True)
    try:
        (work / OWNER_FILE).write_text(json.dumps({"pid": other.pid, "pgid": other.pid,
                                                   "created": 1.0}))
        lines = clean_stale_work(tmp_path / "trials")
        assert other.poll() is None and not work.exists()
        assert "ended" not in lines[0]
    finally:
        other.kill()
        other.wait()
