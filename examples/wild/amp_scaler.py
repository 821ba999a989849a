"""Mixed-precision training the way most people paste it in: autocast + GradScaler.

A small CNN classifies synthetic 3x32x32 "texture" images (oriented gratings with a colour
tint, random phase and heavy noise). The loop uses ``torch.autocast`` (float16 on CUDA,
bfloat16 on CPU) and ``torch.amp.GradScaler``, scaling the loss before ``backward`` and
stepping through the scaler. On CPU with bfloat16 the scaler has nothing to do, but the code
is the same on both devices, which is why people keep it.

    python amp_scaler.py --batch-size 64 --epochs 3
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


class Gratings(Dataset):
    def __init__(self, n, n_classes=10, size=32, seed=0):
        g = torch.Generator().manual_seed(seed)
        labels = torch.randint(0, n_classes, (n,), generator=g)
        # class -> (orientation, frequency, colour tint); neighbours in angle are confusable
        angle = labels.float() * math.pi / n_classes + 0.15 * torch.randn(n, generator=g)
        freq = 0.25 + 0.08 * (labels % 3).float() + 0.02 * torch.randn(n, generator=g)
        tints = torch.rand(n_classes, 3, generator=torch.Generator().manual_seed(7)) * 0.6 + 0.4
        phase = 2 * math.pi * torch.rand(n, generator=g)

        coords = torch.arange(size).float()
        yy, xx = torch.meshgrid(coords, coords, indexing="ij")
        proj = (xx[None] * torch.cos(angle)[:, None, None]
                + yy[None] * torch.sin(angle)[:, None, None])
        wave = torch.sin(freq[:, None, None] * proj + phase[:, None, None])
        images = wave[:, None] * tints[labels][:, :, None, None]
        images = images + 1.2 * torch.randn(n, 3, size, size, generator=g)
        self.images, self.labels = images, labels

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.images[i], self.labels[i]


class Net(nn.Module):
    def __init__(self, n_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.conv3 = nn.Conv2d(32, 64, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.bn3 = nn.BatchNorm2d(64)
        self.fc1 = nn.Linear(64 * 8 * 8, 128)
        self.fc2 = nn.Linear(128, n_classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.max_pool2d(F.relu(self.bn3(self.conv3(x))), 2)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        return self.fc2(x)


def main():
    parser = argparse.ArgumentParser(description="AMP CNN example")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--n-train", type=int, default=5000)
    parser.add_argument("--n-val", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    amp_dtype = torch.float16 if device == "cuda" else torch.bfloat16

    train_loader = DataLoader(Gratings(args.n_train, seed=0), batch_size=args.batch_size,
                              shuffle=True)
    val_loader = DataLoader(Gratings(args.n_val, seed=1), batch_size=256)

    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    scaler = torch.amp.GradScaler(device)

    for epoch in range(1, args.epochs + 1):
        model.train()
        for batch_idx, (data, target) in enumerate(train_loader):
            data, target = data.to(device), target.to(device)
            optimizer.zero_grad()
            with torch.autocast(device_type=device, dtype=amp_dtype):
                output = model(data)
                loss = F.cross_entropy(output, target)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            if batch_idx % 50 == 0:
                print(f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(train_loader.dataset)}"
                      f" ({100. * batch_idx / len(train_loader):.0f}%)]\tLoss: {loss.item():.6f}")

        model.eval()
        val_loss, correct = 0.0, 0
        with torch.no_grad(), torch.autocast(device_type=device, dtype=amp_dtype):
            for data, target in val_loader:
                data, target = data.to(device), target.to(device)
                output = model(data)
                val_loss += F.cross_entropy(output.float(), target, reduction="sum").item()
                correct += (output.argmax(dim=1) == target).sum().item()
        val_loss /= len(val_loader.dataset)
        print(f"\nValidation set: Average loss: {val_loss:.4f}, "
              f"Accuracy: {correct}/{len(val_loader.dataset)} "
              f"({100. * correct / len(val_loader.dataset):.0f}%)\n")

    print(f"val_loss {val_loss:.4f}")


if __name__ == "__main__":
    main()
