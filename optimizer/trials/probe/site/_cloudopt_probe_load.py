"""Where the job loads torch (see ``_cloudopt_probe``): on every core a live trial may be given.

GNU OpenMP, which torch's CPU build loads, counts the CPUs the process may run on once, when
it loads, and throttles its threads' spinning for the rest of the run wherever it runs more
threads than that count. A live controller may hold a job on one core for its start-up and give
it two to train: loaded on one core, checkpoint_heavy's two training threads waited on a
sleeping partner at every parallel region, and its steps ran 8-10% slower all run. On a
Kubernetes node a CPU limit is a quota, not a mask, and the runtime counts the node's CPUs.
So while torch imports, the importing thread may run on the cores the controller may give
(``CLOUDOPT_LOAD_CORES``, set by the runner for live trials only; an import runs on one thread,
so it uses no more CPU than on one core), and afterwards every thread of the process goes back
to the cores the controller holds it on. Standard library only."""

import json
import os


def _control():
    """The control file's order, or {} for anything else: the file is input, and whatever it
    holds (any JSON, half a write, bytes, a folder) must not fail the job's ``import torch``."""
    path = os.environ.get("CLOUDOPT_PROBE_CONTROL")
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as fh:
            order = json.load(fh)
    except (OSError, ValueError, RecursionError):
        return {}
    return order if isinstance(order, dict) else {}


def as_cores(value):
    """``value`` as a set of CPU numbers, or None unless it is a non-empty list of them."""
    if not isinstance(value, list) or not value:
        return None
    if not all(type(c) is int and 0 <= c < 1 << 16 for c in value):  # bool is not a CPU
        return None
    return set(value)


def widen():
    """Before torch loads: this thread on the load cores. What :func:`restore` needs, or None
    where nothing was changed."""
    spec = os.environ.get("CLOUDOPT_LOAD_CORES", "")
    if not spec or not hasattr(os, "sched_setaffinity"):
        return None
    try:
        wide = {int(c) for c in spec.split(",") if c.strip()}
        before = os.sched_getaffinity(0)
        if not wide or wide <= before:
            return None
        seq = _control().get("seq")
        os.sched_setaffinity(0, wide)
    except (ValueError, OSError):
        return None
    return before, seq


def restore(token):
    """After torch loaded: every thread back where the controller holds the job. A controller
    that moved the job meanwhile pinned every thread itself (its order's ``seq`` changed), and
    its order is followed; else the cores from before the load."""
    if token is None:
        return
    before, seq = token
    order = _control()
    try:
        moved = order.get("seq") != seq
    except Exception:  # noqa: BLE001 - a seq whose comparison raises: taken as unmoved
        moved = False
    cores = as_cores(order.get("cpus")) if moved else None
    pin_own_threads(cores or before)


def pin_own_threads(cores):
    """Every thread of this process on ``cores`` (not its children: the controller pins the
    whole tree)."""
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except (OSError, ValueError):
        tids = [0]
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cores)
        except (OSError, ValueError, TypeError, OverflowError):
            continue
