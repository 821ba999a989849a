"""Regret against the number of real runs, on grids too large to enumerate (issue 41).

For every script of the manifest marked ``large`` (8 batch sizes x the machine's CPU levels x
4 data-loader worker counts, or x 3 memory requests for a script without workers: 64 or 48
points on 2 cores; a request changes no run's speed, so a cell is measured once for all of them):

1. the ground truth: every cell run to its end ``--repeats`` times (3), cached and resumable
   (``regret_truth.TruthStore``; interrupted, it goes on where it stopped);
2. at each budget N (``--budgets``, default 2,4,6,8,12,16 real runs):
   - ``cloudopt@N``: the main command with ``--budget N --executor replay:<grid>`` (every trial
     answered from a recorded run of its cell: probes, refinement, sweeps and run-off all count),
     with ``[run].seed`` = 0..``--seeds``-1 (the seed picks which recorded run a cell answers
     with first, and seeds the agents); ``--goodput off`` sets ``[run].goodput = false``, so
     that cloudopt, like the ruler and the peers, compares batch sizes by samples/s;
   - ``random@N``, ``optuna-tpe@N``, ``optuna-gp@N``: N distinct points run once each, the best
     observed wins (``--peer-seeds`` seeds each; ``--memory-levels off``: they right-size the
     memory request from the peak they saw instead of searching it);
   - ``best-probe@N``: the best of cloudopt's own baseline probes in that run, by their
     measured figures (what it would recommend if it stopped after them);
   - ``default``: the script's own setting, no search.
3. regret under the ground truth (``regret_score``: the whole job's time and cost at the cell's
   median), per budget: median and worst over scripts x preferences, each randomised method first
   averaged over its seeds; and which proposer found each cloudopt recommendation.

The grid is packed into ``benchmarks/data/grids/<machine>/<script>-<hash>.tar.gz`` (``--pack``)
so a later session replays it without measuring. Usage::

    python benchmarks/regret_curves.py [--scripts cnn,tab,charlm] [--budgets 2,4,6] [--seeds 3]
        [--measure-only [--fresh]] [--pack] [--json runs/regret/curves.json]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tarfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from regret_peers import (
    CloudoptRunner,
    best_probe,
    code_digest,
    default_cell,
    effective_cell,
    optuna_pick,
)
from regret_score import PREFERENCES, GroundTruth, Pick, evaluate, pct, random_search
from regret_truth import ROOT, TruthStore, describe_machine, grid_cells, load_workloads, machine_key

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.config import load_config
from optimizer.trials.records import TrialSummary

BUDGETS = (2, 4, 6, 8, 12, 16)
PACK_DIR = ROOT / "benchmarks" / "data" / "grids"
PACKED = ("summary.json", "probe.jsonl", "trace.csv", "stages.csv", "config.json", "stdout.log")
"""The files of a recorded run that a replay reads (not the stderr, not long runs)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scripts", default=None, help="comma-separated (default: every large one)")
    p.add_argument("--preferences", default=",".join(PREFERENCES))
    p.add_argument("--budgets", default=",".join(map(str, BUDGETS)))
    p.add_argument("--seeds", type=int, default=2, help="cloudopt runs per budget (seeds)")
    p.add_argument("--peer-seeds", type=int, default=20, help="seeds of each randomised peer")
    p.add_argument("--repeats", type=int, default=3, help="full runs per grid cell")
    p.add_argument("--agent-seconds", type=float, default=None,
                   help="cloudopt's agent budget (default: its own)")
    p.add_argument("--goodput", choices=("on", "off"), default="on",
                   help="cloudopt's [run].goodput: on (its default) judges batch sizes by goodput, "
                   "which the samples/s ruler here does not; off compares like with like")
    p.add_argument("--jobs", type=int, default=2, help="cloudopt runs side by side")
    p.add_argument("--root", default=str(ROOT / "runs" / "regret"), help="cache folder")
    p.add_argument("--measure-only", action="store_true", help="the ground truth, nothing else")
    p.add_argument("--fresh", action="store_true",
                   help="measure the grid into --root instead of unpacking the packed one first "
                   "(all its runs then come from one sitting of this machine)")
    p.add_argument("--pack", action="store_true",
                   help=f"pack each measured grid into {PACK_DIR.relative_to(ROOT)}")
    p.add_argument("--memory-levels", choices=("on", "off"), default="on",
                   help="on: the peers search the memory requests of a script's "
                   "large_memory_gb as a dimension; off: they right-size each request from the "
                   "peak they observed, as on the grids without levels")
    p.add_argument("--no-optuna", action="store_true")
    p.add_argument("--json", default=None, metavar="PATH")
    p.add_argument("--plot", default=None, metavar="PNG")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    args.budgets = [int(b) for b in args.budgets.split(",")]
    args.preferences = [s.strip() for s in args.preferences.split(",") if s.strip()]
    return args


