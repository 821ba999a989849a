"""Build the shipped offline-analysis logs from real, measured runs of the bundled examples.

Runs ``examples/train_mlp.py``, ``train_cnn.py`` and ``train_transformer.py`` through the
optimizer's own runner (:class:`optimizer.trials.training.TrainingModuleManager`) under a small
factorial design per model (two model sizes x CPU threads 1/2 x two batch sizes x two job
lengths), each to
completion with the monitor on, and writes the run records the tool writes
(``summaries_to_frame``: one row per trial) as ``examples/logs/<model>.csv``. The trial folders
(traces, metrics, output) stay under ``runs/example-logs/`` (not shipped).

Usage::

    python benchmarks/make_example_logs.py            # 48 runs, ~6 min on two cores
    python benchmarks/make_example_logs.py --quick    # 6 runs, to check the set-up
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.atomic_files import atomic_write_csv
from optimizer.foundation.config import ResourceConfig
from optimizer.trials.records import TrialSummary, summaries_to_frame
from optimizer.trials.training import TrainingModuleManager, TrialRequest

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Example:
    """One bundled script and the arguments of its model sizes and job size."""

    name: str
    script: str
    sizes: tuple[str, ...]
    """``--width``-style arguments and the samples per epoch, one per model size (larger
    models get fewer samples so that no run is long)."""
    jobs: tuple[str, ...]
    """The job lengths (epochs): a history holds the same model trained for longer and
    shorter jobs, and the time a new job takes depends on its length first."""
    batches: tuple[int, int]


EXAMPLES = (
    Example("mlp", "examples/train_mlp.py",
            ("--hidden 256 --samples 8000", "--hidden 1024 --samples 3000"), ("--epochs 2", "--epochs 8"),
            (64, 256)),
    Example("cnn", "examples/train_cnn.py",
            ("--width 8 --samples 2048", "--width 16 --samples 1024"), ("--epochs 2", "--epochs 8"), (32, 128)),
    Example("transformer", "examples/train_transformer.py",
            ("--width 32 --samples 512", "--width 64 --samples 256"), ("--epochs 2", "--epochs 8"), (16, 64)),
)


def design(quick: bool) -> list[tuple[Example, str, str, int, int]]:
    """(example, size arguments, job arguments, threads, batch size) of every run, in run
    order."""
    runs = []
    for ex in EXAMPLES:
        for size in ex.sizes[:1] if quick else ex.sizes:
            for job in ex.jobs[:1] if quick else ex.jobs:
                for threads in (1, 2):
                    for batch in ex.batches[:1] if quick else ex.batches:
                        runs.append((ex, size, job, threads, batch))
    return runs


def run_all(out_dir: Path, run_dir: Path, quick: bool, timeout_s: float,
            quiet: bool) -> dict[str, list[TrialSummary]]:
    resources = ResourceConfig()
    by_model: dict[str, list[TrialSummary]] = {}
    runs = design(quick)
    for i, (ex, size, job, threads, batch) in enumerate(tqdm(runs, desc="example runs",
                                                             disable=quiet)):
        manager = TrainingModuleManager(REPO / ex.script, train_args=f"{size} {job}")
        alloc = Allocation(gpus=0, cpus=min(threads, resources.cpu_count_max or 1),
                           memory_gb=4.0, batch_size=batch)
        trial_id = f"{i:03d}-{ex.name}-{size.split()[1]}-e{job.split()[-1]}-{alloc.key()}"
        summary = manager.run_training(TrialRequest(alloc, run_dir / "trials" / trial_id,
                                                    timeout_s=timeout_s,
                                                    trial_id=trial_id), resources)
        if not quiet:
            tqdm.write(f"{trial_id}: {summary.status} {summary.wall_time_s:.1f} s "
                       f"{summary.throughput or float('nan'):.1f} samples/s")
        by_model.setdefault(ex.name, []).append(summary)
    for name, summaries in by_model.items():
        frame = summaries_to_frame(summaries)
        # Shipped logs name the script relative to the repository, not this machine's path.
        frame["train_file"] = [_relative(f) for f in frame["train_file"]]
        atomic_write_csv(out_dir / f"{name}.csv", frame)
    return by_model


def _relative(path: str) -> str:
    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=REPO / "examples" / "logs",
                   help="folder of the CSV logs")
    p.add_argument("--run-dir", type=Path, default=REPO / "runs" / "example-logs",
                   help="folder of the trial records")
    p.add_argument("--quick", action="store_true", help="one size and batch per model")
    p.add_argument("--timeout", type=float, default=150.0, help="limit per run, seconds")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    by_model = run_all(args.out, args.run_dir, args.quick, args.timeout, args.quiet)
    failed = [s.trial_id for ss in by_model.values() for s in ss if not s.ok]
    total = sum(len(ss) for ss in by_model.values())
    print(f"{total} runs ({len(failed)} failed) -> {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
