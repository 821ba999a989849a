"""cloudopt's in-process probe, loaded by Python's ``site`` at start-up (see
``optimizer/trials/probe/__init__.py``). Starts the probe when the trial asked for it, then runs
the ``sitecustomize`` the user already had, as if this one were not here."""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))

if os.environ.get("CLOUDOPT_PROBE_EVENTS"):
    try:
        import _cloudopt_probe

        _cloudopt_probe.start()
    except Exception:  # the probe must never stop a script from running
        pass


def _chain() -> None:
    ours = sys.modules.pop("sitecustomize", None)
    index = next((i for i, p in enumerate(sys.path)
                  if os.path.abspath(p or os.curdir) == _HERE), None)
    if index is not None:
        del sys.path[index]
    try:
        import importlib.util

        if importlib.util.find_spec("sitecustomize") is not None:
            # The user's own: its errors reach site.py as they would without the probe.
            import sitecustomize  # noqa: F401
    finally:
        if index is not None:
            sys.path.insert(min(index, len(sys.path)), _HERE)
        sys.modules.setdefault("sitecustomize", ours)


_chain()
