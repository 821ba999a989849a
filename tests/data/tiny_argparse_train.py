"""A miniature job whose batch size comes only from ``--batch-size`` (argparse default 48): it
ignores ``OPTIMIZER_BATCH_SIZE`` and never prints its batch, like most scripts users bring.
Steps sleep ``(alpha + beta * batch) * ((1 - p) + p / threads)`` seconds; no torch import."""

import argparse
import os
import time

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=48)
parser.add_argument("--samples", type=int, default=9000)
opts = parser.parse_args()

threads = int(os.environ.get("OMP_NUM_THREADS") or 1)
seconds_per_step = (0.004 + 0.00005 * opts.batch_size) * (0.2 + 0.8 / threads)
begin, seen = time.perf_counter(), 0
print(f"total_samples={opts.samples}", flush=True)
while seen < opts.samples:
    time.sleep(seconds_per_step)
    seen += opts.batch_size
print(f"{seen / (time.perf_counter() - begin):.1f} samples/s", flush=True)