def pack(store: TruthStore) -> Path:
    """The grid's recorded runs as one archive in the repository (the replay's input)."""
    out = PACK_DIR / machine_key() / f"{store.dir.name}.tar.gz"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for rep in sorted((store.dir / "cells").glob("*/rep*")):
            for name in PACKED:
                if (rep / name).is_file():
                    tar.add(rep / name, arcname=str((rep / name).relative_to(store.dir)))
    tmp.replace(out)
    return out


def unpack(store: TruthStore) -> int:
    """Fill the cache from a packed grid of this machine and script version, if there is one;
    the number of files it added. Files already in the cache are kept; a run summary there
    that differs from the packed one is said (the cache then holds another measurement of the
    grid than the repository's, e.g. one made before the grid was measured again)."""
    src = PACK_DIR / machine_key() / f"{store.dir.name}.tar.gz"
    if not src.is_file():
        return 0
    with tarfile.open(src, "r:gz") as tar:
        members = [m for m in tar.getmembers() if m.isfile() and not m.name.startswith(("/", ".."))
                   and ".." not in Path(m.name).parts]
        todo = [m for m in members if not (store.dir / m.name).exists()]
        differ = sum(1 for m in members if m.name.endswith("summary.json")
                     and (store.dir / m.name).exists()
                     and (f := tar.extractfile(m)) is not None
                     and f.read() != (store.dir / m.name).read_bytes())
        tar.extractall(store.dir, members=todo, filter="data")
    if differ:
        print(f"warning: {differ} recorded run{'s' * (differ != 1)} in {store.dir} differ"
              f"{'s' * (differ == 1)} from the packed grid "
              f"{src.relative_to(ROOT)}; the cached ones are used. For the packed grid, use "
              "another --root or remove that folder's cells/", file=sys.stderr)
    return len(todo)


def proposer_of(body: dict[str, Any]) -> str | None:
    """Which of cloudopt's proposers first proposed the setting it recommends, as its
    recommendation says: ``baseline-trial`` (a probe), an agent (``reinforce``, ``morl``,
    ``best-static``: the agents' plan), ``expected-improvement``, ``workers-sweep``."""
    rec = body.get("recommendation")
    return str(rec.get("agent") or "unknown") if rec else None


def search_of(body: dict[str, Any]) -> dict[str, Any]:
    """The search's cost as the recommendation gives it, with the recommended job's cost (the
    default job's, less the saving per job)."""
    s = (body.get("recommendation") or {}).get("search") or {}
    if s.get("share_of_default_job") and s.get("saving_per_job") is not None:
        s = {**s, "recommended_job_cost": s["dollars"] / s["share_of_default_job"]
             - s["saving_per_job"]}
    return s


def ruled_of(body: dict[str, Any]) -> list[list[int]]:
    """Per closed-loop round: how many unmeasured settings the workload model ruled out without
    a run, of how many (``ruled_out`` in the recommendation's rounds)."""
    rounds = (body.get("recommendation") or {}).get("rounds") or []
    return [list(r["ruled_out"]) for r in rounds if r.get("ruled_out")]


