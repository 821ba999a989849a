"""Sequence classification with the Hugging Face Trainer and a tiny BERT trained from scratch.

No checkpoint is downloaded: the model is built from a small ``BertConfig``. The data is a
synthetic "sentiment" task over token ids: each sequence mixes neutral filler tokens with a
few "positive" and "negative" cue tokens (and some negations that flip the next cue); the
label is which side wins.

    python hf_trainer_bert.py --per-device-train-batch-size 32 --num-train-epochs 2
"""

import argparse
import tempfile

import torch
from torch.utils.data import Dataset
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    Trainer,
    TrainingArguments,
    set_seed,
)

PAD, CLS, SEP, NOT = 0, 1, 2, 3
POSITIVE = range(10, 20)
NEGATIVE = range(20, 30)
FILLER_START = 30


class CueSentimentDataset(Dataset):
    def __init__(self, size, vocab_size=500, max_length=48, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.examples = []
        pos = torch.tensor(list(POSITIVE))
        neg = torch.tensor(list(NEGATIVE))
        for _ in range(size):
            length = int(torch.randint(12, max_length - 1, (1,), generator=g))
            tokens = torch.randint(FILLER_START, vocab_size, (length,), generator=g)
            n_cues = int(torch.randint(2, 9, (1,), generator=g))
            slots = torch.randperm(length - 1, generator=g)[:n_cues] + 1
            score = 0
            for s in slots.tolist():
                is_pos = bool(torch.rand(1, generator=g) < 0.5)
                pool = pos if is_pos else neg
                tokens[s] = pool[torch.randint(len(pool), (1,), generator=g)]
                sign = 1 if is_pos else -1
                if torch.rand(1, generator=g) < 0.1 and tokens[s - 1] >= FILLER_START:
                    tokens[s - 1] = NOT
                    sign = -sign
                score += sign
            if score == 0:  # ties: a coin flip the model can't learn (irreducible noise)
                label = int(torch.rand(1, generator=g) < 0.5)
            else:
                label = int(score > 0)
            ids = torch.cat([torch.tensor([CLS]), tokens, torch.tensor([SEP])])
            self.examples.append((ids, label))
        self.max_length = max_length

    def __len__(self):
        return len(self.examples)

    def __getitem__(self, idx):
        ids, label = self.examples[idx]
        input_ids = torch.full((self.max_length,), PAD, dtype=torch.long)
        input_ids[: len(ids)] = ids
        attention_mask = (input_ids != PAD).long()
        return {"input_ids": input_ids, "attention_mask": attention_mask,
                "labels": torch.tensor(label)}


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--per-device-train-batch-size", type=int, default=32)
    parser.add_argument("--per-device-eval-batch-size", type=int, default=64)
    parser.add_argument("--num-train-epochs", type=float, default=2)
    parser.add_argument("--learning-rate", type=float, default=7e-4)
    parser.add_argument("--train-size", type=int, default=4000)
    parser.add_argument("--eval-size", type=int, default=1000)
    parser.add_argument("--logging-steps", type=int, default=50)
    parser.add_argument("--output-dir", default=None, help="default: a temporary directory")
    parser.add_argument("--seed", type=int, default=42)
    return parser.parse_args()


def main():
    args = parse_args()
    set_seed(args.seed)

    train_dataset = CueSentimentDataset(args.train_size, seed=args.seed)
    eval_dataset = CueSentimentDataset(args.eval_size, seed=args.seed + 1)

    config = BertConfig(
        vocab_size=500,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=256,
        max_position_embeddings=64,
        num_labels=2,
    )
    model = BertForSequenceClassification(config)

    with tempfile.TemporaryDirectory(prefix="hf_trainer_bert_") as tmp:
        training_args = TrainingArguments(
            output_dir=args.output_dir or tmp,
            num_train_epochs=args.num_train_epochs,
            per_device_train_batch_size=args.per_device_train_batch_size,
            per_device_eval_batch_size=args.per_device_eval_batch_size,
            learning_rate=args.learning_rate,
            weight_decay=0.01,
            warmup_steps=20,
            eval_strategy="epoch",
            save_strategy="no",
            logging_steps=args.logging_steps,
            report_to=[],
            use_cpu=True,
            seed=args.seed,
        )
        trainer = Trainer(
            model=model,
            args=training_args,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
        )
        trainer.train()

        metrics = trainer.evaluate()
        print(metrics)


if __name__ == "__main__":
    main()
