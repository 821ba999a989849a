"""Scripts from the wild: cloudopt run as a user runs it, on scripts written for no optimizer.

For each script of ``examples/wild/corpus.toml``:

1. a grid of whole runs (CPUs x batch sizes, each to its end, with its final held-out loss),
   run with cloudopt's own runner so that affinity and thread variables match its trials;
2. cloudopt exactly as a user runs it (``--batch-size-arg`` only), once per preference;
3. the recommendation scored against the grid (``wild_score``): regret against the cheapest
   (or fastest) cell that trains as well as the script's own batch, whether the recommended
   setting itself does, and its claimed job time and cost against whole runs of that setting
   made right after cloudopt (``--pick-reps``, 2; the grid's cell with 0);
4. the in-process probe's time and memory overhead: the script alone and with only the probe
   on, on one core, in the order off on on off.

Costs use the configuration's CPU and memory prices: a grid cell at its measured peak memory
(not the runner's generous limit, which would price every cell mostly by memory it never
used), the recommendation at the memory it requests. The grid is CPU-only.

Whole runs are cached in ``runs/wild/<machine>/<script>-<hash>/cells/<setting>/rep<k>/`` (one
with a ``summary.json`` is complete): a rerun measures nothing again, an interrupted one
resumes. cloudopt's run folders are ``.../cloudopt-<preference>/``, rerun each time unless
``--reuse-cloudopt``.

    python benchmarks/wild.py --quick --scripts sgd_no_loader --preferences cost
    python benchmarks/wild.py --json runs/wild/full.json          # the whole corpus
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import math
import os
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil
from regret_truth import machine_key
from wild_score import (
    PREFERENCES,
    CellRuns,
    Prices,
    Setting,
    WildScript,
    abba_order,
    cell_trains_as_well,
    claim_error,
    load_corpus,
    loss_from_json,
    loss_from_text,
    markdown_table,
    objective,
    optimum,
    overhead,
    read_recommendation,
    regret,
    run_args,
    target_loss,
    train_loss_from_text,
    trains_as_well,
    with_args,
)

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from optimizer.foundation.allocation import Allocation  # noqa: E402
from optimizer.foundation.atomic_files import atomic_write_json  # noqa: E402
from optimizer.foundation.config import OptimizerConfig, load_config  # noqa: E402
from optimizer.trials.probe import probe_environment  # noqa: E402
from optimizer.trials.records import TrialSummary  # noqa: E402
from optimizer.trials.training import TrainingModuleManager, TrialRequest  # noqa: E402

MANIFEST = ROOT / "examples" / "wild" / "corpus.toml"
RUNS = ROOT / "runs" / "wild"
LOSS_FILE = "loss.json"
"""Where a silent script is told to write its loss, inside each trial folder."""
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def say(text: str) -> None:
    """One progress line on stderr."""
    print(f"[wild] {text}", file=sys.stderr, flush=True)


class WildStore:
    """Whole runs of one script on this machine (``runs/wild/<machine>/<script>-<hash>``).

    The hash holds the script's bytes, the arguments every run gets (the manifest's
    ``base_args``, then ``--quick``'s or none) and the batch flag, so a changed script or job
    is measured afresh. A cell's command line is :func:`wild_score.run_args`."""

    def __init__(self, s: WildScript, base_args: Sequence[str], config: OptimizerConfig,
                 reps: int, timeout_s: float, root: Path = RUNS):
        self.s, self.base_args, self.config = s, list(base_args), config
        self.reps, self.timeout_s = reps, timeout_s
        h = hashlib.sha256(s.script.read_bytes())
        h.update(repr((self.script_args(), s.batch_flag)).encode())
        self.dir = root / machine_key() / f"{s.name}-{h.hexdigest()[:12]}"
        # A generous limit, not a request: the measured peak is the script's own.
        self.memory_gb = float(min(config.resources.memory_max * 0.8, 64.0))

    def run_dir(self, setting: Setting, rep: int) -> Path:
        return self.dir / "cells" / setting.key() / f"rep{rep}"

    def script_args(self) -> list[str]:
        """What every run is given before its own setting: ``base_args`` and ``--quick``'s."""
        return run_args(self.s, base=self.base_args)

    def args(self, setting: Setting, trial_dir: Path) -> list[str]:
        """The run's arguments: its batch (in the script's form) and length arguments; the
        runner then sets the batch flag again to the same value, as cloudopt's trials do."""
        args = run_args(self.s, setting.batch, base=self.base_args, extra=setting.extra)
        if self.s.loss_file_flag:
            args = with_args(args, [self.s.loss_file_flag, str((trial_dir / LOSS_FILE).resolve())])
        return args

    def loss(self, trial_dir: Path) -> float | None:
        """The run's final held-out loss: from its output, or the file a silent script wrote."""
        if self.s.loss_file_flag and self.s.loss_key:
            return loss_from_json(trial_dir / LOSS_FILE, self.s.loss_key)
        log = trial_dir / "stdout.log"
        if not self.s.loss or not log.exists():
            return None
        text = log.read_text(encoding="utf-8", errors="replace")
        if self.s.loss_kind == "train":
            return train_loss_from_text(text, self.s.loss)
        return loss_from_text(text, self.s.loss)

    def run_whole(self, setting: Setting, trial_dir: Path) -> TrialSummary:
        """One whole run of ``setting`` into ``trial_dir``, with cloudopt's runner."""
        manager = TrainingModuleManager(self.s.script, self.args(setting, trial_dir),
                                        batch_size_arg=self.s.batch_flag)
        return manager.run_training(TrialRequest(
            Allocation(0, setting.cpus, self.memory_gb, setting.batch), trial_dir,
            probe_seconds=None, timeout_s=self.timeout_s,
            monitor_interval=self.config.run.monitor_interval, quiet=True), self.config.resources)

    def run(self, setting: Setting, rep: int, announce: bool = True) -> TrialSummary:
        """One whole run (reloaded when recorded), with a progress line when it ran or when
        ``announce``."""
        trial_dir = self.run_dir(setting, rep)
        cached = (trial_dir / "summary.json").exists()
        summary = TrialSummary.load(trial_dir) if cached else self.run_whole(setting, trial_dir)
        if cached and not announce:
            return summary
        how = "recorded" if cached else "ran"
        if summary.status != "completed":
            say(f"{self.s.name} {setting.label()} rep{rep}: {summary.status} "
                f"({summary.reason}; {how}) {summary.stderr_tail[-300:]!r}")
        else:
            say(f"{self.s.name} {setting.label()} rep{rep}: {summary.wall_time_s:.1f} s, "
                f"{summary.cpu_cores_mean:.2f} cores, {summary.mem_gb_peak:.2f} GB, "
                f"loss {self.loss(trial_dir)} ({how})")
        return summary

    def cell(self, setting: Setting) -> CellRuns | None:
        """The setting's repetitions (running those not recorded); None if all failed."""
        runs = [(self.run(setting, k, announce=False), self.run_dir(setting, k))
                for k in range(self.reps)]
        ok = [(s, d) for s, d in runs if s.status == "completed"]
        if not ok:
            return None
        return CellRuns(setting, [s.wall_time_s for s, _ in ok], [s.mem_gb_peak for s, _ in ok],
                        [self.loss(d) for _, d in ok], [s.cpu_cores_mean for s, _ in ok])

    def pick_runs(self, setting: Setting, preference: str, reps: int) -> CellRuns | None:
        """Whole runs of cloudopt's pick made right after it (``pick-<preference>/``): the
        claim's ruler, measured as the machine is when cloudopt measured, where a grid cell
        measured hours before varied by up to 20% (Lightning's 1x64: 7.5-7.8 s in the grid,
        6.2-7.1 s in cloudopt's own whole runs of it)."""
        runs = []
        for k in range(reps):
            d = self.dir / f"pick-{preference}" / setting.key() / f"rep{k}"
            if (d / "summary.json").exists():
                summary = TrialSummary.load(d)
            else:
                summary = self.run_whole(setting, d)
                say(f"{self.s.name} pick {setting.label()} rep{k}: {summary.status}, "
                    f"{summary.wall_time_s:.1f} s (ran after cloudopt)")
            if summary.status == "completed":
                runs.append((summary, d))
        if not runs:
            return None
        return CellRuns(setting, [s.wall_time_s for s, _ in runs],
                        [s.mem_gb_peak for s, _ in runs], [self.loss(d) for _, d in runs],
                        [s.cpu_cores_mean for s, _ in runs])

    def grid(self, settings: Sequence[Setting]) -> list[CellRuns]:
        """Every setting; repetitions round-robin, so a slow drift spreads over all cells."""
        for k in range(self.reps):
            for setting in settings:
                self.run(setting, k)
        return [c for c in (self.cell(s) for s in settings) if c is not None]


