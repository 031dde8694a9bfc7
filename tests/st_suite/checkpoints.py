"""Tiny random checkpoints in the layouts of the hub repos sentence-transformers' tests load.

Each repo is a dict of file path -> bytes for the stand-in hub (tests/hub_server.py). The weights are random
(2 layers, hidden 128 as in the real bert-tiny repos). The tokenizer is the bundled all-MiniLM-L6-v2's
(bert-base-uncased's, as the real repos have) cut to its first VOCAB tokens (the special tokens, every
character, the commonest words; other words become [UNK]): a small embedding matrix keeps the tests'
per-test copy of a model fast. The files are written as the real repos hold
them: the sentence-transformers 2.x layout for stsb-bert-tiny, the CrossEncoder 4.x layout (a transformers
classifier whose config.json names the activation) for the rerankers, sentence-transformers' own save for
the SPLADE repos. Nothing here needs the internet.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import torch
import transformers

VOCAB = 5000
TINY_BERT = dict(
    vocab_size=VOCAB,
    hidden_size=128,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=512,
    max_position_embeddings=512,
)
VERSIONS = {"sentence_transformers": "2.3.1", "transformers": "4.37.2", "pytorch": "2.2.0"}


def _dump(data: object) -> bytes:
    return json.dumps(data, indent=2).encode()


def _read_folder(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _save(model: transformers.PreTrainedModel, folder: Path, tokenizer_from: Path) -> None:
    model.save_pretrained(folder)
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(tokenizer_from / name, folder / name)
    tokenizer = json.loads((tokenizer_from / "tokenizer.json").read_text(encoding="utf-8"))
    tokenizer["model"]["vocab"] = {token: i for token, i in tokenizer["model"]["vocab"].items() if i < VOCAB}
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer), encoding="utf-8")
    vocab = (tokenizer_from / "vocab.txt").read_text(encoding="utf-8").splitlines()[:VOCAB]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")


def _random(model: transformers.PreTrainedModel, seed: int) -> transformers.PreTrainedModel:
    """Weights drawn at twice transformers' init scale: random, yet different texts get clearly different vectors."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name:
                continue
            p.copy_(torch.randn(p.shape, generator=generator) * 0.04)
    return model.eval()


def stsb_bert_tiny(tokenizer_from: Path, folder: Path, seed: int = 1) -> dict[str, bytes]:
    """sentence-transformers-testing/stsb-bert-tiny-safetensors: Transformer + mean Pooling, 2.x layout."""
    _save(_random(transformers.BertModel(transformers.BertConfig(**TINY_BERT)), seed=seed), folder, tokenizer_from)
    files = _read_folder(folder)
    files["modules.json"] = _dump(
        [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        ]
    )
    files["sentence_bert_config.json"] = _dump({"max_seq_length": 512, "do_lower_case": False})
    files["config_sentence_transformers.json"] = _dump({"__version__": VERSIONS})
    files["1_Pooling/config.json"] = _dump(
        {
            "word_embedding_dimension": 128,
            "pooling_mode_cls_token": False,
            "pooling_mode_mean_tokens": True,
            "pooling_mode_max_tokens": False,
            "pooling_mode_mean_sqrt_len_tokens": False,
        }
    )
    return files


def reranker_bert_tiny(
    tokenizer_from: Path, folder: Path, activation: str, version: str, seed: int
) -> dict[str, bytes]:
    """cross-encoder-testing/reranker-bert-tiny-gooaq-bce(-tanh-v3/-v4): a one-label BertForSequenceClassification
    whose config.json carries the CrossEncoder's activation, as CrossEncoder 3.x and 4.x saved it."""
    config = transformers.BertConfig(**TINY_BERT, num_labels=1)
    _save(_random(transformers.BertForSequenceClassification(config), seed=seed), folder, tokenizer_from)
    config_json = json.loads((folder / "config.json").read_text())
    key = "sbert_ce_default_activation_function" if version.startswith("3.") else "sentence_transformers"
    config_json[key] = activation if version.startswith("3.") else {"activation_fn": activation, "version": version}
    files = _read_folder(folder)
    files["config.json"] = _dump(config_json)
    return files


def reranker_bert_tiny_v54(tokenizer_from: Path, folder: Path) -> dict[str, bytes]:
    """cross-encoder-testing/reranker-bert-tiny-gooaq-bce-STv54: the same classifier saved by sentence-transformers."""
    from sentence_transformers import CrossEncoder

    raw = folder.with_name(folder.name + "-raw")
    config = transformers.BertConfig(**TINY_BERT, num_labels=1)
    _save(_random(transformers.BertForSequenceClassification(config), seed=3), raw, tokenizer_from)
    CrossEncoder(str(raw), device="cpu").save_pretrained(str(folder))
    return _read_folder(folder)


