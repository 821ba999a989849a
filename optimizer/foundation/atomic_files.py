"""Atomic file writes and strict JSON reads.

Every record is written to a temporary name in the same directory and renamed into place, so a
crash never leaves a half-written file: readers see the old file or the new one. Part of the
foundation: it imports nothing of the project but :mod:`optimizer.foundation.errors`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import secrets
from pathlib import Path
from typing import Any

from optimizer.foundation.errors import CloudoptError


def _create_temp(folder: Path, name: str) -> tuple[int, str]:
    """A new hidden file beside ``folder/name``, open for writing: (descriptor, path).

    Created with mode 0666, which the kernel narrows by the process umask (or the folder's
    default ACL) as it does for any new file, so a record gets the mode any other file would.
    The umask is never read: ``os.umask`` can only read it by setting it, and a thread creating
    a file in that moment would get the wrong mode (``tempfile.mkstemp`` makes 0600 files,
    which is why the umask was once needed here).
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) \
        | getattr(os, "O_BINARY", 0)
    for _ in range(100):
        tmp = str(folder / f".{name}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:  # another writer's name: draw again, as mkstemp does
            continue
    raise FileExistsError(f"{folder}: no free temporary name for {name}")


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_temp(path.parent, path.name)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    if dataclasses.is_dataclass(obj):
        return dataclasses.asdict(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def _strict(obj: Any) -> Any:
    """``obj`` with every non-finite float (NaN, ±inf) as None: JSON has no such numbers, and
    a bare ``NaN`` breaks every reader but Python's."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_strict(v) for v in obj]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return _strict(dataclasses.asdict(obj))
    if hasattr(obj, "item") and getattr(obj, "ndim", 0) == 0:  # numpy scalars
        return _strict(obj.item())
    if hasattr(obj, "tolist"):
        return _strict(obj.tolist())
    return obj


def to_json(obj: Any) -> str:
    """Strict JSON (non-finite numbers become null), indented."""
    return json.dumps(_strict(obj), indent=2, default=_json_default, allow_nan=False) + "\n"


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, to_json(obj))


def atomic_write_csv(path: str | os.PathLike, frame: Any) -> None:
    """Write a pandas DataFrame as CSV atomically (no index)."""
    atomic_write_text(path, frame.to_csv(index=False))


def read_json(path: str | os.PathLike) -> Any:
    p = Path(path)
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CloudoptError(f"{p}: file not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CloudoptError(f"{p}: not valid JSON ({exc})") from None
