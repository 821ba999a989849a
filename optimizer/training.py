"""Running a user's training script for real under an allocation, and measuring it.

:class:`TrainingModuleManager` is the runner every other part calls:

1. :meth:`~TrainingModuleManager.load_module` reads and compiles the script *without running
   it* (a missing file or a syntax error is a :class:`~optimizer.errors.TrainingScriptError`
   naming the file and line) and finds its entry: a ``__main__`` block, else a function
   ``train``, ``train_model`` or ``main``, else its top-level code.
2. :meth:`~TrainingModuleManager.analyze_module` scans the source with :mod:`ast` for GPU use,
   the model family, dataset hints and, when layer sizes are literals, the parameter count.
3. :meth:`~TrainingModuleManager.run_training` runs it in a subprocess with the allocation
   applied (environment from :class:`~optimizer.resources.ResourceManager`, CPU affinity so that
   2 CPUs means two cores, memory limit enforced by the :class:`~optimizer.monitor.ProcessMonitor`)
   and records the trial in ``trial_dir`` (config, trace, metrics, logs, summary; see
   :mod:`optimizer.records`). A crash, an out-of-memory kill or a timeout is a recorded failed
   trial, never an exception.

Throughput comes from the first source available, and the summary names it:
``metrics_csv`` (rows the script appends to ``$OPTIMIZER_METRICS_CSV``), ``stdout`` (printed
rates: ``samples/s``, ``images/sec``, ``it/s`` × batch size) or ``wall_time`` (work / time).
With ``probe_seconds`` a trial is a probe: it runs until the rate is steady (the mean of the
windows after warm-up known to a few percent) or the time box ends, and the whole job's time is predicted as
``startup + total_samples / steady_throughput``.
"""

from __future__ import annotations

import ast
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from optimizer.config import ResourceConfig
from optimizer.cost import ResourceCostCalculator
from optimizer.errors import TrainingScriptError
from optimizer.monitor import CSVMonitor, ProcessMonitor, kill_tree
from optimizer.records import (
    SUMMARY_FILE,
    Allocation,
    TrialSummary,
    atomic_write_json,
    write_trials_csv,
)
from optimizer.resources import ResourceManager, cpu_affinity_set

ENTRY_NAMES = ("train", "train_model", "main")
STDERR_TAIL_CHARS = 2000

# The runner that calls an entry function of a script without a __main__ block.
_BOOT = (
    "import os, runpy, sys\n"
    "path, entry = sys.argv[1], sys.argv[2]\n"
    "sys.argv = [path] + sys.argv[3:]\n"
    "sys.path.insert(0, os.path.dirname(os.path.abspath(path)))\n"
    "result = runpy.run_path(path, run_name='__cloudopt__')[entry]()\n"
    "sys.exit(result if isinstance(result, int) else 0)\n"
)


@dataclass
class ScriptInfo:
    """A training script read and compiled, not executed."""

    path: Path
    source: str
    tree: ast.Module
    has_main_guard: bool
    entry: str | None
    """``__main__`` (run as a script), a function name, or None (top-level code)."""


# --------------------------------------------------------------------------------------------
# Parsing what a script reports
# --------------------------------------------------------------------------------------------

_NUM = r"(\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)"
_SAMPLE_RATE = re.compile(
    _NUM + r"\s*(?:samples|sample|images|imgs|img|examples|sequences|seqs|records|rows)"
    r"\s*/\s*s(?:ec(?:ond)?s?)?\b", re.IGNORECASE)
_SAMPLE_RATE_KEY = re.compile(
    r"(?:samples|images|examples)_per_s(?:ec(?:ond)?)?\s*[=:]\s*" + _NUM, re.IGNORECASE)
_IT_RATE = re.compile(_NUM + r"\s*it/s\b")
_S_PER_IT = re.compile(_NUM + r"\s*s/it\b")
_KEY_VALUE = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)=([^\s,;]+)")
_BATCH = re.compile(r"batch[_ ]size\s*[=:]\s*(\d+)", re.IGNORECASE)
BATCH_SIZE_PATTERN = _BATCH
"""``batch_size=N`` / ``batch size: N`` in a script's output: its batch size when not set."""
_INFO_KEYS = ("model_name", "model_family", "params", "layers", "dataset")


