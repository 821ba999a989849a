"""Human-activity-style time-series classification with gradient accumulation.

A 1-D CNN reads 3-axis "accelerometer" windows (synthetic: each activity has its own
rhythm, harmonics and per-axis amplitudes, with per-subject speed and noise). Memory-bound
users train with small micro-batches and accumulate gradients over several of them before
each AdamW step, so the effective batch is ``micro_batch_size * accum_steps``.

    python grad_accum.py --micro-batch-size 16 --accum-steps 4 --epochs 4
"""
import argparse
import math
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

ACTIVITIES = ["walk", "run", "stairs_up", "stairs_down", "sit", "cycle"]


def make_windows(n, length=128, seed=0):
    g = torch.Generator().manual_seed(seed)
    # activity -> base step frequency (Hz at 50 Hz sampling), 2nd-harmonic weight, axis gains
    base_freq = torch.tensor([1.8, 2.8, 1.5, 1.6, 0.3, 1.2])
    harmonic = torch.tensor([0.3, 0.5, 0.8, 0.2, 0.0, 0.1])
    gains = torch.tensor([[1.0, 0.6, 0.3], [1.6, 1.0, 0.5], [0.9, 0.4, 0.9],
                          [0.9, 0.7, 0.6], [0.1, 0.1, 0.1], [0.5, 1.0, 0.2]])
    y = torch.randint(0, len(ACTIVITIES), (n,), generator=g)
    t = torch.arange(length).float() / 50.0
    speed = 1 + 0.25 * torch.randn(n, 1, generator=g)  # subjects move at different paces
    f = base_freq[y][:, None] * speed
    phase = 2 * math.pi * torch.rand(n, 3, 1, generator=g)
    w = 2 * math.pi * f[:, None, :] * t
    signal = torch.sin(w + phase) + harmonic[y][:, None, None] * torch.sin(2 * w + 2 * phase)
    x = gains[y][:, :, None] * signal
    x = x + 0.15 * torch.randn(n, 3, 1, generator=g)           # sensor orientation offset
    x = x + 0.6 * torch.randn(n, 3, length, generator=g)       # sensor noise
    return TensorDataset(x, y)


class ConvClassifier(nn.Module):
    def __init__(self, channels=3, n_classes=6, width=48):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv1d(channels, width, 7, padding=3), nn.BatchNorm1d(width), nn.ReLU(),
            nn.Conv1d(width, width, 5, padding=2), nn.BatchNorm1d(width), nn.ReLU(),
            nn.MaxPool1d(2),
            nn.Conv1d(width, 2 * width, 5, padding=2), nn.BatchNorm1d(2 * width), nn.ReLU(),
            nn.AdaptiveAvgPool1d(1),
        )
        self.fc = nn.Linear(2 * width, n_classes)

    def forward(self, x):
        return self.fc(self.body(x).flatten(1))


def evaluate(model, loader, criterion):
    model.eval()
    total, n = 0.0, 0
    with torch.no_grad():
        for x, y in loader:
            total += criterion(model(x), y).item() * len(y)
            n += len(y)
    model.train()
    return total / n


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--micro-batch-size", type=int, default=16)
    parser.add_argument("--accum-steps", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--n-train", type=int, default=6000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    train_loader = DataLoader(make_windows(args.n_train, seed=1),
                              batch_size=args.micro_batch_size, shuffle=True)
    val_loader = DataLoader(make_windows(1500, seed=2), batch_size=256)

    model = ConvClassifier()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.05)
    criterion = nn.CrossEntropyLoss()
    print(f"effective batch size: {args.micro_batch_size * args.accum_steps} "
          f"({args.micro_batch_size} x {args.accum_steps} accumulation steps)")

    optimizer.zero_grad()
    for epoch in range(args.epochs):
        t0 = time.time()
        running = 0.0
        for step, (x, y) in enumerate(train_loader):
            loss = criterion(model(x), y) / args.accum_steps
            loss.backward()
            running += loss.item()
            if (step + 1) % args.accum_steps == 0 or (step + 1) == len(train_loader):
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
                optimizer.step()
                optimizer.zero_grad()
        val_loss = evaluate(model, val_loader, criterion)
        print(f"Epoch {epoch + 1}: train loss {running * args.accum_steps / len(train_loader):.4f}"
              f" | val loss {val_loss:.4f} | {time.time() - t0:.1f}s")

    print(f"Validation loss: {evaluate(model, val_loader, criterion):.4f}")


if __name__ == "__main__":
    main()
