"""
Trains a small character-level GPT, written the way nanoGPT-style trainers are written.

Conventions this script copies (its own code, not nanoGPT's):
- every setting is a module-level global with a default (batch_size = 12, block_size, ...);
- a "poor man's configurator": each positional argument is a Python config file that is
  exec'd over those globals, each --key=value argument then overrides one global (later
  wins), its value parsed as a Python literal and checked against the global's type;
- DDP only when launched by torchrun: ddp = int(os.environ.get('RANK', -1)) != -1, then
  init_process_group(backend='nccl') and device cuda:{LOCAL_RANK};
- the job is measured in iterations (max_iters), with gradient accumulation, and the
  tokens per iteration are printed at start;
- "step N: train loss X, val loss Y" every eval_interval, "iter N: loss X, time Tms" every
  log_interval, and ckpt.pt written to out_dir whenever the val loss improves.

The data are a seeded synthetic play script (speakers and lines from a toy Markov language),
made on the fly: nothing is downloaded. out_dir defaults to a temp dir removed at the end.
The learning rate is fixed in the shipped config (decay_lr = False), so batch size matters.

    python gpt_configurator.py config/train_tiny_char.py --batch_size=16
    torchrun --standalone --nproc_per_node=2 gpt_configurator.py config/train_tiny_char.py \
        --gradient_accumulation_steps=2 --backend=gloo    # on CPUs; nccl on GPUs
"""

import math
import os
import random
import shutil
import sys
import tempfile
import time
from ast import literal_eval
from contextlib import nullcontext

import torch
import torch.nn as nn
from torch.nn import functional as F

# -----------------------------------------------------------------------------
# default config values: a small char model; a config file and --key=value override these
# I/O
out_dir = ''  # '' = a fresh temp dir, removed at exit
eval_interval = 250
log_interval = 10
eval_iters = 20
eval_only = False
always_save_checkpoint = False
# data
dataset = 'synthetic_play'
dataset_chars = 300000
gradient_accumulation_steps = 1
batch_size = 12
block_size = 128
# model
n_layer = 4
n_head = 4
n_embd = 128
dropout = 0.0
bias = False
# adamw optimizer
learning_rate = 1e-3
max_iters = 2000
weight_decay = 1e-1
beta1 = 0.9
beta2 = 0.99
grad_clip = 1.0
# learning rate decay settings
decay_lr = True
warmup_iters = 100
lr_decay_iters = 2000
min_lr = 1e-4
# DDP settings
backend = 'nccl'
# system
device = 'cuda' if torch.cuda.is_available() else 'cpu'
dtype = 'bfloat16'
seed = 1337
# -----------------------------------------------------------------------------
config_keys = [k for k, v in globals().items()
               if not k.startswith('_') and isinstance(v, (int, float, bool, str))]


def configure(argv, namespace, keys):
    """Config files (positional) exec'd into namespace, then --key=value overrides of the
    settings named in keys."""
    for arg in argv:
        if '=' not in arg:
            if arg.startswith('-'):
                sys.exit(f"expected a config file or --key=value, got {arg!r}")
            print(f"Overriding config with {arg}:")
            with open(arg) as f:
                source = f.read()
            print(source)
            exec(compile(source, arg, 'exec'), namespace)
            continue
        if not arg.startswith('--'):
            sys.exit(f"overrides look like --key=value, got {arg!r}")
        key, value = arg[2:].split('=', 1)
        if key not in keys:
            sys.exit(f"Unknown config key: {key}")
        try:
            parsed = literal_eval(value)
        except (SyntaxError, ValueError):
            parsed = value  # a bare string
        current = namespace[key]
        if isinstance(current, float) and isinstance(parsed, int) and not isinstance(parsed, bool):
            parsed = float(parsed)
        if type(parsed) is not type(current):
            sys.exit(f"--{key}: expected a {type(current).__name__}, got {value!r}")
        print(f"Overriding: {key} = {parsed}")
        namespace[key] = parsed


configure(sys.argv[1:], globals(), config_keys)
config = {k: globals()[k] for k in config_keys}  # useful for logging
# -----------------------------------------------------------------------------

ddp = int(os.environ.get('RANK', -1)) != -1  # is this a ddp run?
if ddp:
    from torch.distributed import destroy_process_group, init_process_group
    from torch.nn.parallel import DistributedDataParallel as DDP
    init_process_group(backend=backend)
    ddp_rank = int(os.environ['RANK'])
    ddp_local_rank = int(os.environ['LOCAL_RANK'])
    ddp_world_size = int(os.environ['WORLD_SIZE'])
    device = f'cuda:{ddp_local_rank}' if backend == 'nccl' else 'cpu'
    if device.startswith('cuda'):
        torch.cuda.set_device(device)
    master_process = ddp_rank == 0  # this process will do logging, checkpointing etc.
    seed_offset = ddp_rank
    # world_size processes train at once: each does its share of the accumulation
    assert gradient_accumulation_steps % ddp_world_size == 0
    gradient_accumulation_steps //= ddp_world_size
else:
    master_process = True
    seed_offset = 0
    ddp_world_size = 1
tokens_per_iter = gradient_accumulation_steps * ddp_world_size * batch_size * block_size
print(f"tokens per iteration will be: {tokens_per_iter:,}")

cleanup_dir = None
if not out_dir:
    out_dir = cleanup_dir = tempfile.mkdtemp(prefix='gpt_configurator_')
if master_process:
    os.makedirs(out_dir, exist_ok=True)
torch.manual_seed(seed + seed_offset)
device_type = 'cuda' if 'cuda' in device else 'cpu'
ptdtype = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}[dtype]
ctx = nullcontext() if device_type == 'cpu' else torch.amp.autocast(device_type=device_type,
                                                                     dtype=ptdtype)