def parse_rate(line: str, batch_size: int | None) -> float | None:
    """Samples per second printed on one output line, or None.

    ``123.4 samples/s`` (also images/sec, examples/s...) counts directly; ``12.5it/s`` and
    ``0.8s/it`` (tqdm) are multiplied by ``batch_size`` and ignored without one.
    """
    m = _SAMPLE_RATE.search(line) or _SAMPLE_RATE_KEY.search(line)
    if m:
        return float(m.group(1))
    if batch_size:
        m = _IT_RATE.search(line)
        if m:
            return float(m.group(1)) * batch_size
        m = _S_PER_IT.search(line)
        if m and float(m.group(1)) > 0:
            return batch_size / float(m.group(1))
    return None


def parse_key_values(text: str) -> dict[str, str]:
    """``key=value`` tokens printed by a script (the last value of each key wins)."""
    return {k: v for k, v in _KEY_VALUE.findall(text)}


def _to_number(value: Any) -> float | int | None:
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(f):
        return None
    return int(f) if f.is_integer() else f


def total_samples_from_args(args: Sequence[str]) -> int | None:
    """Work implied by common arguments: ``--samples N`` (or ``--num-samples``...) × ``--epochs E``."""
    values: dict[str, str] = {}
    for i, a in enumerate(args):
        if a.startswith("--"):
            if "=" in a:
                k, v = a[2:].split("=", 1)
                values[k.replace("-", "_")] = v
            elif i + 1 < len(args):
                values[a[2:].replace("-", "_")] = args[i + 1]
    n = next((values[k] for k in ("total_samples",) if k in values), None)
    if n is not None and _to_number(n):
        return int(_to_number(n))
    n = next((values[k] for k in ("samples", "num_samples", "n_samples", "train_samples")
              if k in values), None)
    epochs = values.get("epochs") or values.get("num_epochs")
    if n is not None and epochs is not None and _to_number(n) and _to_number(epochs):
        return int(_to_number(n) * _to_number(epochs))
    return None


class RateTracker:
    """Windows of measured throughput, in arrival order.

    Each window is ``(t_s, rate, samples)``: when it was seen (seconds since start), its rate
    (samples/s) and the cumulative samples at its end when the script reports them.
    """

    def __init__(self) -> None:
        self.windows: list[tuple[float, float, float | None]] = []

    def add(self, t_s: float, rate: float, samples: float | None = None) -> None:
        if rate > 0 and math.isfinite(rate):
            self.windows.append((t_s, rate, samples))

    def steady_rates(self) -> np.ndarray:
        """Rates after the first window (which holds the warm-up), or the only one."""
        rates = [w[1] for w in self.windows]
        return np.array(rates[1:] if len(rates) > 1 else rates, dtype=float)

    def is_steady(self, k: int = 4, tol: float = 0.03) -> bool:
        """True when at least ``k`` windows after warm-up pin their mean rate down to a
        relative standard error of ``tol`` (noisy machines need more windows)."""
        rates = self.steady_rates()
        if len(self.windows) < k + 1:
            return False
        sem = rates.std(ddof=1) / np.sqrt(len(rates))
        return bool(sem / rates.mean() <= tol)

    def throughput(self) -> float | None:
        """Mean rate of the windows after warm-up (None before any window)."""
        if not self.windows:
            return None
        return float(self.steady_rates().mean())


# --------------------------------------------------------------------------------------------
# Static analysis
# --------------------------------------------------------------------------------------------

