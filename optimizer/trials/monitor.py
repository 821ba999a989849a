"""Watching a training run: its process tree's resources and the metrics CSV it writes.

* :class:`ProcessMonitor` is a thread that samples a whole process tree with psutil every
  ``interval`` seconds into a trace CSV with the columns and units of
  ``../shared/data/dl-traces/traces.csv``: ``exec_id, time_s`` (seconds since the monitor
  started), ``cpu_cores`` (CPU time per wall second, summed over the tree), ``mem_gb``
  (resident memory, GiB, summed), plus ``gpu_util`` (%, mean of the allocated GPUs) and
  ``gpu_mem_gb`` (GiB, summed) when GPUs are watched. Rows are flushed as they are taken. It
  enforces a memory limit the way a container does: when the tree's resident memory passes the
  limit it kills the tree and sets :attr:`ProcessMonitor.oom`.
* :class:`CSVMonitor` follows a metrics CSV that a training script appends to (the file named
  by ``OPTIMIZER_METRICS_CSV``: ``step, epoch, samples, loss, ...``) and adds RL metrics to it.

Sampling is cheap on purpose (the tree is walked through ``/proc/<pid>/task/<tid>/children``
on Linux, one ``psutil.Process`` object per pid is kept between samples, ``oneshot()`` reads): ``benchmarks/monitor_overhead.py`` measures its cost on the example.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import psutil

from optimizer.foundation.atomic_files import atomic_write_csv
from optimizer.foundation.errors import TraceFormatError

TRACE_COLUMNS = ["exec_id", "time_s", "cpu_cores", "mem_gb"]
GPU_COLUMNS = ["gpu_util", "gpu_mem_gb"]
GIB = 1024**3


def process_tree(root: psutil.Process) -> list[psutil.Process]:
    """``root`` and all its living descendants (``[]`` when ``root`` has exited)."""
    try:
        return [root, *root.children(recursive=True)]
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return []


def _has_proc_children() -> bool:
    return os.path.exists(f"/proc/self/task/{os.getpid()}/children")


PROC_CHILDREN = _has_proc_children()
"""Linux exposes each thread's children in ``/proc/<pid>/task/<tid>/children``: walking a tree
through it reads a few small files, where ``psutil.Process.children`` reads every process's
``stat`` on the machine (about 100x the cost on a machine with 100 processes)."""


def tree_pids(pid: int) -> list[int]:
    """``pid`` and its descendants' pids through ``/proc/.../children`` (Linux only)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/children") as fh:
                    todo.extend(int(c) for c in fh.read().split())
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                continue  # the thread ended while we looked
    return out


def signal_tree(pid: int, sig: int = signal.SIGKILL) -> list[psutil.Process]:
    """Send ``sig`` to a process and all its descendants; returns the processes signalled."""
    try:
        procs = process_tree(psutil.Process(pid))
    except psutil.NoSuchProcess:
        return []
    for p in procs:
        try:
            p.send_signal(sig)
        except psutil.NoSuchProcess:
            pass
    return procs


def kill_tree(pid: int, grace_s: float = 3.0, popen: subprocess.Popen | None = None) -> None:
    """End a process tree: SIGTERM to every process, then SIGKILL to those alive after
    ``grace_s`` seconds.

    Pass the ``Popen`` of the root when this process started it: the root is then reaped by
    ``popen.wait`` so that its exit status is kept (psutil would reap it and lose it).
    """
    procs = signal_tree(pid, signal.SIGTERM)
    others = [p for p in procs if p.pid != pid or popen is None]
    if popen is not None:
        try:
            popen.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    _, alive = psutil.wait_procs(others, timeout=grace_s if popen is None else 0.2)
    if popen is not None and popen.poll() is None:
        popen.kill()
        popen.wait()
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


