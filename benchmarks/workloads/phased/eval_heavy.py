"""Named-entity tagging of generated sentences, with a slow evaluation after every epoch.

Training: a windowed MLP tagger (token embeddings of a +-2 window, two hidden layers) over
BIO tags; its matrix multiplies use torch's intra-op threads. Evaluation, after every epoch:
the emissions of the held-out sentences are computed in batches, then every sentence is
handled on its own in plain Python, as many evaluation scripts do: an n-best constrained
Viterbi search (a BIO tag cannot follow the wrong one), forward-backward tag posteriors, and
the scores (entity F1, the n-best oracle recall, the edit distance between the predicted and
the true tag sequences, the calibration error of the per-token confidences).

    python eval_heavy.py [--train 5000] [--eval 700] [--epochs 4] [--batch-size 64]
"""

import argparse
import heapq
import math
import random
from operator import itemgetter

import torch
from torch import nn

TYPES = ["PER", "LOC", "ORG"]
TAGS = ["O"] + [f"{p}-{t}" for t in TYPES for p in "BI"]
NEG = float("-inf")


def generate(n, length, vocab, rng):
    """Sentences of token ids with entity spans; the token before a span often hints its type."""
    n_types = len(TYPES)
    per_type = vocab // 8          # entity words of each type (neighbouring types overlap)
    common = n_types * per_type    # ids from here on are ordinary words
    triggers = [common + t for t in range(n_types)]
    sents, tags = [], []
    for _ in range(n):
        words, labels = [], []
        while len(words) < length:
            if rng.random() < 0.25 and len(words) < length - 4:
                t = rng.randrange(n_types)
                if rng.random() < 0.7:
                    words.append(triggers[t])
                    labels.append(0)
                for k in range(rng.randint(1, 3)):
                    base = t * per_type + rng.randrange(per_type + per_type // 3)
                    words.append(base % common)
                    labels.append(1 + 2 * t + (k > 0))
            else:
                words.append(common + n_types + rng.randrange(vocab - common - n_types))
                labels.append(0)
        sents.append(words[:length])
        tags.append(labels[:length])
    return torch.tensor(sents), torch.tensor(tags)


class WindowTagger(nn.Module):
    def __init__(self, vocab, n_tags, emb=128, hidden=512, window=2):
        super().__init__()
        self.window = window
        self.emb = nn.Embedding(vocab + 1, emb, padding_idx=vocab)
        self.mlp = nn.Sequential(nn.Linear(emb * (2 * window + 1), hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, n_tags))

    def forward(self, x):
        pad = self.emb.padding_idx
        x = nn.functional.pad(x, (self.window, self.window), value=pad)
        e = self.emb(x)                                            # B, L+2w, E
        L = x.shape[1] - 2 * self.window
        ctx = torch.cat([e[:, k:k + L] for k in range(2 * self.window + 1)], dim=-1)
        return self.mlp(ctx)                                       # B, L, tags


def allowed_transitions():
    """Transition scores: -inf where tag j cannot follow tag i (I-X only after B-X or I-X)."""
    trans = [[NEG if tag.startswith("I-") and prev[2:] != tag[2:] else 0.0 for tag in TAGS]
             for prev in TAGS]
    start = [NEG if tag.startswith("I-") else 0.0 for tag in TAGS]
    return trans, start


def logsumexp(values):
    m = max(values)
    if m == NEG:
        return NEG
    return m + math.log(sum(math.exp(v - m) for v in values))


def nbest_viterbi(emissions, transitions, start, k):
    """The k best tag paths of one sentence (emissions: a list of per-token score lists),
    best first, as (score, path)."""
    n = len(start)
    beams = [[(e + s, None)] if s != NEG else [] for e, s in zip(emissions[0], start,
                                                                 strict=True)]
    history = [beams]
    for em in emissions[1:]:
        new = []
        for j in range(n):
            cands = []
            for i in range(n):
                tr = transitions[i][j]
                if tr == NEG:
                    continue
                for r, (score, _) in enumerate(beams[i]):
                    cands.append((score + tr, (i, r)))
            top = heapq.nlargest(k, cands, key=itemgetter(0))
            new.append([(score + em[j], back) for score, back in top])
        beams = new
        history.append(beams)
    finals = heapq.nlargest(k, ((score, (j, r)) for j in range(n)
                                for r, (score, _) in enumerate(beams[j])), key=itemgetter(0))
    out = []
    for score, (j, r) in finals:
        path = []
        for t in range(len(history) - 1, -1, -1):
            path.append(j)
            back = history[t][j][r][1]
            if back is not None:
                j, r = back
        out.append((score, path[::-1]))
    return out


def marginals(emissions, transitions, start):
    """Per-token tag posteriors of one sentence by forward-backward, in log space."""
    n = len(start)
    alpha = [[e + s for e, s in zip(emissions[0], start, strict=True)]]
    for em in emissions[1:]:
        prev = alpha[-1]
        alpha.append([logsumexp([prev[i] + transitions[i][j] for i in range(n)]) + em[j]
                      for j in range(n)])
    beta = [[0.0] * n]
    for em in reversed(emissions[1:]):
        nxt = beta[-1]
        beta.append([logsumexp([transitions[i][j] + em[j] + nxt[j] for j in range(n)])
                     for i in range(n)])
    beta.reverse()
    z = logsumexp(alpha[-1])
    return [[math.exp(a + b - z) for a, b in zip(al, be, strict=True)]
            for al, be in zip(alpha, beta, strict=True)]


def spans(tags):
    out, start, kind = set(), None, None
    for i, tag in enumerate(tags + [0]):
        name = TAGS[tag]
        if start is not None and not name.startswith("I-"):
            out.add((start, i, kind))
            start = None
        if name.startswith("B-"):
            start, kind = i, name[2:]
    return out


def edit_distance(a, b):
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def train_epoch(model, opt, x, y, batch_size, epoch, step):
    model.train()
    perm = torch.randperm(len(x))
    loss = None
    for i in range(0, len(x), batch_size):
        idx = perm[i:i + batch_size]
        opt.zero_grad()
        logits = model(x[idx])
        loss = nn.functional.cross_entropy(logits.reshape(-1, len(TAGS)), y[idx].reshape(-1))
        loss.backward()
        opt.step()
        step += 1
        if step % 20 == 0:
            print(f"epoch {epoch} step {step} loss {loss.item():.4f}", flush=True)
    return step, loss.item()


def evaluate(model, x, y, nbest, batch_size=256):
    """Entity F1 of the best path and the best of the n-best (oracle), the tag edit distance,
    and the expected calibration error of the per-token confidences."""
    model.eval()
    transitions, start = allowed_transitions()
    tp = tp_oracle = n_pred = n_gold = dist = 0
    bins = [[0, 0.0, 0] for _ in range(10)]  # count, confidence sum, correct
    with torch.no_grad():
        emissions = torch.cat([model(x[i:i + batch_size]).log_softmax(-1)
                               for i in range(0, len(x), batch_size)])
    for em, gold in zip(emissions.tolist(), y.tolist(), strict=True):
        paths = nbest_viterbi(em, transitions, start, nbest)
        pred = paths[0][1]
        p, g = spans(pred), spans(gold)
        tp += len(p & g)
        n_pred += len(p)
        n_gold += len(g)
        tp_oracle += max(len(spans(path) & g) for _, path in paths)
        dist += edit_distance(pred, gold)
        for probs, tag, true in zip(marginals(em, transitions, start), pred, gold,
                                    strict=True):
            b = bins[min(int(probs[tag] * 10), 9)]
            b[0] += 1
            b[1] += probs[tag]
            b[2] += tag == true
    f1 = 2 * tp / max(n_pred + n_gold, 1)
    oracle_recall = tp_oracle / max(n_gold, 1)
    total = sum(b[0] for b in bins)
    ece = sum(abs(b[1] - b[2]) for b in bins) / max(total, 1)
    return f1, oracle_recall, dist / len(x), ece


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--train", type=int, default=5000, help="training sentences")
    p.add_argument("--eval", type=int, default=700, help="held-out sentences")
    p.add_argument("--length", type=int, default=40)
    p.add_argument("--vocab", type=int, default=4000)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--nbest", type=int, default=5, help="paths decoded per held-out sentence")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    args = p.parse_args()
    rng = random.Random(0)
    torch.manual_seed(0)
    xt, yt = generate(args.train, args.length, args.vocab, rng)
    xe, ye = generate(args.eval, args.length, args.vocab, rng)
    model = WindowTagger(args.vocab, len(TAGS), hidden=args.hidden)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    step, loss = 0, float("nan")
    for epoch in range(args.epochs):
        step, loss = train_epoch(model, opt, xt, yt, args.batch_size, epoch, step)
        f1, oracle, dist, ece = evaluate(model, xe, ye, args.nbest)
        print(f"epoch {epoch} step {step} loss {loss:.4f} eval entity_f1 {f1:.3f} "
              f"oracle_recall@{args.nbest} {oracle:.3f} edit_distance {dist:.2f} ece {ece:.3f}",
              flush=True)
    print(f"done: {args.epochs} epochs, {step} steps, final loss {loss:.4f}")


if __name__ == "__main__":
    main()
