"""The main command run inside the test process.

``run_main(*args, cwd=...)`` calls :func:`optimizer.cli.main`, the function ``python -m
optimizer`` calls, and returns what ``subprocess.run(..., capture_output=True, text=True)``
would: the exit status and the printed text. A new interpreter per run costs each test about
4 s of imports (torch, torch._dynamo, pandas, matplotlib) that the suite has already paid; the
trials themselves still run as the user's script in their own processes.

Tests of the process itself keep ``python -m optimizer``: a signal to the optimizer
(tests/test_main_job.py, tests/test_trial_guard.py), the installed wheel (tests/test_wheel.py),
a module hidden from the interpreter (tests/test_executors.py) and the Ray runs.
"""

from __future__ import annotations

import io
import os
import subprocess
from collections.abc import Mapping
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path


def run_main(*args: str, cwd: str | Path | None = None,
             env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    """The main command with ``args`` from ``cwd``, the variables of ``env`` added to the
    environment for the run (its trials inherit them); the working folder and the environment
    are put back afterwards."""
    from optimizer.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    os.environ.update(env or {})
    if cwd is not None:
        os.chdir(cwd)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = main([str(a) for a in args])
            except SystemExit as exc:  # argparse's own usage errors
                code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    return subprocess.CompletedProcess(["python", "-m", "optimizer", *map(str, args)], code,
                                       out.getvalue(), err.getvalue())