class ProcessMonitor(threading.Thread):
    """Sample a process tree into a trace CSV and enforce a memory limit.

    Parameters
    ----------
    pid : int
        Root of the tree (the training process).
    trace_path : path
        CSV written row by row (flushed); the header is written at start.
    exec_id : str
        Value of the ``exec_id`` column (the trial id).
    interval : float
        Seconds between samples.
    memory_limit_gb : float or None
        Resident memory (GiB, summed over the tree) past which the tree is killed.
    gpu_indices : sequence of int or None
        Physical GPU indices to watch through NVML; ``None`` or empty: no GPU columns.

    Attributes
    ----------
    rows : list of dict
        Every sample taken, as written to the CSV.
    oom : bool
        True when the monitor killed the tree for passing the memory limit.
    peak_mem_gb : float
    """

    def __init__(self, pid: int, trace_path: str | os.PathLike, *, exec_id: str = "run",
                 interval: float = 0.5, memory_limit_gb: float | None = None,
                 gpu_indices: Sequence[int] | None = None, start_time: float | None = None):
        super().__init__(name=f"monitor-{pid}", daemon=True)
        self.pid = pid
        self.trace_path = Path(trace_path)
        self.exec_id = exec_id
        self.interval = float(interval)
        self.memory_limit_gb = memory_limit_gb
        self.gpu_indices = list(gpu_indices or [])
        self.start_time = time.monotonic() if start_time is None else start_time
        self.rows: list[dict[str, Any]] = []
        self.oom = False
        self.peak_mem_gb = 0.0
        self._stop_event = threading.Event()
        self._procs: dict[int, psutil.Process] = {}
        self._last_cpu: dict[int, tuple[float, float]] = {}
        self.columns = TRACE_COLUMNS + (GPU_COLUMNS if self.gpu_indices else [])

    # -- sampling ------------------------------------------------------------------------
    def _tree(self) -> list[psutil.Process]:
        """The tree's processes, reusing the Process object of every pid seen before (its
        cached state makes ``cpu_times`` and ``memory_info`` cheaper)."""
        root = self._procs.get(self.pid)
        if root is None:
            try:
                root = psutil.Process(self.pid)
            except psutil.NoSuchProcess:
                return []
            self._procs[self.pid] = root
        pids = tree_pids(self.pid) if PROC_CHILDREN else [p.pid for p in process_tree(root)]
        out = []
        for pid in pids:
            known = self._procs.get(pid)
            if known is None:
                try:
                    self._procs[pid] = known = psutil.Process(pid)
                except psutil.NoSuchProcess:
                    continue
            out.append(known)
        alive = {p.pid for p in out}
        for pid in list(self._procs):
            if pid not in alive:
                self._procs.pop(pid, None)
                self._last_cpu.pop(pid, None)
        return out

    def sample(self) -> dict[str, Any] | None:
        """Take one sample of the tree; ``None`` when every process of it has exited."""
        now_wall = time.time()
        cores, rss, n_alive = 0.0, 0, 0
        procs = self._tree()
        for p in procs:
            try:
                with p.oneshot():
                    if p.status() == psutil.STATUS_ZOMBIE:
                        continue  # exited, not yet reaped: its 0 B of memory is no sample
                    ct = p.cpu_times()
                    mem = p.memory_info().rss
                    created = p.create_time()
            except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
                continue
            if mem == 0:
                continue  # exiting: its memory is already released (a live process has RSS)
            cpu = ct.user + ct.system
            # A pid seen for the first time is averaged since its creation.
            prev_cpu, prev_t = self._last_cpu.get(p.pid, (0.0, created))
            if now_wall > prev_t:
                cores += max(cpu - prev_cpu, 0.0) / (now_wall - prev_t)
            self._last_cpu[p.pid] = (cpu, now_wall)
            rss += mem
            n_alive += 1
        if n_alive == 0:
            return None
        row: dict[str, Any] = {
            "exec_id": self.exec_id,
            "time_s": round(time.monotonic() - self.start_time, 3),
            "cpu_cores": round(cores, 4),
            "mem_gb": round(rss / GIB, 4),
        }
        if self.gpu_indices:
            from optimizer.foundation.gpu import gpu_memory_used_gb, gpu_utilization

            utils = gpu_utilization(self.gpu_indices)
            mems = gpu_memory_used_gb(self.gpu_indices)
            row["gpu_util"] = round(sum(utils) / len(utils), 2) if utils else 0.0
            row["gpu_mem_gb"] = round(sum(mems), 4)
        return row

    def _check_memory(self, row: Mapping[str, Any]) -> None:
        self.peak_mem_gb = max(self.peak_mem_gb, float(row["mem_gb"]))
        if self.memory_limit_gb is not None and row["mem_gb"] > self.memory_limit_gb:
            self.oom = True
            # Like the kernel's OOM killer: SIGKILL, no grace period. The runner reaps the root.
            signal_tree(self.pid, signal.SIGKILL)

    def run(self) -> None:
        self.trace_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.trace_path, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=self.columns)
            writer.writeheader()
            fh.flush()
            # The first sample comes one interval after start, as in the shared traces.
            while not self._stop_event.wait(self.interval):
                row = self.sample()
                if row is None:
                    break
                writer.writerow(row)
                fh.flush()
                self.rows.append(row)
                self._check_memory(row)
                if self.oom:
                    break

    def stop(self, timeout: float | None = 5.0) -> None:
        """Stop sampling and wait for the thread (the trace file is complete afterwards)."""
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout)

    # -- statistics ----------------------------------------------------------------------
    def stats(self, since_s: float | None = None) -> dict[str, float | None]:
        """Mean and peak CPU cores and memory, the memory's growth from ``since_s`` on (the
        time the steady rate began: :func:`memory_growth_rate`), and GPU figures when
        watched."""
        if not self.rows:
            return {"cpu_cores_mean": 0.0, "cpu_cores_peak": 0.0, "mem_gb_mean": 0.0,
                    "mem_gb_peak": 0.0, "gpu_util_mean": None, "gpu_mem_gb_peak": None,
                    "n_samples_trace": 0}
        cpu = [r["cpu_cores"] for r in self.rows]
        mem = [r["mem_gb"] for r in self.rows]
        out: dict[str, float | None] = {
            "cpu_cores_mean": sum(cpu) / len(cpu), "cpu_cores_peak": max(cpu),
            "mem_gb_mean": sum(mem) / len(mem), "mem_gb_peak": max(mem),
            "gpu_util_mean": None, "gpu_mem_gb_peak": None, "n_samples_trace": len(self.rows),
            "mem_gb_growth": memory_growth_rate([r["time_s"] for r in self.rows], mem, since_s),
        }
        if self.gpu_indices:
            out["gpu_util_mean"] = sum(r["gpu_util"] for r in self.rows) / len(self.rows)
            out["gpu_mem_gb_peak"] = max(r["gpu_mem_gb"] for r in self.rows)
        return out


