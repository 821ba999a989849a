"""Which cores of a machine a trial may pin itself to, when several trials share the machine.

Ray (and any scheduler counting CPUs) guarantees that concurrent trials on a node ask for no
more CPUs than it has, but not *which* cores each gets: two 1-CPU trials pinned by
:func:`optimizer.trials.resources.cpu_affinity_set` would both take the first core. A
:class:`CoreLease` takes whole cores through one lock file per core (``flock``, exclusive,
non-blocking) in a folder shared by every process of the user on the machine. The kernel drops
a lock when its holder dies, so a crashed trial never leaves a core taken.

The folder is the user's own (:func:`default_lock_dir`, mode 0700): in a folder others can
write, another local user could hold every core's lock (and stall each trial until its lease
times out) or plant a link where a lock file goes. :func:`lock_folder` refuses a folder that is
a symbolic link, another user's, or open to group or others.
"""

from __future__ import annotations

import fcntl
import os
import stat
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from optimizer.foundation.errors import CloudoptError


def default_lock_dir() -> Path:
    """``$XDG_RUNTIME_DIR/cloudopt-cores`` (a per-user folder the login manager makes), else
    ``<tmp>/cloudopt-cores-<uid>``: one folder per user, so no one else can take the locks."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        return Path(runtime) / "cloudopt-cores"
    return Path(tempfile.gettempdir()) / f"cloudopt-cores-{os.geteuid()}"


def lock_folder(path: str | os.PathLike) -> Path:
    """``path``, made (mode 0700) if missing, once it is safe to keep locks in.

    Raises
    ------
    CloudoptError
        When ``path`` is a symbolic link, not a folder, owned by another user or open to group
        or others: naming it, and what to do.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:  # made before (by us, we check below) or planted by someone else
        pass
    # lstat: a link to a folder of ours would pass every check on its target
    info = os.lstat(path)
    fix = "remove it (or give another lock_dir) so that cloudopt makes its own"
    if stat.S_ISLNK(info.st_mode):
        raise CloudoptError(f"core locks: {path} is a symbolic link; {fix}")
    if not stat.S_ISDIR(info.st_mode):
        raise CloudoptError(f"core locks: {path} is not a folder; {fix}")
    if info.st_uid != os.geteuid():
        raise CloudoptError(f"core locks: {path} belongs to uid {info.st_uid}, not to you "
                            f"(uid {os.geteuid()}); {fix}")
    if info.st_mode & 0o077:
        raise CloudoptError(f"core locks: {path} is open to group or others (mode "
                            f"{stat.S_IMODE(info.st_mode):04o}); chmod 700 it or {fix}")
    return path


class CoreLease:
    """Exclusive use of ``n`` cores of this machine until :meth:`release` (or exit).

    Parameters
    ----------
    n : int
        Cores wanted (at most those available; more gives all of them).
    available : sequence of int, optional
        Cores to choose from (default: this process's affinity mask).
    lock_dir : path, optional
        Folder of the lock files (default: :func:`default_lock_dir`); it must be the
        user's own with mode 0700 (:func:`lock_folder`).
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
        self.lock_dir = Path(lock_dir) if lock_dir is not None else default_lock_dir()
        self.timeout_s = timeout_s
        self.cores: list[int] = []
        self._fds: list[int] = []

    def acquire(self) -> list[int]:
        """Take ``n`` free cores (lowest first); wait while others hold them.

        Raises
        ------
        CloudoptError
            When ``n`` cores are not free within ``timeout_s``, or the lock folder is not
            safe (:func:`lock_folder`).
        """
        lock_folder(self.lock_dir)
        # No link followed: a lock file is never another file of ours opened through a link
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        deadline = time.monotonic() + self.timeout_s
        while True:
            for core in self.available:
                if len(self.cores) == self.n:
                    break
                if core in self.cores:
                    continue
                fd = os.open(self.lock_dir / f"cpu{core}.lock", flags, 0o600)
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
