"""A language model trained the way the classic word-level example does: its own batching (no
DataLoader), a hand-written SGD update (no torch.optim), hidden state carried across batches."""

import argparse
import math
import time

import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--batch_size", type=int, default=20)
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--bptt", type=int, default=20)
parser.add_argument("--lr", type=float, default=5.0)
parser.add_argument("--tokens", type=int, default=20000)
args = parser.parse_args()

torch.manual_seed(0)
vocab = 200
# a first-order Markov source: each word has a few likely successors
successors = torch.randint(0, vocab, (vocab, 4))
words = [0]
gen = torch.Generator().manual_seed(1)
for _ in range(args.tokens + 4000):
    words.append(int(successors[words[-1], torch.randint(0, 4, (1,), generator=gen)]))
data = torch.tensor(words)
train, valid = data[: args.tokens], data[args.tokens:]


def batchify(d, bsz):
    n = d.size(0) // bsz
    return d[: n * bsz].view(bsz, -1).t().contiguous()


class RNNModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Embedding(vocab, 64)
        self.rnn = nn.LSTM(64, 64)
        self.decoder = nn.Linear(64, vocab)

    def forward(self, x, hidden):
        out, hidden = self.rnn(self.encoder(x), hidden)
        return self.decoder(out).view(-1, vocab), hidden


def repackage(h):
    return tuple(v.detach() for v in h)


model = RNNModel()
criterion = nn.CrossEntropyLoss()
train_data, val_data = batchify(train, args.batch_size), batchify(valid, 10)


def evaluate(source):
    model.eval()
    total, hidden = 0.0, (torch.zeros(1, 10, 64), torch.zeros(1, 10, 64))
    with torch.no_grad():
        for i in range(0, source.size(0) - 1, args.bptt):
            n = min(args.bptt, source.size(0) - 1 - i)
            out, hidden = model(source[i:i + n], hidden)
            total += n * criterion(out, source[i + 1:i + 1 + n].reshape(-1)).item()
    return total / (source.size(0) - 1)


for epoch in range(1, args.epochs + 1):
    model.train()
    start = time.time()
    hidden = (torch.zeros(1, args.batch_size, 64), torch.zeros(1, args.batch_size, 64))
    for i in range(0, train_data.size(0) - 1, args.bptt):
        n = min(args.bptt, train_data.size(0) - 1 - i)
        x, y = train_data[i:i + n], train_data[i + 1:i + 1 + n].reshape(-1)
        hidden = repackage(hidden)
        model.zero_grad()
        out, hidden = model(x, hidden)
        loss = criterion(out, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-args.lr)
    val = evaluate(val_data)
    print(f"| end of epoch {epoch:3d} | time: {time.time() - start:5.2f}s | "
          f"valid loss {val:5.2f} | valid ppl {math.exp(val):8.2f}")
