"""Two-tower recommender with a large item-embedding table and a dataset cached in memory.

Memory, not compute, sets this job's size: the item table with its Adam state and the cached
interaction features take about 2 GB whatever the batch size, so the memory request is a real
share of the bill. Batch size: ``--batch-size`` (argparse default 512).
"""

import argparse
import time

import torch
from torch import nn


class TwoTower(nn.Module):
    def __init__(self, items, users, dim, features):
        super().__init__()
        self.items = nn.Embedding(items, dim, sparse=True)
        self.users = nn.Embedding(users, dim, sparse=True)
        self.user_mlp = nn.Sequential(nn.Linear(dim + features, 128), nn.ReLU(), nn.Linear(128, dim))

    def forward(self, user, item, feats):
        u = self.user_mlp(torch.cat([self.users(user), feats], dim=1))
        return (u * self.items(item)).sum(1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--items", type=int, default=2_000_000)
    p.add_argument("--users", type=int, default=50_000)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--interactions", type=int, default=400_000)
    p.add_argument("--features", type=int, default=256)
    p.add_argument("--train-fraction", type=float, default=1.0,
                   help="share of the cached interactions trained on per epoch")
    p.add_argument("--epochs", type=int, default=2)
    args = p.parse_args()

    g = torch.Generator().manual_seed(0)
    # the cached dataset: ids, dense context features and click labels, all held in memory
    users = torch.randint(0, args.users, (args.interactions,), generator=g)
    items = torch.randint(0, args.items, (args.interactions,), generator=g)
    feats = torch.randn(args.interactions, args.features, generator=g)
    labels = (feats[:, 0] + 0.5 * torch.randn(args.interactions, generator=g) > 0).float()
    model = TwoTower(args.items, args.users, args.dim, args.features)
    # sparse rows for the tables (only the rows a batch touches are updated), dense for the MLP
    sparse = [model.items.weight, model.users.weight]
    opts = [torch.optim.SparseAdam(sparse, lr=1e-3),
            torch.optim.Adam(model.user_mlp.parameters(), lr=1e-3)]
    n_train = int(args.interactions * args.train_fraction)
    print(f"items={args.items} dim={args.dim} cached={args.interactions} rows, "
          f"{n_train} per epoch")
    for epoch in range(args.epochs):
        t0, seen, loss_sum = time.time(), 0, 0.0
        order = torch.randperm(args.interactions, generator=g)[:n_train]
        for i in range(0, n_train, args.batch_size):
            idx = order[i:i + args.batch_size]
            score = model(users[idx], items[idx], feats[idx])
            loss = nn.functional.binary_cross_entropy_with_logits(score, labels[idx])
            for opt in opts:
                opt.zero_grad()
            loss.backward()
            for opt in opts:
                opt.step()
            seen += len(idx)
            loss_sum += loss.item() * len(idx)
        print(f"epoch {epoch + 1}: loss {loss_sum / seen:.4f}, "
              f"{seen / (time.time() - t0):.1f} samples/s")


if __name__ == "__main__":
    main()
