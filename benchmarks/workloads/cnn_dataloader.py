"""Small CNN on synthetic images served by a DataLoader with worker processes and augmentation.

A typical image-classification script: a ``Dataset`` that builds each 40x40 image on the fly
(class pattern + noise), random crop, flip and brightness jitter in ``__getitem__``, a
``DataLoader`` with ``--workers`` processes. Per-sample Python work makes it data-loading bound
on few cores. Batch size: ``--batch-size`` (argparse default 64).
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SyntheticImages(Dataset):
    def __init__(self, n, classes=10, size=40, crop=32, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.patterns = torch.randn(classes, 3, size, size, generator=g)
        self.labels = torch.randint(0, classes, (n,), generator=g)
        self.n, self.size, self.crop, self.seed = n, size, crop, seed

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        label = int(self.labels[i])
        img = self.patterns[label] + 0.8 * torch.randn(3, self.size, self.size, generator=g)
        # augmentation: random crop, horizontal flip, brightness/contrast jitter
        top, left = torch.randint(0, self.size - self.crop + 1, (2,), generator=g).tolist()
        img = img[:, top:top + self.crop, left:left + self.crop]
        if torch.rand(1, generator=g).item() < 0.5:
            img = img.flip(-1)
        scale, shift = 1 + 0.2 * (torch.rand(2, generator=g) - 0.5)
        img = (img - img.mean()) * scale + img.mean() + shift
        img = F.avg_pool2d(img.unsqueeze(0), 3, stride=1, padding=1).squeeze(0)  # blur
        return img, label


class Net(nn.Module):
    def __init__(self, classes=10, width=24):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.BatchNorm2d(2 * width), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(2 * width, 2 * width, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2))
        self.head = nn.Linear(8 * width, classes)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--train-size", type=int, default=6000)
    p.add_argument("--lr", type=float, default=0.01)
    args = p.parse_args()

    torch.manual_seed(0)
    data = SyntheticImages(args.train_size)
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True,
                        num_workers=args.workers, persistent_workers=args.workers > 0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    print(f"training on {len(data)} images, batch {args.batch_size}, {args.workers} workers")
    for epoch in range(args.epochs):
        t0, seen, correct, loss_sum = time.time(), 0, 0, 0.0
        for x, y in loader:
            opt.zero_grad()
            out = model(x)
            loss = F.cross_entropy(out, y)
            loss.backward()
            opt.step()
            seen += len(y)
            loss_sum += loss.item() * len(y)
            correct += (out.argmax(1) == y).sum().item()
        dt = time.time() - t0
        print(f"epoch {epoch + 1}/{args.epochs}  loss {loss_sum / seen:.3f}  "
              f"acc {correct / seen:.3f}  {seen / dt:.1f} img/s")


if __name__ == "__main__":
    main()
