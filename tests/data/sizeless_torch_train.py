"""A PyTorch job whose size no one can see: it prints nothing and slices its own batches from
a tensor (no DataLoader), so neither its output nor the in-process probe tells how many
samples the whole job makes. The batch comes from ``--bs`` (default 64), the length from
``--epochs`` (default 10) over 4096 samples."""

import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--bs", type=int, default=64)
parser.add_argument("--epochs", type=int, default=10)
opts = parser.parse_args()

torch.manual_seed(0)
x = torch.randn(4096, 512)
y = (x[:, :8].sum(1) > 0).long()
model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(),
                            torch.nn.Linear(1024, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for _ in range(opts.epochs):
    order = torch.randperm(len(x))
    for i in range(0, len(x), opts.bs):
        idx = order[i:i + opts.bs]
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()
