"""Minibatch SGD from scratch: no DataLoader, no torch.optim.

The "write the training loop yourself" style of course notebooks: tensors for the whole
dataset, a fresh random permutation of row indices each epoch, batches sliced out of it,
and the parameter update done by hand under ``torch.no_grad()``.

Data: blurry 28x28 "glyphs" — ten random prototype strokes, each sample shifted by a pixel
or so, rescaled, and covered in noise — flattened to 784 features.

    python sgd_no_loader.py --bs 64 --epochs 5
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--bs", type=int, default=64)
p.add_argument("--epochs", type=int, default=5)
p.add_argument("--lr", type=float, default=0.01)
p.add_argument("--nh", type=int, default=256)
p.add_argument("--n-train", type=int, default=60000)
args = p.parse_args()

torch.manual_seed(42)


def make_glyphs(n, protos, gen):
    c = torch.randint(0, len(protos), (n,), generator=gen)
    x = protos[c]
    # jitter: shift each sample by up to one pixel in each direction
    shifts = torch.randint(-1, 2, (n, 2), generator=gen).tolist()
    x = torch.stack([torch.roll(x[i], shifts[i], dims=(0, 1)) for i in range(n)])
    x = x * (0.7 + 0.6 * torch.rand(n, 1, 1, generator=gen))
    x = x + 1.5 * torch.randn(x.shape, generator=gen)
    return x.view(n, -1), c


gen = torch.Generator().manual_seed(0)
# prototypes: a few random strokes per class, smoothed with a 3x3 box blur
strokes = (torch.rand(10, 1, 28, 28, generator=gen) < 0.08).float()
protos = F.avg_pool2d(strokes, 3, stride=1, padding=1).squeeze(1) * 3

x_train, y_train = make_glyphs(args.n_train, protos, gen)
x_valid, y_valid = make_glyphs(4000, protos, gen)
x_test, y_test = make_glyphs(4000, protos, gen)

# normalize with the training statistics
mean, std = x_train.mean(), x_train.std()
x_train, x_valid, x_test = [(t - mean) / std for t in (x_train, x_valid, x_test)]

n, m = x_train.shape
c = int(y_train.max()) + 1
model = nn.Sequential(nn.Linear(m, args.nh), nn.ReLU(), nn.Linear(args.nh, args.nh // 2),
                      nn.ReLU(), nn.Linear(args.nh // 2, c))
loss_func = F.cross_entropy
lr, bs = args.lr, args.bs


def accuracy(out, yb):
    return (out.argmax(dim=1) == yb).float().mean()


def evaluate(x, y):
    with torch.no_grad():
        out = model(x)
        return loss_func(out, y).item(), accuracy(out, y).item()


for epoch in range(args.epochs):
    idx = torch.randperm(n)
    for i in range(0, n, bs):
        s = idx[i:i + bs]
        xb, yb = x_train[s], y_train[s]
        loss = loss_func(model(xb), yb)
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= lr * p.grad
            model.zero_grad()
    valid_loss, valid_acc = evaluate(x_valid, y_valid)
    print(f"epoch {epoch} loss {valid_loss:.4f} acc {valid_acc:.4f}")

test_loss, test_acc = evaluate(x_test, y_test)
print(f"test_loss: {test_loss:.4f}")
print(f"test_acc: {test_acc:.4f}")
