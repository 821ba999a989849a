"""A denoising autoencoder that prints nothing: the only result is a JSON file.

Batch jobs written for schedulers often stay silent and leave their metrics in a file
(``--out``), e.g. ``{"val_loss": 0.0123}``. The data are 64-dimensional points near a
6-dimensional curved manifold; the model reconstructs clean points from noisy ones.

    python silent.py --batch-size 32 --epochs 6 --out result.json
"""
import argparse
import json
import os
import tempfile

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def manifold_data(n, seed):
    mix = torch.Generator().manual_seed(99)
    a = torch.randn(6, 64, generator=mix) / 6 ** 0.5
    b = torch.randn(6, 64, generator=mix) / 6 ** 0.5
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, 6, generator=g)
    return torch.tanh(z @ a) + 0.5 * torch.sin(z @ b)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--noise", type=float, default=0.3)
    parser.add_argument("--n-train", type=int, default=30000)
    parser.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "silent_result.json"))
    args = parser.parse_args()

    torch.manual_seed(0)
    train = DataLoader(TensorDataset(manifold_data(args.n_train, seed=1)),
                       batch_size=args.batch_size, shuffle=True)
    val_x = manifold_data(4000, seed=2)
    val_noisy = val_x + args.noise * torch.randn(val_x.shape, generator=torch.Generator().manual_seed(3))

    model = nn.Sequential(
        nn.Linear(64, 256), nn.SiLU(), nn.Linear(256, 64), nn.SiLU(), nn.Linear(64, 6),  # encoder
        nn.Linear(6, 64), nn.SiLU(), nn.Linear(64, 256), nn.SiLU(), nn.Linear(256, 64),  # decoder
    )
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.MSELoss()

    for _ in range(args.epochs):
        model.train()
        for (x,) in train:
            noisy = x + args.noise * torch.randn_like(x)
            loss = loss_fn(model(noisy), x)
            opt.zero_grad()
            loss.backward()
            opt.step()

    model.eval()
    with torch.no_grad():
        val_loss = loss_fn(model(val_noisy), val_x).item()

    with open(args.out, "w") as f:
        json.dump({"val_loss": val_loss, "epochs": args.epochs, "batch_size": args.batch_size}, f)


if __name__ == "__main__":
    main()