GROWTH_NOISE_GB = 1 / 32
"""A rise in memory over a run's steady part under 32 MiB (or :data:`GROWTH_NOISE_SHARE` of
its peak) is the allocator's churn, not growth: projected over an hour-long job, a few MiB
of noise would ask for gigabytes."""
GROWTH_NOISE_SHARE = 0.05


def memory_growth_rate(times: Sequence[float], mems: Sequence[float],
                       since_s: float | None = None) -> float | None:
    """GB per second a run's memory rose over its steady part: the least-squares slope of the
    samples from ``since_s`` on (when its steady rate began; the later half of the run where
    unknown, since loading a model or data grows memory before the first step). Where fewer
    than two samples fall there (a probe stopped soon after its first steps), the last two
    samples: the latest growth seen, which errs on the side of more memory.

    0.0 where the rise over those samples stays within :data:`GROWTH_NOISE_GB` or
    :data:`GROWTH_NOISE_SHARE` of the peak; never negative (memory freed late is no promise);
    None with fewer than two samples in all."""
    if len(times) < 2 or len(times) != len(mems):
        return None
    t, m = np.asarray(times, dtype=float), np.asarray(mems, dtype=float)
    start = float(since_s) if since_s is not None else float(t[-1]) / 2
    steady = t >= start
    if steady.sum() < 2:
        steady = np.arange(len(t)) >= len(t) - 2
    ts, ms = t[steady], m[steady]
    span = float(ts[-1] - ts[0])
    if span <= 0:
        return None
    slope = float(np.polyfit(ts, ms, 1)[0])
    if slope * span < max(GROWTH_NOISE_GB, GROWTH_NOISE_SHARE * float(m.max())):
        return 0.0
    return round(slope, 6)


# --------------------------------------------------------------------------------------------
# Metrics CSV
# --------------------------------------------------------------------------------------------

RL_COLUMNS = ["policy", "action", "reward", "sla_compliance", "gpus", "cpus", "memory_gb",
              "batch_size", "cost", "throughput"]


