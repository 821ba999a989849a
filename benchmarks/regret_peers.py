"""The methods the regret benchmark compares: cloudopt's main command and its peers.

- ``cloudopt@b``: ``python -m optimizer --train-file F --preference P --baseline-samples b`` as
  a user runs it (a subprocess; its trials are real runs of the script). The baseline probes do
  not depend on the preference, so the second and third preference start from a copy of the
  first one's probe folders (``--resume``); each run's search cost still counts every trial of
  its folder. Runs are cached under a hash of cloudopt's own code, so changing the optimizer
  reruns them and nothing else.
- ``default``: the default allocation (no search).
- ``best-probe@b``: cloudopt's own baseline probes, the best by their measured job figures.
- ``random@n``, ``optuna-tpe@n``, ``optuna-gp@n``: searches over the grid with the same number
  of trials as cloudopt ran (probes plus its final run); a trial reads one measured repetition of
  the cell (a full run), and the winner requests its observed peak + 15% memory.
"""

from __future__ import annotations

import hashlib
import json
import math
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from regret_score import Cell, GroundTruth, Pick, nothing_found, right_size
from regret_truth import ROOT, TruthStore, Workload

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import OptimizerConfig
from optimizer.search.baseline import default_allocation
from optimizer.trials.records import TrialSummary, iter_trials

CODE_PARTS = ("optimizer", "envs", "agents", "phases", "configs")


def code_digest() -> str:
    """Hash of cloudopt's code and presets: cached cloudopt runs are keyed by it."""
    h = hashlib.sha256()
    for part in CODE_PARTS:
        for p in sorted((ROOT / part).rglob("*")):
            if p.suffix in (".py", ".toml") and "__pycache__" not in p.parts:
                h.update(str(p.relative_to(ROOT)).encode())
                h.update(p.read_bytes())
    return h.hexdigest()[:10]


def default_cell(w: Workload, config: OptimizerConfig) -> tuple[Cell, float]:
    """The allocation a user gets without optimizing, and its memory request."""
    a = default_allocation(config.resources, uses_gpu=w.needs_gpu)
    return Cell(a.gpus, a.cpus, w.default_batch, w.default_workers), a.memory_gb


def effective_cell(w: Workload, a: Allocation) -> Cell:
    """The cell a cloudopt allocation really runs: a batch size or a worker count cloudopt cannot
    pass to the script (or leaves unset) is the script's default."""
    batch = a.batch_size if (a.batch_size is not None and w.cloudopt_reaches_batch()) \
        else w.default_batch
    workers = getattr(a, "workers", None)
    if workers is None or not w.cloudopt_reaches_workers():
        workers = w.default_workers
    return Cell(int(a.gpus), int(a.cpus), int(batch), workers)


class CloudoptRunner:
    """Runs (or reloads) the main command for one script at one budget and preference."""

    def __init__(self, store: TruthStore, budget: int, *, agent_seconds: float | None,
                 probe_seconds: float | None, quiet: bool, extra: str = "",
                 budget_flag: str | None = "--baseline-samples"):
        """``budget_flag``: the flag ``budget`` is given as (None: only ``extra`` says it)."""
        self.store, self.budget, self.budget_flag = store, budget, budget_flag
        self.agent_seconds, self.probe_seconds, self.quiet = agent_seconds, probe_seconds, quiet
        self.extra = extra
        settings = repr((store.w.args, store.w.cloudopt_args, agent_seconds, probe_seconds)
                        + ((extra,) if extra else ()))
        tag = hashlib.sha256(settings.encode()).hexdigest()[:8]
        self.dir = store.dir / f"cloudopt-{code_digest()}-{tag}"

    def run_dir(self, preference: str) -> Path:
        return self.dir / f"b{self.budget}-{preference}"

    def run(self, preference: str, seed_from: str | None = None) -> dict[str, Any]:
        """The run's recommendation, trials and wall time (cached in ``bench.json``)."""
        out = self.run_dir(preference)
        record = out / "bench.json"
        if record.exists():
            return json.loads(record.read_text())
        w = self.store.w
        cmd = [sys.executable, "-m", "optimizer", "--train-file", str(w.file),
               "--preference", preference, "--quiet"]
        if self.budget_flag:
            cmd += [self.budget_flag, str(self.budget)]
        if w.args:
            cmd.append(f"--train-args={w.args}")
        cmd += shlex.split(w.cloudopt_args) + shlex.split(self.extra)
        if self.agent_seconds is not None:
            cmd += ["--agent-seconds", str(self.agent_seconds)]
        if self.probe_seconds is not None:
            cmd += ["--probe-seconds", str(self.probe_seconds)]
        seeded = seed_from is not None and _seed_probes(self.run_dir(seed_from), out)
        resume = seeded or (out / "run.json").exists()
        cmd += ["--resume", str(out)] if resume else ["--output", str(out)]
        t0 = time.monotonic()
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        wall = time.monotonic() - t0
        body: dict[str, Any] = {"command": shlex.join(cmd), "exit_code": proc.returncode,
                                "main_job_s": wall, "probes_reused": seeded}
        if proc.returncode != 0:
            body["error"] = (proc.stderr.strip() or proc.stdout.strip())[-800:]
        else:
            body["recommendation"] = json.loads((out / "recommendation.json").read_text())
        body["trials"] = [t.to_dict() for t in iter_trials(out)]
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps(body, indent=1, default=str))
        return body


