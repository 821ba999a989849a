"""Topic classification of generated documents, with a long preprocessing step first.

Preprocessing (pure Python, one thread, as tokenizer loops usually are): generate the
documents, tokenize them (lowercase, regex split), count a vocabulary, and turn every document
into TF-IDF features of its unigrams plus hashed word bigrams and character trigrams. Then an
MLP is trained on the features for a few epochs; its matrix multiplies use torch's intra-op
threads.

    python prep_heavy.py [--docs 20000] [--words 150] [--epochs 5] [--batch-size 128]
"""

import argparse
import math
import random
import re
import zlib
from collections import Counter

import numpy as np
import torch
from torch import nn

TOKEN = re.compile(r"[a-z]+(?:'[a-z]+)?")
COMMON = ["the", "a", "of", "and", "to", "in", "is", "it", "that", "for", "on", "was",
          "with", "as", "at", "by", "this", "from", "or", "but", "not", "are", "be", "had"]


def topic_words(n_topics, per_topic, rng):
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = []
    for _ in range(n_topics):
        topic = set()
        while len(topic) < per_topic:
            topic.add("".join(rng.choice(letters) for _ in range(rng.randint(3, 9))))
        words.append(sorted(topic))
    return words


def generate_documents(n_docs, n_words, n_topics, seed):
    rng = random.Random(seed)
    topics = topic_words(n_topics, 400, rng)
    shared = [w for t in topics for w in t[:150]]  # words every topic uses now and then
    docs, labels = [], []
    for _ in range(n_docs):
        label = rng.randrange(n_topics)
        own = topics[label]
        words = []
        for _ in range(n_words):
            r = rng.random()
            if r < 0.4:
                w = rng.choice(COMMON)
            elif r < 0.47:
                w = own[int(len(own) * rng.random() ** 2)]
            else:
                w = rng.choice(shared)
            words.append(w.capitalize() if rng.random() < 0.05 else w)
        text = " ".join(words)
        docs.append(text.replace(" the ", ", the ", 3) + ".")
        labels.append(label)
    return docs, labels


def tokenize(text):
    return TOKEN.findall(text.lower())


def build_dataset(args):
    docs, labels = generate_documents(args.docs, args.words, args.classes, seed=0)
    df = Counter()
    for doc in docs:  # first pass: document frequencies
        df.update(set(tokenize(doc)))
    vocab = [w for w, c in df.most_common(args.vocab) if c >= 2]
    index = {w: i for i, w in enumerate(vocab)}
    n_uni = len(vocab)
    dim = n_uni + args.bigram_buckets + args.subword_buckets
    idf = np.ones(dim, dtype=np.float32)
    for w, i in index.items():
        idf[i] = math.log(len(docs) / (1 + df[w]))
    feats = np.zeros((len(docs), dim), dtype=np.float32)
    for row, doc in enumerate(docs):  # second pass: features
        toks = tokenize(doc)
        counts = Counter()
        for tok in toks:
            i = index.get(tok)
            if i is not None:
                counts[i] += 1
        for a, b in zip(toks, toks[1:], strict=False):
            counts[n_uni + zlib.crc32(f"{a} {b}".encode()) % args.bigram_buckets] += 1
        for tok in toks:  # character trigrams, fastText style, for unseen words
            padded = f"<{tok}>"
            for k in range(len(padded) - 2):
                h = zlib.crc32(padded[k:k + 3].encode()) % args.subword_buckets
                counts[n_uni + args.bigram_buckets + h] += 1
        for i, c in counts.items():
            feats[row, i] = 1.0 + math.log(c)
        feats[row] *= idf
        feats[row] /= np.linalg.norm(feats[row]) + 1e-6
    return torch.from_numpy(feats), torch.tensor(labels)


def train_epoch(model, opt, x, y, batch_size, epoch, step):
    model.train()
    perm = torch.randperm(len(x))
    loss = None
    for i in range(0, len(x), batch_size):
        idx = perm[i:i + batch_size]
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
        step += 1
        if step % 50 == 0:
            print(f"epoch {epoch} step {step} loss {loss.item():.4f}", flush=True)
    return step, loss.item()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--docs", type=int, default=20000)
    p.add_argument("--words", type=int, default=150, help="words per document")
    p.add_argument("--classes", type=int, default=8)
    p.add_argument("--vocab", type=int, default=1536)
    p.add_argument("--bigram-buckets", type=int, default=512)
    p.add_argument("--subword-buckets", type=int, default=512)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    args = p.parse_args()
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)

    x, y = build_dataset(args)
    print(f"features: {x.shape[0]} documents x {x.shape[1]} features", flush=True)
    n_val = len(x) // 10
    xv, yv, xt, yt = x[:n_val], y[:n_val], x[n_val:], y[n_val:]
    model = nn.Sequential(nn.Linear(x.shape[1], args.hidden), nn.ReLU(), nn.Dropout(0.2),
                          nn.Linear(args.hidden, args.hidden // 2), nn.ReLU(),
                          nn.Linear(args.hidden // 2, args.classes))
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    step, loss = 0, float("nan")
    for epoch in range(args.epochs):
        step, loss = train_epoch(model, opt, xt, yt, args.batch_size, epoch, step)
        model.eval()
        with torch.no_grad():
            acc = (model(xv).argmax(-1) == yv).float().mean().item()
        print(f"epoch {epoch} step {step} loss {loss:.4f} val_acc {acc:.3f}", flush=True)
    print(f"done: {args.epochs} epochs, {step} steps, final loss {loss:.4f}")


if __name__ == "__main__":
    main()
