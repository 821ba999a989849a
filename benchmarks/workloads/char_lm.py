"""Character-level language model (2-layer LSTM) on a generated text corpus.

The corpus is sentences drawn from a small grammar, so the model has structure to learn and no
download is needed. Batch size: ``--batch-size`` (argparse default 32); the job is a fixed
number of epochs over ``--sequences`` windows of ``--seq-len`` characters.
"""

import argparse
import random
import time

import torch
from torch import nn

SUBJECTS = ["the cat", "a dog", "my friend", "the old man", "every student", "she", "they"]
VERBS = ["sees", "likes", "writes about", "runs past", "remembers", "paints", "finds"]
OBJECTS = ["the river", "a red house", "two birds", "the long road", "her book", "the sea"]
ENDINGS = [".", "!", " at night.", " every day.", " again.", " slowly."]


def make_corpus(n_chars, seed=0):
    rng = random.Random(seed)
    parts, size = [], 0
    while size < n_chars:
        s = f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}{rng.choice(ENDINGS)} "
        parts.append(s.capitalize())
        size += len(s)
    return "".join(parts)[:n_chars]


class CharLSTM(nn.Module):
    def __init__(self, vocab, emb=64, hidden=256, layers=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, emb)
        self.lstm = nn.LSTM(emb, hidden, layers, batch_first=True)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, x):
        h, _ = self.lstm(self.emb(x))
        return self.out(h)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--sequences", type=int, default=3000, help="training windows per epoch")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--lr", type=float, default=2e-3)
    args = p.parse_args()

    torch.manual_seed(0)
    text = make_corpus(args.sequences * args.seq_len + 1)
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    starts = torch.arange(0, args.sequences * args.seq_len, args.seq_len)
    model = CharLSTM(len(chars))
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    print(f"vocab {len(chars)}, {args.sequences} sequences of {args.seq_len} chars")
    step = 0
    for epoch in range(args.epochs):
        order = starts[torch.randperm(len(starts))]
        t0, seen = time.time(), 0
        for i in range(0, len(order), args.batch_size):
            idx = order[i:i + args.batch_size].unsqueeze(1) + torch.arange(args.seq_len + 1)
            chunk = data[idx]
            x, y = chunk[:, :-1], chunk[:, 1:]
            logits = model(x)
            loss = loss_fn(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            seen += len(idx)
            if step % 25 == 0:
                rate = seen / (time.time() - t0)
                print(f"epoch {epoch + 1} step {step} loss {loss.item():.3f} "
                      f"{rate:.1f} sequences/s", flush=True)
        print(f"epoch {epoch + 1} done in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
