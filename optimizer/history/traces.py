"""Resource traces of training runs read into :class:`~optimizer.history.run.History`.

Two layouts (``shared/data/README.md`` describes both sets):

``dl-traces``
    ``executions.csv`` (one row per run: ``exec_id, workload`` and the configuration ``n,
    epochs, batch, width, threads``, the outcome ``exit_code, wall_s``) beside ``traces.csv``
    (one row per 0.5 s sample: ``exec_id, time_s, cpu_cores, mem_gb`` and the ``stage`` the
    script reported). The job is the workload. The set has **no timestamps**: runs are ordered by
    ``exec_id``, the order they were run in (``started_at`` stays unset and each run is tagged
    ``order=exec_id``). A run's last samples reading 0 GiB were taken while the process exited;
    they are dropped (counted in the tag ``exit_samples_dropped``), never read as usage.
    ``samples`` in ``executions.csv`` counts monitor samples, not training samples: the run's
    training samples are ``n x epochs`` and its throughput that over ``wall_s``.

AI4DL (IBM DLaaS containers)
    One table per file with ``timestamp`` (Unix seconds), ``service``, ``pod.id``,
    ``cpu.usage.cores``, ``mem.working.set`` (bytes; ``mem.current`` where it is missing),
    ``cpu.num.cores`` and ``mem.limit``. A pod is a run, its service the job; ``cpu.num.cores``
    and ``mem.limit`` are the run's configuration. Rows with one more field than the header (a
    leading row index, as in ``sample-vr.csv``) are read as pandas reads them.

A folder may hold either or both; a file is recognised by its name (``executions.csv``,
``traces.csv``) or its ``pod.id`` column. A table that lacks a needed column raises
:class:`~optimizer.foundation.errors.TraceFormatError` naming the file and the columns.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from optimizer.foundation.errors import TraceFormatError
from optimizer.history.columns import require_columns
from optimizer.history.run import History, HistoryRun, UsageSeries

GIB = float(2**30)
_EXEC_PARAMS = {"n": "dataset_size", "epochs": "epochs", "batch": "batch_size", "width": "width",
                "threads": "cpus"}
"""``executions.csv`` column -> canonical param."""


def _read(path: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TraceFormatError(f"{path}: not a readable CSV table ({first})") from None


def _numeric(frame: pd.DataFrame, columns: list[str], path: Path) -> pd.DataFrame:
    out = frame.copy()
    for col in columns:
        out[col] = pd.to_numeric(out[col], errors="coerce")
        bad = out[col].isna() & frame[col].notna()
        if bad.any():
            line = int(np.flatnonzero(bad.to_numpy())[0]) + 2
            raise TraceFormatError(f"{path}: column {col} has a non-number "
                                   f"{frame[col][bad].iloc[0]!r} on line {line}")
    return out


def _exit_trim(mem: np.ndarray) -> int:
    """Samples to keep: trailing zero-memory samples are the process exiting."""
    end = len(mem)
    while end > 1 and mem[end - 1] <= 0:
        end -= 1
    return end


def _dl_usage(samples: pd.DataFrame) -> tuple[UsageSeries, int]:
    samples = samples.sort_values("time_s", kind="stable")
    mem = samples["mem_gb"].to_numpy(dtype=float)
    keep = _exit_trim(mem)
    t = samples["time_s"].to_numpy(dtype=float)[:keep]
    stage = tuple(str(s) for s in samples["stage"].iloc[:keep]) if "stage" in samples else ()
    usage = UsageSeries(time_s=t - t[0], cpu_cores=samples["cpu_cores"].to_numpy(float)[:keep],
                        mem_gb=mem[:keep], stage=stage)
    return usage, len(mem) - keep


def _dl_run(exec_id: str, info: pd.Series | None, samples: pd.DataFrame | None,
            source: str) -> HistoryRun:
    params: dict[str, float] = {}
    outcome: dict[str, float] = {}
    tags = {"order": "exec_id"}
    job = None
    if info is not None:
        job = str(info["workload"])
        params = {name: float(info[col]) for col, name in _EXEC_PARAMS.items()
                  if col in info.index and np.isfinite(info[col])}
        if np.isfinite(info["wall_s"]):
            outcome["wall_s"] = float(info["wall_s"])
        if "n" in info.index and "epochs" in info.index and np.isfinite(info["n"] * info["epochs"]):
            outcome["samples"] = float(info["n"] * info["epochs"])
            if outcome.get("wall_s", 0) > 0:
                outcome["throughput"] = outcome["samples"] / outcome["wall_s"]
        if "exit_code" in info.index and np.isfinite(info["exit_code"]):
            tags["exit_code"] = str(int(info["exit_code"]))
    usage = None
    if samples is not None and len(samples):
        usage, dropped = _dl_usage(samples)
        tags["exit_samples_dropped"] = str(dropped)
        if job is None and "workload" in samples:
            job = str(samples["workload"].iloc[0])
    return HistoryRun(run_id=exec_id, job=job or exec_id, source=f"traces:{source}",
                      params=params, outcome=outcome, usage=usage, tags=tags)


def read_dl_traces(executions: Path | None, traces: Path | None) -> History:
    """The runs of a ``dl-traces`` set (either table may be absent)."""
    info = samples = None
    if executions is not None:
        raw = _read(executions)
        require_columns(executions, raw.columns, ["exec_id", "workload", "wall_s"])
        num = [c for c in (*_EXEC_PARAMS, "wall_s", "exit_code") if c in raw.columns]
        info = _numeric(raw, num, executions).assign(exec_id=raw["exec_id"].astype(str))
        info = info.drop_duplicates("exec_id").set_index("exec_id", drop=False)
    if traces is not None:
        raw = _read(traces)
        require_columns(traces, raw.columns, ["exec_id", "time_s", "cpu_cores", "mem_gb"])
        samples = _numeric(raw, ["time_s", "cpu_cores", "mem_gb"], traces)
        samples["exec_id"] = raw["exec_id"].astype(str)
    ids = list(dict.fromkeys([*(info.index if info is not None else []),
                              *(samples["exec_id"] if samples is not None else [])]))
    groups = dict(tuple(samples.groupby("exec_id", sort=False))) if samples is not None else {}
    source = str((executions or traces).parent)
    return History.of(_dl_run(i, info.loc[i] if info is not None and i in info.index else None,
                              groups.get(i), source) for i in ids)


def read_ai4dl(path: Path) -> History:
    """The pods of one AI4DL table, each a run of its service."""
    raw = _read(path)
    mem_col = "mem.working.set" if "mem.working.set" in raw.columns else "mem.current"
    require_columns(path, raw.columns, ["timestamp", "pod.id", "cpu.usage.cores", mem_col])
    optional = [c for c in ("cpu.num.cores", "mem.limit") if c in raw.columns]
    data = _numeric(raw, ["timestamp", "cpu.usage.cores", mem_col, *optional], path)
    runs = []
    for pod, g in data.groupby(data["pod.id"].astype(str), sort=False):
        g = g.dropna(subset=["timestamp"]).sort_values("timestamp", kind="stable")
        t = g["timestamp"].to_numpy(dtype=float)
        service = str(g["service"].iloc[0]) if "service" in g else path.stem
        usage = UsageSeries(time_s=t - t[0], cpu_cores=g["cpu.usage.cores"].to_numpy(float),
                            mem_gb=g[mem_col].to_numpy(float) / GIB)
        params = {}
        if "cpu.num.cores" in g and np.isfinite(g["cpu.num.cores"].iloc[0]):
            params["cpus"] = float(g["cpu.num.cores"].iloc[0])
        if "mem.limit" in g and g["mem.limit"].iloc[0] > 0:
            params["memory_gb"] = float(g["mem.limit"].iloc[0]) / GIB
        runs.append(HistoryRun(run_id=f"{service}/{pod}", job=service,
                               source=f"traces:{path}", started_at=float(t[0]), params=params,
                               outcome={"wall_s": float(t[-1] - t[0])}, usage=usage,
                               tags={"memory_column": mem_col}))
    return History.of(runs)


def _is_ai4dl(path: Path) -> bool:
    try:
        header = pd.read_csv(path, nrows=0).columns
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError):
        return False
    return "pod.id" in header


def read_trace_history(path: str | os.PathLike) -> History:
    """Every run of the trace tables a folder holds (or of one table).

    Raises :class:`TraceFormatError` when nothing there is a trace table, or naming a table
    that lacks a needed column.
    """
    p = Path(path)
    if not p.exists():
        raise TraceFormatError(f"{p}: no such trace file or folder")
    files = sorted(p.glob("*.csv")) if p.is_dir() else [p]
    named = {f.name: f for f in files}
    history = History(())
    if "executions.csv" in named or "traces.csv" in named:
        history = read_dl_traces(named.get("executions.csv"), named.get("traces.csv"))
    for f in files:
        if f.name not in ("executions.csv", "traces.csv") and _is_ai4dl(f):
            history = history.merged(read_ai4dl(f))
    if not len(history):
        raise TraceFormatError(f"{p}: no trace table (executions.csv, traces.csv, or a table "
                               f"with a pod.id column)")
    return history


def is_trace_source(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a ``dl-traces`` folder (with ``traces.csv``), or an AI4DL table or a
    folder of them, rather than a log of whole runs."""
    p = Path(path)
    if p.is_dir():
        if (p / "traces.csv").is_file():
            return True
        files = sorted(p.glob("*.csv"))
    else:
        files = [p] if p.suffix == ".csv" and p.is_file() else []
    return bool(files) and all(_is_ai4dl(f) for f in files)
