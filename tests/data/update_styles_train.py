"""One small regression job, its update written in one of the ways scripts write it
(``--style``): gradient accumulation over a DataLoader, LBFGS with a closure, a GradScaler's
scaled loss, or plain SGD without a loader. 512 samples an epoch."""

import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--style", default="accum", choices=["accum", "lbfgs", "scaler", "noloader"])
parser.add_argument("--batch-size", type=int, default=16)
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()

torch.manual_seed(0)
x = torch.randn(512, 8)
y = x @ torch.randn(8, 1) + 0.1 * torch.randn(512, 1)
model = torch.nn.Linear(8, 1)
loss_fn = torch.nn.MSELoss()
loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True)

if args.style == "accum":  # 4 micro-batches a step
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(args.epochs):
        for i, (xb, yb) in enumerate(loader):
            (loss_fn(model(xb), yb) / 4).backward()
            if (i + 1) % 4 == 0:
                opt.step()
                opt.zero_grad()
elif args.style == "lbfgs":  # several backward passes a step, over one batch
    opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=5)
    for _ in range(args.epochs):
        for xb, yb in loader:
            def closure(xb=xb, yb=yb):
                opt.zero_grad()
                loss = loss_fn(model(xb), yb)
                loss.backward()
                return loss
            opt.step(closure)
elif args.style == "scaler":  # the loss backward sees is multiplied by the scale
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    for _ in range(args.epochs):
        for xb, yb in loader:
            opt.zero_grad()
            scaler.scale(loss_fn(model(xb), yb)).backward()
            scaler.step(opt)
            scaler.update()
else:  # its own batching, a hand-written update
    for _ in range(args.epochs):
        perm = torch.randperm(512)
        for i in range(0, 512, args.batch_size):
            idx = perm[i:i + args.batch_size]
            loss = loss_fn(model(x[idx]), y[idx])
            model.zero_grad()
            loss.backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.05 * p.grad
print(f"final loss {loss_fn(model(x), y).item():.4f}")
