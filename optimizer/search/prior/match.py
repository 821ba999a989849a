"""Which runs of history are runs of this script, at a setting this search can use.

A run is this script's where its ``job`` names the script (``train_mlp`` for
``examples/train_mlp.py``; case, ``-``, ``_`` and ``.`` alike), or the script file it recorded
has the script's name, or its ``job`` is the one ``--history-job`` gives. Of those, a run is
left out, with the reason the report gives, when it

- failed, or measured no throughput (nothing to fit);
- ran on CPUs it does not say, or on several data-parallel workers;
- lies outside this search's bounds (CPUs, GPUs, batch size): the model is fitted where the
  search may go;
- ran another command line, or another version of the script, where the history recorded
  them (cloudopt run folders do): another job, whose figures are not this one's.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from optimizer.foundation.config import ResourceConfig
from optimizer.history.run import History, HistoryRun


@dataclass(frozen=True)
class Script:
    """What history runs are matched against: the script and its command line."""

    train_file: Path
    train_args: tuple[str, ...]
    resources: ResourceConfig
    sha256: str | None = None
    job: str | None = None
    """The history's name for this job (``--history-job``); None: the script's name."""

    @property
    def name(self) -> str:
        return self.job or self.train_file.stem


@dataclass
class Match:
    """The runs of one history that are this script's and usable (``used``), those that are
    this script's but not usable with the reason (``ignored``), and how many runs each other
    job has there (``other_jobs``)."""

    used: list[HistoryRun] = field(default_factory=list)
    ignored: list[tuple[HistoryRun, str]] = field(default_factory=list)
    other_jobs: Counter[str] = field(default_factory=Counter)

    def why_none(self) -> str:
        """Why nothing was used, in a clause."""
        if self.ignored:
            reasons = Counter(why for _, why in self.ignored)
            return "this script's runs there were left out: " + "; ".join(
                f"{n} {why}" for why, n in reasons.most_common(4))
        jobs = ", ".join(f"{j} ({n})" for j, n in self.other_jobs.most_common(6)) or "none"
        return f"no run of this script there (jobs there: {jobs}; --history-job NAME takes one)"


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def is_this_script(run: HistoryRun, script: Script) -> bool:
    if _norm(run.job) == _norm(script.name):
        return True
    recorded = run.tags.get("train_file", "")
    return script.job is None and bool(recorded) and Path(recorded).name == script.train_file.name


def why_not_used(run: HistoryRun, script: Script) -> str | None:
    """Why a run of this script cannot stand for a measurement of it (None: it can)."""
    status = run.tags.get("status", "").lower()
    if status == "failed":
        return f"failed ({run.tags.get('reason') or 'no reason recorded'})"
    thr = run.value("throughput")
    if not math.isfinite(thr) or thr <= 0:
        return "measured no throughput"
    cpus = run.value("cpus")
    if not math.isfinite(cpus):
        return "ran on CPUs the history does not say"
    if int(float(run.tags.get("replicas") or 1)) > 1:
        return "ran data-parallel on several workers"
    outside = _outside(run, script.resources)
    if outside:
        return f"ran outside this search's bounds ({outside})"
    args = _recorded_args(run)
    if args is not None and args != script.train_args:
        return f"ran another command line ({' '.join(args) or 'no arguments'})"
    sha = run.tags.get("script_sha256")
    if sha and script.sha256 and sha != script.sha256:
        return "ran another version of the script"
    return None


def _recorded_args(run: HistoryRun) -> tuple[str, ...] | None:
    """The command line a run recorded (a JSON list, as cloudopt's reader keeps it), or None."""
    try:
        args = json.loads(run.tags.get("train_args") or "null")
    except ValueError:
        return None
    return tuple(str(a) for a in args) if isinstance(args, list) else None


def _outside(run: HistoryRun, r: ResourceConfig) -> str:
    cpus, gpus, batch = run.value("cpus"), run.value("gpus"), run.value("batch_size")
    gpus = 0.0 if math.isnan(gpus) else gpus
    if not r.cpu_count_min <= cpus <= (r.cpu_count_max or cpus):
        return f"{cpus:g} CPUs, bounds {r.cpu_count_min}-{r.cpu_count_max}"
    if not r.gpu_count_min <= gpus <= (r.gpu_count_max or 0):
        return f"{gpus:g} GPUs, bounds {r.gpu_count_min}-{r.gpu_count_max}"
    if r.batch_size_max is not None and math.isfinite(batch) and batch > r.batch_size_max:
        return f"batch {batch:g} over batch_size_max {r.batch_size_max}"
    return ""


def match_runs(history: History, script: Script) -> Match:
    """Sort the runs of ``history`` into used, ignored (with why) and other jobs'."""
    out = Match()
    for run in history:
        if not is_this_script(run, script):
            out.other_jobs[run.job] += 1
            continue
        why = why_not_used(run, script)
        if why is None:
            out.used.append(run)
        else:
            out.ignored.append((run, why))
    return out


__all__ = ["Match", "Script", "is_this_script", "match_runs", "why_not_used"]
