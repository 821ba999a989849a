"""``--resume DIR`` alone: the main command's options come back from what the run recorded.

Every run folder keeps the options it was started with in ``run.json`` (``options``, written
from its :class:`~optimizer.foundation.job.Job`). On ``--resume DIR`` an option given again on
the command line wins, the rest are the recorded ones; :func:`fill_from_run` says which ones
changed, so the user sees what is reused and what is redone (a changed preference retrains the
agents and keeps the measured trials). The result the folder recorded is read back
(:func:`recorded_result`) so the user sees what the resumed run may change.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any

from optimizer.foundation.atomic_files import read_json
from optimizer.foundation.errors import CloudoptError
from optimizer.foundation.job import RECORDED
from optimizer.foundation.result import RunResult

RUN_FILE = "run.json"
RESULT_FILE = "recommendation.json"


def _run_files(folder: Path) -> list[Path]:
    own = folder / RUN_FILE
    if own.is_file():
        return [own]
    return sorted(folder.glob(f"*/{RUN_FILE}"))  # several scripts: one folder each


def has_recorded_options(folder: Path) -> bool:
    """Whether ``folder`` (or its per-script folders) holds a ``run.json``."""
    return bool(_run_files(folder))


def load_recorded(folder: Path) -> dict[str, Any]:
    """The options recorded in a run folder (or its per-script folders)."""
    files = _run_files(folder)
    if not files:
        raise CloudoptError(f"--resume {folder}: no {RUN_FILE} there (not a run folder, or it "
                            "was stopped before its first trial): start it again with "
                            "--train-file")
    data = read_json(files[0])
    options = data.get("options")
    if not isinstance(options, dict):  # a run recorded before options were kept
        options = {k: data.get(k) for k in RECORDED if k in data}
        if isinstance(options.get("train_args"), list):
            options["train_args"] = shlex.join(options["train_args"])
        options["train_file"] = [read_json(f).get("train_file") for f in files]
    if files[0].parent == folder and data.get("train_file"):
        options["train_file"] = [data["train_file"]]  # this folder is one script's
    if not options.get("train_file"):
        raise CloudoptError(f"{files[0]}: records no training script; resume with --train-file")
    return options


def fill_from_run(args: argparse.Namespace) -> list[str]:
    """Fill the options not given on the command line from the run folder ``args.resume``;
    returns a line per option whose given value differs from the recorded one."""
    recorded = load_recorded(Path(args.resume))
    changed = []
    for key, value in recorded.items():
        if key not in RECORDED:
            continue
        given = getattr(args, key, None)
        if given is None:
            setattr(args, key, value)
        elif value is not None and _norm(given) != _norm(value):
            changed.append(f"{key.replace('_', '-')}: {_show(value)} -> {_show(given)}")
    return changed


def _norm(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [str(Path(v).resolve()) if isinstance(v, str) and v.endswith(".py") else v
                for v in value]
    return value


def _show(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def recorded_result(run_dir: Path) -> tuple[RunResult | None, str | None]:
    """The result a run folder recorded (``recommendation.json``), or None and why not (None
    too where it has none yet)."""
    path = run_dir / RESULT_FILE
    if not path.is_file():
        return None, None
    try:
        return RunResult.from_json(read_json(path), str(path)), None
    except CloudoptError as exc:
        return None, str(exc)


def resume_command(run_dir: Path) -> str:
    """The command that continues an interrupted run."""
    return f"python -m optimizer --resume {shlex.quote(str(run_dir))}"


__all__ = ["RECORDED", "fill_from_run", "has_recorded_options", "load_recorded",
           "recorded_result", "resume_command"]