def _seed_probes(src: Path, dst: Path) -> bool:
    """Copy the baseline probe folders of ``src`` into a new run folder ``dst``."""
    if (dst / "run.json").exists() or not (src / "trials").is_dir():
        return False
    probes = [d for d in sorted((src / "trials").iterdir())
              if d.name[:2].isdigit() and (d / "summary.json").exists()]
    if not probes:
        return False
    for d in probes:
        shutil.copytree(d, dst / "trials" / d.name, dirs_exist_ok=True)
    return True


def cloudopt_picks(body: dict[str, Any], w: Workload, truth: GroundTruth, store: TruthStore,
                   preference: str, budget: int) -> tuple[Pick, Pick]:
    """cloudopt's recommendation and the best of its own probes, as picks."""
    trials = [TrialSummary.from_dict(t) for t in body.get("trials", [])]
    # The baseline probes (NN-*), not the closed loop's refine-*/whole-*/optimized-* trials.
    probes = [t for t in trials if t.trial_id[:2].isdigit()]
    search_s = sum(t.wall_time_s for t in trials)
    extra = {"main_job_s": body.get("main_job_s")}
    if "recommendation" not in body:
        rec = Pick(f"cloudopt@{budget}", None, None, trials=len(trials), search_s=search_s,
                   budget=budget, note=f"main command failed: {body.get('error', '')[-200:]}",
                   extra=extra)
    else:
        r = body["recommendation"]
        a = Allocation(**r["allocation"])
        cell = _measured(effective_cell(w, a), truth, store)
        own = _best_own(trials, w, truth, store, preference, cell, a.memory_gb) \
            if cell is not None else None
        extra.update(agent=r.get("agent"), cloudopt_batch=a.batch_size,
                     dominated_by_own_trial=own)
        rec = Pick(f"cloudopt@{budget}", cell, float(a.memory_gb), trials=len(trials),
                   search_s=search_s, budget=budget, note=r.get("agent", ""), extra=extra)
    probe = best_probe(probes, w, truth, store, preference, budget)
    return rec, probe


def _measured(cell: Cell, truth: GroundTruth, store: TruthStore) -> Cell | None:
    """``cell`` with its ground truth, measuring it first when it is off the grid."""
    if cell not in truth.cells:
        t = store.measure(cell, on_grid=False)
        if t is None:
            return None
        truth.cells[cell] = t
    return cell


def _objective_of_trial(t: TrialSummary, preference: str, truth: GroundTruth,
                        cell: Cell) -> float:
    """A probe's own measured view of the objective (its predicted whole-job figures)."""
    time_s = t.predicted_total_time_s if t.status != "completed" else t.wall_time_s
    if time_s is None:
        return math.inf
    return truth.objective(cell, t.allocation.memory_gb, preference, time_s=time_s,
                           peak_gb=min(t.mem_gb_peak, t.allocation.memory_gb))


