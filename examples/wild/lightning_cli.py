"""Nonlinear regression with a LightningModule and a LightningDataModule, driven by LightningCLI.

Conventions this script copies (its own code):

* ``LightningCLI(Model, DataModule)`` builds the whole command line from the type-hinted
  ``__init__`` arguments (jsonargparse): no argparse in the script;
* run with a subcommand and a YAML config, as the Lightning docs show:
  ``python lightning_cli.py fit --config conf/lightning_cli.yaml --data.batch_size 64``;
  later flags override the file (``--trainer.max_steps 300``, ``--model.lr 3e-4``);
* the job is a step count (``trainer.max_steps``) with validation every
  ``trainer.val_check_interval`` steps; the loss is only reported through ``self.log``;
* a ``LightningCLI`` subclass with an ``after_fit`` hook runs the test set once fit ends and
  prints ``final test_loss=...``.

The data are a seeded synthetic regression: a smooth nonlinear function of 24 features plus
noise. Adam at a fixed learning rate, so at the same steps a smaller batch ends worse. The
Trainer's root dir (checkpoints, the saved config.yaml) is a temp dir removed at the end.
"""

import tempfile

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from lightning.pytorch.cli import LightningCLI
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class SmoothRegressionData(pl.LightningDataModule):
    """Targets from a fixed random two-layer "teacher" with sin/tanh features, plus noise."""

    def __init__(self, batch_size: int = 32, n_features: int = 24, n_train: int = 12000,
                 n_val: int = 2000, n_test: int = 2000, noise: float = 0.1,
                 num_workers: int = 0, seed: int = 7):
        super().__init__()
        self.save_hyperparameters()

    def _split(self, n, seed):
        hp = self.hparams
        teacher = torch.Generator().manual_seed(hp.seed)
        w1 = torch.randn(hp.n_features, 32, generator=teacher) / hp.n_features ** 0.5
        w2 = torch.randn(32, 1, generator=teacher) / 32 ** 0.5
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(n, hp.n_features, generator=g)
        h = x @ w1
        y = (torch.sin(2.0 * h) + torch.tanh(h) * h) @ w2
        y = y + hp.noise * torch.randn(n, 1, generator=g)
        return TensorDataset(x, y)

    def setup(self, stage=None):
        hp = self.hparams
        self.train_set = self._split(hp.n_train, hp.seed + 1)
        self.val_set = self._split(hp.n_val, hp.seed + 2)
        self.test_set = self._split(hp.n_test, hp.seed + 3)

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.hparams.batch_size, shuffle=True,
                          num_workers=self.hparams.num_workers)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=512)

    def test_dataloader(self):
        return DataLoader(self.test_set, batch_size=512)


class MLPRegressor(pl.LightningModule):
    def __init__(self, n_features: int = 24, hidden: int = 128, depth: int = 3,
                 lr: float = 1e-3):
        super().__init__()
        self.save_hyperparameters()
        layers, width = [], n_features
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.SiLU()]
            width = hidden
        self.net = nn.Sequential(*layers, nn.Linear(width, 1))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.mse_loss(self(x), y), prog_bar=True)

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_loss", F.mse_loss(self(x), y))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


class RegressionCLI(LightningCLI):
    def add_arguments_to_parser(self, parser):
        # one source of truth for the input width
        parser.link_arguments("data.n_features", "model.n_features")

    def after_fit(self):
        results = self.trainer.test(self.model, datamodule=self.datamodule, verbose=False)
        print(f"final test_loss={results[0]['test_loss']:.6f}")


def cli_main():
    with tempfile.TemporaryDirectory(prefix="lightning_cli_") as root:
        RegressionCLI(MLPRegressor, SmoothRegressionData,
                      trainer_defaults={"default_root_dir": root})


if __name__ == "__main__":
    cli_main()
