"""Changing a running trial's resources: the actuators a live controller drives.

* CPUs: the affinity of every thread of every process in the trial's tree
  (``os.sched_setaffinity`` per task: a process's affinity is per thread on Linux, and threads
  a pool started earlier keep the old mask), and the job's intra-op threads through the
  probe's control file (``torch.set_num_threads`` from the training thread: a thread pool
  does not notice that its cores went away, and would oversubscribe the ones left).
* Memory: the limit the monitor enforces (:class:`optimizer.trials.monitor.ProcessMonitor`).
  A raise applies at once; a lower limit never goes under the largest resident memory of the
  tree (now, and the monitor's samples of the last seconds) with headroom, and a job started
  without a limit never gets one (:mod:`optimizer.trials.live.memory_rules` has the rules
  and why), so a change never kills a job whose peak fits.

GPU count, data-loader workers and the batch size cannot change under a running script; they
stay as the trial started them. Every change is one JSON line in ``changes.jsonl`` of the
trial folder: its time, the cause, the phase it answered and what was applied.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from optimizer.foundation.atomic_files import atomic_write_json
from optimizer.trials.live.memory_rules import HOLD_S, resident_floor, window_samples

CHANGES_FILE = "changes.jsonl"


@dataclass
class Change:
    """One change to a live trial, as logged."""

    t: float
    cause: str
    phase: int | str | None = None
    cpus: list[int] | None = None
    num_threads: int | None = None
    memory_limit_gb: float | None = None
    memory_request_gb: float | None = None
    """A memory request (billed, not enforced: the limit stays at the largest phase's, as a
    Burstable pod's in-place resize keeps it)."""
    tasks: int = 0
    """Threads whose affinity was set."""
    skipped: list[str] = field(default_factory=list)
    """What could not be applied, and why (a task that ended meanwhile is not an error)."""
    status: str = ""
    """A pod resize's outcome (:mod:`optimizer.trials.live.pod_resize`): ``applied``,
    ``in-progress``, ``deferred``, ``infeasible``, ``sent`` or ``failed``; empty for a change
    made on this machine, which applies at once."""
    requests: dict[str, str] | None = None
    """The pod's container requests asked (``{"cpu": "2", "memory": "400Mi"}``)."""
    attempts: int = 0
    """Reads of the pod's resize status before the outcome was known."""


PIN_PASSES = 5
"""Listings of the tree per affinity change: threads started meanwhile are pinned too."""


def tree_tasks(root_pid: int) -> list[int]:
    """Thread ids of every process in the tree under ``root_pid`` (the root included)."""
    try:
        root = psutil.Process(root_pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return []
    tids: list[int] = []
    for p in procs:
        try:
            tids.extend(int(t) for t in os.listdir(f"/proc/{p.pid}/task"))
        except OSError:
            continue
    return tids


def set_tree_affinity(root_pid: int, cores: Iterable[int]) -> tuple[int, list[str]]:
    """Pin every thread of the tree to ``cores``; (threads set, what was skipped).

    A thread started during the pass by one not yet pinned inherits the old affinity, so the
    tree is listed again until a pass finds no thread it has not seen (a few at most)."""
    cores = sorted(set(cores))
    done, skipped, seen = 0, [], set()
    for _ in range(PIN_PASSES):
        new = [tid for tid in tree_tasks(root_pid) if tid not in seen]
        if not new:
            break
        seen.update(new)
        for tid in new:
            try:
                os.sched_setaffinity(tid, cores)
                done += 1
            except ProcessLookupError:
                continue  # the thread ended between the listing and the call
            except OSError as exc:
                skipped.append(f"thread {tid}: {exc.strerror or exc}")
    return done, skipped


class LiveTrial:
    """The actuators of one running trial: its process tree, the probe's control file and the
    monitor's memory limit, with every change logged to ``trial_dir/changes.jsonl``."""

    request_evicts = False
    """A memory request on this machine is billed, not enforced: nothing evicts the job for
    holding more than it (a pod's request does: :class:`~.pod_resize.ResizingTrial`)."""

    def __init__(self, root_pid: int, trial_dir: str | os.PathLike,
                 control_file: str | os.PathLike | None = None, monitor: Any = None,
                 t0: float | None = None) -> None:
        self.root_pid = root_pid
        self.trial_dir = Path(trial_dir)
        self.control_file = Path(control_file) if control_file else None
        self.monitor = monitor
        self._seq = 0
        self._waiting: float | None = None
        self._said_no_limit = False
        self.t0 = time.monotonic() if t0 is None else t0
        """``time.monotonic()`` the change times count from (the trial's launch)."""
        self.had_limit = self.enforced_limit_gb() is not None
        """Whether the trial started with a memory limit: a job without one never gets one."""

    def set_cpus(self, cores: Sequence[int], *, cause: str,
                 phase: int | str | None = None) -> Change:
        """Pin the tree to ``cores`` and ask the job for as many intra-op threads."""
        tasks, skipped = set_tree_affinity(self.root_pid, cores)
        threads = None
        if self.control_file is not None:
            self._seq += 1
            threads = len(set(cores))
            atomic_write_json(self.control_file, {"num_threads": threads, "seq": self._seq,
                                                  "cpus": sorted(set(cores))})
        return self.log(Change(self.now(), cause, phase, sorted(set(cores)), threads,
                                tasks=tasks, skipped=skipped))

    def enforced_limit_gb(self) -> float | None:
        """The memory limit the monitor enforces now (None: none)."""
        return getattr(self.monitor, "memory_limit_gb", None)

    def set_memory_limit(self, gb: float, *, cause: str,
                         phase: int | str | None = None) -> Change | None:
        """The limit the monitor enforces from now on.

        A higher limit applies at once. A lower one stops at the tree's resident floor
        (:meth:`resident_floor_gb`: the largest resident memory now and over the last
        seconds, with headroom), so a dip does not let in a limit the rebound would be killed
        at; where the floor leaves nothing to lower, the limit stays and this is logged once
        (asked again, None). A trial started without a limit never gets one. Returns the
        change logged, or None when nothing changed and it was said already."""
        skipped: list[str] = []
        applied = float(gb)
        current = self.enforced_limit_gb()
        if not self.had_limit:
            if self._said_no_limit:
                return None
            self._said_no_limit = True
            return self.log(Change(self.now(), cause, phase, skipped=[
                f"asked {gb:g} GB: the job started without a memory limit, none is introduced"]))
        floor = self.resident_floor_gb() if current is not None and applied < current else None
        if floor is not None and applied < floor:
            keep = min(floor, current)
            if keep >= current and self._waiting == applied:
                return None  # said once already
            self._waiting = applied if keep >= current else None
            skipped.append(f"asked {gb:g} GB while the job's resident memory with headroom "
                           f"needs {floor:.3f} GB: kept at {keep:.3f} GB")
            applied = keep
        else:
            self._waiting = None
        if self.monitor is not None:
            self.monitor.memory_limit_gb = applied
        else:
            skipped.append("no monitor: the limit is not enforced")
        return self.log(Change(self.now(), cause, phase, memory_limit_gb=applied,
                               skipped=skipped))

    def set_memory_request(self, gb: float, *, cause: str,
                           phase: int | str | None = None) -> Change:
        """Record a new memory request; the enforced limit does not move, so no phase change
        can kill the job (the limit is the plan's largest phase)."""
        return self.log(Change(self.now(), cause, phase, memory_request_gb=float(gb)))

    def resident_gb(self) -> float | None:
        """The tree's resident memory now (GB), or None when it has ended."""
        try:
            root = psutil.Process(self.root_pid)
            procs = [root, *root.children(recursive=True)]
            return sum(p.memory_info().rss for p in procs) / 1024**3
        except psutil.Error:
            return None

    def resident_floor_gb(self, window_s: float = HOLD_S) -> float | None:
        """The least a memory limit or request may be lowered to: the largest of the tree's
        resident memory now and the monitor's samples over the last ``window_s``, with
        headroom (one sample can be a dip; the rebound must still fit)."""
        rows = list(getattr(self.monitor, "rows", None) or [])
        return resident_floor(self.resident_gb(), *window_samples(rows, self.now(), window_s))

    def now(self) -> float:
        """Seconds since ``t0``."""
        return round(time.monotonic() - self.t0, 3)

    def log(self, change: Change) -> Change:
        """Append ``change`` to ``changes.jsonl``."""
        return append_change(self.trial_dir, change)


def append_change(trial_dir: str | os.PathLike, change: Change) -> Change:
    """Append ``change`` as one JSON line to ``trial_dir/changes.jsonl``; returns it."""
    trial_dir = Path(trial_dir)
    trial_dir.mkdir(parents=True, exist_ok=True)
    # One writer (the controller), appended line by line: a cut last line is dropped by
    # the reader, never the ones before it.
    with open(trial_dir / CHANGES_FILE, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(asdict(change), separators=(",", ":")) + "\n")
    return change


def read_changes(trial_dir: str | os.PathLike) -> list[Change]:
    """The changes logged for a trial (a cut last line is skipped)."""
    path = Path(trial_dir) / CHANGES_FILE
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(Change(**json.loads(line)))
        except (ValueError, TypeError):
            continue
    return out


__all__ = ["CHANGES_FILE", "Change", "LiveTrial", "append_change", "read_changes",
           "set_tree_affinity", "tree_tasks"]
