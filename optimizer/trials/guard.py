"""A trial's script never outlives the optimizer that started it.

The script runs in its own session (so :func:`optimizer.trials.monitor.kill_tree` can end its whole
tree), which also means nothing ends it when the optimizer itself dies: ``kill -9``, an OOM kill
or a crash would leave a training job running with no time box and no memory limit. Two layers
close that gap on every path:

1. **Parent-death signal.** Between fork and exec the child asks Linux (``PR_SET_PDEATHSIG``)
   for SIGKILL when its parent dies. This covers the script itself, instantly.
2. **Watchdog.** A tiny process (:data:`_WATCHDOG`, plain Python without site imports) holds
   the read end of a pipe whose write end only the optimizer has. When the optimizer dies, for
   any reason, the kernel closes that end; the watchdog reads EOF and kills the script's whole
   process group (its data-loader workers, its shell children). A normal end writes ``done``
   first, and the watchdog leaves quietly.

Each trial's ``.work/`` folder records who owns it (:data:`OWNER_FILE`). A later run over the same
run folder (``--resume``) ends any process group still alive there from an optimizer that was
killed before these guards existed, and removes the stale folder (:func:`clean_stale_work`).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psutil

from optimizer.foundation.atomic_files import atomic_write_json, read_json
from optimizer.foundation.errors import CloudoptError

OWNER_FILE = "owner.json"
PR_SET_PDEATHSIG = 1

# argv: the process group to end. stdin: the pipe. Grace of 2 s between SIGTERM and SIGKILL.
_WATCHDOG = (
    "import os, signal, sys, time\n"
    "pgid = int(sys.argv[1])\n"
    "if sys.stdin.buffer.read() == b'done':\n"
    "    sys.exit(0)\n"
    "for sig in (signal.SIGTERM, signal.SIGKILL):\n"
    "    try:\n"
    "        os.killpg(pgid, sig)\n"
    "    except ProcessLookupError:\n"
    "        sys.exit(0)\n"
    "    time.sleep(2)\n"
)


def _libc_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # pragma: no cover - a libc without prctl
        return None


_PRCTL = _libc_prctl()  # looked up once, before any fork: the child only calls it


def die_with_parent(parent_pid: int) -> None:
    """In a forked child: SIGKILL this process when ``parent_pid`` ends (Linux only)."""
    if _PRCTL is None:
        return
    _PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os.kill(os.getpid(), signal.SIGKILL)


class Watchdog:
    """Ends process group ``pgid`` if this process dies before :meth:`release`."""

    def __init__(self, pgid: int):
        self.pgid = pgid
        self._proc = subprocess.Popen(
            [sys.executable, "-S", "-c", _WATCHDOG, str(pgid)], stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    @property
    def pid(self) -> int:
        return self._proc.pid

    def release(self) -> None:
        """The trial ended under our control: let the watchdog go without killing anything."""
        if self._proc.stdin is not None and not self._proc.stdin.closed:
            try:
                self._proc.stdin.write(b"done")
                self._proc.stdin.close()
            except BrokenPipeError:  # it is gone already
                pass
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - a stuck watchdog
            self._proc.kill()
            self._proc.wait()


def record_owner(work: Path, pid: int) -> None:
    """Write who runs in ``work``: the script's pid (its process group) and its start time."""
    try:
        created = psutil.Process(pid).create_time()
    except psutil.NoSuchProcess:
        created = None
    atomic_write_json(work / OWNER_FILE, {"pid": pid, "pgid": pid, "created": created,
                                          "optimizer_pid": os.getpid()})


def _still_running(owner: dict) -> bool:
    try:
        proc = psutil.Process(int(owner["pid"]))
        return owner.get("created") is None or abs(proc.create_time() - owner["created"]) < 1e-3
    except (psutil.NoSuchProcess, KeyError, TypeError, ValueError):
        return False


def clean_stale_work(trials_dir: Path) -> list[str]:
    """End what still runs in unfinished trial folders of ``trials_dir`` and remove their
    ``.work/``; returns one line per folder cleaned. Call before a run or a resume starts
    trials there (a live optimizer on the same folder is the user's error, not ours)."""
    lines = []
    for work in sorted(Path(trials_dir).glob("*/.work")):
        owner_path = work / OWNER_FILE
        try:
            owner = read_json(owner_path) if owner_path.is_file() else {}
        except CloudoptError:  # cut short while written: nothing to end, only to remove
            owner = {}
        killed = ""
        if owner and _still_running(owner):
            try:
                os.killpg(int(owner["pgid"]), signal.SIGKILL)
                killed = f", ended its process group {owner['pgid']} still running"
            except (ProcessLookupError, PermissionError):
                pass
        shutil.rmtree(work, ignore_errors=True)
        lines.append(f"{work.parent.name}: removed an interrupted trial's work folder{killed}")
    return lines


__all__ = ["OWNER_FILE", "Watchdog", "clean_stale_work", "die_with_parent", "record_owner"]
