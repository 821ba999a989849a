"""A character-level GPT trained for a fixed number of iterations from an endless sampler.

The shape of issue 76's script, written the way many research repos write a small GPT
trainer:

* settings live in a nested dataclass config and are set with dotted flags parsed by hand
  (``--trainer.batch_size=64``, ``--model.n_embd 96``), not argparse;
* the job is measured in iterations (``trainer.max_iters``, 300), not epochs: the
  ``DataLoader`` draws from a ``RandomSampler(replacement=True, num_samples=10**9)``, so
  the data never run out and an "epoch" means nothing;
* the only output is the loss of the current training batch every 10 iterations
  (``iter 10: loss 3.2104``): no held-out loss, no summary at the end.

The learning rate is fixed, so at the same 300 iterations a smaller batch has seen fewer
characters and ends at a higher (and noisier) loss. The text is generated on the fly from
a seeded toy language (nothing is downloaded) and nothing is written to disk.

    python char_gpt_steps.py --trainer.batch_size=64 --trainer.max_iters=300
"""

from __future__ import annotations

import dataclasses
import math
import random
import sys
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, RandomSampler


@dataclass
class ModelConfig:
    block_size: int = 32
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    dropout: float = 0.0


@dataclass
class DataConfig:
    n_chars: int = 200_000  # length of the generated training text
    num_workers: int = 0
    seed: int = 1337


@dataclass
class TrainerConfig:
    batch_size: int = 64
    max_iters: int = 300
    learning_rate: float = 2e-3
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    log_interval: int = 10
    device: str = "cpu"


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)


# -----------------------------------------------------------------------------
# a tiny hand-rolled "--section.key=value" parser over the dataclasses above

def _convert(value: str, kind):
    if kind is bool or kind == "bool":
        if value.lower() in ("1", "true", "yes", "on"):
            return True
        if value.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"not a boolean: {value!r}")
    return {"int": int, "float": float, "str": str}.get(kind, kind)(value)


def _usage(cfg: Config) -> str:
    lines = ["usage: char_gpt_steps.py [--section.key=value ...]", ""]
    for section in dataclasses.fields(cfg):
        for f in dataclasses.fields(getattr(cfg, section.name)):
            default = getattr(getattr(cfg, section.name), f.name)
            lines.append(f"  --{section.name}.{f.name}={default!r}")
    return "\n".join(lines)


def parse_config(argv: list[str]) -> Config:
    cfg = Config()
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-h", "--help"):
            print(_usage(cfg))
            sys.exit(0)
        if not arg.startswith("--") or "." not in arg:
            sys.exit(f"unrecognised argument {arg!r}; expected --section.key=value\n\n"
                     + _usage(cfg))
        key, eq, value = arg[2:].partition("=")
        if not eq:  # "--trainer.batch_size 64"
            if i + 1 >= len(argv):
                sys.exit(f"{arg} needs a value")
            i += 1
            value = argv[i]
        section, _, name = key.partition(".")
        sub = getattr(cfg, section, None)
        kinds = {f.name: f.type for f in dataclasses.fields(sub)} if sub is not None else {}
        if name not in kinds:
            sys.exit(f"unknown setting {key!r}\n\n" + _usage(cfg))
        try:
            setattr(sub, name, _convert(value, kinds[name]))
        except ValueError as exc:
            sys.exit(f"bad value for {key}: {exc}")
        i += 1
    return cfg


# -----------------------------------------------------------------------------
# data: a seeded toy language, one long character stream

def make_text(n_chars: int, seed: int) -> str:
    rng = random.Random(seed)
    onsets = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "sh", "th",
              "st", "gr", "pl"]
    vowels = ["a", "e", "i", "o", "u", "ai", "ou"]
    codas = ["", "", "n", "r", "s", "t", "l", "nd"]

    def word():
        return "".join(rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas)
                       for _ in range(rng.randint(1, 3)))

    nouns = [word() for _ in range(120)]
    verbs = [word() + "es" for _ in range(60)]
    adjectives = [word() + "y" for _ in range(40)]
    determiners = ["the", "a", "my", "our", "each"]
    zipf = [1.0 / (r + 1) for r in range(120)]

    def pick(words):
        return rng.choices(words, weights=zipf[: len(words)])[0]

    def noun_phrase():
        out = [rng.choice(determiners)]
        if rng.random() < 0.35:
            out.append(pick(adjectives))
        out.append(pick(nouns))
        return out

    chunks, size = [], 0
    while size < n_chars:
        sentence = noun_phrase() + [pick(verbs)] + noun_phrase()
        if rng.random() < 0.3:
            sentence += ["and"] + noun_phrase() + [pick(verbs)]
        line = " ".join(sentence) + (".\n" if rng.random() < 0.2 else ". ")
        chunks.append(line)
        size += len(line)
    return "".join(chunks)[:n_chars]


class CharWindows(Dataset):
    """Every window of ``block_size + 1`` characters of the stream: (input, next chars)."""

    def __init__(self, ids: torch.Tensor, block_size: int):
        self.ids, self.block_size = ids, block_size

    def __len__(self):
        return len(self.ids) - self.block_size - 1

    def __getitem__(self, i):
        chunk = self.ids[i: i + self.block_size + 1]
        return chunk[:-1], chunk[1:]


# -----------------------------------------------------------------------------
# model: a small pre-norm GPT

class SelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.dropout = cfg.dropout

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.dropout if self.training else 0.0)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.n_embd)
        self.attn = SelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = nn.Sequential(nn.Linear(cfg.n_embd, 4 * cfg.n_embd), nn.GELU(),
                                 nn.Linear(4 * cfg.n_embd, cfg.n_embd), nn.Dropout(cfg.dropout))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class CharGPT(nn.Module):
    def __init__(self, cfg: ModelConfig, vocab_size: int):
        super().__init__()
        self.block_size = cfg.block_size
        self.tok = nn.Embedding(vocab_size, cfg.n_embd)
        self.pos = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.head = nn.Linear(cfg.n_embd, vocab_size, bias=False)
        self.apply(self._init)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx, targets=None):
        T = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


# -----------------------------------------------------------------------------

def main(argv: list[str]) -> None:
    cfg = parse_config(argv)
    torch.manual_seed(cfg.data.seed)

    text = make_text(cfg.data.n_chars, cfg.data.seed)
    chars = sorted(set(text))
    stoi = {ch: i for i, ch in enumerate(chars)}
    ids = torch.tensor([stoi[ch] for ch in text], dtype=torch.long)
    dataset = CharWindows(ids, cfg.model.block_size)
    # an endless stream of random windows: the job is max_iters long, not an epoch count
    sampler = RandomSampler(dataset, replacement=True, num_samples=10**9,
                            generator=torch.Generator().manual_seed(cfg.data.seed))
    loader = DataLoader(dataset, batch_size=cfg.trainer.batch_size, sampler=sampler,
                        num_workers=cfg.data.num_workers, drop_last=True)

    device = torch.device(cfg.trainer.device)
    model = CharGPT(cfg.model, len(chars)).to(device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.trainer.weight_decay},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.trainer.learning_rate, betas=(0.9, 0.95))

    model.train()
    it = 0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        _, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.trainer.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.trainer.grad_clip)
        optimizer.step()
        it += 1
        if it % cfg.trainer.log_interval == 0:
            print(f"iter {it}: loss {loss.item():.4f}", flush=True)
        if it >= cfg.trainer.max_iters:
            break


if __name__ == "__main__":
    main(sys.argv[1:])