_FAMILIES = (  # first match wins: specific families before generic ones
    ("ResNet", ("resnet", "wide_resnet", "resnext")),
    ("VGG", ("vgg",)),
    ("EfficientNet", ("efficientnet",)),
    ("MobileNet", ("mobilenet",)),
    ("transformer", ("transformer", "multiheadattention", "bert", "gpt", "vit_", "attention")),
    ("RNN", ("lstm", "gru", "rnn")),
    ("autoencoder", ("autoencoder", "decoder")),
    ("CNN", ("conv1d", "conv2d", "conv3d")),
    ("MLP", ("linear",)),
)
_DATASETS = (
    ("CIFAR-100", ("cifar100",)), ("CIFAR-10", ("cifar10", "cifar")),
    ("ImageNet", ("imagenet",)), ("Fashion-MNIST", ("fashionmnist", "fashion_mnist")),
    ("MNIST", ("mnist",)), ("IMDB", ("imdb",)), ("COCO", ("coco",)),
    ("WikiText", ("wikitext",)), ("SQuAD", ("squad",)),
)
_GPU_MARKERS = ("cuda", "dataparallel", "distributeddataparallel", "nccl")


def _identifiers(tree: ast.AST) -> list[str]:
    """Lower-cased names, attribute names and string constants of a syntax tree."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            out.append(node.id.lower())
        elif isinstance(node, ast.Attribute):
            out.append(node.attr.lower())
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out.append(node.name.lower())
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.append(node.value.lower())
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.extend(a.name.lower() for a in node.names)
    return out


def _layer_params(node: ast.Call) -> tuple[str, int | None] | None:
    """(layer kind, parameter count or None when its sizes are not literals)."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    if name not in ("Linear", "Conv1d", "Conv2d", "Conv3d", "Embedding"):
        return None
    ints = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, int)]
    kernel: Any = None
    if name.startswith("Conv"):
        kw = {k.arg: k.value for k in node.keywords}
        knode = node.args[2] if len(node.args) > 2 else kw.get("kernel_size")
        if isinstance(knode, ast.Constant) and isinstance(knode.value, int):
            kernel = knode.value ** int(name[-2])
        elif isinstance(knode, ast.Tuple) and all(isinstance(e, ast.Constant) for e in knode.elts):
            kernel = int(np.prod([e.value for e in knode.elts]))
        if len(ints) < 2 or kernel is None:
            return name, None
        return name, ints[0] * ints[1] * kernel + ints[1]
    if len(ints) < 2:
        return name, None
    if name == "Embedding":
        return name, ints[0] * ints[1]
    return name, ints[0] * ints[1] + ints[1]


def analyze_source(tree: ast.Module) -> dict[str, Any]:
    """GPU use, model family, dataset hint, layers and literal parameter count of a script."""
    ids = _identifiers(tree)
    text = " ".join(ids)
    family = next((fam for fam, keys in _FAMILIES if any(k in text for k in keys)), None)
    dataset = next((ds for ds, keys in _DATASETS if any(k in text for k in keys)), None)
    if dataset is None and any(k in ids for k in ("randn", "rand", "randint", "make_classification")):
        dataset = "synthetic"
    layers = [p for p in (_layer_params(n) for n in ast.walk(tree) if isinstance(n, ast.Call)) if p]
    counts = [c for _, c in layers]
    return {
        "uses_gpu": any(m in ids for m in _GPU_MARKERS) or any("cuda" in i for i in ids),
        "model_family": family,
        "dataset": dataset,
        "layers": len(layers) or None,
        "params": sum(counts) if counts and all(c is not None for c in counts) else None,
        "reads_batch_size_env": "optimizer_batch_size" in ids,
        "writes_metrics_csv": "optimizer_metrics_csv" in ids,
        "framework": next((f for f in ("torch", "tensorflow", "jax", "sklearn") if f in ids), None),
    }


# --------------------------------------------------------------------------------------------
# The manager
# --------------------------------------------------------------------------------------------


@dataclass
class _Run:
    """State of one running trial."""

    proc: subprocess.Popen
    t0: float
    monitor: ProcessMonitor
    csv_monitor: CSVMonitor
    stdout_path: Path
    batch_size: int | None
    rates_csv: RateTracker = field(default_factory=RateTracker)
    rates_stdout: RateTracker = field(default_factory=RateTracker)
    stdout_pos: int = 0
    stdout_buf: str = ""
    stdout_text: list[str] = field(default_factory=list)
    first_output_s: float | None = None
    last_samples: tuple[float, float] | None = None
    """(t_s, cumulative samples) of the last metrics row."""
    csv_total: float | None = None
    stop_reason: str | None = None


