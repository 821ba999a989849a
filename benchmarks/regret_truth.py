"""Ground truth of the regret benchmark: every grid cell of a script run to its end, cached.

Cells are run with cloudopt's own runner (``TrainingModuleManager.run_training``: CPU affinity,
thread variables, ``CUDA_VISIBLE_DEVICES``, the monitor) with no time box and a generous memory
limit, so the measured peak is the script's own. Each repetition is a trial folder
``runs/regret/<machine>/<script>-<hash>/cells/<cell>/rep<k>/``; one with a ``summary.json`` is
complete, so an interrupted measurement resumes and a second run of the benchmark reruns
nothing. The loss ruler (``regret_loss``) reads each repetition's probe events and runs a
repetition that misses the target again for longer, in ``cells/<cell>/long3x-rep<k>/``, cached
the same way. The machine key holds the CPU model, the core count and the GPU name; the hash
holds the script's bytes, its arguments and the batch mechanism (not the manifest's epochs).
"""

from __future__ import annotations

import hashlib
import math
import os
import platform
import re
import shlex
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
from regret_loss import LONG_FACTOR, LossCurve, time_to_target
from regret_score import Cell, CellTruth

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from optimizer.foundation.allocation import Allocation  # noqa: E402
from optimizer.foundation.config import OptimizerConfig, read_toml  # noqa: E402
from optimizer.trials.probe.events import read_probe  # noqa: E402
from optimizer.trials.records import TrialSummary  # noqa: E402
from optimizer.trials.training import TrainingModuleManager, TrialRequest  # noqa: E402

MANIFEST = ROOT / "benchmarks" / "workloads" / "workloads.toml"


@dataclass
class Workload:
    """One script of the suite, as ``workloads.toml`` describes it."""

    name: str
    file: Path
    batch: str
    default_batch: int
    batch_sizes: list[int]
    description: str = ""
    args: str = ""
    cloudopt_args: str = ""
    workers_flag: str | None = None
    default_workers: int | None = None
    workers: list[int] = field(default_factory=list)
    needs_gpu: bool = False
    quick: bool = False
    epochs_flag: str | None = None
    epochs: int | None = None
    """The script's own epoch count, for arguments that do not give ``epochs_flag``."""
    memory_gb: list[float] = field(default_factory=list)
    """Memory requests searched as a dimension of the grid (GB; empty: each search right-sizes
    its request from the peak it observed)."""

    @property
    def train_args(self) -> list[str]:
        return shlex.split(self.args)

    def job_epochs(self) -> int | None:
        """Epochs of the job as the benchmark runs it (None when the manifest does not say)."""
        if not self.epochs_flag:
            return None
        args = self.train_args
        for i, a in enumerate(args):
            if a == self.epochs_flag and i + 1 < len(args):
                return int(args[i + 1])
            if a.startswith(self.epochs_flag + "="):
                return int(a.split("=", 1)[1])
        return self.epochs

    def longer_args(self, factor: int) -> list[str] | None:
        """The job's arguments with ``factor`` times its epochs; None when the epochs are
        unknown."""
        epochs = self.job_epochs()
        if epochs is None or not self.epochs_flag:
            return None
        args, out, skip = self.train_args, [], False
        for a in args:
            if skip:
                skip = False
            elif a == self.epochs_flag:
                skip = True
            elif not a.startswith(self.epochs_flag + "="):
                out.append(a)
        return out + [self.epochs_flag, str(epochs * factor)]

    def cloudopt_reaches_batch(self) -> bool:
        """Whether the main command, run with ``cloudopt_args``, can change the batch size."""
        if self.batch == "optimizer-env":
            return True
        given = shlex.split(self.cloudopt_args)
        if self.batch.startswith("flag:"):
            return any(a.startswith("--batch-size-arg") for a in given)
        if self.batch.startswith("env:"):
            return any(a.startswith("--batch-size-env") for a in given)
        return False

    def cloudopt_reaches_workers(self) -> bool:
        """Whether the main command, run with ``cloudopt_args``, can change the data-loader
        workers (``--workers-arg``)."""
        return bool(self.workers_flag) and any(
            a.startswith("--workers-arg") for a in shlex.split(self.cloudopt_args))

    def digest(self) -> str:
        h = hashlib.sha256(self.file.read_bytes())
        h.update(repr((self.args, self.batch, self.workers_flag)).encode())
        return h.hexdigest()[:12]


