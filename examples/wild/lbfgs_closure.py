# ruff: noqa: B023  (the closure is called inside optimizer.step, within its own iteration)
"""Smooth surrogate regression fitted with mini-batch L-BFGS (scientific-ML style).

A tanh MLP in float64 learns a smooth response surface y = f(x) of 4 inputs (the kind of
surrogate people fit to simulation outputs). ``torch.optim.LBFGS`` needs a closure that
re-evaluates the loss, and calls it several times per ``step`` (line search), so one
"step" costs many forward/backward passes.

    python lbfgs_closure.py --batch-size 512 --epochs 10
"""
import argparse
import math
import time

import torch
import torch.nn as nn

torch.set_default_dtype(torch.float64)


def response(x):
    """The 'simulator': smooth, nonlinear, with interactions."""
    return (torch.sin(math.pi * x[:, 0]) * torch.cos(0.5 * math.pi * x[:, 1])
            + 0.5 * x[:, 2] ** 2 - 0.3 * x[:, 2] * x[:, 3]
            + 0.2 * torch.exp(x[:, 3]) + 0.1 * torch.sin(3 * x[:, 0] * x[:, 1]))


def make_data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = 2 * torch.rand(n, 4, generator=g) - 1
    y = response(x) + 0.01 * torch.randn(n, generator=g)
    return x, y.unsqueeze(1)


class Surrogate(nn.Module):
    def __init__(self, width=64, depth=3):
        super().__init__()
        layers, d = [], 4
        for _ in range(depth):
            layers += [nn.Linear(d, width), nn.Tanh()]
            d = width
        layers.append(nn.Linear(d, 1))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--batch-size', type=int, default=512)
    parser.add_argument('--epochs', type=int, default=10)
    parser.add_argument('--n-train', type=int, default=8192)
    parser.add_argument('--width', type=int, default=64)
    parser.add_argument('--max-iter', type=int, default=20, help='LBFGS iterations per step')
    parser.add_argument('--seed', type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    x_train, y_train = make_data(args.n_train, seed=1)
    x_val, y_val = make_data(2048, seed=2)

    model = Surrogate(args.width)
    optimizer = torch.optim.LBFGS(model.parameters(), lr=1.0, max_iter=args.max_iter,
                                  history_size=10, line_search_fn='strong_wolfe')
    mse = nn.MSELoss()

    n_evals = 0
    for epoch in range(1, args.epochs + 1):
        t0 = time.time()
        perm = torch.randperm(args.n_train)
        running = 0.0
        for i in range(0, args.n_train, args.batch_size):
            idx = perm[i:i + args.batch_size]
            xb, yb = x_train[idx], y_train[idx]

            def closure():
                nonlocal n_evals
                n_evals += 1
                optimizer.zero_grad()
                loss = mse(model(xb), yb)
                loss.backward()
                return loss

            loss = optimizer.step(closure)
            running += loss.item() * len(idx)
        with torch.no_grad():
            val = mse(model(x_val), y_val).item()
        print(f'Epoch {epoch}/{args.epochs} - {time.time() - t0:.1f}s - '
              f'loss: {running / args.n_train:.3e} - val: {val:.3e} - closure calls: {n_evals}')

    with torch.no_grad():
        val_loss = mse(model(x_val), y_val).item()
    print(f'val_loss = {val_loss:.6e}')


if __name__ == '__main__':
    main()
