"""cloudopt's in-process probe, loaded by Python's ``site`` at start-up (see
``optimizer/trials/probe/__init__.py``). Starts the probe when the trial asked for it, then runs
the ``sitecustomize`` the user already had, as if this one were not here."""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))

def _pin_rank() -> None:
    """A data-parallel rank takes its share of the trial's cores (``CLOUDOPT_RANK_CPUS``,
    ``0,1;2,3``: local rank 0 on cores 0 and 1) before the script's first line."""
    groups, local = os.environ.get("CLOUDOPT_RANK_CPUS"), os.environ.get("LOCAL_RANK", "")
    if not groups or not local.isdigit() or not hasattr(os, "sched_setaffinity"):
        return
    try:
        cores = [[int(c) for c in g.split(",") if c] for g in groups.split(";")]
        mine = cores[int(local) % len(cores)]
        if mine:
            os.sched_setaffinity(0, mine)
    except (ValueError, OSError):
        pass


_pin_rank()

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