# -----------------------------------------------------------------------------
# data: a synthetic play, encoded one character per token
def synthetic_play(n_chars, rng):
    consonants, vowels = 'bcdfghklmnprstvw', 'aeiou'

    def make_word():
        return ''.join(rng.choice(consonants) + rng.choice(vowels)
                       for _ in range(rng.randint(1, 3))) + rng.choice(['', 'n', 's', 'th'])

    vocab = [make_word() for _ in range(300)]
    # each word is followed mostly by a handful of favourite successors
    successors = {w: rng.sample(vocab, 6) for w in vocab}
    speakers = [make_word().upper() for _ in range(8)]
    parts, size = [], 0
    while size < n_chars:
        words = [rng.choice(vocab)]
        for _ in range(rng.randint(4, 14)):
            prev = words[-1]
            words.append(rng.choice(successors[prev]) if rng.random() < 0.8 else rng.choice(vocab))
        line = f"{rng.choice(speakers)}:\n{' '.join(words).capitalize()}.\n\n"
        parts.append(line)
        size += len(line)
    return ''.join(parts)[:n_chars]


text = synthetic_play(dataset_chars, random.Random(seed))  # same text on every rank
chars = sorted(set(text))
vocab_size = len(chars)
stoi = {ch: i for i, ch in enumerate(chars)}
data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
n = int(0.9 * len(data))
train_data, val_data = data[:n], data[n:]


def get_batch(split):
    source = train_data if split == 'train' else val_data
    ix = torch.randint(len(source) - block_size, (batch_size,))
    x = torch.stack([source[i:i + block_size] for i in ix])
    y = torch.stack([source[i + 1:i + 1 + block_size] for i in ix])
    return x.to(device), y.to(device)


# -----------------------------------------------------------------------------
# model
class LayerNorm(nn.Module):
    """LayerNorm with an optional bias."""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = LayerNorm(n_embd, bias)
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.ln_2 = LayerNorm(n_embd, bias)
        self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=bias)
        self.mlp_proj = nn.Linear(4 * n_embd, n_embd, bias=bias)
        self.drop = nn.Dropout(dropout)

    def attention(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(n_embd, dim=2)
        q = q.view(B, T, n_head, C // n_head).transpose(1, 2)
        k = k.view(B, T, n_head, C // n_head).transpose(1, 2)
        v = v.view(B, T, n_head, C // n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=dropout if self.training else 0.0)
        return self.drop(self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C)))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.drop(self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList([Block() for _ in range(n_layer)])
        self.ln_f = LayerNorm(n_embd, bias)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith('proj.weight') else 0.02
                nn.init.normal_(p, mean=0.0, std=std)
            elif name.endswith('bias'):
                nn.init.zeros_(p)

    def forward(self, idx, targets=None):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    def configure_optimizers(self):
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [{'params': [p for p in params if p.dim() >= 2], 'weight_decay': weight_decay},
                  {'params': [p for p in params if p.dim() < 2], 'weight_decay': 0.0}]
        return torch.optim.AdamW(groups, lr=learning_rate, betas=(beta1, beta2))


iter_num = 0
best_val_loss = 1e9
model = GPT().to(device)
print(f"number of parameters: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M")
optimizer = model.configure_optimizers()
scaler = torch.amp.GradScaler(device_type, enabled=(dtype == 'float16' and device_type == 'cuda'))
if ddp:
    model = DDP(model, device_ids=[ddp_local_rank] if device_type == 'cuda' else None)
raw_model = model.module if ddp else model


@torch.no_grad()
def estimate_loss():
    out = {}
    model.eval()
    for split in ['train', 'val']:
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            X, Y = get_batch(split)
            with ctx:
                _, loss = model(X, Y)
            losses[k] = loss.item()
        out[split] = losses.mean()
    model.train()
    return out


def get_lr(it):
    if not decay_lr:
        return learning_rate
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)


X, Y = get_batch('train')
t0 = time.time()
while True:
    lr = get_lr(iter_num)
    for param_group in optimizer.param_groups:
        param_group['lr'] = lr

    if iter_num % eval_interval == 0 and master_process:
        losses = estimate_loss()
        print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        if losses['val'] < best_val_loss or always_save_checkpoint:
            best_val_loss = losses['val']
            if iter_num > 0:
                checkpoint = {'model': raw_model.state_dict(), 'optimizer': optimizer.state_dict(),
                              'iter_num': iter_num, 'best_val_loss': best_val_loss,
                              'config': config, 'chars': chars}
                print(f"saving checkpoint to {out_dir}")
                torch.save(checkpoint, os.path.join(out_dir, 'ckpt.pt'))
    if iter_num == 0 and eval_only:
        break

    for micro_step in range(gradient_accumulation_steps):
        if ddp:  # sync gradients only on the last micro-step
            model.require_backward_grad_sync = micro_step == gradient_accumulation_steps - 1
        with ctx:
            _, loss = model(X, Y)
            loss = loss / gradient_accumulation_steps
        X, Y = get_batch('train')  # fetch the next batch while the backward runs
        scaler.scale(loss).backward()
    if grad_clip != 0.0:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)

    t1 = time.time()
    dt = t1 - t0
    t0 = t1
    if iter_num % log_interval == 0 and master_process:
        lossf = loss.item() * gradient_accumulation_steps
        print(f"iter {iter_num}: loss {lossf:.4f}, time {dt * 1000:.2f}ms")
    iter_num += 1

    if iter_num > max_iters:
        break

if ddp:
    destroy_process_group()
if cleanup_dir is not None:
    shutil.rmtree(cleanup_dir, ignore_errors=True)
