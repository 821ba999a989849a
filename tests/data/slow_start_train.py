"""A job whose first step waits ``--startup`` seconds, as a ``torch.compile`` of the model
does at its first forward pass; then quick SGD steps over a DataLoader, epoch after epoch."""

import argparse
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--batch-size", type=int, default=32)
p.add_argument("--startup", type=float, default=4.0, help="seconds the first step waits")
p.add_argument("--epochs", type=int, default=200)
args = p.parse_args()

torch.manual_seed(0)
x, y = torch.randn(2048, 16), torch.randn(2048, 1)
model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
first = True
for _ in range(args.epochs):
    for xb, yb in DataLoader(TensorDataset(x, y), batch_size=args.batch_size):
        if first:  # the compile
            time.sleep(args.startup)
            first = False
        loss = ((model(xb) - yb) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(0.002)
