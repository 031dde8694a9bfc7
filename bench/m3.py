"""BGE-M3: bertlite M3Encoder.encode against FlagEmbedding's BGEM3FlagModel.encode, all three outputs, in rounds.

No BGE-M3 checkpoint ships offline (the real one is XLM-RoBERTa large), so the job builds a folder of the
same form as FlagEmbedding saves one: the all-MiniLM-L6-v2 encoder and tokenizer with BGE-M3's two heads
beside it (`colbert_linear.pt`, hidden -> hidden, and `sparse_linear.pt`, hidden -> 1, random; the sparse
bias set so a text keeps about half its tokens, as a trained head does). Both libraries encode the same
corpus texts with dense vectors, lexical weights and ColBERT vectors at once, batch 32, max length 256,
float32 (FlagEmbedding runs float32 on a CPU); bertlite in its `auto` dtype too. The median round counts,
with the per-round ratio to FlagEmbedding and how far the outputs are apart.
"""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.common import PAUSE_S, add_rounds_arguments, rates, read_corpus, run_on_built_folder, table, timed_rounds
from bench.runners import BATCH_SIZE, MAX_LENGTH

ALL = {"return_dense": True, "return_sparse": True, "return_colbert_vecs": True}


def build_m3_folder(model_path: str, folder: Path, seed: int = 0) -> Path:
    """Save `model_path`'s encoder and tokenizer with random BGE-M3 heads, as FlagEmbedding saves a model.

    Args:
        model_path: a BERT checkpoint folder.
        folder: where the model is written.
        seed: the heads' random init.

    Returns:
        The folder.
    """
    import transformers

    model = transformers.AutoModel.from_pretrained(model_path, add_pooling_layer=False).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_path)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    hidden = model.config.hidden_size
    torch.manual_seed(seed)
    colbert, sparse = torch.nn.Linear(hidden, hidden), torch.nn.Linear(hidden, 1)
    batch = tokenizer(read_corpus(32), padding=True, truncation=True, max_length=MAX_LENGTH, return_tensors="pt")
    with torch.no_grad():
        rows = model(**batch).last_hidden_state[batch["attention_mask"].bool()]
        sparse.bias -= sparse(rows).median()  # about half the tokens above zero
    torch.save(colbert.state_dict(), folder / "colbert_linear.pt")
    torch.save(sparse.state_dict(), folder / "sparse_linear.pt")
    return folder


def bench_m3(folder: Path, texts: list[str], rounds: int, pause_s: float = PAUSE_S) -> dict[str, Any]:
    """Time both libraries' encode of all three outputs on `texts` in rotated rounds and compare them.

    Args:
        folder: build_m3_folder's folder.
        texts: the texts each encodes per round.
        rounds: timed rounds, after a warm-up call on 64 texts.
        pause_s: seconds idle before each timed run.

    Returns:
        Per configuration its seconds per round, texts/s and per-round ratio to FlagEmbedding; how far
        bertlite float32's outputs are from FlagEmbedding's.
    """
    from FlagEmbedding import BGEM3FlagModel

    from bertlite import M3Encoder

    flag = BGEM3FlagModel(str(folder), use_fp16=False, devices="cpu", batch_size=BATCH_SIZE)
    ours = {
        "bertlite_fp32": M3Encoder.from_pretrained(folder, dtype="float32", max_length=MAX_LENGTH),
        "bertlite_auto": M3Encoder.from_pretrained(folder, dtype="auto", max_length=MAX_LENGTH),
    }
    runs = {name: (lambda t, m=m: m.encode(t, batch_size=BATCH_SIZE, **ALL)) for name, m in ours.items()}
    runs["flagembedding_fp32"] = lambda t: flag.encode(t, batch_size=BATCH_SIZE, max_length=MAX_LENGTH, **ALL)
    for run in runs.values():
        run(texts[:64])
    seconds, outputs = timed_rounds(
        {name: partial(run, texts) for name, run in runs.items()}, rounds, pause_s, len(texts)
    )
    configs = rates(seconds, len(texts), "flagembedding_fp32", "per_round_x_flagembedding")
    return {
        "texts": len(texts),
        "rounds": rounds,
        "pause_s": pause_s,
        "batch_size": BATCH_SIZE,
        "max_length": MAX_LENGTH,
        "threads": torch.get_num_threads(),
        "precision_auto": ours["bertlite_auto"].precision,
        "configs": configs,
        **differences(outputs["bertlite_fp32"], outputs["flagembedding_fp32"]),
    }


def differences(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, Any]:
    """How far two encode() results of the same texts are apart: dense and ColBERT max abs difference,
    the texts whose lexical weights name other tokens, and the largest weight difference over shared ones."""
    lexical = zip(ours["lexical_weights"], theirs["lexical_weights"], strict=True)
    other_keys = shared_diff = 0.0
    for a, b in lexical:
        other_keys += set(a) != set(b)
        shared = set(a) & set(b)
        shared_diff = max([shared_diff, *(abs(float(a[k]) - float(b[k])) for k in shared)])
    colbert = [np.abs(a - b).max() for a, b in zip(ours["colbert_vecs"], theirs["colbert_vecs"], strict=True)]
    return {
        "dense_max_abs_diff": float(np.abs(ours["dense_vecs"] - theirs["dense_vecs"]).max()),
        "lexical_texts_with_other_tokens": int(other_keys),
        "lexical_max_abs_diff": float(shared_diff),
        "colbert_max_abs_diff": float(max(colbert)),
        "mean_lexical_tokens": float(np.mean([len(w) for w in theirs["lexical_weights"]])),
    }


def format_m3(result: dict[str, Any]) -> str:
    """The table of bench_m3's result."""
    return table(
        f"BGE-M3 encode, dense + lexical + ColBERT: {result['texts']} corpus texts, batch {result['batch_size']}, "
        f"max length {result['max_length']}, {result['threads']} threads, median of {result['rounds']} rounds "
        f"(bertlite auto: {result['precision_auto']})",
        f"{'library':22} {'texts/s':>8} {'x Flag/rnd':>11}",
        (
            f"{name:22} {r['texts_per_s']:8.1f} {r['per_round_x_flagembedding']:11.2f}"
            for name, r in result["configs"].items()
        ),
        f"bertlite fp32 vs FlagEmbedding: dense max abs diff {result['dense_max_abs_diff']:.1e}, ColBERT "
        f"{result['colbert_max_abs_diff']:.1e}, lexical {result['lexical_max_abs_diff']:.1e} "
        f"({result['lexical_texts_with_other_tokens']} texts with other tokens; "
        f"{result['mean_lexical_tokens']:.1f} tokens per text)",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The m3 job's flags."""
    add_rounds_arguments(parser, texts=1000, pause=True)
    parser.add_argument("--folder", type=Path, help="build the BGE-M3 folder here (default: a temporary folder)")


def run(args: argparse.Namespace) -> None:
    """Build the BGE-M3 folder, run the m3 job and write the JSON."""
    run_on_built_folder(args, "m3", ("FlagEmbedding",), build_m3_folder, bench_m3, format_m3)
