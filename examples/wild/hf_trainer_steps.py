#!/usr/bin/env python
"""Causal language modeling with the Hugging Face Trainer for a fixed number of steps.

Conventions this script copies from the ``run_clm``-style example scripts (its own code):

* ``HfArgumentParser`` over ``ModelArguments``, ``DataTrainingArguments`` and the
  ``TrainingArguments`` dataclass, so every flag is a dataclass field with an underscore
  name: ``--per_device_train_batch_size``, ``--max_steps``, ``--eval_steps``,
  ``--learning_rate``; a single ``.json`` argument is read as the whole configuration;
* the model is built from a config, not downloaded (``--model_type gpt2`` with
  ``--config_overrides "n_embd=64,n_layer=2"``), as ``run_clm`` does when training from
  scratch;
* the job is step-defined (``--max_steps``), with evaluation every ``--eval_steps``;
  the Trainer prints its log dicts, and the script ends with ``print(trainer.evaluate())``.

The script's own defaults (set on a ``TrainingArguments`` subclass): batch 16, 300 steps,
evaluation every 100, a constant learning rate (so the batch size matters: a smaller batch
at the same steps sees fewer tokens), no checkpoints, the CPU, and an output
dir under the temp dir. The corpus is a seeded synthetic token stream (a sparse Markov
chain with some long-range copying); nothing is downloaded.

    python hf_trainer_steps.py --per_device_train_batch_size 16 --max_steps 300 --eval_steps 100
"""

import logging
import math
import os
import random
import sys
import tempfile
from dataclasses import dataclass, field

import torch
from torch.utils.data import Dataset
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    HfArgumentParser,
    Trainer,
    TrainingArguments,
    set_seed,
)

logger = logging.getLogger(__name__)


@dataclass
class ModelArguments:
    model_type: str = field(default="gpt2", metadata={"help": "Only gpt2 is built here."})
    config_overrides: str | None = field(
        default="n_embd=64,n_layer=2,n_head=4",
        metadata={"help": "Override some default config settings, e.g. n_embd=64,n_layer=2"},
    )


@dataclass
class DataTrainingArguments:
    vocab_size: int = field(default=256, metadata={"help": "Size of the synthetic vocabulary."})
    block_size: int = field(default=32, metadata={"help": "Tokens per training sequence."})
    train_tokens: int = field(default=200_000, metadata={"help": "Length of the train stream."})
    max_eval_samples: int = field(default=256, metadata={"help": "Held-out sequences."})
    data_seed_offset: int = field(default=0)


@dataclass
class ScriptTrainingArguments(TrainingArguments):
    """TrainingArguments with this example's defaults."""

    output_dir: str | None = field(
        default=os.path.join(tempfile.gettempdir(), "hf_trainer_steps"),
        metadata={"help": "Where checkpoints would go (none are saved by default)."})
    per_device_train_batch_size: int = field(default=16, metadata={"help": "Batch per device."})
    per_device_eval_batch_size: int = field(default=64)
    max_steps: int = field(default=300, metadata={"help": "Total optimizer steps."})
    eval_strategy: str = field(default="steps")
    eval_steps: float | None = field(default=100)
    logging_steps: float = field(default=50)
    learning_rate: float = field(default=1e-3)
    lr_scheduler_type: str = field(default="constant")
    weight_decay: float = field(default=0.01)
    save_strategy: str = field(default="no")
    use_cpu: bool = field(default=True)
    dataloader_drop_last: bool = field(default=True)


def markov_stream(n_tokens, vocab_size, seed):
    """A sparse first-order Markov chain, and every so often a copy of a recent span."""
    lang = random.Random(1234)  # the "language" is shared by every split
    successors = [[lang.randrange(vocab_size) for _ in range(4)] for _ in range(vocab_size)]
    weights = [0.55, 0.25, 0.15, 0.05]
    rng = random.Random(seed)
    out = [0]
    while len(out) < n_tokens:
        if len(out) > 40 and rng.random() < 0.02:  # copy a recent span
            start = len(out) - rng.randint(16, 40)
            out.extend(out[start:start + 8])
        elif rng.random() < 0.05:
            out.append(rng.randrange(vocab_size))
        else:
            out.append(rng.choices(successors[out[-1]], weights)[0])
    return torch.tensor(out[:n_tokens], dtype=torch.long)


class BlockDataset(Dataset):
    def __init__(self, stream, block_size):
        n = len(stream) // block_size
        self.blocks = stream[: n * block_size].view(n, block_size)

    def __len__(self):
        return len(self.blocks)

    def __getitem__(self, i):
        ids = self.blocks[i]
        return {"input_ids": ids, "labels": ids.clone()}


def main():
    parser = HfArgumentParser((ModelArguments, DataTrainingArguments, ScriptTrainingArguments))
    if len(sys.argv) == 2 and sys.argv[1].endswith(".json"):
        model_args, data_args, training_args = parser.parse_json_file(
            json_file=os.path.abspath(sys.argv[1]))
    else:
        model_args, data_args, training_args = parser.parse_args_into_dataclasses()

    logging.basicConfig(format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
                        datefmt="%m/%d/%Y %H:%M:%S", handlers=[logging.StreamHandler(sys.stdout)])
    logger.setLevel(logging.INFO)
    logger.info(f"Training/evaluation parameters: batch {training_args.per_device_train_batch_size}"
                f", max_steps {training_args.max_steps}, lr {training_args.learning_rate}")
    set_seed(training_args.seed)

    if model_args.model_type != "gpt2":
        raise ValueError("this example builds gpt2-style models only")
    config = GPT2Config(vocab_size=data_args.vocab_size, n_positions=data_args.block_size,
                        bos_token_id=0, eos_token_id=0)
    if model_args.config_overrides:
        logger.info(f"Overriding config: {model_args.config_overrides}")
        config.update_from_string(model_args.config_overrides)
    model = GPT2LMHeadModel(config)
    n_params = sum(p.numel() for p in model.parameters())
    logger.info(f"Training new model from scratch - Total size={n_params / 2**20:.2f}M params")

    seed = training_args.seed + data_args.data_seed_offset
    train_dataset = BlockDataset(
        markov_stream(data_args.train_tokens, data_args.vocab_size, seed), data_args.block_size)
    eval_tokens = data_args.max_eval_samples * data_args.block_size
    eval_dataset = BlockDataset(
        markov_stream(eval_tokens, data_args.vocab_size, seed + 1), data_args.block_size)

    trainer = Trainer(model=model, args=training_args, train_dataset=train_dataset,
                      eval_dataset=eval_dataset)
    train_result = trainer.train()
    trainer.log_metrics("train", train_result.metrics)

    metrics = trainer.evaluate()
    metrics["perplexity"] = math.exp(metrics["eval_loss"])
    print(metrics)


if __name__ == "__main__":
    main()
