"""A tiny Transformer language model trained on synthetic token sequences (seconds on two cores).

The tokens come from a random first-order Markov chain over ``--vocab`` symbols (each symbol has
a few likely successors), generated in memory from ``--seed``, so next-token prediction is
learnable: the loss falls from ``log(vocab)`` towards ``log(4)``. The script follows cloudopt's conventions for
training scripts:

- the batch size (sequences per step) comes from ``--batch-size`` if given, else
  ``OPTIMIZER_BATCH_SIZE``, else 32;
- ``OMP_NUM_THREADS`` sets torch's intra-op threads (the runner sets it from the allocation);
- when ``OPTIMIZER_METRICS_CSV`` is set, rows ``step,epoch,samples,loss,samples_per_s`` are
  appended about twice a second (``samples`` is cumulative and counts sequences);
- it prints ``model_name=transformer ... params=N layers=L dataset=...`` and
  ``total_samples=N`` first, then one ``... samples/s`` line per epoch.

``--width`` (model dimension), ``--layers``, ``--samples`` and ``--epochs`` give several model
and job sizes from the same script.
"""

from __future__ import annotations

import argparse
import csv
import os
import time
from pathlib import Path

import torch
from torch import nn


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=2048, help="training sequences per epoch")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=None,
                   help="default: $OPTIMIZER_BATCH_SIZE, else 32")
    p.add_argument("--width", type=int, default=64, help="model dimension d_model")
    p.add_argument("--layers", type=int, default=2, help="encoder layers")
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--log-interval", type=float, default=0.5,
                   help="seconds between metrics rows")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


class TinyLM(nn.Module):
    """Token and position embeddings, a causal Transformer encoder, a norm and a linear head."""

    def __init__(self, vocab: int, width: int, layers: int, seq_len: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.pos = nn.Parameter(torch.zeros(1, seq_len, width))
        layer = nn.TransformerEncoderLayer(width, nhead=max(1, width // 32),
                                           dim_feedforward=4 * width, batch_first=True,
                                           dropout=0.0)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab)
        self.mask = nn.Transformer.generate_square_subsequent_mask(seq_len)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Tokens (N, T) -> next-token logits (N, T, vocab)."""
        t = tokens.shape[1]
        h = self.embed(tokens) + self.pos[:, :t]
        h = self.encoder(h, mask=self.mask[:t, :t].to(tokens.device), is_causal=True)
        return self.head(self.norm(h))


def make_tokens(n: int, seq_len: int, vocab: int, gen: torch.Generator) -> torch.Tensor:
    """Sequences (n, seq_len + 1) from a Markov chain where each symbol has 4 likely successors."""
    successors = torch.randint(0, vocab, (vocab, 4), generator=gen)
    seqs = torch.empty(n, seq_len + 1, dtype=torch.long)
    seqs[:, 0] = torch.randint(0, vocab, (n,), generator=gen)
    for t in range(seq_len):
        choice = torch.randint(0, 4, (n,), generator=gen)
        seqs[:, t + 1] = successors[seqs[:, t], choice]
    return seqs


def metrics_writer(path: str | None):
    """A function that appends one metrics row (the header first if the file is new)."""
    if not path:
        return lambda *row: None
    fields = ["step", "epoch", "samples", "loss", "samples_per_s"]
    new = not Path(path).exists() or Path(path).stat().st_size == 0

    def write(*row: float) -> None:
        nonlocal new
        with open(path, "a", newline="") as fh:
            w = csv.writer(fh)
            if new:
                w.writerow(fields)
                new = False
            w.writerow(row)
            fh.flush()

    return write


def configure_threads() -> None:
    threads = os.environ.get("OMP_NUM_THREADS")
    if threads and threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    configure_threads()
    env_batch = os.environ.get("OPTIMIZER_BATCH_SIZE", "").strip()
    batch_size = args.batch_size or (int(env_batch) if env_batch else 32)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    gen = torch.Generator().manual_seed(args.seed)
    torch.manual_seed(args.seed)
    model = TinyLM(args.vocab, args.width, args.layers, args.seq_len).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    total = args.samples * args.epochs
    print(f"model_name=transformer model_family=Transformer params={n_params} "
          f"layers={args.layers} dataset=synthetic-tokens batch_size={batch_size} "
          f"threads={torch.get_num_threads()}")
    print(f"total_samples={total}", flush=True)
    seqs = make_tokens(args.samples, args.seq_len, args.vocab, gen)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    write = metrics_writer(os.environ.get("OPTIMIZER_METRICS_CSV"))
    step, seen = 0, 0
    win_t, win_seen = time.perf_counter(), 0
    for epoch in range(1, args.epochs + 1):
        order = torch.randperm(args.samples, generator=gen)
        t_epoch, loss_sum, n_batches = time.perf_counter(), 0.0, 0
        for start in range(0, args.samples, batch_size):
            idx = order[start:start + batch_size]
            batch = seqs[idx].to(device)
            logits = model(batch[:, :-1])
            loss = loss_fn(logits.reshape(-1, args.vocab), batch[:, 1:].reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step, seen, n_batches = step + 1, seen + len(idx), n_batches + 1
            loss_sum += float(loss.detach())
            now = time.perf_counter()
            if now - win_t >= args.log_interval:
                write(step, epoch, seen, f"{float(loss.detach()):.5f}",
                      f"{(seen - win_seen) / (now - win_t):.2f}")
                win_t, win_seen = now, seen
        rate = args.samples / (time.perf_counter() - t_epoch)
        print(f"epoch {epoch}/{args.epochs} loss {loss_sum / n_batches:.4f} {rate:.1f} samples/s",
              flush=True)
    now = time.perf_counter()
    if seen > win_seen:
        write(step, args.epochs, seen, f"{float(loss.detach()):.5f}",
              f"{(seen - win_seen) / max(now - win_t, 1e-9):.2f}")


if __name__ == "__main__":
    main()
