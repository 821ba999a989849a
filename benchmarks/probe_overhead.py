"""Cost of the in-process probe on real training runs (the companion of monitor_overhead.py).

Runs each script as a subprocess with and without the probe (``optimizer.trials.probe``),
in the order off, on, on, off (ABBA), so that a drift in the machine's load hits both alike,
and reports per script the median wall times, their ratio (``wall_ratio``, goal <= 1.02) and
the ratio of the job's own CPU time (``cpu_ratio``, less noisy on a shared machine), with the
probe's event-file size.
Scripts: the bundled example and two of the regret suite's (its quick arguments).

    python benchmarks/probe_overhead.py [--reps 5] [--json PATH]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from optimizer.foundation.atomic_files import atomic_write_json  # noqa: E402
from optimizer.trials.probe import probe_environment, read_probe  # noqa: E402

SCRIPTS = {
    "mlp (examples/train_mlp.py)": ["examples/train_mlp.py", "--epochs", "2", "--samples", "12000"],
    "cnn (regret suite)": ["benchmarks/workloads/cnn_dataloader.py", "--epochs", "1",
                           "--train-size", "1500"],
    "charlm (regret suite)": ["benchmarks/workloads/char_lm.py", "--epochs", "1",
                              "--sequences", "700"],
}


def run_once(argv: list[str], probed: bool, tmp: Path) -> tuple[float, float, int, int]:
    """(wall s, the job's CPU s, probe events bytes, probe steps)."""
    events = tmp / "events.jsonl"
    events.unlink(missing_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if probed:
        env = probe_environment(env, events)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, *argv], cwd=REPO, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    rec = read_probe(events) if probed else None
    return wall, cpu, events.stat().st_size if probed else 0, rec.steps if rec else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=5, help="runs of each kind per script")
    p.add_argument("--json", default=None, metavar="PATH", help="write the results as JSON")
    args = p.parse_args(argv)
    results = {}
    print(f"{'script':<28} {'off_s':>7} {'on_s':>7} {'wall_ratio':>10} {'cpu_ratio':>9} "
          f"{'steps':>6} {'events_kB':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, script in SCRIPTS.items():
            runs = {False: [], True: []}
            for i in range(2 * args.reps):
                probed = i % 4 in (1, 2)  # off on on off: a linear drift hits both alike
                runs[probed].append(run_once(script, probed, Path(tmp)))
            off = statistics.median(r[0] for r in runs[False])
            on = statistics.median(r[0] for r in runs[True])
            cpu = (statistics.median(r[1] for r in runs[True])
                   / statistics.median(r[1] for r in runs[False]))
            steps, size = runs[True][-1][3], runs[True][-1][2]
            results[name] = {"off_s": off, "on_s": on, "wall_ratio": on / off, "cpu_ratio": cpu,
                             "steps": steps, "events_bytes": size, "reps": args.reps}
            print(f"{name:<28} {off:7.2f} {on:7.2f} {on / off:10.3f} {cpu:9.3f} {steps:6d} "
                  f"{size / 1024:9.1f}")
    if args.json:
        atomic_write_json(Path(args.json), results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