def curves_for(w: Any, config: Any, args: argparse.Namespace,
               say: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    store = TruthStore(w, config, Path(args.root), repeats=args.repeats)
    added = 0 if args.fresh else unpack(store)
    if added:
        say(f"{w.name}: {added} files of the packed grid unpacked into {store.dir}")
    cells = grid_cells(w, config, gpus=False)
    t0 = time.monotonic()
    truths = store.measure_all(cells, quiet=args.quiet)
    dcell, dmem = default_cell(w, config)
    if dcell not in {t.cell for t in truths}:
        extra = store.measure(dcell, on_grid=False)
        if extra is not None:
            truths.append(extra)
    from recommendation_regret import prices_of

    truth = GroundTruth(truths, prices_of(config), dcell,
                        memory_levels=[] if args.memory_levels == "off" else w.memory_gb,
                        default_memory_gb=dmem)
    points = truth.points()
    levels = f" x {len(truth.memory_levels)} memory requests = {len(points)} points" \
        if truth.memory_levels else ""
    say(f"{w.name}: {len(cells)} cells{levels}, {len(truths)} measured ({time.monotonic() - t0:.0f} s "
        f"this run) in {store.dir}")
    if args.pack:
        say(f"{w.name}: packed into {pack(store)}")
    grid = {"dir": str(store.dir), "cells": len(cells), "points": len(points),
            "memory_levels": list(truth.memory_levels), "measured": len(truths),
            "optimum": {p: truth.optimum(p)[0].key() for p in args.preferences}}
    if args.measure_only:
        return [], grid
    rows: list[dict[str, Any]] = []
    for pref in args.preferences:
        rows.append(evaluate(truth, Pick("default", dcell, dmem), pref, w.name))
        # The ruler's resolution: every cell run once (a random one of its runs), the best
        # observed wins. What a single run per cell cannot tell apart, no search of single
        # runs can either.
        every = [evaluate(truth, random_search(truth, len(points), pref,
                                               np.random.default_rng(s)), pref, w.name)
                 for s in range(args.peer_seeds)]
        rows.append(seed_row(every, "every-cell", len(points)))
    # cloudopt's runs first, --jobs at a time (replayed trials measure nothing, so runs side by
    # side only share the agents' training time), then the scoring in order.
    tasks = [(b, p, s) for b in args.budgets for p in args.preferences for s in range(args.seeds)]
    t1 = time.monotonic()
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        bodies = dict(zip(tasks, pool.map(lambda t: cloudopt_run(store, w, *t, args), tasks),
                          strict=True))
    say(f"{w.name}: {len(tasks)} cloudopt runs in {time.monotonic() - t1:.0f} s")
    for budget in args.budgets:
        for pref in args.preferences:
            seeds = []
            for seed in range(args.seeds):
                body = bodies[(budget, pref, seed)]
                row = evaluate(truth, cloudopt_pick(body, w, truth, budget), pref, w.name)
                row.update(seed=seed, proposer=proposer_of(body), unrecorded=sum(
                    t.get("reason") == "not-recorded" for t in body.get("trials", [])),
                    ruled_out=ruled_of(body),
                    search=search_of(body))
                seeds.append(row)
            ours = seed_row(seeds, f"cloudopt@{budget}", budget)
            ours["unrecorded"] = sum(r["unrecorded"] for r in seeds)
            rows.append(ours)
            probes = [evaluate(truth, best_probe_pick(bodies[(budget, pref, s)], w, truth,
                                                      store, pref, budget), pref, w.name)
                      for s in range(args.seeds)]
            rows.append(seed_row(probes, f"best-probe@{budget}", budget))
            peers = [("random", lambda s, n=budget, p=pref: random_search(
                truth, n, p, np.random.default_rng(s)))]
            if not args.no_optuna:
                peers += [(f"optuna-{sm}", lambda s, n=budget, p=pref, sm=sm: optuna_pick(
                    truth, n, p, s, sm)) for sm in ("tpe", "gp")]
            said = [f"cloudopt {pct(ours['regret'])} (seeds: "
                    f"{', '.join(pct(r['regret']) for r in seeds)}; runs "
                    f"{[r['trials'] for r in seeds]}; off the grid {ours['unrecorded']})",
                    f"best-probe {pct(rows[-1]['regret'])} ({probes[0]['trials']} probes)"]
            for name, make in peers:
                runs = [evaluate(truth, make(s), pref, w.name) for s in range(args.peer_seeds)]
                rows.append(seed_row(runs, f"{name}@{budget}", budget))
                said.append(f"{name} {pct(rows[-1]['regret'])}")
            say(f"{w.name} {pref} {budget} runs: " + ", ".join(said))
    return rows, grid


def cloudopt_run(store: TruthStore, w: Any, budget: int, pref: str, seed: int,
                 args: argparse.Namespace) -> dict[str, Any]:
    off = args.goodput == "off"
    # the file's name keys the cached runs: a grid measured again more times answers anew
    cfg = store.dir / "curves" / f"seed{seed}-r{store.repeats}{'-samples' if off else ''}.toml"
    cfg.parent.mkdir(parents=True, exist_ok=True)
    cfg.write_text(f"[run]\nseed = {seed}\n" + ("goodput = false\n" if off else ""))
    extra = (f"--budget {budget} --executor replay:{store.dir} --live-plan off "
             f"--config {cfg}")
    runner = CloudoptRunner(store, budget, agent_seconds=args.agent_seconds, probe_seconds=None,
                            quiet=True, extra=extra, budget_flag=None)
    return runner.run(pref)


def cloudopt_pick(body: dict[str, Any], w: Any, truth: GroundTruth, budget: int) -> Pick:
    trials = body.get("trials", [])
    search_s = sum(float(t.get("wall_time_s") or 0) for t in trials)
    if "recommendation" not in body:
        return Pick(f"cloudopt@{budget}", None, None, trials=len(trials), search_s=search_s,
                    budget=budget, note=f"failed: {body.get('error', '')[-200:]}")
    a = Allocation(**body["recommendation"]["allocation"])
    cell = effective_cell(w, a)
    if cell not in truth.cells:
        return Pick(f"cloudopt@{budget}", None, None, trials=len(trials), search_s=search_s,
                    budget=budget, note=f"recommended {cell.key()}, off the measured grid")
    return Pick(f"cloudopt@{budget}", cell, float(a.memory_gb), trials=len(trials),
                search_s=search_s, budget=budget, note=body["recommendation"].get("agent", ""))


def best_probe_pick(body: dict[str, Any], w: Any, truth: GroundTruth, store: TruthStore,
                    pref: str, budget: int) -> Pick:
    """The best of cloudopt's own baseline probes by their measured figures: what the search
    would recommend if it stopped after them."""
    probes = [TrialSummary.from_dict(t) for t in body.get("trials", [])
              if str(t.get("trial_id", ""))[:2].isdigit()]
    return best_probe(probes, w, truth, store, pref, budget)


def seed_row(rows: list[dict[str, Any]], method: str, budget: int) -> dict[str, Any]:
    """One row per method, budget and case: mean regret over seeds, with median and worst."""
    regrets = [math.inf if r["regret"] is None else r["regret"] for r in rows]
    out = {k: rows[0][k] for k in ("script", "preference")}
    finite = [x for x in regrets if math.isfinite(x)]
    out.update(method=method, budget=budget, seeds=len(rows),
               regret=float(np.mean(regrets)) if len(finite) == len(regrets) else None,
               median_seed=(float(np.median(regrets))
                            if math.isfinite(float(np.median(regrets))) else None),
               worst_seed=max(regrets) if len(finite) == len(regrets) else None,
               trials=float(np.mean([r["trials"] for r in rows])),
               failed=sum(r.get("failed") is not None for r in rows))
    out["ruled_out"] = [pair for r in rows for pair in r.get("ruled_out", [])]
    out["search"] = [r["search"] for r in rows if r.get("search")]
    proposers = Counter(r.get("proposer") for r in rows if r.get("proposer"))
    if proposers:
        out["proposers"] = dict(proposers)
    return out


def table(rows: list[dict[str, Any]], budgets: list[int]) -> str:
    methods = ["cloudopt", "best-probe", "random", "optuna-tpe", "optuna-gp"]
    lines = ["| method | " + " | ".join(f"{b} runs" for b in budgets) + " |",
             "|---|" + "---|" * len(budgets)]
    for m in methods:
        cells = []
        for b in budgets:
            rs = [math.inf if r["regret"] is None else r["regret"] for r in rows
                  if r["method"] == f"{m}@{b}"]
            if not rs:
                cells.append("–")
                continue
            cells.append(f"{pct(float(np.median(rs)))} / {pct(max(rs))}")
        if any(c != "–" for c in cells):
            lines.append(f"| {m} (median / worst) | " + " | ".join(cells) + " |")
    made = [np.mean([r["trials"] for r in rows if r["method"] == f"cloudopt@{b}"] or [np.nan])
            for b in budgets]
    lines.append("| cloudopt: runs made (mean) | " + " | ".join(
        "–" if np.isnan(m) else f"{m:.1f}" for m in made) + " |")
    default = [math.inf if r["regret"] is None else r["regret"] for r in rows
               if r["method"] == "default"]
    if default:
        lines.append(f"| default (no search) | {pct(float(np.median(default)))} / "
                     f"{pct(max(default))} |" + " |" * (len(budgets) - 1))
    every = [r for r in rows if r["method"] == "every-cell"]
    if every:
        rs = [math.inf if r["regret"] is None else r["regret"] for r in every]
        lines.append(f"| every cell once ({_runs_range(every)} runs) | "
                     f"{pct(float(np.median(rs)))} / {pct(max(rs))} |"
                     + " |" * (len(budgets) - 1))
    return "\n".join(lines)


def _runs_range(rows: list[dict[str, Any]]) -> str:
    sizes = sorted({int(r["budget"]) for r in rows})
    return str(sizes[0]) if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]}"