def grid_settings(s: WildScript, cpus: Sequence[int], multipliers: Sequence[float]
                  ) -> list[Setting]:
    batches = sorted({max(1, round(s.default_batch * m)) for m in multipliers})
    return [Setting(c, b) for c in cpus for b in batches]


# ------------------------------------------------------------------------------ cloudopt
def run_cloudopt(s: WildScript, store: WildStore, preference: str, reuse: bool,
                 timeout_s: float) -> dict[str, Any]:
    """The main command as a user runs it; its exit, wall time and recommendation."""
    out_dir = store.dir / f"cloudopt-{preference}"
    record = store.dir / f"cloudopt-{preference}.json"
    if reuse and record.exists() and (out_dir / "recommendation.json").exists():
        say(f"{s.name} cloudopt --preference {preference}: recorded")
        recorded = json.loads(record.read_text(encoding="utf-8"))
        return {**recorded, **read_recommendation(out_dir, s, store.script_args())}
    shutil.rmtree(out_dir, ignore_errors=True)  # the command writes a fresh run folder
    shutil.rmtree(store.dir / f"pick-{preference}", ignore_errors=True)  # its pick's, too
    # "--batch-size-arg=FLAG": with a space argparse takes the flag for an option of its own.
    cmd = [sys.executable, "-m", "optimizer", "--train-file", str(s.script),
           f"--batch-size-arg={s.batch_flag}", "--preference", preference, "--quiet",
           "--output", str(out_dir)]
    if store.script_args():  # a config file, a subcommand; --quick: the grid's shorter job
        cmd.append(f"--train-args={shlex.join(store.script_args())}")
    say(f"{s.name} cloudopt: {shlex.join(cmd[1:])}")
    t0 = time.perf_counter()
    # Its own session: a timeout ends the command and the trial it is running, by group id.
    # Its trials compile cold, as the grid's whole runs do: no compile cache handed down.
    env = {k: v for k, v in os.environ.items()
           if k not in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, env=env)
    try:
        err = proc.communicate(timeout=timeout_s)[1]
        code: int | str = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        err, code = proc.communicate()[1], "timeout"
    wall = time.perf_counter() - t0
    out = {"command": cmd, "exit": code, "wall_s": wall, "stderr_tail": err[-2000:],
           "run_dir": str(out_dir)}
    atomic_write_json(record, out)
    say(f"{s.name} cloudopt --preference {preference}: exit {code} after {wall:.0f} s")
    return {**out, **read_recommendation(out_dir, s, store.script_args())}


