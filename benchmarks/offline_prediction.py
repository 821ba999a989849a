"""Leave-one-out evaluation of the offline resource predictor against the global mean, with the
coverage of its intervals; leave-one-workload-out for a job never seen.

Each logged run is held out in turn; the predictor (:class:`optimizer.offline.intervals.
JobPredictor`, fitted on all the other runs, its conformal intervals calibrated on them alone)
predicts its throughput, wall time and peak memory from its model characteristics,
configuration and job size, and the naive baseline predicts the mean of the other runs.
Printed: the mean absolute percentage errors (MAPE) of both, with their ratio, the share of
held-out runs inside the ``--level`` interval, and two stronger references: copying the nearest
logged run, and the mean of the same model's other runs. Then each workload is held out whole
(a new job: its runs predicted from the other workloads only).

The logs are the shipped ``examples/logs`` (the tool's own measured runs of the bundled
examples) and, when present, the shared traces ``../shared/data/dl-traces`` (read as history:
configuration and outcome from ``executions.csv``, peak memory from ``traces.csv``).

Usage::

    python benchmarks/offline_prediction.py [--logs DIR_OR_GLOB ...] [--level 0.8]
        [--json PATH] [--quiet]
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import pandas as pd

from optimizer.foundation.atomic_files import atomic_write_json
from optimizer.foundation.config import ResourceConfig
from optimizer.offline.analyzer import OfflineDataAnalyzer, leave_one_out, loo_summary
from optimizer.offline.evaluation import leave_one_group_out

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "examples" / "logs"
DL_TRACES = REPO.parent / "shared" / "data" / "dl-traces"


def _line(name: str, s: dict[str, float], what: str) -> str:
    parts = []
    for label, key in (("time", "time"), ("throughput", "throughput"), ("memory", "memory")):
        pred, base = s[f"predictor_{key}_mape"], s[f"baseline_{key}_mape"]
        if pred == pred:
            parts.append(f"{label} MAPE {pred:.1f} % vs global mean {base:.1f} % (ratio "
                         f"{pred / base:.3f}; interval holds {s[f'{key}_coverage']:.0f} %)")
    return f"{name} {what}: " + "; ".join(parts)


def evaluate(name: str, specs: list[Path | str], level: float, quiet: bool) -> dict[str, object]:
    # Fixed prices and bounds: the figures must not depend on the machine running this.
    resources = ResourceConfig(gpu_count_max=0, cpu_count_max=2, memory_max=24.0)
    data = OfflineDataAnalyzer(specs, resources=resources).combined_data
    loo = leave_one_out(data, level=level)
    summary = loo_summary(loo)
    if not quiet:
        cols = ["model_key", "time_s", "pred_time_s", "time_s_low", "time_s_high",
                "pred_time_s_ape", "base_time_s_ape", "mem_gb_peak", "pred_mem_gb_peak"]
        with pd.option_context("display.width", 180, "display.max_rows", 200,
                               "display.float_format", "{:.4g}".format):
            print(f"\n== {name}: {len(loo)} held-out runs ==")
            print(loo[[c for c in cols if c in loo]].to_string(index=False))
    print(_line(name, summary, f"leave-one-out ({level:.0%} intervals)"))
    print(f"  references: nearest run copied - throughput "
          f"{summary['nearest_copy_throughput_mape']:.1f} %, "
          f"time {summary['nearest_copy_time_mape']:.1f} %; same model's mean - throughput "
          f"{summary['model_mean_throughput_mape']:.1f} %, time "
          f"{summary['model_mean_time_mape']:.1f} %")
    new_job = loo_summary(leave_one_group_out(data, level=level))
    print(_line(name, new_job, "leave-one-workload-out"))
    return {**summary, "new_job": new_job}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--logs", action="append", help="logs to evaluate (default: examples/logs)")
    p.add_argument("--level", type=float, default=0.8, help="interval coverage (default 0.8)")
    p.add_argument("--json", type=Path, help="write the figures here")
    p.add_argument("--quiet", action="store_true", help="only the summary lines")
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore", category=RuntimeWarning)
    name = "given logs" if args.logs else "shipped example logs"
    main_summary = evaluate(name, args.logs or [SHIPPED], args.level, args.quiet)
    result: dict[str, object] = dict(main_summary)
    if DL_TRACES.is_dir() and not args.logs:
        result["dl_traces"] = evaluate("dl-traces", [DL_TRACES], args.level, args.quiet)
    if args.json:
        atomic_write_json(args.json, result)
    ratio = main_summary["predictor_time_mape"] / main_summary["baseline_time_mape"]
    beats = ratio < 1 and main_summary["predictor_throughput_mape"] \
        < main_summary["baseline_throughput_mape"]
    print(f"{name}: time MAPE {ratio:.2f} x the global mean's "
          f"({'under' if ratio < 0.5 else 'NOT under'} half); "
          f"{'predictor beats the global mean' if beats else 'predictor does NOT beat the mean'}")
    return 0 if beats else 1


if __name__ == "__main__":
    sys.exit(main())
