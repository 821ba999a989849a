"""The core locks live in a folder of the user's own (issue 62 part 5): another local user
cannot hold every core's lock, nor plant a link where a lock goes."""

from __future__ import annotations

import os
import stat
import sys

import pytest

from optimizer.foundation.errors import CloudoptError
from optimizer.trials import core_lease
from optimizer.trials.core_lease import CoreLease, default_lock_dir, lock_folder

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX owners")


def test_the_default_folder_is_per_user(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert default_lock_dir() == tmp_path / "cloudopt-cores"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert default_lock_dir().name == f"cloudopt-cores-{os.geteuid()}"


def test_the_folder_is_made_0700_and_ours(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    with CoreLease(1, [0]) as cores:  # the default folder
        assert cores == [0]
    info = os.lstat(tmp_path / "cloudopt-cores")
    assert stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == os.geteuid()
    assert stat.S_IMODE(os.lstat(tmp_path / "cloudopt-cores" / "cpu0.lock").st_mode) == 0o600


def test_a_folder_open_to_others_is_refused(tmp_path):
    shared = tmp_path / "locks"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(CloudoptError, match=r"locks is open to group or others \(mode 0777\)"):
        CoreLease(1, [0], lock_dir=shared).acquire()
    assert not list(shared.iterdir())  # no lock file made there


def test_another_users_folder_is_refused(monkeypatch, tmp_path):
    folder = lock_folder(tmp_path / "locks")  # ours, and fine
    monkeypatch.setattr(core_lease.os, "geteuid", lambda: os.getuid() + 4242)
    with pytest.raises(CloudoptError, match=rf"{folder} belongs to uid {os.getuid()}, not to "
                                            rf"you \(uid {os.getuid() + 4242}\)"):
        CoreLease(1, [0], lock_dir=folder).acquire()


def test_a_symbolic_link_is_refused(tmp_path):
    target = lock_folder(tmp_path / "real")  # a folder that would pass every check
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(CloudoptError, match=rf"{link} is a symbolic link"):
        lock_folder(link)


def test_a_file_is_refused(tmp_path):
    (tmp_path / "locks").write_text("")
    with pytest.raises(CloudoptError, match="is not a folder"):
        lock_folder(tmp_path / "locks")