# ------------------------------------------------------------------------------ probe overhead
def tree_rss(proc: psutil.Process) -> int:
    """Resident bytes of a process and its children (those still there)."""
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass  # it ended between the listing and the reading
    return total


def run_plain(s: WildScript, args: Sequence[str], probed: bool, tmp: Path,
              poll_s: float = 0.05) -> tuple[float, float, float]:
    """(wall s, CPU s, peak GB of the process tree) of the script alone on one core, the probe
    on or off; raises ``RuntimeError`` when the script fails."""
    env = dict(os.environ, **dict.fromkeys(THREAD_VARS, "1"), CUDA_VISIBLE_DEVICES="")
    # Every run compiles cold, as a trial and a fresh pod do: A and B pay the same compile.
    cache = tempfile.mkdtemp(prefix="compile-", dir=tmp)
    env.update(TORCHINDUCTOR_CACHE_DIR=f"{cache}/inductor", TRITON_CACHE_DIR=f"{cache}/triton")
    if probed:
        env = probe_environment(env, tmp / "events.jsonl")
        env["CLOUDOPT_PROBE_BATCH"] = str(s.default_batch)  # as a trial sets it
    core = min(os.sched_getaffinity(0))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(tmp / "stdout.log", "w") as out, open(tmp / "stderr.log", "w") as err:
        t0 = time.perf_counter()
        popen = subprocess.Popen([sys.executable, str(s.script), *args], cwd=tmp, env=env,
                                 stdout=out, stderr=err,
                                 preexec_fn=lambda: os.sched_setaffinity(0, {core}))
        proc, peak = psutil.Process(popen.pid), 0
        while popen.poll() is None:
            peak = max(peak, tree_rss(proc))
            time.sleep(poll_s)
        wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the script, reaped by poll()
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if popen.returncode != 0:
        tail = (tmp / "stderr.log").read_text(errors="replace")[-300:]
        raise RuntimeError(f"exit {popen.returncode}: {tail}")
    return wall, cpu, peak / 1e9


