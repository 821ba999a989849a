"""Trials of earlier cloudopt searches: a run folder (``--output DIR``) read as history.

Spec (``--history``)::

    cloudopt:<dir>

or a folder that is a run folder (it holds ``trials/<trial>/summary.json`` or ``trials.csv``),
or a folder of run folders (``runs/``). Each trial that recorded a ``summary.json`` is one
:class:`HistoryRun` (``run_id`` ``<run folder>/<trial>``); a run folder without trial folders
is read from its ``trials.csv`` (the same figures, less the probe's). Trials set aside as stale
(``replaced/``) are not read. The files are read as JSON and CSV: the trial records' schema is
the trials room's, and this room imports nothing of it.

- ``params``: ``cpus``, ``gpus``, ``memory_gb`` (the limit it ran under), ``batch_size`` (the
  allocation's, else the batch the in-process probe saw per step, else the one the script
  printed), ``workers``, ``total_samples`` (the job's size where the trial knew it), ``epochs``
  and ``dataset_size`` (the probe's);
- ``outcome``: ``wall_s``, ``throughput`` (its steady rate), ``samples``, ``peak_mem_gb``,
  ``cost``, ``startup_s``, ``final_loss`` (the probe's last loss);
- ``tags``: ``status`` and ``reason``, ``train_file``, ``train_args`` (a JSON list),
  ``script_sha256`` (from the trial's ``config.json``), ``replicas``, ``concurrent_with``,
  ``default_batch`` (``"1"`` where the trial ran the script's own batch), ``probe_steps`` (the
  optimizer steps the in-process probe saw), ``trial_dir`` (the trial's folder, whose probe
  files a search may read);
- ``job``: the script's name (``train_file``'s stem).
"""

from __future__ import annotations

import csv
import json
import math
from datetime import datetime
from pathlib import Path
from typing import Any

from optimizer.foundation.errors import HistoryError
from optimizer.history.run import History, HistoryRun

SUMMARY = "summary.json"
TRIALS_CSV = "trials.csv"


def is_run_folder(path: Path) -> bool:
    """Whether ``path`` is a cloudopt run folder (trial records or a ``trials.csv``)."""
    return (path / TRIALS_CSV).is_file() or any((path / "trials").glob(f"*/{SUMMARY}"))


def run_folders(path: Path) -> list[Path]:
    """``path`` itself where it is a run folder, else the run folders directly in it."""
    if is_run_folder(path):
        return [path]
    return sorted(d for d in path.iterdir() if d.is_dir() and is_run_folder(d)) \
        if path.is_dir() else []


def read_run_folders(path: str | Path) -> History:
    """Every trial of the run folder ``path`` (or of the run folders in it)."""
    path = Path(path)
    folders = run_folders(path)
    if not folders:
        raise HistoryError(f"history folder {path} is no cloudopt run folder (no trials/*/"
                           f"{SUMMARY} or {TRIALS_CSV}) and holds none")
    runs: list[HistoryRun] = []
    for folder in folders:
        records = sorted((folder / "trials").glob(f"*/{SUMMARY}"))
        if records:
            runs += [_from_summary(folder, p) for p in records]
        else:
            runs += _from_csv(folder)
    if not runs:
        raise HistoryError(f"history folder {path}: its run folder(s) hold no trial")
    return History.of(runs)


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HistoryError(f"history record {path}: not readable JSON ({exc})") from None
    if not isinstance(data, dict):
        raise HistoryError(f"history record {path}: a JSON object is expected, got "
                           f"{type(data).__name__}")
    return data