def splade_bert_tiny(tokenizer_from: Path, folder: Path) -> dict[str, bytes]:
    """sparse-encoder-testing/splade-bert-tiny-nq: a BertForMaskedLM + SpladePooling("max"), saved by
    sentence-transformers."""
    from sentence_transformers import SparseEncoder
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sparse_encoder.modules import SpladePooling

    raw = folder.with_name(folder.name + "-raw")
    _save(_random(transformers.BertForMaskedLM(transformers.BertConfig(**TINY_BERT)), seed=4), raw, tokenizer_from)
    transformer = Transformer(str(raw), transformer_task="fill-mask")
    SparseEncoder(modules=[transformer, SpladePooling("max")], device="cpu").save(str(folder))
    return _read_folder(folder)


def inference_free_splade_bert_tiny(tokenizer_from: Path, folder: Path) -> dict[str, bytes]:
    """sparse-encoder-testing/inference-free-splade-bert-tiny-nq: a Router with a SparseStaticEmbedding for
    queries and the MLM Transformer + SpladePooling for documents."""
    from sentence_transformers import SparseEncoder
    from sentence_transformers.base.modules import Router, Transformer
    from sentence_transformers.sparse_encoder.modules import SparseStaticEmbedding, SpladePooling

    raw = folder.with_name(folder.name + "-raw")
    _save(_random(transformers.BertForMaskedLM(transformers.BertConfig(**TINY_BERT)), seed=5), raw, tokenizer_from)
    document = [Transformer(str(raw), transformer_task="fill-mask"), SpladePooling("max")]
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(raw))
    weights = torch.rand(TINY_BERT["vocab_size"], generator=torch.Generator().manual_seed(6))
    query = [SparseStaticEmbedding(tokenizer=tokenizer, weight=weights, frozen=True)]
    router = Router.for_query_document(query_modules=query, document_modules=document)
    SparseEncoder(modules=[router], device="cpu").save(str(folder))
    return _read_folder(folder)


# The commits of stsb-bert-tiny that a test pins by hash: the newest (main's files) and an older one.
STSB = "sentence-transformers-testing/stsb-bert-tiny-safetensors"
STSB_NEWEST, STSB_OLDER = "f3cb857cba53019a20df283396bcca179cf051a4", "ba33022fdf0b0fc2643263f0726f44d0a07d0e24"


def build_repos(tokenizer_from: Path) -> dict[str, dict[str, bytes]]:
    """repo id -> files, for every repo the in-scope tests load; "repo id@commit" for a commit a test pins
    by hash (after the repo's main)."""
    sigmoid, tanh = "torch.nn.modules.activation.Sigmoid", "torch.nn.modules.activation.Tanh"
    bars = transformers.utils.logging.is_progress_bar_enabled()
    transformers.utils.logging.disable_progress_bar()  # the build runs outside any test's captured output
    try:
        with tempfile.TemporaryDirectory(prefix="st-suite-") as tmp:
            root = Path(tmp)
            return {
                STSB: (stsb := stsb_bert_tiny(tokenizer_from, root / "stsb")),
                f"{STSB}@{STSB_NEWEST}": stsb,
                f"{STSB}@{STSB_OLDER}": stsb_bert_tiny(tokenizer_from, root / "stsb-older", seed=8),
                "cross-encoder-testing/reranker-bert-tiny-gooaq-bce": reranker_bert_tiny(
                    tokenizer_from, root / "ce", sigmoid, "4.0.2", seed=2
                ),
                "cross-encoder-testing/reranker-bert-tiny-gooaq-bce-tanh-v3": reranker_bert_tiny(
                    tokenizer_from, root / "ce-v3", tanh, "3.4.1", seed=7
                ),
                "cross-encoder-testing/reranker-bert-tiny-gooaq-bce-tanh-v4": reranker_bert_tiny(
                    tokenizer_from, root / "ce-v4", tanh, "4.0.2", seed=7
                ),
                "cross-encoder-testing/reranker-bert-tiny-gooaq-bce-STv54": reranker_bert_tiny_v54(
                    tokenizer_from, root / "ce-v54"
                ),
                "sparse-encoder-testing/splade-bert-tiny-nq": splade_bert_tiny(tokenizer_from, root / "splade"),
                "sparse-encoder-testing/inference-free-splade-bert-tiny-nq": inference_free_splade_bert_tiny(
                    tokenizer_from, root / "if-splade"
                ),
            }
    finally:
        if bars:
            transformers.utils.logging.enable_progress_bar()
