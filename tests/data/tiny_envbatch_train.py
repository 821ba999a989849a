"""A miniature job whose batch size comes only from its own ``$BATCH_SIZE`` (default 40), as
cluster launchers set it: no batch flag, and it ignores ``OPTIMIZER_BATCH_SIZE``.
Steps sleep ``(alpha + beta * batch) * ((1 - p) + p / threads)`` seconds; no torch import."""

import os
import sys
import time

batch = int(os.environ.get("BATCH_SIZE", "40"))
samples = int(sys.argv[sys.argv.index("--samples") + 1]) if "--samples" in sys.argv else 8000

threads = int(os.environ.get("OMP_NUM_THREADS") or 1)
seconds_per_step = (0.004 + 0.00005 * batch) * (0.2 + 0.8 / threads)
begin, seen = time.perf_counter(), 0
print(f"total_samples={samples}", flush=True)
while seen < samples:
    time.sleep(seconds_per_step)
    seen += batch
print(f"ran with batch {batch}", flush=True)
print(f"{seen / (time.perf_counter() - begin):.1f} samples/s", flush=True)
