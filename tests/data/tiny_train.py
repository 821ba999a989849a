"""A training job in miniature for end-to-end tests: seconds, no torch import.

Each step "trains" on a batch by sleeping for the time a data-parallel CPU job would take,
``(alpha + beta * batch) * ((1 - p) + p / threads)`` (Amdahl over the threads it was given), so
its throughput depends on threads and batch size the way a real job's does and the optimizer's
workload model can be fitted to it. It follows the conventions of examples/train_mlp.py:
``OPTIMIZER_BATCH_SIZE``, ``OMP_NUM_THREADS``, rows appended to ``OPTIMIZER_METRICS_CSV``, a
``batch_size=N`` / ``total_samples=N`` header line and a final ``samples/s`` line.
"""

import argparse
import csv
import os
import time

p = argparse.ArgumentParser()
p.add_argument("--samples", type=int, default=6000, help="samples of the whole job")
p.add_argument("--alpha", type=float, default=0.004, help="fixed seconds per step")
p.add_argument("--beta", type=float, default=0.00005, help="seconds per sample")
p.add_argument("--parallel", type=float, default=0.8, help="parallel fraction of a step")
p.add_argument("--buffer-mb", type=int, default=20, help="memory held per 64 samples of batch")
p.add_argument("--workers", type=int, default=2, help="data-loader workers (see --worker-cost)")
p.add_argument("--worker-cost", type=float, default=0.0,
               help="seconds each worker adds to a step (their start-up and hand-off)")
args = p.parse_args()

batch = int(os.environ.get("OPTIMIZER_BATCH_SIZE") or 64)
threads = int(os.environ.get("OMP_NUM_THREADS") or 1)
print(f"model_name=tiny model_family=MLP batch_size={batch} threads={threads}", flush=True)
print(f"total_samples={args.samples}", flush=True)
buffer = bytearray(args.buffer_mb * 1024 * 1024 * batch // 64)  # memory grows with the batch
step_s = (args.alpha + args.beta * batch) * ((1 - args.parallel) + args.parallel / threads)
step_s += args.worker_cost * args.workers
path = os.environ.get("OPTIMIZER_METRICS_CSV")
out = open(path, "a", newline="") if path else None
writer = csv.writer(out) if out else None
if writer:
    writer.writerow(["step", "epoch", "samples", "loss", "samples_per_s"])
start, done, step = time.perf_counter(), 0, 0
while done < args.samples:
    time.sleep(step_s)
    buffer[step % len(buffer)] = step % 256
    done += batch
    step += 1
    if writer and step % 5 == 0:
        writer.writerow([step, 0, done, 1.0 / step, f"{done / (time.perf_counter() - start):.2f}"])
        out.flush()
print(f"{done / (time.perf_counter() - start):.1f} samples/s", flush=True)
