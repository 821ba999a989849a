"""Start-up guard: the four top-level packages must be this installation's.

``optimizer``, ``envs``, ``agents`` and ``phases`` share their names with unrelated
distributions on the package index, and a folder called ``envs/`` in the working directory (common
in RL projects) shadows ours because ``python -m`` puts that directory first on ``sys.path``.
Either would crash the main job after its trials, with ``No module named 'envs.calibrate'``.
:func:`foreign_packages` finds them before anything runs, without importing them: each package's
``__init__.py`` must sit beside ``optimizer/`` (one installation) and carry :data:`MARKER`.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

PACKAGES = ("optimizer", "envs", "agents", "phases")
MARKER = "__cloudopt_package__ = True"


def _init_file(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin)


def foreign_packages(root: Path | None = None) -> list[str]:
    """One line per package that does not resolve to this installation (empty when all do)."""
    root = root or Path(__file__).resolve().parents[2]
    problems = []
    for name in PACKAGES:
        expected = root / name / "__init__.py"
        found = _init_file(name)
        if found is None:
            problems.append(f"package {name!r} is missing from this installation ({expected}): "
                            "reinstall cloudopt")
            continue
        found = found.resolve()
        if found != expected.resolve():
            problems.append(f"package {name!r} resolves to {found}, not to cloudopt's "
                            f"{expected}: run from another folder or rename the shadowing "
                            f"{found.parent}")
            continue
        try:
            ours = MARKER in found.read_text(encoding="utf-8")
        except OSError:
            ours = False
        if not ours:
            problems.append(f"{found} is not cloudopt's {name!r} (another distribution "
                            f"installed over it?): pip uninstall the other '{name}' and "
                            "reinstall cloudopt")
    return problems


__all__ = ["MARKER", "PACKAGES", "foreign_packages"]
