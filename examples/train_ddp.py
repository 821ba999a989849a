"""A data-parallel PyTorch job as its users write it: launched by ``torchrun``, one process per
worker, ``DistributedDataParallel`` over gloo on CPU (NCCL on GPU), a ``DistributedSampler``.

Run it as its users do::

    torchrun --nproc-per-node 2 examples/train_ddp.py --batch-size 64

and let cloudopt choose the number of workers and the per-worker batch::

    python -m optimizer --train-file examples/train_ddp.py --launcher torchrun --workers-max 2

It follows none of cloudopt's conventions: ``--batch-size`` is the per-worker batch (the global
batch is that times the world size), and at the end rank 0 prints the samples all ranks trained
on (``global samples trained: N``, an all-reduced count) and the held-out loss (``test loss``).
A single process without ``torchrun`` runs it as a world of one.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--samples", type=int, default=32768, help="training rows")
    p.add_argument("--batch-size", type=int, default=64, help="per worker")
    p.add_argument("--features", type=int, default=64)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def make_data(n: int, features: int, classes: int, seed: int, rows_seed: int) -> TensorDataset:
    """Synthetic classification rows labelled by a fixed random teacher (``seed``; the same on
    every rank and for the held-out rows, which ``rows_seed`` draws)."""
    g = torch.Generator().manual_seed(seed)
    w1 = torch.randn(features, 32, generator=g)
    w2 = torch.randn(32, classes, generator=g)
    x = torch.randn(n, features, generator=torch.Generator().manual_seed(rows_seed))
    y = (torch.tanh(x @ w1) @ w2).argmax(dim=1)
    return TensorDataset(x, y)


def setup() -> tuple[int, int, torch.device]:
    """(rank, world size, device): the process group from torchrun's variables, if any."""
    if "RANK" not in os.environ:
        return 0, 1, torch.device("cpu")
    gpu = torch.cuda.is_available()
    dist.init_process_group("nccl" if gpu else "gloo")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if gpu:
        torch.cuda.set_device(local)
    return dist.get_rank(), dist.get_world_size(), torch.device(f"cuda:{local}" if gpu else "cpu")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rank, world, device = setup()
    torch.manual_seed(args.seed)
    train = make_data(args.samples, args.features, args.classes, args.seed, args.seed + 1)
    test = make_data(4096, args.features, args.classes, args.seed, args.seed + 2)
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, seed=args.seed,
                                 drop_last=True)
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    model = nn.Sequential(nn.Linear(args.features, args.hidden), nn.ReLU(),
                          nn.Linear(args.hidden, args.hidden), nn.ReLU(),
                          nn.Linear(args.hidden, args.classes)).to(device)
    if world > 1:
        model = DistributedDataParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    if rank == 0:
        print(f"world_size={world} per-worker batch={args.batch_size} "
              f"global batch={args.batch_size * world}", flush=True)

    seen, start = 0, time.perf_counter()
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        for step, (x, y) in enumerate(loader):
            x, y = x.to(device), y.to(device)
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            seen += len(x)
            if rank == 0 and step % 50 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}", flush=True)

    model.eval()
    with torch.no_grad():
        x, y = test.tensors
        test_loss = loss_fn(model(x.to(device)), y.to(device))
    totals = torch.tensor([float(seen)], device=device)
    if world > 1:
        dist.all_reduce(totals)
    if rank == 0:
        elapsed = time.perf_counter() - start
        print(f"global samples trained: {int(totals.item())} in {elapsed:.1f} s", flush=True)
        print(f"test loss {test_loss.item():.4f}", flush=True)
    if world > 1:
        # Every rank leaves together: a rank tearing gloo down after rank 0 (which hosts the
        # rendezvous store) has exited can abort in its destructor.
        dist.barrier()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