def per_case(rows: list[dict[str, Any]], budgets: list[int]) -> str:
    """Each script and preference: cloudopt's regret (mean over its seeds) beside each peer's
    at every budget."""
    lines = ["| script | preference | method | " + " | ".join(f"{b} runs" for b in budgets)
             + " |", "|---|---|---|" + "---|" * len(budgets)]
    cases = dict.fromkeys((r["script"], r["preference"]) for r in rows)
    for script, pref in cases:
        for m in ("cloudopt", "optuna-gp", "optuna-tpe", "random"):
            got = {r["budget"]: r["regret"] for r in rows if r["script"] == script
                   and r["preference"] == pref and r["method"] == f"{m}@{r['budget']}"}
            if got:
                lines.append(f"| {script} | {pref} | {m} | " + " | ".join(
                    pct(got.get(b)) if b in got else "–" for b in budgets) + " |")
    return "\n".join(lines)


def winners(rows: list[dict[str, Any]]) -> str:
    """Which of cloudopt's proposers found its recommendations, per script."""
    per: dict[str, Counter] = {}
    for r in rows:
        if r["method"].startswith("cloudopt@"):
            per.setdefault(r["script"], Counter()).update(r.get("proposers", {}))
    return "\n".join(f"{s}: " + ", ".join(f"{k} {v}" for k, v in c.most_common())
                     for s, c in per.items())


