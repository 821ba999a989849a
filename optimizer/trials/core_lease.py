"""Which cores of a machine a trial may pin itself to, when several trials share the machine.

Ray (and any scheduler counting CPUs) guarantees that concurrent trials on a node ask for no
more CPUs than it has, but not *which* cores each gets: two 1-CPU trials pinned by
:func:`optimizer.trials.resources.cpu_affinity_set` would both take the first core. A
:class:`CoreLease` takes whole cores through one lock file per core (``flock``, exclusive,
non-blocking) in a folder shared by every process of the machine. The kernel drops a lock when
its holder dies, so a crashed trial never leaves a core taken.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from optimizer.foundation.errors import CloudoptError

DEFAULT_LOCK_DIR = Path(tempfile.gettempdir()) / "cloudopt-cores"


class CoreLease:
    """Exclusive use of ``n`` cores of this machine until :meth:`release` (or exit).

    Parameters
    ----------
    n : int
        Cores wanted (at most those available; more gives all of them).
    available : sequence of int, optional
        Cores to choose from (default: this process's affinity mask).
    lock_dir : path, optional
        Folder of the lock files (default: ``<tmp>/cloudopt-cores``).
    timeout_s : float
        How long to wait for ``n`` free cores before giving up.
    """

    def __init__(self, n: int, available: Sequence[int] | None = None, *,
                 lock_dir: str | os.PathLike | None = None, timeout_s: float = 60.0):
        if n < 1:
            raise CloudoptError(f"a core lease needs at least one core (got {n})")
        if available is None:
            available = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
                else list(range(os.cpu_count() or 1))
        self.available = sorted(int(c) for c in available)
        self.n = min(n, len(self.available))
        self.lock_dir = Path(lock_dir) if lock_dir is not None else DEFAULT_LOCK_DIR
        self.timeout_s = timeout_s
        self.cores: list[int] = []
        self._fds: list[int] = []

    def acquire(self) -> list[int]:
        """Take ``n`` free cores (lowest first); wait while others hold them.

        Raises
        ------
        CloudoptError
            When ``n`` cores are not free within ``timeout_s``.
        """
        self.lock_dir.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + self.timeout_s
        while True:
            for core in self.available:
                if len(self.cores) == self.n:
                    break
                if core in self.cores:
                    continue
                fd = os.open(self.lock_dir / f"cpu{core}.lock", os.O_RDWR | os.O_CREAT, 0o666)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    os.close(fd)
                    continue
                self.cores.append(core)
                self._fds.append(fd)
            if len(self.cores) == self.n:
                return sorted(self.cores)
            held = len(self.cores)
            self.release()  # all or nothing: two waiting leases never hold each other's cores
            if time.monotonic() > deadline:
                raise CloudoptError(
                    f"{self.n} free core(s) wanted, {held} free after {self.timeout_s:g} s "
                    f"(locks in {self.lock_dir}): another process holds the others")
            time.sleep(0.05)

    def release(self) -> None:
        for fd in self._fds:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
        self._fds, self.cores = [], []

    def __enter__(self) -> list[int]:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
