"""Locate a blob in a noisy image: a small CNN regression trained with Hugging Face Accelerate.

Written like the Accelerate examples: a ``training_function(config, args)``, everything
handed to ``accelerator.prepare``, ``accelerator.backward`` instead of ``loss.backward``,
``gather_for_metrics`` in the eval loop and ``accelerator.print`` for the per-epoch line.
The same file runs unchanged on CPU, one GPU, or under ``accelerate launch``.

    python accelerate_loop.py --batch-size 64 --num-epochs 3
"""

import argparse

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch import nn
from torch.utils.data import DataLoader, Dataset


class BlobImages(Dataset):
    """Grayscale images with one bright Gaussian blob and a fainter distractor, plus noise.

    The target is the (x, y) centre of the bright blob, scaled to [-1, 1].
    """

    def __init__(self, n, size=24, seed=0):
        g = torch.Generator().manual_seed(seed)
        coords = torch.linspace(0, 1, size)
        yy, xx = torch.meshgrid(coords, coords, indexing="ij")
        centre = 0.15 + 0.7 * torch.rand(n, 2, generator=g)
        decoy = 0.15 + 0.7 * torch.rand(n, 2, generator=g)
        width = 0.05 + 0.05 * torch.rand(n, 1, 1, generator=g)

        def blob(c, amp):
            d2 = (xx - c[:, 0, None, None]) ** 2 + (yy - c[:, 1, None, None]) ** 2
            return amp * torch.exp(-d2 / (2 * width**2))

        images = blob(centre, 1.0) + blob(decoy, 0.6)
        images = images + 0.4 * torch.randn(n, size, size, generator=g)
        self.images = images.unsqueeze(1)
        self.targets = centre * 2 - 1

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, idx):
        return {"image": self.images[idx], "target": self.targets[idx]}


class BlobNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
            nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
            nn.MaxPool2d(2),                                  # 12x12
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
            nn.MaxPool2d(2),                                  # 6x6
        )
        self.head = nn.Sequential(
            nn.Flatten(), nn.Linear(32 * 6 * 6, 128), nn.ReLU(), nn.Linear(128, 2),
        )

    def forward(self, x):
        return self.head(self.features(x))


def get_dataloaders(batch_size, train_size, eval_size):
    train_ds = BlobImages(train_size, seed=0)
    eval_ds = BlobImages(eval_size, seed=1)
    train_dataloader = DataLoader(train_ds, shuffle=True, batch_size=batch_size, drop_last=True)
    eval_dataloader = DataLoader(eval_ds, shuffle=False, batch_size=256)
    return train_dataloader, eval_dataloader


def training_function(config, args):
    accelerator = Accelerator(cpu=args.cpu, mixed_precision=args.mixed_precision)
    lr = config["lr"]
    num_epochs = int(config["num_epochs"])
    batch_size = int(config["batch_size"])
    set_seed(config["seed"])

    train_dataloader, eval_dataloader = get_dataloaders(
        batch_size, config["train_size"], config["eval_size"])
    model = BlobNet()
    optimizer = torch.optim.AdamW(params=model.parameters(), lr=lr)
    criterion = nn.MSELoss()

    model, optimizer, train_dataloader, eval_dataloader = accelerator.prepare(
        model, optimizer, train_dataloader, eval_dataloader
    )

    for epoch in range(num_epochs):
        model.train()
        for batch in train_dataloader:
            outputs = model(batch["image"])
            loss = criterion(outputs, batch["target"])
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()

        model.eval()
        total, count = 0.0, 0
        for batch in eval_dataloader:
            with torch.no_grad():
                outputs = model(batch["image"])
            predictions, references = accelerator.gather_for_metrics((outputs, batch["target"]))
            total += nn.functional.mse_loss(predictions, references, reduction="sum").item()
            count += references.numel()
        eval_loss = total / count
        accelerator.print(f"epoch {epoch}: eval_loss={eval_loss:.4f}")

    accelerator.end_training()


def main():
    parser = argparse.ArgumentParser(description="Simple example of training script.")
    parser.add_argument(
        "--mixed_precision",
        type=str,
        default=None,
        choices=["no", "fp16", "bf16", "fp8"],
        help="Whether to use mixed precision. Choose between fp16 and bf16 (bfloat16).",
    )
    parser.add_argument("--cpu", action="store_true", help="If passed, will train on the CPU.")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--num-epochs", type=int, default=3)
    parser.add_argument("--train-size", type=int, default=10000)
    args = parser.parse_args()
    config = {"lr": 1e-3, "num_epochs": args.num_epochs, "seed": 42,
              "batch_size": args.batch_size, "train_size": args.train_size,
              "eval_size": 2000}
    training_function(config, args)


if __name__ == "__main__":
    main()
