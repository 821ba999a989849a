"""Time-series classification with a 1-D CNN, configured the Hydra way.

Conventions this script copies (its own code):

* ``@hydra.main(config_path="conf", config_name="hydra_style", version_base=None)`` over a
  nested YAML config (``conf/hydra_style.yaml``: ``data``, ``model``, ``optim``, ``trainer``);
* overrides on the command line are ``key=value`` with no dashes (``data.batch_size=128``,
  ``trainer.max_epochs=3``), and ``+key=value`` adds a key the file lacks
  (``+trainer.log_every=20``);
* the resolved config is printed with ``OmegaConf.to_yaml`` at start, settings are read as
  attributes (``cfg.optim.lr``), and optional keys with ``cfg.get``;
* Hydra's run folder, ``.hydra/`` copies and log files are switched off in the YAML
  (``hydra.run.dir`` under the temp dir, ``hydra.output_subdir: null``, logging disabled,
  ``hydra.job.chdir: false``), so nothing is written into the working directory.

The data are seeded synthetic series: each class is a mixture of two class-specific
frequencies with random phase and amplitude, plus heavy noise. SGD with momentum at a fixed
learning rate, so a larger batch takes fewer steps per epoch and ends at a higher loss.

    python hydra_style.py data.batch_size=128 trainer.max_epochs=3
"""

import math
import time

import hydra
import torch
import torch.nn as nn
import torch.nn.functional as F
from omegaconf import DictConfig, OmegaConf
from torch.utils.data import DataLoader, TensorDataset

N_CLASSES = 5


def make_series(n, length, noise, seed):
    g = torch.Generator().manual_seed(seed)
    base = torch.Generator().manual_seed(1234)  # the classes are the same in every split
    freqs = 1.0 + 6.0 * torch.rand(N_CLASSES, 2, generator=base)
    labels = torch.randint(N_CLASSES, (n,), generator=g)
    t = torch.linspace(0, 2 * math.pi, length)
    phase = 2 * math.pi * torch.rand(n, 2, 1, generator=g)
    amp = 0.5 + torch.rand(n, 2, 1, generator=g)
    f = freqs[labels].unsqueeze(-1)  # (n, 2, 1)
    x = (amp * torch.sin(f * t + phase)).sum(1)
    x = x + noise * torch.randn(n, length, generator=g)
    return x.unsqueeze(1), labels  # (n, 1, length)


class ConvNet(nn.Module):
    def __init__(self, channels, kernel_size):
        super().__init__()
        pad = kernel_size // 2
        self.conv1 = nn.Conv1d(1, channels, kernel_size, padding=pad)
        self.conv2 = nn.Conv1d(channels, channels, kernel_size, padding=pad)
        self.conv3 = nn.Conv1d(channels, 2 * channels, kernel_size, padding=pad)
        self.fc = nn.Linear(2 * channels, N_CLASSES)

    def forward(self, x):
        x = F.max_pool1d(F.relu(self.conv1(x)), 2)
        x = F.max_pool1d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.conv3(x))
        return self.fc(x.mean(-1))


def evaluate(model, loader, device):
    model.eval()
    total, n, correct = 0.0, 0, 0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            logits = model(x)
            total += F.cross_entropy(logits, y, reduction="sum").item()
            correct += (logits.argmax(1) == y).sum().item()
            n += len(y)
    model.train()
    return total / n, correct / n


def build_optimizer(cfg, params):
    if cfg.name == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum,
                               weight_decay=cfg.weight_decay)
    if cfg.name == "adam":
        return torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    raise ValueError(f"unknown optimizer {cfg.name!r}")


@hydra.main(config_path="conf", config_name="hydra_style", version_base=None)
def main(cfg: DictConfig) -> float:
    print(OmegaConf.to_yaml(cfg))
    torch.manual_seed(cfg.seed)
    device = torch.device(cfg.trainer.device)

    d = cfg.data
    train = TensorDataset(*make_series(d.n_train, d.length, d.noise, cfg.seed + 1))
    val = TensorDataset(*make_series(d.n_val, d.length, d.noise, cfg.seed + 2))
    test = TensorDataset(*make_series(d.n_test, d.length, d.noise, cfg.seed + 3))
    train_loader = DataLoader(train, batch_size=d.batch_size, shuffle=True,
                              num_workers=d.num_workers)
    val_loader = DataLoader(val, batch_size=256)
    test_loader = DataLoader(test, batch_size=256)

    model = ConvNet(cfg.model.channels, cfg.model.kernel_size).to(device)
    optimizer = build_optimizer(cfg.optim, model.parameters())
    log_every = cfg.trainer.get("log_every", 0)  # only with +trainer.log_every=N

    step = 0
    for epoch in range(cfg.trainer.max_epochs):
        start = time.time()
        running, seen = 0.0, 0
        for x, y in train_loader:
            x, y = x.to(device), y.to(device)
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            running += loss.item() * len(y)
            seen += len(y)
            step += 1
            if log_every and step % log_every == 0:
                print(f"  step {step}: loss {loss.item():.4f}")
        val_loss, val_acc = evaluate(model, val_loader, device)
        print(f"epoch {epoch + 1}/{cfg.trainer.max_epochs}  train_loss={running / seen:.4f}  "
              f"val_loss={val_loss:.4f}  val_acc={val_acc:.3f}  ({time.time() - start:.1f}s)")

    test_loss, test_acc = evaluate(model, test_loader, device)
    print(f"final test_loss={test_loss:.4f} test_acc={test_acc:.3f}")
    return test_loss


if __name__ == "__main__":
    main()
