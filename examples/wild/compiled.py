"""A residual MLP classifier sped up with ``torch.compile`` (the PyTorch 2 one-liner).

Everything else is the plain PyTorch loop: a Dataset, DataLoaders, AdamW, cross-entropy.
The first batch pays for compilation (Dynamo tracing, AOTAutograd, Inductor generating and
compiling C++ kernels with the system compiler), and evaluation under ``torch.no_grad()``
compiles an inference graph of its own. Compiled kernels land in Inductor's on-disk cache
(``/tmp/torchinductor_$USER`` by default), so a second run on the same machine compiles far faster.

    python compiled.py --batch-size 128 --epochs 5
"""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class ResidualBlock(nn.Module):
    def __init__(self, dim, expansion=2, dropout=0.1):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, dim * expansion)
        self.fc2 = nn.Linear(dim * expansion, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return x + self.drop(self.fc2(F.gelu(self.fc1(self.norm(x)))))


class ResMLP(nn.Module):
    def __init__(self, in_dim, dim, n_blocks, n_classes):
        super().__init__()
        self.stem = nn.Linear(in_dim, dim)
        self.blocks = nn.Sequential(*[ResidualBlock(dim) for _ in range(n_blocks)])
        self.head = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, n_classes))

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)))


def make_dataset(n, in_dim=32, n_classes=8, seed=0):
    """Each class is a mixture of a few Gaussian clusters in a warped feature space."""
    centers = 0.45 * torch.randn(n_classes * 4, in_dim, generator=torch.Generator().manual_seed(1234))
    g = torch.Generator().manual_seed(seed)
    which = torch.randint(0, n_classes * 4, (n,), generator=g)
    x = centers[which] + torch.randn(n, in_dim, generator=g)
    x = x + 0.3 * torch.sin(2 * x.roll(1, dims=1))
    y = which % n_classes
    return TensorDataset(x, y)


def main():
    parser = argparse.ArgumentParser(description="torch.compile'd ResMLP")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--n-train", type=int, default=40000)
    parser.add_argument("--backend", default="inductor",
                        help='torch.compile backend ("inductor", "aot_eager", ...; "none" = eager)')
    args = parser.parse_args()

    torch.manual_seed(0)
    train_ds = make_dataset(args.n_train, seed=0)
    test_ds = make_dataset(5000, seed=1)
    # drop_last: a ragged final batch would make torch.compile recompile for a new shape
    train_loader = DataLoader(train_ds, batch_size=args.batch_size, shuffle=True, drop_last=True)
    test_loader = DataLoader(test_ds, batch_size=500)

    model = ResMLP(32, args.dim, args.blocks, 8)
    if args.backend != "none":
        model = torch.compile(model, backend=args.backend)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    criterion = nn.CrossEntropyLoss()

    for epoch in range(args.epochs):
        model.train()
        start = time.time()
        total, seen = 0.0, 0
        for x, y in train_loader:
            optimizer.zero_grad(set_to_none=True)
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            total += loss.item() * len(y)
            seen += len(y)
        print(f"epoch {epoch + 1}/{args.epochs}  train loss {total / seen:.4f}  "
              f"({time.time() - start:.1f}s)")

    model.eval()
    total, correct = 0.0, 0
    with torch.no_grad():
        for x, y in test_loader:
            out = model(x)
            total += criterion(out, y).item() * len(y)
            correct += (out.argmax(1) == y).sum().item()
    print(f"eval loss {total / len(test_ds):.4f}  accuracy {correct / len(test_ds):.4f}")


if __name__ == "__main__":
    main()
