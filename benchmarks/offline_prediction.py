"""Leave-one-out evaluation of the offline resource predictor against the global mean.

Each logged run is held out in turn; the predictor (:class:`optimizer.offline.analyzer.
LocalScalingModel`, fitted on all the other runs) predicts its throughput and wall time from
its model characteristics, configuration and job size, and the naive baseline predicts the mean
of the other runs. Printed: the error of each held-out run and the mean absolute percentage
errors (MAPE) of both, with their ratio, and two stronger references: copying the nearest
logged run, and the mean of the same model's other runs (what the scaling model adds). The logs are the shipped ``examples/logs`` (the tool's
own measured runs of the bundled examples) and, when present, the shared real history
``../shared/data/dl-traces/executions.csv``.

Usage::

    python benchmarks/offline_prediction.py [--logs DIR_OR_GLOB ...] [--json PATH] [--quiet]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from optimizer.foundation.atomic_files import atomic_write_json
from optimizer.foundation.config import ResourceConfig
from optimizer.offline.analyzer import OfflineDataAnalyzer, leave_one_out, loo_summary

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "examples" / "logs"
DL_TRACES = REPO.parent / "shared" / "data" / "dl-traces" / "executions.csv"


def evaluate(name: str, specs: list[Path | str], quiet: bool) -> dict[str, float]:
    # Fixed prices and bounds: the figures must not depend on the machine running this.
    resources = ResourceConfig(gpu_count_max=0, cpu_count_max=2, memory_max=24.0)
    analyzer = OfflineDataAnalyzer(specs, resources=resources)
    loo = leave_one_out(analyzer.combined_data)
    summary = loo_summary(loo)
    if not quiet:
        cols = ["model_key", "throughput", "pred_throughput", "pred_throughput_ape",
                "base_throughput_ape", "time_s", "pred_time_s", "pred_time_s_ape",
                "base_time_s_ape"]
        with pd.option_context("display.width", 160, "display.max_rows", 200,
                               "display.float_format", "{:.4g}".format):
            print(f"\n== {name}: {len(loo)} held-out runs ==")
            print(loo[[c for c in cols if c in loo]].to_string(index=False))
    print(f"{name}: throughput MAPE predictor {summary['predictor_throughput_mape']:.1f} % vs "
          f"global mean {summary['baseline_throughput_mape']:.1f} % (ratio "
          f"{summary['predictor_throughput_mape'] / summary['baseline_throughput_mape']:.3f}); "
          f"time MAPE predictor {summary['predictor_time_mape']:.1f} % vs global mean "
          f"{summary['baseline_time_mape']:.1f} % (ratio "
          f"{summary['predictor_time_mape'] / summary['baseline_time_mape']:.3f})")
    print(f"  references: nearest run copied - throughput "
          f"{summary['nearest_copy_throughput_mape']:.1f} %, "
          f"time {summary['nearest_copy_time_mape']:.1f} %; same model's mean - throughput "
          f"{summary['model_mean_throughput_mape']:.1f} %, time "
          f"{summary['model_mean_time_mape']:.1f} %")
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--logs", action="append", help="logs to evaluate (default: examples/logs)")
    p.add_argument("--json", type=Path, help="write the shipped logs' figures here")
    p.add_argument("--quiet", action="store_true", help="only the summary lines")
    args = p.parse_args(argv)
    name = "given logs" if args.logs else "shipped example logs"
    main_summary = evaluate(name, args.logs or [SHIPPED], args.quiet)
    result: dict[str, object] = dict(main_summary)
    if DL_TRACES.is_file() and not args.logs:
        result["dl_traces"] = evaluate("dl-traces executions.csv", [DL_TRACES], args.quiet)
    if args.json:
        atomic_write_json(args.json, result)
    beats = (main_summary["predictor_time_mape"] < main_summary["baseline_time_mape"]
             and main_summary["predictor_throughput_mape"]
             < main_summary["baseline_throughput_mape"])
    print("predictor beats the global mean" if beats else "predictor does NOT beat the mean")
    return 0 if beats else 1


if __name__ == "__main__":
    sys.exit(main())
