"""``python -m optimizer phases fit|predict|report``: discover workload phases (AI4DL CRBM).

- ``fit --traces FILE --exec-id COL --features cpu,mem [--time COL] [--phases 5 --hidden 10
  --delay 3 --epochs N] [--feature-set whole --window-weight 2 --smoothing viterbi] --out
  MODEL_DIR``: fit a
  :class:`phases.PhaseDetector` and save it;
- ``predict --model MODEL_DIR --traces FILE --out phases.csv``: one row per input sample with
  its phase (-1: warm-up or dropped, see the ``note`` column);
- ``report --model MODEL_DIR --traces FILE --out DIR``: ``report.md``, ``phases.json`` and PNG
  plots (see :func:`phases.report.write_report`).

Feature values that are not finite numbers refuse the file (exit 2, naming column and line of
each) unless ``--drop-invalid`` drops their rows; either way they are counted on the console.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import warnings
from pathlib import Path

from optimizer.foundation.errors import CloudoptError, TraceFormatError


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Discover workload phases in resource traces (AI4DL: CRBM + k-means).",
    )
    sub = parser.add_subparsers(dest="action", required=True, metavar="{fit,predict,report}")

    fit = sub.add_parser("fit", help="fit a phase model on a trace file and save it")
    fit.add_argument("--traces", type=Path, required=True, help="CSV or Parquet trace table")
    fit.add_argument("--exec-id", required=True, help="execution id column")
    fit.add_argument("--features", required=True, help="comma-separated feature columns")
    fit.add_argument("--time", default=None, help="time column to sort samples by")
    fit.add_argument("--phases", type=int, default=5, help="number of phases (k-means k)")
    fit.add_argument("--hidden", type=int, default=10, help="CRBM hidden units")
    fit.add_argument("--delay", type=int, default=3, help="history samples per window")
    fit.add_argument("--epochs", type=int, default=None, help="CRBM epochs (model default)")
    fit.add_argument("--lr", type=float, default=1e-3, help="CD learning rate")
    fit.add_argument("--batch-size", type=int, default=64, help="windows per minibatch")
    fit.add_argument(
        "--preprocess", default="none", help="none, or exec-norm/diff steps joined by '+'"
    )
    fit.add_argument(
        "--feature-set", default="abs", metavar="SPEC",
        help="engineered inputs (phases/features.py): abs, whole (each execution against its "
        "own level: best measured offline), rel (causal), with -diff/-rate groups joined by '+'")
    fit.add_argument(
        "--window-weight", type=float, default=0.0, metavar="W",
        help="cluster each CRBM code beside its input window, weighted W (0: codes alone, the "
        "AI4DL method; 2 with --feature-set whole: best measured)")
    fit.add_argument("--smoothing", default="none", choices=("none", "viterbi", "forward"),
                     help="hidden-Markov smoothing of the phase sequence (viterbi: offline)")
    fit.add_argument("--stay-prob", type=float, default=0.99,
                     help="the smoother's chance of staying in a phase per sample")
    fit.add_argument("--min-duration", type=int, default=1,
                     help="shortest phase run, in samples (shorter runs are merged)")
    fit.add_argument("--device", default="auto", help="auto, cpu or cuda")
    fit.add_argument("--seed", type=int, default=0, help="random seed")
    fit.add_argument("--out", type=Path, required=True, help="model directory to write")
    fit.add_argument("--quiet", action="store_true", help="no progress bar")
    fit.add_argument("--drop-invalid", action="store_true", help=DROP_HELP)

    for name, text in (
        ("predict", "phase of every sample of a trace file"),
        ("report", "phase report: report.md, phases.json, plots"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("--model", type=Path, required=True, help="model directory (from fit)")
        p.add_argument("--traces", type=Path, required=True, help="CSV or Parquet trace table")
        p.add_argument("--exec-id", default=None, help="execution id column (model's default)")
        p.add_argument("--time", default=None, help="time column (model's default)")
        p.add_argument("--device", default=None, help="auto, cpu or cuda")
        p.add_argument("--drop-invalid", action="store_true", help=DROP_HELP)
        if name == "predict":
            p.add_argument("--out", type=Path, required=True, help="CSV to write")
        else:
            p.add_argument("--out", type=Path, required=True, help="report directory")
            p.add_argument(
                "--labels",
                default=None,
                help="column with known stages to compare phases with (not an input)",
            )
            p.add_argument("--examples", type=int, default=4, help="execution plots to draw")
    return parser


DROP_HELP = ("drop rows whose feature values are not finite numbers (default: refuse the file, "
             "naming each); they are never filled in")


def _invalid(args: argparse.Namespace) -> str:
    return "drop" if getattr(args, "drop_invalid", False) else "refuse"


@contextlib.contextmanager
def _console_warnings():
    """What the trace reader warns about (dropped rows, skipped executions), one line each."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for w in caught:
        print(f"warning: {w.message}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    return {"fit": _fit, "predict": _predict, "report": _report}[args.action](args)


def _fit(args: argparse.Namespace) -> int:
    from phases import PhaseDetector, read_traces

    features = [f.strip() for f in args.features.split(",") if f.strip()]
    params = dict(
        n_phases=args.phases,
        n_hidden=args.hidden,
        delay=args.delay,
        lr=args.lr,
        batch_size=args.batch_size,
        preprocess=args.preprocess,
        features=args.feature_set,
        smoothing=args.smoothing,
        stay_prob=args.stay_prob,
        min_duration=args.min_duration,
        window_weight=args.window_weight,
        device=args.device,
        random_state=args.seed,
        verbose=not args.quiet,
    )
    if args.epochs is not None:
        params["epochs"] = args.epochs
    model = PhaseDetector(**params)
    try:  # a bad option is named before the traces are read
        model._check_params()
    except ValueError as exc:
        raise CloudoptError(f"phases fit: {exc}") from None
    with _console_warnings():
        traces = read_traces(args.traces, args.exec_id, features, args.time,
                             min_length=args.delay + 1, invalid=_invalid(args))
    model.fit(traces)
    model.save(args.out)
    print(
        f"{args.out}: {len(traces)} executions, {model.n_windows_} windows, "
        f"{model.epochs} epochs, reconstruction error {model.loss_curve_[-1]:.4f}"
    )
    return 0


def _load(args: argparse.Namespace):
    from phases import PhaseDetector
    from phases.report import read_for_model

    model = PhaseDetector.load(args.model, device=args.device)
    with _console_warnings():
        traces, frame = read_for_model(model, args.traces, exec_id=args.exec_id, time=args.time,
                                       invalid=_invalid(args))
    return model, traces, frame


def _predict(args: argparse.Namespace) -> int:
    from optimizer.foundation.atomic_files import atomic_write_csv
    from phases.report import predict_table

    model, traces, frame = _load(args)
    table = predict_table(model, traces, frame)
    atomic_write_csv(args.out, table)
    scored = int((table["note"] == "").sum())
    print(
        f"{args.out}: {len(table)} rows, {scored} with a phase, "
        f"{len(table) - scored} warm-up or dropped"
    )
    return 0


def _report(args: argparse.Namespace) -> int:
    from phases.report import write_report

    model, traces, frame = _load(args)
    labels = None
    if args.labels:
        if args.labels not in frame.columns:
            raise TraceFormatError(
                f"{args.traces}: label column {args.labels!r} not found; "
                f"available columns: {', '.join(map(str, frame.columns))}"
            )
        column = frame[args.labels].to_numpy()
        labels = [column[rows] for rows in traces.rows]
    summary = write_report(
        model,
        traces,
        args.out,
        labels=labels,
        label_name=args.labels or "label",
        n_examples=args.examples,
        title=f"Phases of {args.traces.name}",
    )
    cov = summary["prototype_coverage"]
    print(
        f"{args.out}/report.md: {summary['traces']['executions']} executions, "
        f"{summary['model']['n_phases']} phases, top-3 prototypes cover "
        f"{100 * cov['3']:.0f}% of executions"
    )
    return 0