def probe_overhead(s: WildScript, base_args: Sequence[str], rounds: int) -> dict[str, Any]:
    """Median wall time, CPU time (less noisy on a shared machine) and peak memory with the
    probe over without, ABBA-ordered."""
    runs: dict[bool, list[tuple[float, float, float]]] = {False: [], True: []}
    with tempfile.TemporaryDirectory(prefix="wild-overhead-") as tmp:
        args = run_args(s, base=base_args)
        if s.loss_file_flag:
            args = with_args(args, [s.loss_file_flag, str(Path(tmp) / LOSS_FILE)])
        for i, probed in enumerate(abba_order(rounds)):
            try:
                wall, cpu, peak = run_plain(s, args, probed, Path(tmp))
            except RuntimeError as exc:
                say(f"{s.name} overhead run {i} (probe {'on' if probed else 'off'}): {exc}")
                return {"error": str(exc)}
            runs[probed].append((wall, cpu, peak))
            say(f"{s.name} overhead run {i} (probe {'on' if probed else 'off'}): "
                f"{wall:.1f} s, {cpu:.1f} CPU s, {peak:.2f} GB")

    def ratio(i: int) -> float | None:
        return overhead([r[i] for r in runs[False]], [r[i] for r in runs[True]])

    return {"plain": runs[False], "probed": runs[True], "columns": ["wall_s", "cpu_s", "peak_gb"],
            "time": ratio(0), "cpu": ratio(1), "memory": ratio(2)}