class TrainingModuleManager:
    """Load, analyse and run one training script.

    Parameters
    ----------
    train_file : path
        The script.
    train_args : str or sequence of str, optional
        Arguments passed through to it (a string is split like a shell would).
    batch_size_arg : str, optional
        For scripts that do not read ``OPTIMIZER_BATCH_SIZE``: the flag that sets their batch
        size (``--batch_size`` gives ``--batch_size 128``; ``--bs={}`` gives ``--bs=128``).
    """

    def __init__(self, train_file: str | os.PathLike, train_args: str | Sequence[str] | None = None,
                 batch_size_arg: str | None = None):
        self.module_path = Path(train_file)
        if isinstance(train_args, str):
            train_args = shlex.split(train_args)
        self.train_args = [str(a) for a in (train_args or [])]
        self.batch_size_arg = batch_size_arg
        self.module: ScriptInfo | None = None
        self.training_process: subprocess.Popen | None = None
        self.csv_monitor: CSVMonitor | None = None
        self.output_csv_path: Path | None = None
        self.resource_config: ResourceConfig | None = None
        self._analysis: dict[str, Any] | None = None

    # -- loading and analysis ------------------------------------------------------------
    def load_module(self) -> ScriptInfo:
        """Read and compile the script without running it, and find its entry point.

        Raises
        ------
        TrainingScriptError
            Missing or unreadable file, or a syntax error (message names file and line).
        """
        p = self.module_path
        if not p.is_file():
            raise TrainingScriptError(f"{p}: training script not found")
        try:
            source = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise TrainingScriptError(f"{p}: cannot read training script ({exc})") from None
        try:
            tree = ast.parse(source, filename=str(p))
            compile(tree, str(p), "exec")
        except SyntaxError as exc:
            raise TrainingScriptError(
                f"{p}:{exc.lineno}: syntax error in training script: {exc.msg}") from None
        guard = any(_is_main_guard(n) for n in tree.body)
        funcs = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        entry = "__main__" if guard else next((e for e in ENTRY_NAMES if e in funcs), None)
        self.module = ScriptInfo(p, source, tree, guard, entry)
        return self.module

    def analyze_module(self) -> dict[str, Any]:
        """Static facts about the script (see :func:`analyze_source`) plus its entry."""
        if self._analysis is None:
            info = self.module or self.load_module()
            self._analysis = {"entry": info.entry, **analyze_source(info.tree)}
        return dict(self._analysis)

    def command(self, allocation: Allocation) -> list[str]:
        """The command line of a run: the script, its arguments and the batch-size flag."""
        info = self.module or self.load_module()
        args = list(self.train_args)
        if self.batch_size_arg and allocation.batch_size is not None:
            args = _with_batch_flag(args, self.batch_size_arg, allocation.batch_size)
        script = str(info.path)
        if info.entry in (None, "__main__"):
            return [sys.executable, script, *args]
        return [sys.executable, "-c", _BOOT, script, info.entry, *args]

    # -- running -------------------------------------------------------------------------
    def run_training(
        self,
        allocation: Allocation,
        trial_dir: str | os.PathLike,
        *,
        resource_config: ResourceConfig,
        probe_seconds: float | None = None,
        timeout_s: float = 600,
        monitor_interval: float = 0.5,
        total_samples: float | None = None,
        quiet: bool = True,
        trial_id: str | None = None,
        visible_devices: Sequence[int] | None = None,
        steady_windows: int = 4,
        steady_tol: float = 0.03,
    ) -> TrialSummary:
        """Run the script once under ``allocation`` and record it in ``trial_dir``.

        Parameters
        ----------
        allocation : Allocation
            GPUs, CPUs (pinned cores), memory limit (GiB, enforced) and batch size.
        trial_dir : path
            Folder of this trial (created; files replaced atomically; ``summary.json`` last).
        resource_config : ResourceConfig
            Prices, exported to the script and used for the cost.
        probe_seconds : float, optional
            Time box: stop once throughput is steady or this many seconds pass, and record a
            ``probe`` with the predicted whole-job time. None: run to the end.
        timeout_s : float
            Hard limit; a script still running then is a failed trial (``timeout``).
        monitor_interval : float
            Seconds between resource samples.
        total_samples : float, optional
            Work of the whole job; otherwise taken from the script's metrics, output
            (``total_samples=N``) or arguments (``--samples`` × ``--epochs``).
        quiet : bool
            False: echo the script's output lines.
        trial_id : str, optional
            Default: the folder name.
        visible_devices : sequence of int, optional
            GPUs to choose from (default: those NVML sees).
        steady_windows, steady_tol : int, float
            A probe is steady once at least ``steady_windows`` rate windows after the first
            give their mean a relative standard error of at most ``steady_tol``.

        Returns
        -------
        TrialSummary
            Also saved as ``trial_dir/summary.json``. Failures are recorded, not raised.
        """
        info = self.module or self.load_module()
        trial_dir = Path(trial_dir)
        trial_id = trial_id or trial_dir.name
        self.resource_config = resource_config
        work = trial_dir / ".work"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        # A summary left by an earlier attempt would mark this folder complete while it runs.
        (trial_dir / SUMMARY_FILE).unlink(missing_ok=True)
        env = ResourceManager.apply_configuration(allocation, resource_config=resource_config,
                                                  visible_devices=visible_devices)
        metrics_part = work / "metrics.csv"
        env.update(OPTIMIZER_METRICS_CSV=str(metrics_part.resolve()), PYTHONUNBUFFERED="1",
                   OPTIMIZER_TRIAL_ID=trial_id)
        cpus = cpu_affinity_set(allocation.cpus)
        cmd = self.command(allocation)
        gpu_indices = ([int(i) for i in env["CUDA_VISIBLE_DEVICES"].split(",")]
                       if allocation.gpus else [])
        started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        atomic_write_json(trial_dir / "config.json", {
            "trial_id": trial_id, "allocation": allocation, "train_file": str(info.path),
            "train_args": self.train_args, "command": cmd, "cpu_affinity": cpus,
            "env": {k: env[k] for k in sorted(env) if k.startswith(("OPTIMIZER_", "COST_PER_",
                                                                     "CUDA_VISIBLE"))
                    or k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                             "NUMEXPR_NUM_THREADS")},
            "probe_seconds": probe_seconds, "timeout_s": timeout_s,
            "monitor_interval": monitor_interval, "started_at": started_at,
        })
        run = self._start(cmd, env, cpus, work, trial_id, allocation, monitor_interval,
                          gpu_indices, metrics_part)
        try:
            wall = self._wait(run, probe_seconds, timeout_s, monitor_interval, quiet,
                              steady_windows, steady_tol)
        finally:
            if run.proc.poll() is None:  # e.g. KeyboardInterrupt: never leave a tree behind
                kill_tree(run.proc.pid, popen=run.proc)
                run.proc.wait()
            run.monitor.stop()
        self._poll_outputs(run, time.monotonic() - run.t0, quiet)
        summary = self.generate_summary(run, allocation, trial_id, wall, resource_config,
                                        total_samples, work, started_at)
        self._finalize(trial_dir, work, summary)
        return summary

    def _start(self, cmd: list[str], env: dict[str, str], cpus: list[int], work: Path,
               trial_id: str, allocation: Allocation, interval: float,
               gpu_indices: list[int], metrics_part: Path) -> _Run:
        stdout_path, stderr_path = work / "stdout.log", work / "stderr.log"
        with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
            proc = subprocess.Popen(
                cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env,
                start_new_session=True, preexec_fn=_affinity_setter(cpus),
            )
        t0 = time.monotonic()
        self.training_process = proc
        if not hasattr(os, "sched_setaffinity"):  # pragma: no cover - macOS/Windows
            _set_affinity_psutil(proc.pid, cpus)
        monitor = ProcessMonitor(proc.pid, work / "trace.csv", exec_id=trial_id,
                                 interval=interval, memory_limit_gb=allocation.memory_gb,
                                 gpu_indices=gpu_indices, start_time=t0)
        monitor.start()
        self.csv_monitor = CSVMonitor(metrics_part)
        self.output_csv_path = metrics_part
        return _Run(proc, t0, monitor, self.csv_monitor, stdout_path,
                    allocation.batch_size)

    def _wait(self, run: _Run, probe_seconds: float | None, timeout_s: float,
              interval: float, quiet: bool, k: int, tol: float) -> float:
        """Poll until the script ends, is stopped (probe, timeout) or killed (OOM).

        Returns the wall time in seconds.
        """
        poll = min(0.1, interval)
        while True:
            code = run.proc.poll()
            elapsed = time.monotonic() - run.t0
            if code is not None or run.monitor.oom:
                kill_tree(run.proc.pid, popen=run.proc)  # orphans left by the script
                break
            self._poll_outputs(run, elapsed, quiet)
            if elapsed >= timeout_s:
                run.stop_reason = "timeout"
            elif probe_seconds is not None:
                tracker = run.rates_csv if run.rates_csv.windows else run.rates_stdout
                if elapsed >= probe_seconds or tracker.is_steady(k, tol):
                    run.stop_reason = "probe"
            if run.stop_reason:
                kill_tree(run.proc.pid, popen=run.proc)
                break
            time.sleep(poll)
        run.proc.wait()
        return time.monotonic() - run.t0

    def _poll_outputs(self, run: _Run, elapsed: float, quiet: bool) -> None:
        """Read new metrics rows and new output lines into the rate trackers."""
        if run.csv_monitor.check_for_updates():
            try:
                rows = run.csv_monitor.get_new_rows()
            except Exception:  # a half-written or odd file: try again at the next poll
                rows = pd.DataFrame()
            self._add_metric_rows(run, rows, elapsed)
        try:
            with open(run.stdout_path, "rb") as fh:
                fh.seek(run.stdout_pos)
                chunk = fh.read()
        except FileNotFoundError:
            return
        if not chunk:
            return
        run.stdout_pos += len(chunk)
        text = run.stdout_buf + chunk.decode("utf-8", errors="replace")
        lines = text.replace("\r", "\n").split("\n")
        run.stdout_buf = lines.pop()
        for line in lines:
            if not line.strip():
                continue
            if run.first_output_s is None:
                run.first_output_s = elapsed
            run.stdout_text.append(line)
            if run.batch_size is None and (m := _BATCH.search(line)):
                run.batch_size = int(m.group(1))
            rate = parse_rate(line, run.batch_size)
            if rate is not None:
                run.rates_stdout.add(elapsed, rate)
            if not quiet:
                print(f"  | {line}", flush=True)

    @staticmethod
    def _add_metric_rows(run: _Run, rows: pd.DataFrame, elapsed: float) -> None:
        if rows.empty:
            return
        if "samples" not in rows:
            if "step" not in rows or not run.batch_size:
                return
            # Steps without a sample count: samples = steps × the batch size in use.
            rows = rows.assign(samples=pd.to_numeric(rows["step"], errors="coerce")
                               * run.batch_size)
        for _, row in rows.iterrows():
            samples = _to_number(row.get("samples"))
            if samples is None:
                continue
            if "total_samples" in row and _to_number(row["total_samples"]):
                run.csv_total = float(_to_number(row["total_samples"]))
            rate = _to_number(row.get("samples_per_s"))
            if rate is None and run.last_samples is not None:
                dt = elapsed - run.last_samples[0]
                rate = (samples - run.last_samples[1]) / dt if dt > 0 else None
            if rate is not None:
                run.rates_csv.add(elapsed, float(rate), float(samples))
            run.last_samples = (elapsed, float(samples))

    # -- results -------------------------------------------------------------------------
    def get_model_info(self, metrics: pd.DataFrame | str | os.PathLike | None = None,
                       stdout_text: str = "") -> dict[str, Any]:
        """What the script tells about its model and data, over what its source shows.

        Reads ``model_name, model_family, params, layers, dataset`` from columns of the
        metrics CSV (a frame or a path) and from ``key=value`` tokens in its output.
        """
        info = {k: v for k, v in self.analyze_module().items() if v is not None}
        if metrics is not None and not isinstance(metrics, pd.DataFrame):
            metrics = CSVMonitor(metrics).load_latest_data()
        reported: dict[str, Any] = {}
        if isinstance(metrics, pd.DataFrame) and not metrics.empty:
            for k in _INFO_KEYS:
                if k in metrics and metrics[k].notna().any():
                    reported[k] = metrics[k].dropna().iloc[-1]
        kv = parse_key_values(stdout_text)
        reported.update({k: kv[k] for k in _INFO_KEYS if k in kv and k not in reported})
        for k in ("params", "layers"):
            if k in reported:
                reported[k] = _to_number(reported[k])
        info.update({k: v for k, v in reported.items() if v is not None})
        return info

    def generate_summary(self, run: _Run, allocation: Allocation, trial_id: str, wall: float,
                         resource_config: ResourceConfig, total_samples: float | None,
                         work: Path, started_at: str = "") -> TrialSummary:
        """Status, time, throughput (and its source), cost and resource use of a finished run."""
        code = run.proc.returncode
        status, reason = _classify(run, code)
        stdout_text = "\n".join(run.stdout_text)
        samples, thr, source, startup = _throughput(run, wall, total_samples, status)
        total = _first_number(total_samples, run.csv_total,
                              parse_key_values(stdout_text).get("total_samples"),
                              total_samples_from_args(self.train_args))
        if source == "wall_time" and total is not None and status == "completed":
            samples, thr = total, total / wall if wall > 0 else None
        hourly = ResourceCostCalculator.from_config(resource_config).calculate_hourly_cost(
            allocation)
        predicted = _predict_time(status, wall, samples, total, thr, startup)
        stats = run.monitor.stats()
        stderr = _tail(work / "stderr.log")
        if status == "probe" and thr is None:
            reason = "no throughput measured before the time box ended"
        model_info = self.get_model_info(work / "metrics.csv", stdout_text)
        if run.batch_size is not None:  # the allocation's, else what the script printed
            model_info["batch_size"] = run.batch_size
        return TrialSummary(
            trial_id=trial_id, status=status, allocation=allocation, reason=reason,
            exit_code=code, wall_time_s=round(wall, 3), samples=samples, throughput=thr,
            throughput_source=source, hourly_cost=hourly, cost=hourly * wall / 3600,
            total_samples=total, predicted_total_time_s=predicted,
            predicted_total_cost=None if predicted is None else hourly * predicted / 3600,
            cpu_util_mean=100 * stats["cpu_cores_mean"] / max(allocation.cpus, 1),
            **stats, train_file=str(self.module_path), train_args=list(self.train_args),
            model_info=model_info,
            stderr_tail=stderr if status == "failed" else "", started_at=started_at,
        )

    @staticmethod
    def _finalize(trial_dir: Path, work: Path, summary: TrialSummary) -> None:
        """Move the run's files into place (renames are atomic), then write the summary."""
        for name in ("trace.csv", "metrics.csv", "stdout.log", "stderr.log"):
            src = work / name
            if src.exists():
                os.replace(src, trial_dir / name)
        shutil.rmtree(work, ignore_errors=True)
        summary.save(trial_dir)
        if trial_dir.parent.name == "trials":
            write_trials_csv(trial_dir.parent.parent)


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _is_main_guard(node: ast.stmt) -> bool:
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    parts = [node.test.left, *node.test.comparators]
    return (any(isinstance(p, ast.Name) and p.id == "__name__" for p in parts)
            and any(isinstance(p, ast.Constant) and p.value == "__main__" for p in parts))


