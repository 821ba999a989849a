"""Cost of the process monitor on a real training run.

Runs ``examples/train_mlp.py`` as a subprocess with and without a
:class:`~optimizer.trials.monitor.ProcessMonitor` attached, alternating the two so that drifts in the
machine's load hit both alike, and reports the median wall times and their ratio
(``overhead_ratio``, goal <= 1.02). Wall-time ratios on a shared machine are noisy, so it also
reports the ratio of the job's own CPU time with and without the monitor (``job_cpu_ratio``)
and the monitor's CPU time per wall second (measured in its sampling loop), a direct bound of
what it can take from the job.

    python benchmarks/monitor_overhead.py [--reps 5] [--interval 0.5] [--quick] [--json PATH]
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
from optimizer.trials.monitor import ProcessMonitor  # noqa: E402

EXAMPLE = REPO / "examples" / "train_mlp.py"


class TimedMonitor(ProcessMonitor):
    """A ProcessMonitor that adds up the thread CPU time its samples take."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.sample_cpu_s = 0.0

    def sample(self):
        t = time.thread_time()
        try:
            return super().sample()
        finally:
            self.sample_cpu_s += time.thread_time() - t


def run_once(args: list[str], monitored: bool, interval: float,
             workdir: Path) -> tuple[float, float, float]:
    """Wall seconds of one run, the job's CPU seconds, and the monitor's CPU seconds (0
    without monitor)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, str(EXAMPLE), *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    mon = None
    if monitored:
        mon = TimedMonitor(proc.pid, workdir / "trace.csv", interval=interval)
        mon.start()
    proc.wait()
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    job_cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    if mon is not None:
        mon.stop()
    if proc.returncode != 0:
        raise SystemExit(f"example failed with exit code {proc.returncode}")
    return wall, job_cpu, (mon.sample_cpu_s if mon else 0.0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=5, help="runs of each kind")
    p.add_argument("--interval", type=float, default=0.5, help="monitor interval, s")
    p.add_argument("--quick", action="store_true", help="smaller runs, 3 repetitions")
    p.add_argument("--json", default=None, metavar="PATH", help="write the results as JSON")
    args = p.parse_args(argv)
    example_args = ["--epochs", "1", "--samples", "8000"] if args.quick else ["--epochs", "2"]
    reps = 3 if args.quick else args.reps
    plain, monitored, mon_cpu = [], [], []
    job_cpu: dict[bool, list[float]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(reps):
            # Alternate which kind goes first so that a load trend favours neither.
            order = (False, True) if i % 2 == 0 else (True, False)
            for kind in order:
                wall, jcpu, cpu = run_once(example_args, kind, args.interval, Path(tmp))
                (monitored if kind else plain).append(wall)
                job_cpu[kind].append(jcpu)
                if kind:
                    mon_cpu.append(cpu / wall)
                print(f"rep {i + 1}/{reps} {'monitored' if kind else 'plain    '} {wall:7.2f} s "
                      f"wall, {jcpu:7.2f} s job CPU", flush=True)
    med_plain, med_mon = statistics.median(plain), statistics.median(monitored)
    result = {
        "example_args": example_args, "reps": reps, "interval_s": args.interval,
        "plain_wall_s": plain, "monitored_wall_s": monitored,
        "median_plain_s": med_plain, "median_monitored_s": med_mon,
        "overhead_ratio": med_mon / med_plain,
        # Each repetition's two runs are adjacent in time: their ratio cancels slow load drift.
        "paired_ratio_median": statistics.median(m / q for m, q in zip(monitored, plain,
                                                                       strict=True)),
        "job_cpu_ratio": statistics.median(job_cpu[True]) / statistics.median(job_cpu[False]),
        "monitor_cpu_per_wall_s": statistics.median(mon_cpu),
    }
    print(f"median wall without monitor {med_plain:.2f} s, with monitor {med_mon:.2f} s, "
          f"ratio {result['overhead_ratio']:.3f} (goal <= 1.02)")
    print(f"median of per-repetition ratios (adjacent runs): {result['paired_ratio_median']:.3f}")
    print(f"job CPU time with/without monitor (medians): ratio {result['job_cpu_ratio']:.3f}")
    print(f"monitor CPU time per wall second: {1000 * result['monitor_cpu_per_wall_s']:.2f} ms")
    if args.json:
        atomic_write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