def search_costs(rows: list[dict[str, Any]], budget: int) -> str:
    """At ``budget`` runs, per script and preference, what the search cost as cloudopt's report
    says it (median over seeds): its runs' dollars as a share of one job at the default
    allocation, and the number of recommended jobs (and their hours) that repay it."""
    lines = ["| script | preference | runs | search cost (x one recommended job) | (x one "
             "default job) | break-even (recommended jobs) | break-even (hours of them) |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["method"] != f"cloudopt@{budget}" or not r.get("search"):
            continue
        s = r["search"]
        share = [x["share_of_default_job"] for x in s if x.get("share_of_default_job")]
        of_rec = [x["dollars"] / x["recommended_job_cost"] for x in s
                  if x.get("recommended_job_cost")]
        jobs = [x["break_even_jobs"] if x.get("break_even_jobs") is not None else math.inf
                for x in s]
        hours = [x.get("break_even_hours", math.inf) or math.inf for x in s]

        def med(v: list[float], fmt: str) -> str:
            m = float(np.median(v)) if v else math.nan
            return "never (no saving)" if math.isinf(m) else fmt.format(m)
        lines.append(f"| {r['script']} | {r['preference']} | {r['trials']:.1f} | "
                     f"{med(of_rec, '{:.1f}x')} | {med(share, '{:.1f}x')} | "
                     f"{med(jobs, '{:.1f}')} | {med(hours, '{:.3f} h')} |")
    return "\n".join(lines)


def pruning(rows: list[dict[str, Any]]) -> str:
    """Per script, the settings the model ruled out per closed-loop round, on average."""
    per: dict[str, list[list[int]]] = {}
    for r in rows:
        if r["method"].startswith("cloudopt@"):
            per.setdefault(r["script"], []).extend(r.get("ruled_out", []))
    return "\n".join(
        f"{s}: {len(p)} rounds; ruled out {np.mean([a for a, _ in p]):.1f} of "
        f"{np.mean([b for _, b in p]):.1f} unmeasured settings per round "
        f"({sum(a for a, _ in p) / max(1, sum(b for _, b in p)):.0%})" if p else
        f"{s}: no closed-loop round had a fitted model" for s, p in per.items())


def plot(rows: list[dict[str, Any]], budgets: list[int], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for m in ("cloudopt", "best-probe", "random", "optuna-tpe", "optuna-gp"):
        xs, ys = [], []
        for b in budgets:
            rs = [math.inf if r["regret"] is None else r["regret"] for r in rows
                  if r["method"] == f"{m}@{b}"]
            if rs:
                xs.append(b)
                ys.append(100 * min(float(np.median(rs)), 10.0))
        if xs:
            ax.plot(xs, ys, marker="o", label=m)
    every = [r for r in rows if r["method"] == "every-cell"]
    if every:  # the ruler's resolution: what one run of every cell reaches
        rs = [math.inf if r["regret"] is None else r["regret"] for r in every]
        ax.axhline(100 * min(float(np.median(rs)), 10.0), color="grey", ls="--",
                   label=f"every cell once ({_runs_range(every)} runs)")
    ax.set_xlabel("real runs")
    ax.set_ylabel("median regret, % (capped at 1000)")
    ax.set_title("Regret against runs on the enlarged grids")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    say = (lambda *a: None) if args.quiet else (lambda *a: print(*a, flush=True))
    config = load_config()
    workloads = load_workloads(variant="large")
    if args.scripts:
        wanted = {s.strip() for s in args.scripts.split(",")}
        if wanted - {w.name for w in workloads}:
            raise SystemExit(f"--scripts: unknown {sorted(wanted - {w.name for w in workloads})}"
                             f" (large ones: {', '.join(w.name for w in workloads)})")
        workloads = [w for w in workloads if w.name in wanted]
    t0 = time.monotonic()
    rows: list[dict[str, Any]] = []
    grids = {}
    for w in workloads:
        r, grids[w.name] = curves_for(w, config, args, say)
        rows += r
    if rows:
        print("\nRegret against real runs (median / worst over scripts x preferences; "
              "randomised methods averaged over their seeds first):")
        print(table(rows, args.budgets))
        print("\nPer script and preference (mean regret over seeds):")
        print(per_case(rows, args.budgets))
        print("\nWho proposed cloudopt's recommendation (count over budgets x preferences x "
              "seeds):")
        print(winners(rows))
        print("\nSettings the workload model ruled out without running them (batch x CPUs; "
              "the model does not see data-loader workers):")
        print(pruning(rows))
        default_budget = int(config.run.budget) if str(config.run.budget).isdigit() else 12
        if default_budget in args.budgets:
            print(f"\nThe search's cost at the default budget ({default_budget} runs), as "
                  "cloudopt's report gives it (median over seeds):")
            print(search_costs(rows, default_budget))
        path = Path(args.plot) if args.plot else Path(args.root) / "regret_vs_runs.png"
        plot(rows, args.budgets, path)
        print(f"plot: {path}")
    print(f"\n{time.monotonic() - t0:.0f} s")
    if args.json:
        body = {"machine": describe_machine(config), "cloudopt_code": code_digest(),
                "settings": {k: v for k, v in vars(args).items() if k not in ("json", "plot")},
                "rows": rows, "grids": grids,
                "median_trials": statistics.median([r["trials"] for r in rows
                                                    if r["method"].startswith("cloudopt")])
                if rows else None}
        Path(args.json).write_text(json.dumps(body, indent=1, default=str) + "\n")
        print(f"json: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
