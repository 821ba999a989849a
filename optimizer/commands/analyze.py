"""``python -m optimizer analyze``: per-model statistics and a resource prediction from logs.

Example::

    python -m optimizer analyze --logs examples/logs --model cnn --params 20000 \\
        --preference cost --out runs/analysis

prints the per-model table (and the prediction when a model is given) and writes
``analysis.md``, ``analysis.html``, ``analysis.json``, ``time_vs_cost.png`` and
``throughput_scaling.png`` into ``--out``.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from optimizer.foundation.config import load_config
from optimizer.foundation.errors import CloudoptError
from optimizer.foundation.preferences import parse_preference
from optimizer.offline.analyzer import OfflineDataAnalyzer, ResourcePrediction
from optimizer.offline.prediction import interval_label


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    p.add_argument("--logs", action="append", required=True, metavar="DIR_OR_GLOB",
                   help="training logs: a CSV file, a folder (its *.csv and */trials.csv) or "
                        "a glob; repeat for several")
    p.add_argument("--model", help="name of the model to predict resources for")
    p.add_argument("--family", help="its family (CNN, Transformer, MLP...)")
    p.add_argument("--params", type=float, help="its parameter count")
    p.add_argument("--layers", type=float, help="its number of layers")
    p.add_argument("--width", type=float, help="its width (hidden size, channels)")
    p.add_argument("--dataset", help="its dataset name or type")
    p.add_argument("--samples", type=float,
                   help="samples of the whole job (dataset size x epochs), for time and cost")
    p.add_argument("--preference", default="balanced",
                   help="cost, time, balanced, resource, or weights 'cost,time,resource'")
    p.add_argument("--config", help="TOML configuration (prices and resource bounds)")
    p.add_argument("--out", type=Path, default=Path("runs") / "analysis",
                   help="folder for analysis.md/json and plots (default: runs/analysis)")
    p.add_argument("--accuracy", action="store_true",
                   help="also measure the predictor leave-one-out (each run predicted from the "
                        "others; a few seconds per 10 runs) and report it with the intervals' "
                        "coverage")
    p.add_argument("--quiet", action="store_true", help="print only the output paths")
    return p


def characteristics(args: argparse.Namespace) -> dict[str, Any] | None:
    """The new job's characteristics from the arguments, or None when none was given."""
    values = {"model_name": args.model, "model_family": args.family, "params": args.params,
              "layers": args.layers, "width": args.width, "dataset": args.dataset,
              "total_samples": args.samples}
    given = {k: v for k, v in values.items() if v is not None}
    return given or None


def format_prediction(pred: ResourcePrediction) -> str:
    a = pred.allocation
    level = interval_label(pred.interval_level)
    lines = [f"prediction ({pred.preference}, from {pred.source}):",
             f"  allocation  {a.gpus} GPU, {a.cpus} CPU, {a.memory_gb:g} GB, "
             f"batch {a.batch_size or 'script default'}",
             f"  throughput  {pred.expected_throughput:.4g} samples/s "
             f"({level}: {pred.throughput_range[0]:.4g}-{pred.throughput_range[1]:.4g})",
             f"  time        {pred.expected_time_s:.4g} s "
             f"({level}: {pred.time_range_s[0]:.4g}-{pred.time_range_s[1]:.4g})"]
    if math.isfinite(pred.peak_memory_gb):
        lines.append(f"  peak memory {pred.peak_memory_gb:.3g} GiB ({level}: "
                     f"{pred.peak_memory_range_gb[0]:.3g}-{pred.peak_memory_range_gb[1]:.3g})")
    lines.append(f"  cost        ${pred.expected_cost:.4g} (${pred.hourly_cost:.4g}/h)")
    if pred.similar_models:
        lines.append(f"  similar     {', '.join(pred.similar_models)}")
    lines += [f"  note        {n}" for n in pred.notes]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    out_existed = Path(args.out).exists()
    try:
        return _run(args)
    except CloudoptError as exc:
        out = Path(args.out)
        if not out_existed and out.is_dir() and not any(out.rglob("*")):
            out.rmdir()  # no empty output folder left behind
        message = str(exc)
        if not any(str(spec) in message for spec in args.logs):
            # errors about the history as a whole: say which logs it was
            raise CloudoptError(f"{', '.join(map(str, args.logs))}: {message}") from None
        raise


def _rows(rows: list[int], shown: int = 8) -> str:
    head = ", ".join(map(str, rows[:shown]))
    more = f" and {len(rows) - shown} more" if len(rows) > shown else ""
    return f"row{'s' if len(rows) > 1 else ''} {head}{more}"


def _report_dropped(analyzer: OfflineDataAnalyzer) -> None:
    for path, rep in analyzer.reports.items():
        if rep.dropped:
            reasons = ", ".join(f"{n} {why}: {_rows(rep.dropped_rows.get(why, []))}"
                                for why, n in rep.dropped.items())
            print(f"warning: {path}: {rep.rows_dropped} of {rep.rows_read} rows dropped "
                  f"({reasons})", file=sys.stderr)


def _run(args: argparse.Namespace) -> int:
    from optimizer.offline.evaluation import leave_one_out, loo_summary
    from optimizer.offline.report import model_table, write_analysis
    from optimizer.offline.requests import sizing_table

    preference = parse_preference(args.preference)
    config = load_config(args.config)
    analyzer = OfflineDataAnalyzer(args.logs, resources=config.resources)
    _report_dropped(analyzer)
    prediction = None
    chars = characteristics(args)
    if chars is not None:
        prediction = analyzer.predict_resources(chars, preference)
    accuracy = None
    if args.accuracy:
        accuracy = loo_summary(leave_one_out(analyzer.combined_data,
                                             level=analyzer.interval_level))
    paths = write_analysis(analyzer, args.out, prediction, accuracy)
    if not args.quiet:
        analysis = analyzer.analyze_all_logs()
        with pd.option_context("display.width", 140, "display.max_columns", 20,
                               "display.float_format", "{:.4g}".format):
            print(model_table(analysis).to_string(index=False))
        for path, reason in analyzer.rejected.items():
            print(f"skipped {path}: {reason}")
        sizing = sizing_table(analyzer.right_size())
        if not sizing.empty:
            print("right-sized requests for the next run (cloudopt beside KRR simple and "
                  "VPA-style):")
            print(sizing.drop(columns=["note"]).to_string(index=False))
        if prediction is not None:
            print(format_prediction(prediction))
        if accuracy is not None:
            print(f"leave-one-out: time MAPE {accuracy['predictor_time_mape']:.1f} % vs the "
                  f"global mean's {accuracy['baseline_time_mape']:.1f} %, "
                  f"{interval_label(analyzer.interval_level)} interval holds "
                  f"{accuracy['time_coverage']:.0f} % of runs")
    print(f"wrote {paths['md']}, {paths['json']} and plots in {args.out}")
    return 0
