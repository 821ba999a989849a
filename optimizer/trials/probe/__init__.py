"""The in-process probe: what an unmodified PyTorch script does, seen from inside its process.

The trial's environment puts ``site/`` first on ``PYTHONPATH``; Python's ``site`` module then
imports our ``sitecustomize`` at start-up, which starts the probe and runs the user's own
``sitecustomize``, if any, as before. This is how auto-instrumentation tools load themselves
(``opentelemetry-instrument``, ``ddtrace-run``). We chose it over a ``runpy`` launcher because
the script then runs as ``python script.py`` exactly: ``sys.argv``, ``__main__``, ``__file__``,
tracebacks, the pickling of ``__main__`` classes by spawned data-loader workers, the exit code,
output and signals are all untouched. It costs nothing until the script imports ``torch`` (a
post-import hook; the probe never imports torch itself), and child processes stay out.

Inside the process (``site/_cloudopt_probe.py``, with its hooks, gradient windows and torch
loading beside it, all sharing ``_cloudopt_probe_state.py``; standard library only) the probe
records optimizer steps and samples, data-loader epochs and dataset lengths, the loss,
train/eval switches and squared gradient norms (single steps and windows of consecutive steps,
for the gradient noise scale) to an append-only JSON-lines file; a control file lets cloudopt
change the intra-op threads of a running job. Here, outside it: :func:`probe_environment` and the reader
(:mod:`optimizer.trials.probe.events`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from optimizer.trials.probe.events import ProbeRecord, read_probe, write_stage_marks

SITE_DIR = Path(__file__).resolve().parent / "site"
EVENTS_FILE = "probe.jsonl"


def probe_environment(env: Mapping[str, str], events_path: str | os.PathLike,
                      control_path: str | os.PathLike | None = None) -> dict[str, str]:
    """``env`` with the probe switched on: its site directory first on ``PYTHONPATH`` (the
    user's entries after it) and where to write events (and read control orders)."""
    out = dict(env)
    rest = out.get("PYTHONPATH", "")
    out["PYTHONPATH"] = str(SITE_DIR) + (os.pathsep + rest if rest else "")
    out["CLOUDOPT_PROBE_EVENTS"] = str(Path(events_path).resolve())
    out.pop("CLOUDOPT_PROBE_PID", None)
    if control_path is not None:
        out["CLOUDOPT_PROBE_CONTROL"] = str(Path(control_path).resolve())
    return out


__all__ = ["EVENTS_FILE", "SITE_DIR", "ProbeRecord", "probe_environment", "read_probe",
           "write_stage_marks"]