def load_workloads(quick: bool = False, manifest: Path = MANIFEST,
                   variant: str | None = None) -> list[Workload]:
    """The manifest's scripts. ``variant`` (``quick`` or ``large``; ``quick=True`` is
    ``variant="quick"``): only the scripts marked with it, each ``<variant>_<key>`` setting in
    place of ``<key>``."""
    variant = variant or ("quick" if quick else None)
    data = read_toml(manifest)
    out = []
    for name, spec in data.items():
        if variant and not spec.get(variant):
            continue
        pick = (lambda k, d=None, s=spec: s.get(f"{variant}_{k}", s.get(k, d))) if variant \
            else (lambda k, d=None, s=spec: s.get(k, d))
        out.append(Workload(
            name=name, file=ROOT / spec["file"], batch=spec["batch"],
            default_batch=int(spec["default_batch"]),
            batch_sizes=[int(b) for b in pick("batch_sizes")],
            description=spec.get("description", ""), args=pick("args", ""),
            cloudopt_args=pick("cloudopt_args", ""), workers_flag=spec.get("workers_flag"),
            default_workers=spec.get("default_workers"), workers=list(pick("workers", [])),
            needs_gpu=bool(spec.get("needs_gpu", False)), quick=bool(spec.get("quick")),
            epochs_flag=spec.get("epochs_flag"), epochs=spec.get("epochs"),
            memory_gb=[float(m) for m in pick("memory_gb", [])]))
    return out


def cuda_device_name() -> str | None:
    try:
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:
        return None


def machine_key() -> str:
    """``<cpu model>-<cores>c-<gpu>``, as a folder name; ``$REGRET_MACHINE`` names another
    machine's, for analyses that only read its recorded runs (``efficiency_truth.py``: loss
    per sample does not depend on the machine; never set it to measure)."""
    if os.environ.get("REGRET_MACHINE"):
        return os.environ["REGRET_MACHINE"]
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            model = next((line.split(":", 1)[1] for line in fh if line.startswith("model name")),
                         model)
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    gpu = cuda_device_name() or "nogpu"
    return re.sub(r"[^A-Za-z0-9.]+", "-", f"{model.strip()}-{cores}c-{gpu}").strip("-")


def cpu_levels(cpu_max: int) -> list[int]:
    """Powers of two up to the machine's cores, and the core count itself."""
    levels = [1 << k for k in range(0, 8) if (1 << k) < cpu_max]
    return sorted({*levels, cpu_max})


def grid_cells(w: Workload, config: OptimizerConfig, gpus: bool) -> list[Cell]:
    """Every allocation of the script's grid on this machine."""
    gpu_levels = [0, 1] if gpus and w.needs_gpu else ([1] if w.needs_gpu else [0])
    workers = w.workers or [w.default_workers]
    return [Cell(g, c, b, wk) for g in gpu_levels
            for c in cpu_levels(config.resources.cpu_count_max)
            for b in w.batch_sizes for wk in workers]


@contextmanager
def _env(name: str | None, value: str | None) -> Iterator[None]:
    """Set one environment variable for the runs started inside (the runner copies it)."""
    if name is None:
        yield
        return
    saved = os.environ.get(name)
    os.environ[name] = str(value)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved


