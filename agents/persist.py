"""Saving and loading agent state: tensors and state dicts only, written atomically.

Files are ``torch.save`` archives of nested dicts of tensors and numbers, read back with
``torch.load(weights_only=True)`` so loading never executes code. Problems a user can cause
(missing file, another agent's file, a different state/action size) raise
:class:`optimizer.errors.ModelFileError` naming the file.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import torch

from optimizer.errors import ModelFileError
from optimizer.records import atomic_write_bytes


def save_state(path: str | os.PathLike, state: dict[str, Any]) -> None:
    """Serialise ``state`` with ``torch.save`` and write it to ``path`` atomically."""
    buf = io.BytesIO()
    torch.save(state, buf)
    atomic_write_bytes(path, buf.getvalue())


def load_state(path: str | os.PathLike, expected_shape: tuple[int, ...] | None = None) -> Any:
    """Read a file written by :func:`save_state`, checking the stored ``shape`` entry if given."""
    p = Path(path)
    if not p.is_file():
        raise ModelFileError(f"{p}: agent file not found")
    try:
        state = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises several types for corrupt or foreign files
        raise ModelFileError(
            f"{p}: not a readable agent file ({type(exc).__name__}: {exc})"
        ) from None
    if not isinstance(state, dict):
        raise ModelFileError(f"{p}: not an agent file (top level is {type(state).__name__})")
    if expected_shape is not None:
        shape = tuple(int(v) for v in state.get("shape", torch.tensor([])).tolist())
        if shape != tuple(expected_shape):
            raise ModelFileError(
                f"{p}: saved for (state_dim, action_dim, ...) = {shape}, this agent has "
                f"{tuple(expected_shape)}"
            )
    return state
