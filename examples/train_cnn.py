"""A small ConvNet trained on synthetic 32x32 RGB images (CPU or GPU, seconds on two cores).

The images are class-dependent patterns plus noise, generated in memory from ``--seed``, so the
loss really falls and no download is needed. The script follows cloudopt's conventions for
training scripts:

- the batch size comes from ``--batch-size`` if given, else ``OPTIMIZER_BATCH_SIZE``, else 64;
- ``OMP_NUM_THREADS`` sets torch's intra-op threads (the runner sets it from the allocation);
- when ``OPTIMIZER_METRICS_CSV`` is set, rows ``step,epoch,samples,loss,samples_per_s`` are
  appended about twice a second (``samples`` is cumulative);
- it prints ``model_name=cnn ... params=N layers=L dataset=...`` and ``total_samples=N`` first,
  then one ``... samples/s`` line per epoch.

``--width`` (channels of the first conv block), ``--samples`` and ``--epochs`` give several
model and job sizes from the same script.
"""

from __future__ import annotations

import argparse
import csv
import os
import time
from pathlib import Path

import torch
from torch import nn


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=3072, help="training images per epoch")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=None,
                   help="default: $OPTIMIZER_BATCH_SIZE, else 64")
    p.add_argument("--width", type=int, default=16, help="channels of the first conv block")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--log-interval", type=float, default=0.5,
                   help="seconds between metrics rows")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def build_model(width: int = 16, classes: int = 10) -> nn.Sequential:
    """Two conv blocks (conv-BN-ReLU-pool) and a linear head; input (N, 3, 32, 32)."""
    return nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(width, 2 * width, 3, padding=1), nn.BatchNorm2d(2 * width), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(2 * width, 2 * width, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
        nn.Flatten(), nn.Linear(2 * width * 16, classes),
    )


def count_layers(model: nn.Module) -> int:
    """Layers with weights (conv and linear), as model cards count them."""
    return sum(isinstance(m, (nn.Conv2d, nn.Linear)) for m in model.modules())


def make_images(n: int, classes: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Images (n, 3, 32, 32): one fixed random pattern per class plus unit noise; labels (n,)."""
    patterns = torch.randn(classes, 3, 32, 32, generator=gen)
    labels = torch.randint(0, classes, (n,), generator=gen)
    images = patterns[labels] + torch.randn(n, 3, 32, 32, generator=gen)
    return images, labels


def metrics_writer(path: str | None):
    """A function that appends one metrics row (the header first if the file is new)."""
    if not path:
        return lambda *row: None
    fields = ["step", "epoch", "samples", "loss", "samples_per_s"]
    new = not Path(path).exists() or Path(path).stat().st_size == 0

    def write(*row: float) -> None:
        nonlocal new
        with open(path, "a", newline="") as fh:
            w = csv.writer(fh)
            if new:
                w.writerow(fields)
                new = False
            w.writerow(row)
            fh.flush()

    return write


def configure_threads() -> None:
    threads = os.environ.get("OMP_NUM_THREADS")
    if threads and threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    configure_threads()
    env_batch = os.environ.get("OPTIMIZER_BATCH_SIZE", "").strip()
    batch_size = args.batch_size or (int(env_batch) if env_batch else 64)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    gen = torch.Generator().manual_seed(args.seed)
    torch.manual_seed(args.seed)
    model = build_model(args.width, args.classes).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    total = args.samples * args.epochs
    print(f"model_name=cnn model_family=CNN params={n_params} layers={count_layers(model)} "
          f"dataset=synthetic-images batch_size={batch_size} threads={torch.get_num_threads()}")
    print(f"total_samples={total}", flush=True)
    images, labels = make_images(args.samples, args.classes, gen)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    write = metrics_writer(os.environ.get("OPTIMIZER_METRICS_CSV"))
    step, seen = 0, 0
    win_t, win_seen = time.perf_counter(), 0
    for epoch in range(1, args.epochs + 1):
        order = torch.randperm(args.samples, generator=gen)
        t_epoch, loss_sum, n_batches = time.perf_counter(), 0.0, 0
        for start in range(0, args.samples, batch_size):
            idx = order[start:start + batch_size]
            x, y = images[idx].to(device), labels[idx].to(device)
            if torch.rand(1, generator=gen).item() < 0.5:  # flip augmentation
                x = x.flip(3)
            loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step, seen, n_batches = step + 1, seen + len(idx), n_batches + 1
            loss_sum += float(loss.detach())
            now = time.perf_counter()
            if now - win_t >= args.log_interval:
                write(step, epoch, seen, f"{float(loss.detach()):.5f}",
                      f"{(seen - win_seen) / (now - win_t):.2f}")
                win_t, win_seen = now, seen
        rate = args.samples / (time.perf_counter() - t_epoch)
        print(f"epoch {epoch}/{args.epochs} loss {loss_sum / n_batches:.4f} {rate:.1f} samples/s",
              flush=True)
    now = time.perf_counter()
    if seen > win_seen:
        write(step, args.epochs, seen, f"{float(loss.detach()):.5f}",
              f"{(seen - win_seen) / max(now - win_t, 1e-9):.2f}")


if __name__ == "__main__":
    main()