def _with_batch_flag(args: list[str], flag: str, batch_size: int) -> list[str]:
    """``args`` with the batch-size flag set (replacing a value already there)."""
    if "{" in flag:
        token = flag.replace("{batch_size}", str(batch_size)).replace("{}", str(batch_size))
        prefix = token.split("=", 1)[0] + "="
        return [a for a in args if not a.startswith(prefix)] + [token]
    out, skip = [], False
    for i, a in enumerate(args):
        if skip:
            skip = False
            continue
        if a == flag:
            skip = i + 1 < len(args)
            continue
        if a.startswith(flag + "="):
            continue
        out.append(a)
    return [*out, flag, str(batch_size)]


def _affinity_setter(cpus: list[int]):
    if not hasattr(os, "sched_setaffinity"):  # pragma: no cover - macOS/Windows
        return None

    def set_affinity() -> None:  # runs in the child between fork and exec: one syscall
        os.sched_setaffinity(0, cpus)

    return set_affinity


def _set_affinity_psutil(pid: int, cpus: list[int]) -> None:  # pragma: no cover
    import psutil

    try:
        psutil.Process(pid).cpu_affinity(cpus)
    except (AttributeError, psutil.Error):
        pass  # the platform has no affinity (macOS): the thread variables are all we have


def _classify(run: _Run, code: int | None) -> tuple[str, str]:
    if run.monitor.oom:
        return "failed", "oom"
    if run.stop_reason == "timeout":
        return "failed", "timeout"
    if run.stop_reason == "probe" and code != 0:
        return "probe", ""
    if code == 0:
        return "completed", ""
    if code is not None and code < 0:
        return "failed", f"crash (killed by signal {-code})"
    return "failed", "crash"


