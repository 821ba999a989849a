"""Classification with an MLP that checkpoints often, as jobs on preemptible machines do.

Every ``--ckpt-every`` steps the model, optimizer and RNG state are serialised with
``torch.save``, compressed with zlib (one thread), checksummed and written to the checkpoint
folder, where only the newest ``--keep`` are kept. Training itself is matrix multiplies that
use torch's intra-op threads. Checkpoints go to ``--out`` (default: a temporary folder); the
files this run wrote are removed when it exits.

    python checkpoint_heavy.py [--samples 16384] [--epochs 10] [--batch-size 256] \\
        [--ckpt-every 64] [--out DIR]
"""

import argparse
import hashlib
import io
import json
import os
import shutil
import tempfile
import zlib
from pathlib import Path

import torch
from torch import nn


def make_data(n, dim, classes, generator):
    teacher = nn.Sequential(nn.Linear(dim, 256), nn.Tanh(), nn.Linear(256, classes))
    x = torch.randn(n, dim, generator=generator)
    with torch.no_grad():
        y = teacher(x).argmax(-1)
    return x, y


def save_checkpoint(folder, model, opt, epoch, step, keep, level):
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                "epoch": epoch, "step": step, "rng": torch.get_rng_state()}, buf)
    raw = buf.getvalue()
    packed = zlib.compress(raw, level)
    path = folder / f"ckpt-{step:06d}.pt.zz"
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(packed)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)
    meta = {"step": step, "epoch": epoch, "bytes": len(raw), "compressed": len(packed),
            "sha256": hashlib.sha256(packed).hexdigest()}
    (folder / "latest.json").write_text(json.dumps(meta))
    for old in sorted(folder.glob("ckpt-*.pt.zz"))[:-keep]:
        old.unlink()
    return path, len(packed)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--samples", type=int, default=16384)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--classes", type=int, default=16)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--ckpt-every", type=int, default=64, help="steps between checkpoints")
    p.add_argument("--keep", type=int, default=2, help="checkpoints kept on disk")
    p.add_argument("--compress-level", type=int, default=6)
    p.add_argument("--out", default=None, help="checkpoint folder (default: a temporary one)")
    args = p.parse_args()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    x, y = make_data(args.samples, args.dim, args.classes, g)
    model = nn.Sequential(nn.Linear(args.dim, args.hidden), nn.ReLU(),
                          nn.Linear(args.hidden, args.hidden), nn.ReLU(),
                          nn.Linear(args.hidden, args.hidden), nn.ReLU(),
                          nn.Linear(args.hidden, args.classes))
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)

    made_folder = args.out is None or not Path(args.out).exists()
    folder = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="ckpt-"))
    folder.mkdir(parents=True, exist_ok=True)
    step, loss = 0, float("nan")
    try:
        for epoch in range(args.epochs):
            model.train()
            perm = torch.randperm(len(x))
            for i in range(0, len(x), args.batch_size):
                idx = perm[i:i + args.batch_size]
                opt.zero_grad()
                out = model(x[idx])
                loss_t = nn.functional.cross_entropy(out, y[idx])
                loss_t.backward()
                opt.step()
                step += 1
                loss = loss_t.item()
                if step % 20 == 0:
                    print(f"epoch {epoch} step {step} loss {loss:.4f}", flush=True)
                if step % args.ckpt_every == 0:
                    path, size = save_checkpoint(folder, model, opt, epoch, step, args.keep,
                                                 args.compress_level)
                    print(f"saved {path.name} ({size / 2**20:.1f} MiB)", flush=True)
        print(f"done: {args.epochs} epochs, {step} steps, final loss {loss:.4f}")
    finally:
        if made_folder:
            shutil.rmtree(folder, ignore_errors=True)
        else:
            for f in list(folder.glob("ckpt-*.pt.zz")) + list(folder.glob("ckpt-*.tmp")):
                f.unlink(missing_ok=True)
            (folder / "latest.json").unlink(missing_ok=True)


if __name__ == "__main__":
    main()