def best_probe(probes: list[TrialSummary], w: Workload, truth: GroundTruth, store: TruthStore,
               preference: str, budget: int) -> Pick:
    ok = [t for t in probes if t.ok and t.throughput]
    search_s = sum(t.wall_time_s for t in probes)
    if not ok:
        return Pick(f"best-probe@{budget}", None, None, trials=len(probes), search_s=search_s,
                    budget=budget, note="no usable probe")
    cells = [effective_cell(w, t.allocation) for t in ok]
    for c in cells:
        if c not in truth.cells:
            _measured(c, truth, store)
    scored = [(_objective_of_trial(t, preference, truth, c), t, c)
              for t, c in zip(ok, cells, strict=True) if c in truth.cells]
    _, t, c = min(scored, key=lambda s: s[0])
    return Pick(f"best-probe@{budget}", c, float(t.allocation.memory_gb), trials=len(probes),
                search_s=search_s, budget=budget)


def _best_own(trials: list[TrialSummary], w: Workload, truth: GroundTruth, store: TruthStore,
              preference: str, rec_cell: Cell, rec_memory: float) -> bool | None:
    """Whether a trial cloudopt measured itself would have been better, under the ground truth,
    than what it recommended by more than 2%: that trial's cell at a request right-sized from its
    measured peak, against the recommendation at the memory it requests. (cloudopt picks the best
    trial by its own measurement; True here means that measurement misled it.)"""
    ok = [t for t in trials if t.ok and t.throughput]
    if not ok or rec_cell not in truth.cells:
        return None
    return dominating_cell(ok, w, truth, preference, rec_cell, rec_memory) is not None


def dominating_cell(trials: list[TrialSummary], w: Workload, truth: GroundTruth,
                    preference: str, rec_cell: Cell, rec_memory: float) -> Cell | None:
    """The cell of cloudopt's own trials that is best under the ground truth, when it beats the
    recommendation (at the memory it requests) by more than 2%; None otherwise."""
    rec_value = truth.objective(rec_cell, rec_memory, preference)
    best, best_value = None, rec_value * 0.98
    for t in trials:
        if not (t.ok and t.throughput):
            continue
        c = effective_cell(w, t.allocation)
        if c in truth.cells and c != rec_cell:
            value = truth.objective(c, right_size(truth.cells[c].peak), preference)
            if value < best_value:
                best, best_value = c, value
    return best


def optuna_pick(truth: GroundTruth, n: int, preference: str, seed: int, sampler: str) -> Pick:
    """Optuna (TPE or its GP sampler) over the grid's dimensions, ``n`` trials; the memory
    request is one of them where the grid has memory levels (a run killed for memory scores
    as a very bad trial, as a user's objective would return it)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    cells = sorted(c.cell for c in truth.cells.values() if c.on_grid)
    names = ("gpus", "cpus", "batch", "workers")
    dims: dict[str, list[Any]] = {
        name: sorted({getattr(c, name) for c in cells}, key=lambda v: (v is None, v))
        for name in names}
    dims = {k: v for k, v in dims.items() if len(v) > 1}
    fixed = {k: getattr(cells[0], k) for k in names if k not in dims}
    if truth.memory_levels:
        dims["memory_gb"] = list(truth.memory_levels)
    startup = max(2, math.ceil(n / 2))
    if sampler == "tpe":
        s = optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup)
    else:
        s = optuna.samplers.GPSampler(seed=seed, n_startup_trials=startup)
    study = optuna.create_study(direction="minimize", sampler=s)
    rng = np.random.default_rng(seed)
    seen: list[tuple[float, float, float, Cell, float | None]] = []

    def objective(trial: Any) -> float:
        values = {k: trial.suggest_categorical(k, v) for k, v in dims.items()}
        memory = values.pop("memory_gb", None)
        cell = Cell(**{**fixed, **values})
        value, wall, peak = truth.observed(cell, int(rng.integers(1 << 30)), preference, memory)
        seen.append((value, wall, peak, cell, memory))
        return value if math.isfinite(value) else 1e30

    study.optimize(objective, n_trials=n)
    value, _, peak, cell, memory = min(seen, key=lambda s: s[0])
    search_s = sum(s[1] for s in seen)
    if not math.isfinite(value):
        return nothing_found(truth, f"optuna-{sampler}@{n}", n, search_s)
    return Pick(f"optuna-{sampler}@{n}", cell, right_size(peak) if memory is None else memory,
                trials=n, search_s=search_s)

