"""Atomic writes never touch the process umask (issue 62 part 5): reading it with
``os.umask`` sets it for a moment, and a thread creating a file then got the wrong mode."""

from __future__ import annotations

import os
import stat
import sys
import threading

import pytest

from optimizer.foundation import atomic_files
from optimizer.foundation.atomic_files import atomic_write_bytes, atomic_write_json

pytestmark = pytest.mark.skipif(sys.platform.startswith("win"), reason="POSIX modes")


@pytest.fixture
def umask():
    """Set the process umask for the test (and put the old one back)."""
    real = os.umask  # the test replaces os.umask before this fixture's teardown
    old = real(0o022)
    yield real
    real(old)


def _forbid_umask(monkeypatch):
    def refuse(*_):
        raise AssertionError("os.umask called while writing")

    monkeypatch.setattr(os, "umask", refuse)


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_a_written_file_has_the_mode_the_umask_gives(tmp_path, monkeypatch, umask, mask, mode):
    umask(mask)
    _forbid_umask(monkeypatch)
    target = tmp_path / "sub" / "record.json"
    atomic_write_json(target, {"a": 1})
    assert stat.S_IMODE(target.stat().st_mode) == mode
    assert target.read_text() == '{\n  "a": 1\n}\n'
    atomic_write_bytes(target, b"again")  # a replaced file too
    assert stat.S_IMODE(target.stat().st_mode) == mode and target.read_bytes() == b"again"
    assert [p.name for p in target.parent.iterdir()] == ["record.json"]  # no temporary left


def test_concurrent_writers_leave_no_temporary_and_no_torn_file(tmp_path, monkeypatch):
    _forbid_umask(monkeypatch)
    target = tmp_path / "shared.bin"
    errors = []

    def write(k: int) -> None:
        try:
            for _ in range(50):
                atomic_write_bytes(target, bytes([k]) * 4096)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    data = target.read_bytes()
    assert len(data) == 4096 and len(set(data)) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["shared.bin"]


def test_a_failed_write_removes_its_temporary(tmp_path, monkeypatch):
    def fail(*_):
        raise OSError("disk full")

    monkeypatch.setattr(atomic_files.os, "fsync", fail)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_bytes(tmp_path / "x.json", b"{}")
    assert not list(tmp_path.iterdir())