def _first_number(*values: Any) -> float | None:
    for v in values:
        n = _to_number(v)
        if n is not None and n > 0:
            return n
    return None


def _throughput(run: _Run, wall: float, total: float | None,
                status: str) -> tuple[float | None, float | None, str, float | None]:
    """(samples done, samples/s, source, startup seconds) from the best source available.

    Startup is the time not explained by the steady rate: for metrics, the time of the last
    row minus its cumulative samples over the rate; for stdout, the first output line.
    """
    if run.rates_csv.windows:
        thr = run.rates_csv.throughput()
        t_last, samples = run.last_samples  # type: ignore[misc]
        startup = max(t_last - samples / thr, 0.0)
        return samples, thr, "metrics_csv", startup
    if run.rates_stdout.windows:
        thr = run.rates_stdout.throughput()
        return None, thr, "stdout", run.first_output_s or 0.0
    return None, None, "wall_time", None


def _predict_time(status: str, wall: float, samples: float | None, total: float | None,
                  thr: float | None, startup: float | None) -> float | None:
    """Whole-job time: measured when the script ran to its end, else predicted."""
    if status == "completed":
        if total is None or samples is None or samples >= total or not thr:
            return round(wall, 3)
        return round(wall + (total - samples) / thr, 3)
    if status == "probe" and thr and total is not None:
        return round((startup or 0.0) + total / thr, 3)
    return None


def _tail(path: Path, chars: int = STDERR_TAIL_CHARS) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(size - chars, 0))
            return fh.read().decode("utf-8", errors="replace").strip()
    except FileNotFoundError:
        return ""


def load_trial_files(trial_dir: str | os.PathLike) -> dict[str, Any]:
    """The files of a recorded trial: ``summary`` (dict), ``trace`` and ``metrics`` frames."""
    d = Path(trial_dir)
    out: dict[str, Any] = {"summary": TrialSummary.load(d).to_dict()}
    for name in ("trace", "metrics"):
        p = d / f"{name}.csv"
        out[name] = pd.read_csv(p) if p.exists() and p.stat().st_size else pd.DataFrame()
    return out


def describe_allocation(allocation: Allocation | Mapping[str, Any]) -> str:
    """``2 CPU, 0 GPU, 4 GB, batch 128`` for tables and logs."""
    a = allocation if isinstance(allocation, Allocation) else Allocation(**allocation)
    bs = "default" if a.batch_size is None else str(a.batch_size)
    return f"{a.cpus} CPU, {a.gpus} GPU, {a.memory_gb:g} GB, batch {bs}"

