"""Live adaptation: the agents' per-phase plan applied to the running job, against the best
static allocation of an exhaustive grid (issue 40).

For each script (three with real phases, written for this benchmark and knowing nothing of
cloudopt, ``benchmarks/workloads/phased/``, and two suite scripts without them):

1. the grid: every CPU count of this machine at the script's own batch size, each run to its
   end with the probe on (cached under ``runs/live_bench/<machine>/<script>/grid``);
2. the best static allocation: the fastest cell (a cell within 2% of its time that costs
   less wins), memory right-sized from its peak, as cloudopt recommends it;
3. the plans, all from those grid runs: the workload model fitted to them, the stage model
   (:mod:`optimizer.search.live.stage_model`) and the agents trained on it
   (:func:`optimizer.search.live.live_plan.build_live_plan`); the same agent with the phase
   hidden (:func:`~optimizer.search.live.live_plan.hidden_phase_schedule`, a schedule by the
   clock);
4. ``--repeats`` rounds of back-to-back runs, the arms in a rotated order each round: the
   static allocation, the live plan, the phase-free ``reactive-max`` and ``reactive-trend``
   rules and the phase-blind agent, each applied live by the same controller
   (:mod:`optimizer.trials.live.controller`); every run is billed per interval at the
   allocation it held.

Reported per script and arm: median time and cost, and the medians of each round's ratios to
the static run of the same round. Goal (issue 40): on the phased scripts the live plan
>= 15% cheaper at <= 5% more time, and better than the three peers; on the flat ones no more
than 2% worse.

    python benchmarks/live_adaptation.py --json runs/live_bench/live.json       # ~40 min, 2 cores
    python benchmarks/live_adaptation.py --scripts prep_heavy --repeats 1       # one script
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from regret_truth import machine_key  # noqa: E402

from optimizer.foundation.allocation import Allocation  # noqa: E402
from optimizer.foundation.atomic_files import atomic_write_json  # noqa: E402
from optimizer.foundation.config import load_config  # noqa: E402
from optimizer.foundation.memory import right_size_memory  # noqa: E402
from optimizer.search.calibrate import env_config_from_trials  # noqa: E402
from optimizer.search.live.live_plan import build_live_plan, hidden_phase_schedule  # noqa: E402
from optimizer.trials.live.controller import (  # noqa: E402
    PlanDecider,
    ReactiveDecider,
    ScheduleDecider,
)
from optimizer.trials.live.session import LiveSetup  # noqa: E402
from optimizer.trials.records import TrialSummary  # noqa: E402
from optimizer.trials.resources import cpu_affinity_set  # noqa: E402
from optimizer.trials.training import TrainingModuleManager, TrialRequest  # noqa: E402

PHASED = ROOT / "benchmarks" / "workloads" / "phased"


@dataclass
class Script:
    name: str
    file: Path
    args: str
    batch_flag: str | None
    batch: int
    phased: bool


SCRIPTS = {
    "prep_heavy": Script("prep_heavy", PHASED / "prep_heavy.py", "", "--batch-size", 0, True),
    "eval_heavy": Script("eval_heavy", PHASED / "eval_heavy.py", "", "--batch-size", 0, True),
    "checkpoint_heavy": Script("checkpoint_heavy", PHASED / "checkpoint_heavy.py", "",
                               "--batch-size", 0, True),
    "mlp": Script("mlp", ROOT / "examples" / "train_mlp.py", "--epochs 2 --samples 12000",
                  None, 128, False),
    "charlm": Script("charlm", ROOT / "benchmarks" / "workloads" / "char_lm.py",
                     "--epochs 1 --sequences 1200", "--batch-size", 32, False),
}
ARMS = ("static", "live plan", "reactive-max", "reactive-trend", "phase hidden")
GRID_MEMORY_GB = 4.0
TIE = 0.02


def manager_for(s: Script, out: Path) -> TrainingModuleManager:
    args = shlex.split(s.args)
    if s.phased:
        args += ["--out", str(out / "checkpoints")] if s.name == "checkpoint_heavy" else []
    return TrainingModuleManager(s.file, train_args=args,
                                 batch_size_arg=s.batch_flag if s.batch_flag else None)


def run(manager: TrainingModuleManager, alloc: Allocation, folder: Path, config: Any,
        live: LiveSetup | None = None) -> TrialSummary:
    done = folder / "summary.json"
    if done.is_file():
        summary = TrialSummary.load(folder)
        if summary.status == "completed":
            return summary
    return manager.run_training(TrialRequest(alloc, folder, timeout_s=600,
                                             live=live), config.resources)


def best_static(grid: list[TrialSummary]) -> TrialSummary:
    ok = [t for t in grid if t.status == "completed"]
    fastest = min(ok, key=lambda t: t.wall_time_s)
    close = [t for t in ok if t.wall_time_s <= fastest.wall_time_s * (1 + TIE)]
    return min(close, key=lambda t: t.cost)


def plans_for(s: Script, grid: list[tuple[TrialSummary, Path]], static: Allocation,
              config: Any, agent_seconds: float, interval: float,
              preference: str, extra: list[TrialSummary]) -> dict[str, Any]:
    trials = [t for t, _ in grid] + [t for t in extra if t.ok]
    batch = static.batch_size
    env_cfg = env_config_from_trials(
        trials, resources=config.resources, preference=preference,
        batch_sizes=[batch], batch_actions=False, n_steps=20)
    result = build_live_plan(grid, env_cfg, config, static, time_budget_s=agent_seconds,
                             interval_s=interval)
    out: dict[str, Any] = {"why": result.why, "outcomes": result.outcomes,
                           "plan": result.plan.to_dict() if result.plan else None}
    if result.stage_model is not None:
        out["stages"] = {k: {"parallel": v.parallel, "source": v.parallel_source,
                             "seconds": v.seconds, "mem_peak_gb": v.mem_peak_gb}
                         for k, v in result.stage_model.stats.items()}
        out["sequence"] = result.stage_model.sequence
    out["live"] = result.plan
    if result.env_config is not None:
        steps, model_s = hidden_phase_schedule(result.env_config, config,
                                               time_budget_s=agent_seconds)
        out["hidden"] = steps
        out["hidden_schedule"] = [(round(a, 3), b.cpus) for a, b in steps]
    return out


def setups(plans: dict[str, Any], static_wall: float, max_cpus: int, static: Allocation,
           interval: float) -> dict[str, tuple[LiveSetup | None, Allocation]]:
    """Each arm's controller and the allocation its trial starts at (all cores leasable)."""
    cores = cpu_affinity_set(max_cpus)
    live = plans.get("live")
    out: dict[str, tuple[LiveSetup | None, Allocation]] = {"static": (None, static)}

    def start(cpus: int, memory: float | None = None) -> Allocation:
        return Allocation(0, cpus, memory or static.memory_gb, static.batch_size)

    if live is not None:
        first = live.allocation_for(live.schedule[0] if live.schedule else None)
        # Memory per phase is a request; the limit is the plan's largest phase's. Launched on
        # its first phase's cores (loading torch on all: _cloudopt_probe_load).
        out["live plan"] = (LiveSetup(PlanDecider(live), interval, label="live plan",
                                      cores=cores, start_cpus=first.cpus),
                            start(live.largest().cpus, live.memory_max_gb))
    for kind in ("reactive-max", "reactive-trend"):
        # CPU only: see ReactiveDecider.adapt_memory. They start where the static one is.
        out[kind] = (LiveSetup(ReactiveDecider(max_cpus, kind, window_s=2 * interval,
                                               adapt_memory=False), interval, label=kind,
                               cores=cores), start(static.cpus))
    if plans.get("hidden"):
        steps = plans["hidden"]
        out["phase hidden"] = (LiveSetup(ScheduleDecider(steps, static_wall), interval,
                                         label="phase hidden", cores=cores,
                                         start_cpus=steps[0][1].cpus),
                               start(max(a.cpus for _, a in steps)))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scripts", default=",".join(SCRIPTS))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--agent-seconds", type=float, default=15.0)
    p.add_argument("--interval", type=float, default=0.5, help="controller interval, s")
    p.add_argument("--preference", default="balanced")
    p.add_argument("--root", default=str(ROOT / "runs" / "live_bench"))
    p.add_argument("--json", default=None)
    p.add_argument("--plans-only", action="store_true",
                   help="measure the grids (cached) and print the plans; no paired rounds")
    args = p.parse_args(argv)
    config = load_config(None)
    max_cpus = int(config.resources.cpu_count_max)
    root = Path(args.root) / machine_key()
    rows, report = [], {"machine": machine_key(), "cpus": max_cpus, "scripts": {}}
    for name in args.scripts.split(","):
        s = SCRIPTS[name]
        base = root / name
        manager = manager_for(s, base)
        batch = s.batch or manager.default_batch_size() or 0
        grid = []
        for c in range(1, max_cpus + 1):
            folder = base / "grid" / f"c{c}"
            summary = run(manager, Allocation(0, c, GRID_MEMORY_GB, batch or None), folder,
                          config)
            grid.append((summary, folder))
            print(f"{name}: grid {c} CPUs: {summary.status} {summary.wall_time_s:.1f} s "
                  f"${summary.cost:.6f}", flush=True)
        # The workload model needs a third point with another batch: a time-boxed probe at
        # twice the batch (it fits the model only; the grid and the plans keep the batch),
        # boxed past the start-up (a long data preparation comes before any step).
        folder = base / "fit" / "b2x"
        box = 5 + 0.6 * min(g.wall_time_s for g, _ in grid)
        extra = TrialSummary.load(folder) if (folder / "summary.json").is_file() else None
        if extra is None or not extra.throughput:
            extra = manager.run_training(TrialRequest(
                Allocation(0, max_cpus, GRID_MEMORY_GB, 2 * batch), folder, probe_seconds=box,
                timeout_s=600), config.resources)
        best = best_static([g for g, _ in grid])
        memory = right_size_memory(best.mem_gb_peak)
        static = Allocation(0, best.allocation.cpus, memory, best.allocation.batch_size)
        started = time.perf_counter()
        plans = plans_for(s, grid, static, config, args.agent_seconds, args.interval,
                          args.preference, [extra])
        print(f"{name}: static {static.cpus} CPUs {memory:g} GB; plan: {plans['why']} "
              f"({time.perf_counter() - started:.0f} s)", flush=True)
        if plans.get("plan"):
            print("  " + json.dumps(plans["plan"]["phases"]), flush=True)
        if args.plans_only:
            print(f"  phase hidden: {plans.get('hidden_schedule')}", flush=True)
            continue
        arms = setups(plans, best.wall_time_s, max_cpus, static, args.interval)
        results: dict[str, list[TrialSummary]] = {a: [] for a in arms}
        order = list(arms)
        for k in range(args.repeats):
            turn = order[k % len(order):] + order[:k % len(order)]
            for arm in turn:
                live, alloc = arms[arm]
                folder = base / f"rep{k}" / arm.replace(" ", "-")
                summary = run(manager, alloc, folder, config, live)
                results[arm].append(summary)
                print(f"{name} round {k} {arm}: {summary.status} {summary.wall_time_s:.1f} s "
                      f"${summary.cost:.6f} changes {summary.live.get('changes', 0)}",
                      flush=True)
        stat = results["static"]
        for arm, runs in results.items():
            ok = [(r, st) for r, st in zip(runs, stat, strict=True)
                  if r.status == "completed" and st.status == "completed"]
            if not ok:
                rows.append({"script": name, "arm": arm, "phased": s.phased, "ok": 0})
                continue
            rows.append({
                "script": name, "arm": arm, "phased": s.phased, "ok": len(ok),
                "time_s": statistics.median(r.wall_time_s for r, _ in ok),
                "cost": statistics.median(r.cost for r, _ in ok),
                "time_ratio": statistics.median(r.wall_time_s / st.wall_time_s for r, st in ok),
                "cost_ratio": statistics.median(r.cost / st.cost for r, st in ok),
                "changes": statistics.median(r.live.get("changes", 0) for r, _ in ok),
            })
        report["scripts"][name] = {k: v for k, v in plans.items() if k not in ("live", "hidden")}
        report["scripts"][name]["static"] = {"cpus": static.cpus, "memory_gb": memory,
                                             "batch_size": static.batch_size}
    report["rows"] = rows
    print_table(rows)
    if args.json:
        atomic_write_json(Path(args.json), report)
    return 0


def print_table(rows: list[dict[str, Any]]) -> None:
    print("\n| script | arm | runs | time s | cost $ | time vs static | cost vs static | "
          "changes |\n|---|---|---|---|---|---|---|---|")
    for r in rows:
        if not r["ok"]:
            print(f"| {r['script']} | {r['arm']} | 0 | failed | | | | |")
            continue
        print(f"| {r['script']}{' (phased)' if r['phased'] else ''} | {r['arm']} | {r['ok']} "
              f"| {r['time_s']:.1f} | {r['cost']:.7f} | {r['time_ratio'] - 1:+.1%} "
              f"| {r['cost_ratio'] - 1:+.1%} | {r['changes']:g} |")


if __name__ == "__main__":
    raise SystemExit(main())