# ------------------------------------------------------------------------------ scoring
def score(s: WildScript, store: WildStore, cells: list[CellRuns], cloud: dict[str, Any],
          preference: str, prices: Prices, pick_reps: int = 0) -> dict[str, Any]:
    """One script's row for one preference: cloudopt's outcome against the grid."""
    l0 = target_loss(cells, s.default_batch)
    best = optimum(cells, lambda c: cell_trains_as_well(c, cells, s.default_batch), preference,
                   prices)
    row: dict[str, Any] = {
        "script": s.name, "loss_kind": s.loss_kind, "preference": preference,
        "exit": cloud.get("exit"),
        "cloudopt_wall_s": cloud.get("wall_s"), "fitted": cloud.get("fitted"),
        "agents": cloud.get("agents"), "l0": l0, "l0_mean": l0,
        "optimum": None if best is None else best.setting.label(),
        "optimum_value": None if best is None else objective(best, preference, prices)}
    setting = cloud.get("setting")
    if setting is None:
        return row
    row["pick"] = setting.label()
    pick = next((c for c in cells if c.setting == setting), None) or store.cell(setting)
    if pick is None:
        row["regret"] = math.inf  # the recommended setting fails when run whole
        return row
    memory = cloud.get("memory_gb") or pick.peak
    l0_pick = target_loss(cells, s.default_batch, setting.cpus)  # its own batch on its CPUs
    row["l0"] = l0_pick  # what the table shows beside the pick's loss
    value = objective(pick, preference, prices, memory_gb=memory)
    measured_cost = prices.cost(setting.cpus, memory, pick.time_s)
    row.update({
        "pick_time_s": pick.time_s, "pick_cost": measured_cost, "pick_loss": pick.loss,
        "pick_cores": pick.cores,  # beside the claim: a busy machine slows the whole run
        "pick_trains_as_well": trains_as_well(pick.loss, l0_pick), "pick_value": value,
        "pick_trains_as_well_by_mean": trains_as_well(pick.loss, l0),
        "regret": None if best is None else regret(value, row["optimum_value"]),
        "claimed_time_s": cloud.get("claimed_time_s"), "claimed_cost": cloud.get("claimed_cost"),
        "claim_time": claim_error(cloud.get("claimed_time_s"), pick.time_s),
        "claim_cost": claim_error(cloud.get("claimed_cost"), measured_cost),
        "claim_ruler": "grid"})
    fresh = store.pick_runs(setting, preference, pick_reps) if pick_reps else None
    if fresh is not None:
        fresh_cost = prices.cost(setting.cpus, memory, fresh.time_s)
        row.update({
            "grid_claim_time": row["claim_time"], "grid_claim_cost": row["claim_cost"],
            "pick_fresh_time_s": fresh.wall_s, "pick_fresh_loss": fresh.losses,
            "claim_time": claim_error(cloud.get("claimed_time_s"), fresh.time_s),
            "claim_cost": claim_error(cloud.get("claimed_cost"), fresh_cost),
            "claim_ruler": f"{len(fresh.wall_s)} whole runs of the pick right after cloudopt"})
    return row


def missing_framework(s: WildScript) -> str | None:
    missing = [m for m in s.modules() if importlib.util.find_spec(m) is None]
    if missing:
        return f"module {missing[0]!r} is not installed"
    return None


