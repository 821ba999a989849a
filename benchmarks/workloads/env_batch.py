"""Denoising autoencoder on synthetic sensor data; the batch size comes from ``$BATCH_SIZE``.

Written the way many cluster job scripts are: no command-line flag for the batch size, which
the launcher sets through an environment variable (default 256). Nothing else in the script
reads ``OPTIMIZER_BATCH_SIZE``.
"""

import argparse
import math
import os
import time

import torch
from torch import nn

BATCH_SIZE = int(os.environ.get("BATCH_SIZE", "256"))


def sensor_data(n, channels=96, seed=0):
    g = torch.Generator().manual_seed(seed)
    t = torch.linspace(0, 8 * math.pi, channels)
    freq = torch.rand(n, 1, generator=g) * 3 + 0.5
    phase = torch.rand(n, 1, generator=g) * 2 * math.pi
    return torch.sin(freq * t + phase) + 0.1 * torch.randn(n, channels, generator=g)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=60000)
    p.add_argument("--epochs", type=int, default=3)
    args = p.parse_args()

    torch.manual_seed(0)
    x = sensor_data(args.rows)
    model = nn.Sequential(
        nn.Linear(96, 768), nn.GELU(), nn.Linear(768, 256), nn.GELU(), nn.Linear(256, 32),
        nn.GELU(), nn.Linear(32, 256), nn.GELU(), nn.Linear(256, 768), nn.GELU(),
        nn.Linear(768, 96))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
    for epoch in range(args.epochs):
        t0, total = time.time(), 0.0
        perm = torch.randperm(args.rows)
        for i in range(0, args.rows, BATCH_SIZE):
            clean = x[perm[i:i + BATCH_SIZE]]
            noisy = clean + 0.3 * torch.randn_like(clean)
            loss = nn.functional.mse_loss(model(noisy), clean)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(clean)
        dt = time.time() - t0
        print(f"epoch {epoch + 1}/{args.epochs} train_loss={total / args.rows:.4f} "
              f"{args.rows / dt:.0f} samples/s")


if __name__ == "__main__":
    main()
