"""Regenerate the shipped phase model ``phases/models/default/`` from ``dl-traces``.

Fits :class:`phases.PhaseDetector` with its defaults (5 phases, 10 hidden units, delay 3,
lr 1e-3, ``DEFAULT_EPOCHS``) on all 60 executions of ``../shared/data/dl-traces/traces.csv``
(features ``cpu_cores, mem_gb``, execution id ``exec_id``, time ``time_s``), seed 0, on CPU so
that the files are the same on every machine. Equivalent command line::

    python -m optimizer phases fit --traces ../shared/data/dl-traces/traces.csv \\
        --exec-id exec_id --features cpu_cores,mem_gb --time time_s --seed 0 --device cpu \\
        --out phases/models/default
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from phases import DEFAULT_MODEL_DIR, PhaseDetector, read_traces  # noqa: E402

DATA = REPO.parent / "shared" / "data" / "dl-traces" / "traces.csv"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=DATA)
    parser.add_argument("--out", type=Path, default=DEFAULT_MODEL_DIR)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    if not args.traces.is_file():
        print(f"{args.traces}: not found (the shared data sit beside the repository)")
        return 1
    torch.set_num_threads(1)  # bit-for-bit reproducible files
    model = PhaseDetector(random_state=args.seed, device="cpu", verbose=not args.quiet)
    traces = read_traces(
        args.traces, "exec_id", ["cpu_cores", "mem_gb"], "time_s", min_length=model.delay + 1
    )
    model.fit(traces)
    model.save(args.out)
    phases = model.predict(traces)
    sizes = {int(p): int(sum((s == p).sum() for s in phases)) for p in range(model.n_phases_)}
    print(
        f"saved {args.out}: {len(traces)} executions, {model.n_windows_} windows, "
        f"reconstruction error {model.loss_curve_[-1]:.4f}, samples per phase {sizes}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
