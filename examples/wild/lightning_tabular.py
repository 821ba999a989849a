"""Tabular classification with PyTorch Lightning.

A LightningModule over a synthetic 20,000-row table (numeric features plus a couple of
one-hot categorical columns), trained with the stock ``pl.Trainer``: progress bar on, loss
only reported through ``self.log``, and a final ``trainer.validate`` that prints the usual
metrics table.

    python lightning_tabular.py --batch-size 64 --max-epochs 4
"""

import argparse
import tempfile

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split


def make_table(rows: int, seed: int = 0):
    """Numeric columns, two categorical columns (one-hot), labels from a hidden rule + noise."""
    g = torch.Generator().manual_seed(seed)
    num = torch.randn(rows, 12, generator=g)
    region = torch.randint(0, 5, (rows,), generator=g)
    plan = torch.randint(0, 3, (rows,), generator=g)
    x = torch.cat([num, F.one_hot(region, 5).float(), F.one_hot(plan, 3).float()], dim=1)

    w = torch.randn(12, 4, generator=g)
    score = torch.tanh(num @ w) @ torch.randn(4, 4, generator=g)
    score = score + 0.8 * torch.randn(5, 4, generator=g)[region]
    score = score + 0.5 * (num[:, :1] * num[:, 1:2]) * torch.randn(3, 4, generator=g)[plan]
    score = score + 0.6 * torch.randn(rows, 4, generator=g)  # label noise
    y = score.argmax(dim=1)
    return TensorDataset(x, y)


class TabularClassifier(pl.LightningModule):
    def __init__(self, in_features: int = 20, hidden: int = 256, num_classes: int = 4,
                 lr: float = 0.01, dropout: float = 0.1):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(
            nn.Linear(in_features, hidden),
            nn.BatchNorm1d(hidden),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(hidden, hidden),
            nn.BatchNorm1d(hidden),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(hidden, hidden // 2),
            nn.ReLU(),
            nn.Linear(hidden // 2, num_classes),
        )

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        acc = (logits.argmax(dim=1) == y).float().mean()
        self.log("val_loss", loss, prog_bar=True)
        self.log("val_acc", acc, prog_bar=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-epochs", type=int, default=4)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--root-dir", default=None,
                        help="where Lightning writes logs/checkpoints (default: a temp dir)")
    args = parser.parse_args()

    pl.seed_everything(args.seed)

    dataset = make_table(args.rows)
    n_val = len(dataset) // 5
    train_set, val_set = random_split(dataset, [len(dataset) - n_val, n_val],
                                      generator=torch.Generator().manual_seed(args.seed))
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True,
                              num_workers=args.num_workers)
    val_loader = DataLoader(val_set, batch_size=256, num_workers=args.num_workers)

    model = TabularClassifier(lr=args.lr, hidden=args.hidden)

    with tempfile.TemporaryDirectory(prefix="lightning_tabular_") as tmp:
        trainer = pl.Trainer(
            max_epochs=args.max_epochs,
            accelerator="auto",
            devices=1,
            default_root_dir=args.root_dir or tmp,
            log_every_n_steps=20,
        )
        trainer.fit(model, train_loader, val_loader)
        results = trainer.validate(model, val_loader)

    print(f"final val_loss={results[0]['val_loss']:.4f}")


if __name__ == "__main__":
    main()