def bench_script(s: WildScript, opts: argparse.Namespace, config: OptimizerConfig,
                 prices: Prices) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Rows per preference, and every figure measured for the script."""
    skip = missing_framework(s)
    if skip:
        say(f"{s.name}: skipped ({skip})")
        rows = {p: {"script": s.name, "exit": "skipped"} for p in opts.preferences}
        return rows, {"skipped": skip}
    base = s.quick_args if opts.quick else []
    store = WildStore(s, base, config, opts.reps, opts.timeout)
    cells = store.grid(grid_settings(s, opts.cpus, opts.batches))
    extra: dict[str, Any] = {"dir": str(store.dir), "cells": [_cell_json(c, prices)
                                                              for c in cells]}
    extra["overhead"] = None if opts.skip_overhead else probe_overhead(s, base,
                                                                      opts.overhead_rounds)
    rows = {}
    for pref in opts.preferences:
        cloud = ({} if opts.skip_cloudopt
                 else run_cloudopt(s, store, pref, opts.reuse_cloudopt, opts.cloudopt_timeout))
        rows[pref] = score(s, store, cells + length_cells(s, store, cloud, opts), cloud, pref,
                           prices, 0 if opts.skip_cloudopt else opts.pick_reps)
        ov = extra["overhead"] or {}
        rows[pref].update(probe_time=ov.get("time"), probe_cpu=ov.get("cpu"),
                          probe_memory=ov.get("memory"))
        extra[f"cloudopt_{pref}"] = _jsonable(cloud)
    return rows, extra


def length_cells(s: WildScript, store: WildStore, cloud: dict[str, Any],
                 opts: argparse.Namespace) -> list[CellRuns]:
    """Where cloudopt's pick changes the job's length (``--max_iters=620``), the grid at that
    length too, every CPU count and batch: the optimum is then searched over both lengths,
    so a pick that wins only by running longer or shorter is measured against every batch
    run that long."""
    setting = cloud.get("setting")
    if setting is None or not setting.extra:
        return []
    return store.grid([Setting(c.cpus, c.batch, setting.extra)
                       for c in grid_settings(s, opts.cpus, opts.batches)])


def _cell_json(c: CellRuns, prices: Prices) -> dict[str, Any]:
    return {"setting": c.setting.label(), "cpus": c.setting.cpus, "batch": c.setting.batch,
            "extra": list(c.setting.extra), "wall_s": c.wall_s, "peak_gb": c.peak_gb,
            "losses": c.losses, "cores": c.cores, "time_s": c.time_s, "loss": c.loss,
            "cost": objective(c, "cost", prices)}


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.label() if isinstance(v, Setting) else v) for k, v in d.items()}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--manifest", type=Path, default=MANIFEST)
    p.add_argument("--scripts", default=None, help="comma-separated names (default: all)")
    p.add_argument("--preferences", default="cost", help="comma-separated: cost, time")
    p.add_argument("--quick", action="store_true",
                   help="the manifest's quick_args and a small grid (1 CPU x batch 1x, 2x)")
    p.add_argument("--cpus", default=None, help="CPU counts of the grid (default 1,2; quick 1)")
    p.add_argument("--batches", default=None,
                   help="batch multipliers of the script's own (default 0.5,1,2; quick 1,2)")
    p.add_argument("--reps", type=int, default=1, help="whole runs per grid cell")
    p.add_argument("--pick-reps", type=int, default=2,
                   help="whole runs of the pick right after cloudopt, the claim's ruler "
                        "(0: the grid's cell)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per whole run")
    p.add_argument("--cloudopt-timeout", type=float, default=4 * 3600.0)
    p.add_argument("--overhead-rounds", type=int, default=2, help="ABBA rounds of the probe")
    p.add_argument("--skip-cloudopt", action="store_true")
    p.add_argument("--skip-overhead", action="store_true")
    p.add_argument("--reuse-cloudopt", action="store_true",
                   help="score cloudopt's recorded run folders instead of running it again")
    p.add_argument("--json", type=Path, default=None, metavar="PATH")
    opts = p.parse_args(argv)
    opts.preferences = [x.strip() for x in opts.preferences.split(",") if x.strip()]
    bad = [x for x in opts.preferences if x not in PREFERENCES]
    if bad:
        p.error(f"unknown preference(s) {bad}; choose from {PREFERENCES}")
    opts.cpus = [int(x) for x in (opts.cpus or ("1" if opts.quick else "1,2")).split(",")]
    opts.batches = [float(x) for x in
                    (opts.batches or ("1,2" if opts.quick else "0.5,1,2")).split(",")]
    return opts


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(argv)
    config = load_config(None)
    r = config.resources
    prices = Prices(r.cost_per_cpu_hour, r.cost_per_gb_hour)
    scripts = load_corpus(opts.manifest, ROOT)
    if opts.scripts:
        wanted = opts.scripts.split(",")
        unknown = set(wanted) - {s.name for s in scripts}
        if unknown:
            raise SystemExit(f"not in {opts.manifest}: {sorted(unknown)}")
        scripts = [s for s in scripts if s.name in wanted]
    rows: dict[str, list[dict[str, Any]]] = {p: [] for p in opts.preferences}
    figures: dict[str, Any] = {"machine": machine_key(), "quick": opts.quick, "scripts": {}}
    for s in scripts:
        by_pref, extra = bench_script(s, opts, config, prices)
        for pref, row in by_pref.items():
            rows[pref].append(row)
        figures["scripts"][s.name] = extra
        figures["rows"] = rows
        if opts.json:  # after each script: a long benchmark keeps what it finished
            atomic_write_json(opts.json, figures)
    for pref in opts.preferences:
        print(f"\n### preference {pref} ({machine_key()}{', quick' if opts.quick else ''})\n")
        print(markdown_table(rows[pref]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
