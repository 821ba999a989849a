"""The regret benchmark's tables over several JSON files, peers matched per row.

``recommendation_regret.py`` names each peer by its number of trials (``random@8``), which is
cloudopt's own count for that script and preference, so a suite's rows carry several peer names.
This script pools them by family (``random@same``: every row's random search at that row's
cloudopt trial count) and prints the per-method table over all rows, the per-case table, and
how often cloudopt's regret is at most each peer's on the same row.

    python benchmarks/regret_matched.py runs/regret/i18-*.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

from regret_score import Prices, format_rows, format_summary, summarize  # noqa: E402


def pooled(rows: list[dict]) -> list[dict]:
    out = []
    for r in rows:
        name, _, n = r["method"].partition("@")
        same = name not in ("default", "cloudopt", "best-probe") and n.isdigit()
        out.append({**r, "method": f"{name}@same" if same else r["method"]})
    return out


def head_to_head(rows: list[dict]) -> list[str]:
    """Per peer family: rows where cloudopt's regret <= the peer's, out of rows compared."""
    mine = {(r["script"], r["preference"]): r["regret"] for r in rows
            if r["method"].startswith("cloudopt@")}
    lines = []
    for peer in sorted({r["method"] for r in rows} - {m for m in {r["method"] for r in rows}
                                                       if m.startswith("cloudopt@")}):
        pairs = [(mine[(r["script"], r["preference"])], r["regret"]) for r in rows
                 if r["method"] == peer and (r["script"], r["preference"]) in mine]
        pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
        wins = sum(a <= b + 1e-12 for a, b in pairs)
        lines.append(f"cloudopt <= {peer}: {wins} of {len(pairs)} rows")
    return lines


def reachable(rows: list[dict], grids: dict[str, dict]) -> list[str]:
    """cloudopt's regret against the best cell it can reach: a batch size its options do not
    let it set, or a data-loader worker count, stays at the script's default."""
    from regret_score import Cell, CellTruth, GroundTruth
    from regret_truth import load_workloads

    from optimizer.foundation.config import load_config

    config = load_config()
    r = config.resources
    prices = Prices(r.cost_per_gpu_hour, r.cost_per_cpu_hour, r.cost_per_gb_hour,
                    r.gpu_count_max, r.cpu_count_max, r.memory_max,
                    tuple(config.multi_objective.vector("balanced")))
    workloads = {w.name: w for w in load_workloads()}
    lines = []
    for row in rows:
        w = workloads.get(row["script"])
        if not row["method"].startswith("cloudopt@") or w is None or row["regret"] is None:
            continue
        fixed_batch = None if w.cloudopt_reaches_batch() else w.default_batch
        fixed_workers = (w.default_workers if w.workers_flag and not w.cloudopt_reaches_workers()
                         else None)
        if fixed_batch is None and fixed_workers is None:
            continue
        cells = [CellTruth(Cell(c["gpus"], c["cpus"], c["batch_size"], c.get("workers")),
                           c["wall_s"], [c["peak_gb"]], c.get("on_grid", True))
                 for c in grids[row["script"]]["cells"]]
        truth = GroundTruth(cells, prices, cells[0].cell)
        ok = [c for c in cells if c.on_grid
              and (fixed_batch is None or c.cell.batch == fixed_batch)
              and (fixed_workers is None or c.cell.workers == fixed_workers)]
        pref = row["preference"]
        best = min(truth.objective(c.cell, c.peak, pref) for c in ok)
        _, grid_best = truth.optimum(pref)
        mine = (1 + row["regret"]) * grid_best
        lines.append(f"| {row['script']} | {pref} | {row['regret']:.1%} | "
                     f"{mine / best - 1:.1%} |")
    if lines:
        lines = ["| script | preference | regret (grid) | regret (reachable) |",
                 "|---|---|---|---|", *lines]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", nargs="+", type=Path)
    args = ap.parse_args(argv)
    rows, grids = [], {}
    for path in args.json:
        data = json.loads(path.read_text())
        rows += data["rows"]
        grids.update(data.get("grids", {}))
    rows = pooled(rows)
    print(format_summary(summarize(rows)))
    print()
    print(format_rows(rows))
    print()
    print("\n".join(head_to_head(rows)))
    dominated = [r for r in rows if r["method"].startswith("cloudopt@")
                 and r.get("dominated_by_own_trial")]
    table = reachable(rows, grids)
    if table:
        print("\nWhere cloudopt cannot set a dimension of the grid (the script's own batch "
              "variable, data-loader workers):")
        print("\n".join(table))
    print(f"cloudopt recommendations dominated by one of its own measured trials: "
          f"{len(dominated)} of {sum(r['method'].startswith('cloudopt@') for r in rows)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