class CSVMonitor:
    """Follow a metrics CSV that another process appends to.

    Parameters
    ----------
    csv_path : path
        The CSV (it may not exist yet).
    update_interval : float
        Minimum seconds between two real checks of the file in :meth:`check_for_updates`.
    extended_columns : sequence of str
        RL columns that :meth:`append_rl_metrics` and :meth:`create_extended_csv` add.

    Attributes
    ----------
    last_modified_time : float
        ``st_mtime_ns`` of the file at the last check (0 before any).
    last_row_count : int
        Data rows already handed out by :meth:`get_new_rows`.
    """

    def __init__(self, csv_path: str | os.PathLike, update_interval: float = 0.0,
                 extended_columns: Sequence[str] = RL_COLUMNS):
        self.csv_path = Path(csv_path)
        self.update_interval = float(update_interval)
        self.extended_columns = list(extended_columns)
        self.last_modified_time = 0
        self.last_size = -1
        self.last_row_count = 0
        self._last_check = -float("inf")
        self.rl_rows: list[dict[str, Any]] = []

    def check_for_updates(self) -> bool:
        """True when the file changed (size or mtime) since the last check."""
        now = time.monotonic()
        if now - self._last_check < self.update_interval:
            return False
        self._last_check = now
        try:
            st = self.csv_path.stat()
        except FileNotFoundError:
            return False
        changed = st.st_mtime_ns != self.last_modified_time or st.st_size != self.last_size
        self.last_modified_time, self.last_size = st.st_mtime_ns, st.st_size
        return changed

    def load_latest_data(self) -> pd.DataFrame:
        """The whole file as a DataFrame (empty when it does not exist or has no header yet).

        A last line still being written (no trailing newline) is left out.
        """
        try:
            text = self.csv_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return pd.DataFrame()
        if not text.endswith("\n"):
            text = text[: text.rfind("\n") + 1]
        if not text.strip():
            return pd.DataFrame()
        import io

        try:
            return pd.read_csv(io.StringIO(text))
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
            raise TraceFormatError(f"{self.csv_path}: not a readable metrics CSV ({exc})") from None

    def get_new_rows(self) -> pd.DataFrame:
        """Rows appended since the previous call (all rows on the first call)."""
        df = self.load_latest_data()
        new = df.iloc[self.last_row_count:]
        self.last_row_count = len(df)
        return new.reset_index(drop=True)

    def append_rl_metrics(self, metrics: Mapping[str, Any]) -> dict[str, Any]:
        """Record one row of RL metrics (policy, action, reward, SLA compliance...).

        The row is aligned with the training step it follows: it gets the ``step`` of the last
        metrics row when the script wrote one. Unknown keys are kept (a column each).
        """
        row = {c: None for c in self.extended_columns}
        row.update(metrics)
        if "step" not in row:
            df = self.load_latest_data()
            row["step"] = int(df["step"].iloc[-1]) if "step" in df and len(df) else None
        self.rl_rows.append(row)
        return row

    def rl_frame(self) -> pd.DataFrame:
        cols = ["step", *self.extended_columns]
        cols += [k for r in self.rl_rows for k in r if k not in cols]
        return pd.DataFrame(self.rl_rows, columns=list(dict.fromkeys(cols)))

    def create_extended_csv(self, output_path: str | os.PathLike) -> pd.DataFrame:
        """Write the training metrics joined with the RL metrics (on ``step``), atomically.

        Training rows without an RL row get empty RL columns; RL rows whose step is unknown
        are appended at the end. Returns the frame written.
        """
        base = self.load_latest_data()
        rl = self.rl_frame()
        if base.empty:
            out = rl
        elif rl.empty:
            out = base.reindex(columns=[*base.columns, *self.extended_columns])
        elif "step" in base:
            rl_known = rl[rl["step"].notna()].drop_duplicates("step", keep="last")
            rl_known = rl_known.astype({"step": base["step"].dtype})
            out = base.merge(rl_known, on="step", how="left", suffixes=("", "_rl"))
            out = pd.concat([out, rl[rl["step"].isna()]], ignore_index=True)
        else:
            out = pd.concat([base, rl], ignore_index=True)
        atomic_write_csv(output_path, out)
        return out


def read_trace(path: str | os.PathLike, required: Iterable[str] = TRACE_COLUMNS) -> pd.DataFrame:
    """Load a trace CSV written by :class:`ProcessMonitor` (or the shared traces)."""
    p = Path(path)
    try:
        df = pd.read_csv(p)
    except FileNotFoundError:
        raise TraceFormatError(f"{p}: trace file not found") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise TraceFormatError(f"{p}: not a readable trace CSV ({exc})") from None
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise TraceFormatError(f"{p}: missing column(s) {', '.join(missing)}")
    return df
