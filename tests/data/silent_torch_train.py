"""A PyTorch job that prints nothing at all: no rate, no job size, no batch size. Its batch
comes from ``--bs`` (argparse default 128) and its length from ``--epochs`` (default 2) over a
DataLoader of 2048 samples (steps of about 10 ms, which a second thread speeds up); only
the in-process probe can see how fast it goes."""

import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--bs", type=int, default=128)
parser.add_argument("--epochs", type=int, default=2)
opts = parser.parse_args()

torch.manual_seed(0)
x = torch.randn(2048, 512)
y = (x[:, :8].sum(1) > 0).long()
model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(),
                            torch.nn.Linear(2048, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for _ in range(opts.epochs):
    for xb, yb in DataLoader(TensorDataset(x, y), batch_size=opts.bs, shuffle=True):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()
