"""Saving and loading agent state: tensors and state dicts only, written atomically.

Files are ``torch.save`` archives of nested dicts of tensors and numbers, read back with
``torch.load(weights_only=True)`` so loading never executes code. Problems a user can cause
(missing file, another agent's file, a different state/action size, other preference vectors)
raise :class:`optimizer.foundation.errors.ModelFileError` naming the file.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from optimizer.foundation.atomic_files import atomic_write_bytes
from optimizer.foundation.errors import ModelFileError


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


def save_parts(path: str | os.PathLike, shape: Sequence[int], parts: dict[str, Any],
               **values: torch.Tensor) -> None:
    """Save each part's ``state_dict()`` (networks, optimizers) under its key, then ``values``
    and ``shape``, atomically."""
    state = {k: part.state_dict() for k, part in parts.items()}
    save_state(path, {**state, **values, "shape": torch.tensor(list(shape))})


def load_parts(path: str | os.PathLike, shape: Sequence[int],
               parts: dict[str, Any]) -> dict[str, Any]:
    """Load what :func:`save_parts` wrote into ``parts`` (the file must be for ``shape``);
    returns the whole state, for its other values."""
    state = load_state(path, expected_shape=tuple(shape))
    for key, part in parts.items():
        part.load_state_dict(state[key])
    return state


def check_policies(
    path: str | os.PathLike, state: dict[str, Any], names: Sequence[str], preferences: np.ndarray
) -> None:
    """Check that a multi-objective agent's file has a policy per name, for these preferences.

    ``state`` is what :func:`load_state` read from ``path``; ``preferences`` holds one vector
    per name, in order.
    """
    if not np.allclose(state["preferences"].numpy(), preferences):
        raise ModelFileError(f"{path}: saved for other preference vectors")
    missing = [n for n in names if n not in state]
    if missing:
        raise ModelFileError(f"{path}: no policy named {missing[0]!r}")