def _from_summary(folder: Path, path: Path) -> HistoryRun:
    s = _read(path)
    alloc = s.get("allocation") if isinstance(s.get("allocation"), dict) else {}
    probe = s.get("probe") if isinstance(s.get("probe"), dict) else {}
    info = s.get("model_info") if isinstance(s.get("model_info"), dict) else {}
    config = path.with_name("config.json")
    sha = _read(config).get("script_sha256") if config.is_file() else None
    ran = _number(alloc.get("batch_size"))
    batch = ran or _number(probe.get("samples_per_step")) or _number(info.get("batch_size"))
    params = _numbers({"cpus": alloc.get("cpus"), "gpus": alloc.get("gpus"),
                       "memory_gb": alloc.get("memory_gb"), "batch_size": batch,
                       "workers": alloc.get("workers"), "total_samples": s.get("total_samples"),
                       "epochs": probe.get("epochs"), "dataset_size": probe.get("dataset_len")})
    outcome = _numbers({"wall_s": s.get("wall_time_s"), "throughput": s.get("throughput"),
                        "samples": s.get("samples"), "peak_mem_gb": s.get("mem_gb_peak"),
                        "cost": s.get("cost"), "startup_s": s.get("startup_s"),
                        "final_loss": probe.get("loss_last")})
    tags = {"status": str(s.get("status", "")), "reason": str(s.get("reason", "")),
            "train_file": str(s.get("train_file", "")),
            "train_args": json.dumps([str(a) for a in s.get("train_args") or []]),
            "replicas": str(alloc.get("replicas", 1)),
            "concurrent_with": " ".join(map(str, s.get("concurrent_with") or [])),
            "default_batch": "1" if ran is None and batch else "0",
            "trial_dir": str(path.parent.resolve())}
    if sha:
        tags["script_sha256"] = str(sha)
    if _number(probe.get("steps")):
        tags["probe_steps"] = str(int(probe["steps"]))
    trial = str(s.get("trial_id") or path.parent.name)
    return HistoryRun(run_id=f"{folder.name}/{trial}", job=_job(tags["train_file"]),
                      source=f"cloudopt:{folder}", started_at=_unix(s.get("started_at")),
                      params=params, outcome=outcome, tags=tags)


def _from_csv(folder: Path) -> list[HistoryRun]:
    path = folder / TRIALS_CSV
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise HistoryError(f"history file {path}: not readable CSV ({exc})") from None
    missing = [c for c in ("trial_id", "status", "cpus", "throughput") if rows and c not in rows[0]]
    if missing:
        raise HistoryError(f"history file {path}: no column {missing[0]!r} (not a cloudopt "
                           f"{TRIALS_CSV})")
    runs = []
    for row in (r for r in rows if not r.get("history_source")):  # not copies read from history
        params = _numbers({k: row.get(k) for k in ("cpus", "gpus", "memory_gb", "batch_size",
                                                    "workers", "total_samples")})
        outcome = _numbers({"wall_s": row.get("wall_time_s"), "throughput": row.get("throughput"),
                            "samples": row.get("samples"), "peak_mem_gb": row.get("mem_gb_peak"),
                            "cost": row.get("cost"), "startup_s": row.get("startup_s")})
        tags = {"status": row.get("status") or "", "reason": row.get("reason") or "",
                "train_file": row.get("train_file") or "",
                "train_args": json.dumps((row.get("train_args") or "").split()),
                "replicas": row.get("replicas") or "1",
                "concurrent_with": row.get("concurrent_with") or "",
                "default_batch": "0" if "batch_size" in params else "1"}
        runs.append(HistoryRun(run_id=f"{folder.name}/{row['trial_id']}",
                               job=_job(tags["train_file"]), source=f"cloudopt:{folder}",
                               started_at=_unix(row.get("started_at")), params=params,
                               outcome=outcome, tags=tags))
    return runs


def _job(train_file: str) -> str:
    return Path(train_file).stem if train_file else "unknown"


def _number(value: Any) -> float | None:
    if value is None or isinstance(value, bool) or value == "":
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _numbers(values: dict[str, Any]) -> dict[str, float]:
    return {k: n for k, v in values.items() if (n := _number(v)) is not None}


def _unix(stamp: Any) -> float | None:
    """Unix seconds of an ISO 8601 time as the trial records write it (None where absent)."""
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return None
