"""A tabular transformer trained from rows parsed in the data loader, as such scripts are written.

Each row is a line of comma-separated text (32 numeric columns and 4 categorical ones) that the
``Dataset`` parses, standardises and tokenises in ``__getitem__``: per-row Python work that
``--workers`` data-loader processes take off the training loop. The model embeds every column as
a token and runs two transformer encoder layers over the 36 tokens. It prints a loss line every
``--log-every`` steps and one summary line per epoch, never its job size. Batch size: ``--bs``
(argparse default 64).
"""

import argparse
import math
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

NUMERIC, CATEGORICAL, LEVELS = 32, 4, 16


def make_rows(n, seed=0):
    """CSV-like text rows and a label that depends on a few columns nonlinearly."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, NUMERIC, generator=g)
    c = torch.randint(0, LEVELS, (n, CATEGORICAL), generator=g)
    score = x[:, 0] * x[:, 1] + torch.sin(2 * x[:, 2]) + 0.3 * (c[:, 0] % 3) - 0.5 * x[:, 3].abs()
    y = (score > score.median()).long()
    rows = [",".join([f"{v:.5f}" for v in x[i].tolist()] + [f"k{v}" for v in c[i].tolist()])
            for i in range(n)]
    return rows, y


class Rows(Dataset):
    def __init__(self, rows, labels):
        self.rows, self.labels = rows, labels

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        fields = self.rows[i].split(",")
        num = torch.tensor([float(v) for v in fields[:NUMERIC]])
        num = torch.clamp(num, -4.0, 4.0) / 2.0
        cat = torch.tensor([int(v[1:]) for v in fields[NUMERIC:]])
        # light augmentation: jitter the numbers, drop a category now and then
        num = num + 0.01 * torch.randn(NUMERIC)
        if torch.rand(1).item() < 0.05:
            cat[torch.randint(0, CATEGORICAL, (1,))] = 0
        return num, cat, self.labels[i]


class TabTransformer(nn.Module):
    def __init__(self, dim=64, heads=4, layers=2):
        super().__init__()
        self.num_proj = nn.Parameter(torch.randn(NUMERIC, dim) / math.sqrt(dim))
        self.num_bias = nn.Parameter(torch.zeros(NUMERIC, dim))
        self.cat_emb = nn.Embedding(CATEGORICAL * LEVELS, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=2 * dim, dropout=0.0,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.head = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 2))

    def forward(self, num, cat):
        num_tok = num.unsqueeze(-1) * self.num_proj + self.num_bias
        offsets = torch.arange(CATEGORICAL, device=cat.device) * LEVELS
        cat_tok = self.cat_emb(cat + offsets)
        h = self.encoder(torch.cat([num_tok, cat_tok], dim=1))
        return self.head(h.mean(1))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bs", type=int, default=64)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--rows", type=int, default=12000)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--log-every", type=int, default=20)
    args = p.parse_args()

    torch.manual_seed(0)
    rows, labels = make_rows(args.rows)
    loader = DataLoader(Rows(rows, labels), batch_size=args.bs, shuffle=True,
                        num_workers=args.workers, persistent_workers=args.workers > 0)
    model = TabTransformer()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    step = 0
    for epoch in range(args.epochs):
        t0, seen, loss_sum = time.time(), 0, 0.0
        model.train()
        for num, cat, y in loader:
            loss = F.cross_entropy(model(num, cat), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            seen += len(y)
            loss_sum += loss.item() * len(y)
            if step % args.log_every == 0:
                print(f"step {step} loss {loss.item():.4f}")
        print(f"epoch {epoch + 1} loss {loss_sum / seen:.4f} ({seen / (time.time() - t0):.0f} "
              "samples/s)")


if __name__ == "__main__":
    main()