class TruthStore:
    """Measured cells of one script on this machine (``runs/regret/<machine>/<script>-<hash>``)."""

    def __init__(self, w: Workload, config: OptimizerConfig, root: Path, repeats: int = 2,
                 timeout_s: float = 900.0):
        self.w, self.config, self.repeats, self.timeout_s = w, config, repeats, timeout_s
        self.dir = root / machine_key() / f"{w.name}-{w.digest()}"
        self.memory_gb = float(min(config.resources.memory_max * 0.8, 64.0))

    def cell_dir(self, cell: Cell) -> Path:
        return self.dir / "cells" / cell.key()

    def is_measured(self, cell: Cell) -> bool:
        return all((self.cell_dir(cell) / f"rep{k}" / "summary.json").exists()
                   for k in range(self.repeats))

    def measure(self, cell: Cell, on_grid: bool = True) -> CellTruth | None:
        """The cell's repetitions (running those not recorded yet); None if a run failed."""
        runs = [self._run(cell, k) for k in range(self.repeats)]
        bad = [r for r in runs if r.status != "completed"]
        if bad:
            reason = bad[0].reason or bad[0].status
            print(f"  {self.w.name} {cell.key()}: failed ({reason}): {bad[0].stderr_tail[-300:]}",
                  file=sys.stderr)
            return None
        return CellTruth(cell, [r.wall_time_s for r in runs], [r.mem_gb_peak for r in runs],
                         on_grid=on_grid)

    def _run(self, cell: Cell, rep: int) -> TrialSummary:
        return self.run_in(cell, self.cell_dir(cell) / f"rep{rep}")

    def run_in(self, cell: Cell, trial_dir: Path,
               train_args: Sequence[str] | None = None) -> TrialSummary:
        """One full run of ``cell`` recorded in ``trial_dir`` (reloaded when recorded), with
        the job's arguments or ``train_args``."""
        if (trial_dir / "summary.json").exists():
            return TrialSummary.load(trial_dir)
        w = self.w
        args = list(w.train_args if train_args is None else train_args)
        if w.workers_flag and cell.workers is not None:
            args += [w.workers_flag, str(cell.workers)]
        flag = w.batch.split(":", 1)[1] if w.batch.startswith("flag:") else None
        env_name = w.batch.split(":", 1)[1] if w.batch.startswith("env:") else None
        manager = TrainingModuleManager(w.file, args, batch_size_arg=flag)
        batch = None if env_name else cell.batch
        alloc = Allocation(cell.gpus, cell.cpus, self.memory_gb, batch)
        with _env(env_name, cell.batch if env_name else None):
            return manager.run_training(TrialRequest(
                alloc, trial_dir, probe_seconds=None, timeout_s=self.timeout_s,
                monitor_interval=self.config.run.monitor_interval,
                quiet=True), self.config.resources)

    def measure_all(self, cells: Sequence[Cell], quiet: bool = False) -> list[CellTruth]:
        """Every cell, repetitions interleaved round-robin so slow drift spreads over all; and
        the script's own settings beside them, for a replay of a trial that leaves them unset."""
        from tqdm.auto import tqdm

        from optimizer.foundation.atomic_files import atomic_write_json
        from optimizer.trials.executors.replay import DEFAULTS_FILE

        atomic_write_json(self.dir / DEFAULTS_FILE, {"default_batch": self.w.default_batch,
                                                     "default_workers": self.w.default_workers})

        todo = [(k, c) for k in range(self.repeats) for c in cells
                if not (self.cell_dir(c) / f"rep{k}" / "summary.json").exists()]
        for k, c in tqdm(todo, desc=f"ground truth {self.w.name}", unit="run",
                         disable=quiet or not todo, leave=False):
            self._run(c, k)
        return [t for t in (self.measure(c) for c in cells) if t is not None]

    def long_dir(self, cell: Cell, rep: int) -> Path:
        return self.cell_dir(cell) / f"long{LONG_FACTOR}x-rep{rep}"

    def times_to_target(self, cell: Cell, target: float, tau: float) -> list[float]:
        """Each repetition's time to ``target`` (:meth:`run_to_target`)."""
        return [self.run_to_target(cell, self.cell_dir(cell) / f"rep{k}",
                                   self.long_dir(cell, k), target, tau)
                for k in range(self.repeats)]

    def run_to_target(self, cell: Cell, run_dir: Path, long_dir: Path, target: float,
                      tau: float) -> float:
        """A recorded run's time to ``target`` (``regret_loss.time_to_target``).

        A run that misses it is run again for ``LONG_FACTOR`` times the epochs in ``long_dir``;
        its time is the long run's time from its first loss to the target plus the run's own
        start-up (up to its first loss). It is ``inf`` if the long run misses the target too,
        or if the script's epochs are unknown.
        """
        curve = read_loss_curve(run_dir, cell.batch)
        t = time_to_target(curve, target, tau) if curve is not None else math.inf
        longer = self.w.longer_args(LONG_FACTOR)
        if math.isinf(t) and curve is not None and longer is not None:
            # A long run cut short (a timeout) still counts up to where it got.
            self.run_in(cell, long_dir, train_args=longer)
            long = read_loss_curve(long_dir, cell.batch)
            if long is not None:
                # Start-up drifts between sessions (0.2-0.4 s on a 2-core machine, a tenth
                # of a quick job): the long run, taken later, keeps the repetition's own.
                t = time_to_target(long, target, tau) - long.t[0] + curve.t[0]
        return float(t)


def read_loss_curve(trial_dir: Path, batch: int) -> LossCurve | None:
    """The sampled losses of a recorded run, each at the samples seen (steps x the batch the
    probe saw, else ``batch``) and the seconds since the trial started; None without a
    probe record with losses."""
    rec = read_probe(trial_dir / "probe.jsonl")
    if rec is None or not rec.losses or not (trial_dir / "summary.json").exists():
        return None
    summary = TrialSummary.load(trial_dir)
    # Probe times count from the interpreter's start; the trial's clock from its launch, a few
    # tens of milliseconds earlier.
    offset = 0.0
    if summary.started_at and "wall" in rec.header:
        offset = float(rec.header["wall"]) - datetime.fromisoformat(
            summary.started_at).timestamp()
    steps, t, loss = zip(*rec.losses, strict=True)
    return LossCurve(np.asarray(steps, dtype=float) * (rec.samples_per_step or batch),
                     np.asarray(t, dtype=float) + max(offset, 0.0), np.asarray(loss))


def describe_machine(config: OptimizerConfig) -> dict[str, Any]:
    r = config.resources
    return {"key": machine_key(), "cpus": r.cpu_count_max, "gpus": r.gpu_count_max,
            "memory_gb": round(r.memory_max, 1), "gpu_name": cuda_device_name()}
