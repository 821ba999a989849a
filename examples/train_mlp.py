"""A small real PyTorch training job: an MLP classifier on synthetic tabular data.

This is the example cloudopt optimizes. It shows the three conventions a script can follow to
give the optimizer exact figures (none is required):

* the batch size comes from ``--batch-size`` if given, else ``OPTIMIZER_BATCH_SIZE``, else 128;
* torch uses ``OMP_NUM_THREADS`` intra-op threads (the optimizer sets it per trial);
* when ``OPTIMIZER_METRICS_CSV`` names a file, rows ``step,epoch,samples,loss,samples_per_s``
  are appended to it (``samples`` is cumulative) and flushed, about twice a second.

It also prints ``total_samples=N`` at the start, so the runner knows the size of the whole job,
and one ``... samples/s`` line per epoch for runners that only read stdout. The defaults take
about 10-20 s on two cores.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time

import torch
from torch import nn

METRICS_COLUMNS = ["step", "epoch", "samples", "loss", "samples_per_s"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--samples", type=int, default=20000, help="training rows per epoch")
    p.add_argument("--batch-size", type=int, default=None,
                   help="default: $OPTIMIZER_BATCH_SIZE, else 128")
    p.add_argument("--features", type=int, default=64)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-interval", type=float, default=0.5,
                   help="seconds between metrics rows")
    return p.parse_args(argv)


def resolve_batch_size(arg: int | None) -> int:
    if arg is not None:
        return arg
    env = os.environ.get("OPTIMIZER_BATCH_SIZE", "").strip()
    return int(env) if env else 128


def make_data(n: int, features: int, classes: int, generator: torch.Generator):
    """Synthetic classification data: labels from a fixed random nonlinear teacher.

    Returns X of shape (n, features) float32 and y of shape (n,) int64.
    """
    x = torch.randn(n, features, generator=generator)
    w1 = torch.randn(features, 32, generator=generator)
    w2 = torch.randn(32, classes, generator=generator)
    y = (torch.tanh(x @ w1) @ w2).argmax(dim=1)
    return x, y


def build_model(features: int, hidden: int, classes: int) -> nn.Module:
    return nn.Sequential(
        nn.Linear(features, hidden), nn.ReLU(),
        nn.Linear(hidden, hidden), nn.ReLU(),
        nn.Linear(hidden, classes),
    )


class MetricsWriter:
    """Appends flushed rows to ``$OPTIMIZER_METRICS_CSV`` (a no-op when it is not set)."""

    def __init__(self, path: str | None):
        self._fh = None
        if path:
            new = not os.path.exists(path) or os.path.getsize(path) == 0
            self._fh = open(path, "a", newline="")
            self._writer = csv.writer(self._fh)
            if new:
                self._writer.writerow(METRICS_COLUMNS)
                self._fh.flush()

    def write(self, *row) -> None:
        if self._fh is not None:
            self._writer.writerow(row)
            self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    threads = int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
    if threads > 0:
        torch.set_num_threads(threads)
    batch_size = resolve_batch_size(args.batch_size)
    g = torch.Generator().manual_seed(args.seed)
    x, y = make_data(args.samples, args.features, args.classes, g)
    torch.manual_seed(args.seed)
    model = build_model(args.features, args.hidden, args.classes)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    n_params = sum(p.numel() for p in model.parameters())
    total = args.epochs * args.samples
    print(f"model_name=mlp model_family=MLP params={n_params} layers=3 dataset=synthetic "
          f"batch_size={batch_size} threads={torch.get_num_threads()}")
    print(f"total_samples={total}", flush=True)

    metrics = MetricsWriter(os.environ.get("OPTIMIZER_METRICS_CSV"))
    step, seen = 0, 0
    win_t, win_seen = time.perf_counter(), 0
    for epoch in range(1, args.epochs + 1):
        perm = torch.randperm(args.samples, generator=g)
        t_epoch, seen_epoch, loss_sum, n_batches = time.perf_counter(), 0, 0.0, 0
        for i in range(0, args.samples, batch_size):
            idx = perm[i:i + batch_size]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
            step += 1
            seen += len(idx)
            seen_epoch += len(idx)
            loss_sum += float(loss.detach())
            n_batches += 1
            now = time.perf_counter()
            if now - win_t >= args.log_interval:
                rate = (seen - win_seen) / (now - win_t)
                metrics.write(step, epoch, seen, f"{float(loss.detach()):.5f}", f"{rate:.2f}")
                win_t, win_seen = now, seen
        rate = seen_epoch / (time.perf_counter() - t_epoch)
        print(f"epoch {epoch}/{args.epochs} loss {loss_sum / n_batches:.4f} "
              f"{rate:.1f} samples/s", flush=True)
    now = time.perf_counter()
    if seen > win_seen:
        metrics.write(step, args.epochs, seen, f"{float(loss.detach()):.5f}",
                      f"{(seen - win_seen) / max(now - win_t, 1e-9):.2f}")
    metrics.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
