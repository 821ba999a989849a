"""ResNet-18-style image classifier on synthetic data, on the GPU (CPU only when told to).

The data are random 64x64 images held on the host and copied per batch with pinned memory, as
a real input pipeline would. Batch size: ``--batch-size`` (argparse default 128).
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.skip = (nn.Sequential() if stride == 1 and cin == cout else
                     nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)))

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        return F.relu(self.b2(self.c2(y)) + self.skip(x))


def resnet18(classes=100):
    layers, cin = [nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU()], 64
    for cout, stride in ((64, 1), (64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1)):
        layers.append(Block(cin, cout, stride))
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes)]
    return nn.Sequential(*layers)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--images", type=int, default=20000)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--cpu", action="store_true", help="run on the CPU (for a smoke test)")
    args = p.parse_args()
    if not args.cpu and not torch.cuda.is_available():
        raise SystemExit("gpu_resnet.py needs CUDA (or --cpu)")
    device = torch.device("cpu" if args.cpu else "cuda")

    g = torch.Generator().manual_seed(0)
    images = torch.randn(args.images, 3, 64, 64, generator=g)
    labels = torch.randint(0, 100, (args.images,), generator=g)
    model = resnet18().to(device).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    scaler_dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    for epoch in range(args.epochs):
        t0, seen = time.time(), 0
        perm = torch.randperm(args.images, generator=g)
        for i in range(0, args.images, args.batch_size):
            idx = perm[i:i + args.batch_size]
            x = images[idx].pin_memory() if device.type == "cuda" else images[idx]
            x = x.to(device, non_blocking=True).to(memory_format=torch.channels_last)
            y = labels[idx].to(device, non_blocking=True)
            with torch.autocast(device.type, dtype=scaler_dtype, enabled=device.type == "cuda"):
                loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            seen += len(idx)
        if device.type == "cuda":
            torch.cuda.synchronize()
        print(f"epoch {epoch + 1}/{args.epochs} loss {loss.item():.3f} "
              f"{seen / (time.time() - t0):.1f} images/sec")


if __name__ == "__main__":
    main()
