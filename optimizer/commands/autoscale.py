"""``python -m optimizer autoscale evaluate``: replay autoscaling policies on held-out traces.

Only parses arguments and calls :func:`phases.evaluation.evaluate.evaluate_file` and
:func:`phases.evaluation.evaluate.write_outputs`; see :mod:`phases.evaluation.evaluate` for the metrics and
:mod:`phases.policies` for the policies.
"""

from __future__ import annotations

import argparse
import warnings

from optimizer.foundation.errors import CloudoptError


def _columns(text: str) -> list[str]:
    cols = [c.strip() for c in text.split(",") if c.strip()]
    if not cols:
        raise argparse.ArgumentTypeError(f"expected comma-separated column names, got {text!r}")
    return cols


def build_parser(prog: str) -> argparse.ArgumentParser:
    from phases.evaluation.evaluate import DEFAULT_POLICIES, PHASE_FEATURES

    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    ev = sub.add_parser(
        "evaluate",
        help="fit policies on a split of executions and score them on the rest",
        description="Split executions by id, fit the phase model and the policies on the "
        "training part, replay every policy on the test part, write metrics.json, "
        "metrics.csv, report.md and plots to --out.",
    )
    ev.add_argument("--traces", required=True, help="CSV or Parquet trace file")
    ev.add_argument("--exec-id", required=True, help="execution id column")
    ev.add_argument(
        "--features",
        required=True,
        type=_columns,
        help="comma-separated phase-model feature columns, e.g. cpu,mem",
    )
    ev.add_argument(
        "--resources",
        type=_columns,
        default=None,
        help="columns that get allocations (default: the features)",
    )
    ev.add_argument("--time", default=None, help="time column in seconds (default: 1 s/row)")
    ev.add_argument(
        "--model",
        default=None,
        help="saved phase model directory (default: fit one on the training split)",
    )
    ev.add_argument("--cycle", type=float, default=600.0, help="autoscaling cycle, seconds")
    ev.add_argument("--test-fraction", type=float, default=0.1)
    ev.add_argument(
        "--folds",
        type=int,
        default=0,
        help="k-fold cross-validation over executions instead of one split (k >= 2)",
    )
    ev.add_argument(
        "--group",
        default=None,
        metavar="COL",
        help="leave one group out: a column naming each execution's workload (or job); each "
        "group is tested by policies and phase model fitted on the other groups only "
        "(replaces --test-fraction and --folds)",
    )
    ev.add_argument("--seed", type=int, default=0)
    ev.add_argument(
        "--cold-start",
        choices=("pooled", "first-cycle", "previous-run"),
        default="pooled",
        help="first-cycle allocation of every practical policy: mean + 2 std of all training "
        "samples, or of the training samples in their executions' first cycle, or the peak of "
        "the same job's previous run (the job column: --job, else --group)",
    )
    ev.add_argument(
        "--job",
        default=None,
        metavar="COL",
        help="column naming the job each execution is a run of (for --cold-start previous-run)",
    )
    ev.add_argument(
        "--tolerance",
        type=float,
        default=0.05,
        help="use above allocation × (1 + tolerance) counts as under-provisioned",
    )
    ev.add_argument(
        "--policies",
        type=_columns,
        default=list(DEFAULT_POLICIES),
        help="comma-separated policy names (default: all)",
    )
    ev.add_argument(
        "--phase-features",
        choices=PHASE_FEATURES,
        default=None,
        help="phase-model inputs: raw features or relative to the trailing level "
        "(default: relative when fitting, raw with --model)",
    )
    ev.add_argument("--phases", type=int, default=None, help="phases (k) of a fitted model")
    ev.add_argument("--delay", type=int, default=None, help="CRBM delay of a fitted model")
    ev.add_argument("--epochs", type=int, default=None, help="CRBM epochs of a fitted model")
    ev.add_argument(
        "--vpa-half-life",
        type=float,
        default=None,
        help="vpa histogram half-life in seconds (VPA: 86400; default: 1/8 of the median "
        "training execution, as VPA's 24 h against its 8-day window)",
    )
    ev.add_argument(
        "--plot-exec", default=None, help="test execution to plot (default: the longest)"
    )
    ev.add_argument("--out", required=True, help="output directory")
    ev.add_argument("--quiet", action="store_true", help="no progress bars or table")
    return parser


def run(args: argparse.Namespace) -> int:
    from phases.evaluation.evaluate import evaluate_file, format_table, write_outputs

    detector_params = {
        key: value
        for key, value in (
            ("n_phases", args.phases),
            ("delay", args.delay),
            ("epochs", args.epochs),
        )
        if value is not None
    }
    with warnings.catch_warnings():
        if args.quiet:
            warnings.simplefilter("ignore")
        try:
            result = evaluate_file(
                args.traces,
                args.exec_id,
                args.features,
                resources=args.resources,
                time=args.time,
                cycle_s=args.cycle,
                test_fraction=args.test_fraction,
                seed=args.seed,
                tolerance=args.tolerance,
                policies=args.policies,
                policy_params=(
                    {"vpa": {"half_life_s": args.vpa_half_life}} if args.vpa_half_life else None
                ),
                model=args.model,
                detector_params=detector_params,
                phase_features=args.phase_features,
                folds=args.folds,
                group=args.group,
                cold_start=args.cold_start,
                job=args.job,
                quiet=args.quiet,
            )
        except ValueError as exc:
            if isinstance(exc, CloudoptError):
                raise
            raise CloudoptError(str(exc)) from None
    out = write_outputs(result, args.out, plot_exec=args.plot_exec)
    if not args.quiet:
        for r in result.resources:
            print(f"\n{r}\n" + format_table(result, r, markdown=False))
        print(
            f"\nwrote {out}/metrics.json, metrics.csv, settings.json, report.md, allocation.png, policies.png"
        )
    return 0
