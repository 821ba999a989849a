"""Backtest of right-sized requests over the shared traces: each run's requests from the runs
before it, by cloudopt, KRR's simple strategy and a VPA-style recommender.

The traces are the history (``../shared/data/dl-traces``: 60 runs of 5 workloads, no
timestamps, so runs are taken in ``exec_id`` order; ``../shared/data/ai4dl``: 5 pods of 2
services). Each run with at least ``--min-prior`` earlier runs of its workload is sized by each
strategy from the earlier runs only (see :mod:`optimizer.offline.requests.backtest`), then
judged by what it used:

- memory held: its peak memory <= the memory request;
- CPU held: its CPU at the p95 <= the CPU request;
- slack: ``max(request - use, 0) / use``, mean over the runs each strategy recommended for.

KRR's ``points_required`` (100) is kept: a workload whose earlier runs hold fewer samples gets
no KRR recommendation, which counts as not held.

Usage::

    python benchmarks/history_backtest.py [--min-prior 1] [--per-job] [--json PATH]
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import pandas as pd

from optimizer.foundation.atomic_files import atomic_write_json
from optimizer.history.traces import read_trace_history
from optimizer.offline.requests import backtest, summarise

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"


def run_set(name: str, path: Path, min_prior: int, per_job: bool) -> pd.DataFrame:
    rows = backtest(read_trace_history(path), min_prior=min_prior)
    table = summarise(rows)
    with pd.option_context("display.width", 160, "display.float_format", "{:.1f}".format):
        print(f"\n== {name}: runs with >= {min_prior} earlier run(s) of their workload ==")
        print(table.to_string(index=False))
        if per_job:
            for job, part in rows.groupby("job"):
                print(f"-- {job}")
                print(summarise(part).to_string(index=False))
    return table


def verdict(table: pd.DataFrame) -> list[str]:
    """Where cloudopt holds at least as often as the best peer with less slack, and where not."""
    t = table.set_index("strategy")
    peers = t.drop(index="cloudopt")
    lines = []
    for res in ("mem", "cpu"):
        best = peers[f"{res}_held_%"].max()
        slack = peers.loc[peers[f"{res}_held_%"] == best, f"{res}_slack_%"].min()
        co_held, co_slack = t.loc["cloudopt", f"{res}_held_%"], t.loc["cloudopt", f"{res}_slack_%"]
        ok = co_held >= best and co_slack < slack
        lines.append(f"{res}: cloudopt held {co_held:.1f} % (best peer {best:.1f} %), slack "
                     f"{co_slack:.1f} % (that peer's {slack:.1f} %): "
                     f"{'wins' if ok else 'does NOT win'}")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--min-prior", type=int, default=1,
                   help="earlier runs of its workload a run needs to be judged (default 1)")
    p.add_argument("--per-job", action="store_true", help="also one table per workload")
    p.add_argument("--json", type=Path, help="write the tables here")
    args = p.parse_args(argv)
    if not (SHARED / "dl-traces").is_dir():
        print(f"{SHARED / 'dl-traces'}: not found (the shared data sits beside the repo)")
        return 2
    warnings.filterwarnings("ignore", category=RuntimeWarning)
    main_table = run_set("dl-traces", SHARED / "dl-traces", args.min_prior, args.per_job)
    result = {"dl_traces": main_table.to_dict("records")}
    if (SHARED / "ai4dl").is_dir():
        result["ai4dl"] = run_set("ai4dl", SHARED / "ai4dl", args.min_prior,
                                  False).to_dict("records")
    lines = verdict(main_table)
    print("\n" + "\n".join(lines))
    if args.json:
        atomic_write_json(args.json, result)
    return 0 if all("wins" in line for line in lines) else 1


if __name__ == "__main__":
    sys.exit(main())
