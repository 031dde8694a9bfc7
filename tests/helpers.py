"""Helpers more than one test file (or script) uses: model builders, inputs and comparisons.

Fixtures live in conftest.py, which imports its builders from here too; test modules import from here,
never from each other or from conftest.
"""

from __future__ import annotations

import json
import os
import shutil
import string
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import transformers
from safetensors.torch import save_file

import bertlite
from bertlite.utils.capabilities import ISA_VARIABLES

ROOT = Path(__file__).resolve().parent.parent  # the repository
DATA = ROOT / "data"

TINY = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=64,
    # Dropout is off in eval mode anyway; zero keeps train-mode checks comparable.
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)


def make_hf_model(seed: int = 0, attn: str = "eager", add_pooling_layer: bool = True, **overrides: Any):
    """A random transformers BertModel whose weights are far from the init values
    (LayerNorm weights/biases included), so a wrongly loaded tensor shows."""
    torch.manual_seed(seed)
    config = transformers.BertConfig(**{**TINY, **overrides})
    config._attn_implementation = attn
    model = transformers.BertModel(config, add_pooling_layer=add_pooling_layer)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    return model.eval()


def to_bertlite(hf_model, attn: str = "eager") -> bertlite.BertModel:
    config = bertlite.BertConfig.from_dict(hf_model.config.to_dict())
    model = bertlite.BertModel(config, add_pooling_layer=hf_model.pooler is not None, attn_implementation=attn)
    model.load_state_dict(hf_model.state_dict(), strict=True)
    return model.eval()


def random_batch(config: transformers.BertConfig, batch: int = 3, seq: int = 11, seed: int = 1) -> dict:
    """Ids with padded rows (one row unpadded), pad id at padded positions, two segments."""
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(1, config.vocab_size, (batch, seq), generator=g)
    lengths = torch.linspace(seq, max(1, seq // 3), batch).long()
    attention_mask = (torch.arange(seq)[None, :] < lengths[:, None]).long()
    input_ids = input_ids.masked_fill(attention_mask == 0, config.pad_token_id or 0)
    token_type_ids = (torch.arange(seq)[None, :] >= (lengths[:, None] // 2)).long() * attention_mask
    token_type_ids = token_type_ids.clamp(max=config.type_vocab_size - 1)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}


def packed_inputs(batch: dict) -> dict:
    """A padded batch's real tokens as a packed batch: input_ids and token_type_ids (N,), lengths (B,)."""
    mask = batch["attention_mask"].bool()
    return {
        "input_ids": batch["input_ids"][mask],
        "token_type_ids": batch["token_type_ids"][mask],
        "lengths": mask.sum(1),
    }


def real_tokens(hidden: torch.Tensor, batch: dict) -> torch.Tensor:
    """(B, T, ...) rows of a padded batch -> (N, ...) rows of its real tokens."""
    return hidden[batch["attention_mask"].bool()]


def write_folder(folder: Path, config: dict, state_dict: dict, fmt: str = "safetensors") -> Path:
    """config.json and the weights (model.safetensors, or pytorch_model.bin with fmt="bin") in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    state_dict = {k: v.contiguous() for k, v in state_dict.items()}
    if fmt == "safetensors":
        save_file(state_dict, folder / "model.safetensors")
    else:
        torch.save(state_dict, folder / "pytorch_model.bin")
    return folder


# Model shapes BertModel is checked on (tests/test_parity.py, tests/layers/test_packed.py).
PARITY_CONFIGS = {
    "gelu-4heads": dict(),
    "gelu_new-2heads-3types": dict(
        hidden_act="gelu_new", num_attention_heads=2, type_vocab_size=3, layer_norm_eps=1e-5, pad_token_id=5
    ),
    "relu-8heads-1type": dict(
        hidden_act="relu", num_attention_heads=8, type_vocab_size=1, layer_norm_eps=1e-6, pad_token_id=1
    ),
    "tanh_gelu-1head-3layers": dict(
        hidden_act="gelu_pytorch_tanh",
        hidden_size=24,
        num_attention_heads=1,
        num_hidden_layers=3,
        layer_norm_eps=1e-3,
        pad_token_id=0,
    ),
    "quick_gelu-16heads": dict(
        hidden_act="quick_gelu", hidden_size=64, num_attention_heads=16, type_vocab_size=5, pad_token_id=98
    ),
    "silu-no-pad-id": dict(hidden_act="silu", pad_token_id=None, layer_norm_eps=1e-9),
}


# --- task heads ---------------------------------------------------------------------

TOL = dict(atol=1e-5, rtol=1e-5)
HEADS = (
    "BertForPreTraining",
    "BertForMaskedLM",
    "BertLMHeadModel",
    "BertForNextSentencePrediction",
    "BertForSequenceClassification",
    "BertForMultipleChoice",
    "BertForTokenClassification",
    "BertForQuestionAnswering",
)
# Per head, what its config needs (a decoder for the causal LM, labels for the classifiers).
HEAD_CONFIG: dict[str, dict[str, Any]] = {
    "BertLMHeadModel": dict(is_decoder=True),
    "BertForSequenceClassification": dict(num_labels=3),
    "BertForTokenClassification": dict(num_labels=5),
}
# Model shapes every head is checked on.
HEAD_CONFIGS = {
    "tiny": dict(),
    "gelu_new-2heads-3types-3layers": dict(
        hidden_act="gelu_new", num_attention_heads=2, type_vocab_size=3, num_hidden_layers=3, pad_token_id=5
    ),
}


def make_hf_head(name: str, seed: int = 0, attn: str = "eager", **overrides: Any) -> transformers.PreTrainedModel:
    """A random transformers head model, every weight (LayerNorms, biases, head) far from its init."""
    torch.manual_seed(seed)
    config = transformers.BertConfig(**{**TINY, **HEAD_CONFIG.get(name, {}), **overrides})
    config._attn_implementation = attn
    model = getattr(transformers, name)(config)
    with torch.no_grad():
        for p in model.parameters():  # a tied pair is one parameter here, so it stays tied
            p.normal_(0.0, 0.3)
    return model.eval()


def to_ours(hf: transformers.PreTrainedModel, attn: str = "eager") -> bertlite.BertPreTrainedModel:
    config = bertlite.BertConfig.from_dict(hf.config.to_dict())
    ours = getattr(bertlite, type(hf).__name__)(config, attn_implementation=attn)
    ours.load_state_dict(hf.state_dict(), strict=True)
    return ours.eval()


def head_inputs(name: str, config: transformers.BertConfig, seed: int = 1) -> dict[str, torch.Tensor]:
    """Padded inputs and labels for the head, with ignored (-100) and out-of-range positions."""
    batch = random_batch(config, batch=3, seq=11, seed=seed)
    g = torch.Generator().manual_seed(seed + 100)
    padded = batch["attention_mask"] == 0
    b, t = batch["input_ids"].shape
    token_labels = torch.randint(0, config.vocab_size, (b, t), generator=g).masked_fill(padded, -100)
    if name == "BertForPreTraining":
        token_labels[:, ::3] = -100
        return {**batch, "labels": token_labels, "next_sentence_label": torch.tensor([0, 1, 1])}
    if name == "BertForMaskedLM":
        token_labels[:, ::2] = -100
        return {**batch, "labels": token_labels}
    if name == "BertLMHeadModel":
        return {**batch, "labels": batch["input_ids"].masked_fill(padded, -100)}
    if name == "BertForNextSentencePrediction":
        return {**batch, "labels": torch.tensor([1, 0, 1])}
    if name == "BertForMultipleChoice":
        choices = {k: torch.stack([v, v.roll(1, dims=0)], dim=1) for k, v in batch.items()}  # (B, 2, T)
        return {**choices, "labels": torch.tensor([1, 0, 1])}
    if name == "BertForTokenClassification":
        return {**batch, "labels": torch.randint(0, config.num_labels, (b, t), generator=g).masked_fill(padded, -100)}
    if name == "BertForQuestionAnswering":
        # 40 is past the sequence: clamped to T and ignored, as in transformers.
        return {**batch, "start_positions": torch.tensor([0, 3, 40]), "end_positions": torch.tensor([[5], [4], [2]])}
    return {**batch, "labels": torch.tensor([2, 0, 1])}  # sequence classification, 3 labels


def assert_same(ours: Any, theirs: Any) -> float:
    """Every tensor field of two outputs close; returns the largest difference."""
    worst = 0.0
    for key in theirs.keys():
        if key in ("cache", "cross_attentions"):  # transformers' decoder extras: bertlite has neither
            continue
        a, b = ours[key], theirs[key]
        for x, y in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,), strict=True):
            torch.testing.assert_close(x, y, **TOL, msg=lambda m, key=key: f"{key}: {m}")
            worst = max(worst, (x - y).abs().max().item())
    assert list(ours.keys()) == [k for k in theirs.keys() if k not in ("cache", "cross_attentions")]
    return worst


def assert_tied(model: bertlite.BertPreTrainedModel) -> None:
    predictions = model.cls.predictions
    embeddings = model.bert.embeddings.word_embeddings.weight
    assert predictions.decoder.weight is embeddings and predictions.decoder.bias is predictions.bias
    assert predictions.decoder.weight.data_ptr() == embeddings.data_ptr()
    assert len(list(model.parameters())) == len(model.state_dict()) - 2  # one tensor each, two names


# --- the stand-in hub ---------------------------------------------------------------

REPO_ID = "org/tiny-bert"


def checkpoint_files(seed: int, tmp_path: Path) -> dict[str, bytes]:
    """config.json + model.safetensors of a tiny random transformers BertModel, as save_pretrained writes them."""
    folder = tmp_path / f"saved-{seed}"
    make_hf_model(seed=seed).save_pretrained(folder)
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def assert_weights(model: bertlite.BertModel, seed: int) -> None:
    reference = make_hf_model(seed=seed)
    for key, value in reference.state_dict().items():
        assert torch.equal(model.state_dict()[key], value), key
    inputs = random_batch(reference.config)
    with torch.no_grad():
        torch.testing.assert_close(model(**inputs).last_hidden_state, reference(**inputs).last_hidden_state)


# --- optional dependencies and what a process imports --------------------------------


def hide_modules(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    """Make `import name` raise ImportError for this test, as when the package is not installed
    (None in sys.modules does that)."""
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)


def modules_after_embed(model_path: Path, folder: Path, imports: str, packages: tuple[str, ...]) -> list[str]:
    """In a fresh interpreter on this checkout: `import sys, <imports>`, then `bertlite embed` of a two-line
    folder/in.txt with the real checkpoint at model_path (which must succeed and write two 384-d vectors).
    Returns the modules of the top-level `packages` it then holds, sorted."""
    (folder / "in.txt").write_text("hello\nworld\n")
    script = (
        f"import json, sys, {imports}\n"
        "from bertlite.cli import main\n"
        f"code = main(['embed', {str(model_path)!r}, '-i', 'in.txt', '-o', 'out.npy', '--quiet'])\n"
        "assert code == 0, code\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {packages!r})))\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=folder, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert np.load(folder / "out.npy").shape == (2, 384)
    return json.loads(result.stdout)


def run_fresh_without_isa_caps(
    args: list[str], *, drop: tuple[str, ...] = (), timeout: float = 120, **variables: str
) -> subprocess.CompletedProcess[str]:
    """`python *args` in a fresh interpreter on this checkout, which must succeed within `timeout` seconds:
    offline, with none of this process's ISA caps (ISA_VARIABLES), forced auto verdict (BERTLITE_AUTO_DTYPE)
    or `drop` in its environment and `variables` set. A kernel library reads its cap once, at its first use,
    so only a fresh process starts under given caps (and a fresh process is what a memory measurement needs)."""
    dropped = {*ISA_VARIABLES, "BERTLITE_AUTO_DTYPE", *drop}
    env = {name: value for name, value in os.environ.items() if name not in dropped}
    env |= {"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", **variables}
    result = subprocess.run(
        [sys.executable, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, result.stderr
    return result


# The vector widths torch dispatches to below this CPU's: bertlite's C++ kernels build each as its own library
# (their AVX2 and portable code paths), so each is checked in a process that runs torch at that width.
VECTOR_WIDTHS = ("default", "avx2", "avx512")
_HERE = torch.backends.cpu.get_cpu_capability().lower()
NARROWER_WIDTHS = VECTOR_WIDTHS[: VECTOR_WIDTHS.index(_HERE)] if _HERE in VECTOR_WIDTHS else ("default",)  # ARM, POWER


def run_at_vector_width(width: str, code: str) -> None:
    """Run `code` in a fresh interpreter whose torch runs at `width` (ATEN_CPU_CAPABILITY); it must succeed
    within 600 s (a first build of a kernel included) and print the capability it ran at, then "ok"."""
    done = run_fresh_without_isa_caps(["-c", code], timeout=600, ATEN_CPU_CAPABILITY=width)
    assert done.stdout.split()[-2:] == [width.upper(), "ok"]


# A damaged tokenizer file, as a user meets one: name -> (file to damage, its bytes or None for a folder).
DAMAGED_TOKENIZERS = {
    "truncated": ("tokenizer.json", b'{"version": "1.0", "truncation": null, "added_tok'),
    "empty_object": ("tokenizer.json", b"{}"),
    "binary": ("tokenizer.json", bytes(range(256)) * 4),
    "folder": ("tokenizer.json", None),
    "binary_vocab": ("vocab.txt", bytes(range(256)) * 4),
    "vocab_without_special_tokens": ("vocab.txt", b"hello\nworld\n"),
}


def damaged_tokenizer_folder(
    real_model_path: Path, folder: Path, damage: str, weights_from: Path | None = None
) -> Path:
    """The real checkpoint's tokenizer files (vocab.txt always there) with one of them damaged (DAMAGED_TOKENIZERS);
    with weights_from, also that model folder's config.json and weights, so that the folder loads as a model."""
    folder.mkdir()
    for name in ("tokenizer_config.json", "vocab.txt", "tokenizer.json"):
        shutil.copy(real_model_path / name, folder / name)
    for name in ("config.json", "model.safetensors") if weights_from is not None else ():
        shutil.copy(weights_from / name, folder / name)
    name, data = DAMAGED_TOKENIZERS[damage]
    if name == "vocab.txt":
        (folder / "tokenizer.json").unlink()  # vocab.txt is read only without tokenizer.json
    (folder / name).unlink()
    if data is None:
        (folder / name).mkdir()
    else:
        (folder / name).write_bytes(data)
    return folder


def cross_encoder_folder(
    real_model_path: Path,
    folder: Path,
    *,
    num_labels: int,
    seed: int = 0,
    problem_type: str | None = None,
    activation_fn: torch.nn.Module | None = None,
    save_with_st: bool = True,
    max_length: int | None = None,
    id2label: dict[int, str] | None = None,
) -> Path:
    """A random transformers BertForSequenceClassification with the real tokenizer, saved with
    sentence-transformers (or as transformers saves it, save_with_st=False); with save_with_st, the
    transformers folder it was made from is folder-raw."""
    torch.manual_seed(seed)
    labels = {"id2label": id2label} if id2label is not None else {}
    config = transformers.BertConfig(
        **{**TINY, "vocab_size": 30522, "max_position_embeddings": 512},
        num_labels=num_labels,
        problem_type=problem_type,
        **labels,
    )
    model = transformers.BertForSequenceClassification(config)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)  # far from the init, so a score that ignores a weight shows
    raw = folder.with_name(folder.name + "-raw") if save_with_st else folder
    model.save_pretrained(raw)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(real_model_path / name, raw / name)
    if save_with_st:
        from sentence_transformers import CrossEncoder as STCrossEncoder

        st = STCrossEncoder(str(raw), device="cpu", max_length=max_length, activation_fn=activation_fn)
        st.save_pretrained(str(folder))
    return folder


def masked_lm_folder(real_model_path: Path, folder: Path, seed: int = 0) -> Path:
    """A random 2-layer BertForMaskedLM (hidden 16) saved by transformers with the real tokenizer:
    the base of splade_folder."""
    torch.manual_seed(seed)
    config = transformers.BertConfig(
        vocab_size=30522,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=24,
        max_position_embeddings=64,
    )
    model = transformers.BertForMaskedLM(config).eval()
    with torch.no_grad():
        for p in model.parameters():  # far from init, LayerNorms and the head's bias included
            p.normal_(0.0, 0.3)
    model.save_pretrained(folder)
    transformers.AutoTokenizer.from_pretrained(real_model_path).save_pretrained(folder)
    return folder


def splade_folder(
    base: Path,
    folder: Path,
    *,
    pooling: str = "max",
    legacy_module: bool = False,
    max_seq_length: int | None = None,
    **st_kwargs: Any,
) -> Path:
    """sentence-transformers' SparseEncoder of the masked-LM folder `base` (masked_lm_folder): its MLM
    Transformer (the older MLMTransformer module with legacy_module) and SpladePooling(pooling), with
    `st_kwargs` (prompts, max_active_dims, ...), saved to `folder`."""
    from sentence_transformers import SparseEncoder
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sparse_encoder.modules import MLMTransformer, SpladePooling

    module = MLMTransformer if legacy_module else Transformer
    task = {} if legacy_module else {"transformer_task": "fill-mask"}
    transformer = module(str(base), max_seq_length=max_seq_length, **task)
    SparseEncoder(modules=[transformer, SpladePooling(pooling)], device="cpu", **st_kwargs).save(str(folder))
    return folder


# colbert_folder's options for a ColBERT v2-style folder: fixed [MASK] query expansion (not attended),
# a punctuation skiplist, [Q]/[D] prompts and markers.
COLBERT_OPTIONS: dict[str, Any] = dict(
    transformer_kwargs={
        "document_length": 40,
        "query_expansion": {"strategy": "fixed", "attend": False, "length": 12},
    },
    skiplist=list(string.punctuation),
    prompts={"query": "[Q] ", "document": "[D] "},
    markers=True,
)


def colbert_folder(
    real_model_path: Path,
    folder: Path,
    *,
    transformer_kwargs: dict[str, Any] | None = None,
    skiplist: list[str] | None = None,
    dense_bias: bool = False,
    dense_activation: torch.nn.Module | None = None,
    prompts: dict[str, str] | None = None,
    markers: bool = False,
    spread_tokens: bool = False,
    seed: int = 3,
) -> Path:
    """A tiny random ColBERT model saved by sentence-transformers' MultiVectorEncoder to `folder`: a
    BertModel (hidden 32, the real tokenizer, "[Q]" and "[D]" added as special tokens with markers),
    Dense 32 -> 16 (`dense_bias`, `dense_activation`; None: identity), MultiVectorMask (`skiplist`
    words dropped from documents) and Normalize. The transformers folder of its BertModel is folder-hf.

    Args:
        transformer_kwargs: the Transformer module's options (query_length, document_length, query_expansion).
        spread_tokens: draw the BertModel's weights at std 0.1, LayerNorm weights around 1: its token vectors
            then differ (mean cosine about 0.4). make_hf_model's LayerNorm weights around 0 make every LayerNorm
            output about its bias, so all tokens point one way (cosine above 0.99), which hides precision errors.
    """
    from sentence_transformers import MultiVectorEncoder
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask

    tokenizer = transformers.AutoTokenizer.from_pretrained(str(real_model_path))
    if markers:
        tokenizer.add_special_tokens({"additional_special_tokens": ["[Q]", "[D]"]})
    base = folder.with_name(folder.name + "-hf")
    bert = make_hf_model(seed=seed, vocab_size=len(tokenizer), add_pooling_layer=False)
    if spread_tokens:
        with torch.no_grad():
            for name, p in bert.named_parameters():
                p.normal_(1.0 if name.endswith("LayerNorm.weight") else 0.0, 0.1)
    bert.save_pretrained(base)
    tokenizer.save_pretrained(base)
    torch.manual_seed(seed + 1)
    activation = dense_activation if dense_activation is not None else torch.nn.Identity()
    dense = Dense(32, 16, bias=dense_bias, activation_function=activation, module_input_name="token_embeddings")
    with torch.no_grad():
        dense.linear.weight.normal_(0.0, 0.5)  # far from the init, so a wrong projection shows
    modules = [
        Transformer(str(base), **(transformer_kwargs or {})),
        dense,
        MultiVectorMask(skiplist_words=skiplist or []),
        Normalize(module_input_name="token_embeddings"),
    ]
    MultiVectorEncoder(modules=modules, prompts=prompts, device="cpu").save_pretrained(str(folder))
    return folder


def bert_m3_folder(real_model_path: Path, folder: Path, seed: int = 0) -> Path:
    """A tiny random BERT (hidden 32, the real tokenizer) with BGE-M3's two heads saved beside it as
    FlagEmbedding saves them: colbert_linear.pt (32 -> 16) and sparse_linear.pt (32 -> 1)."""
    bert = make_hf_model(seed=seed, vocab_size=30522, max_position_embeddings=512, add_pooling_layer=False)
    with torch.no_grad():
        for name, p in bert.named_parameters():  # LayerNorms around 1, so token rows differ
            p.normal_(1.0 if "LayerNorm.weight" in name else 0.0, 0.2)
    bert.save_pretrained(folder)
    transformers.AutoTokenizer.from_pretrained(real_model_path).save_pretrained(folder)
    save_m3_heads(folder, hidden=32, colbert_dim=16)
    return folder


def save_m3_heads(folder: Path, hidden: int, colbert_dim: int) -> None:
    """BGE-M3's two random heads in `folder` as FlagEmbedding saves them: colbert_linear.pt (hidden ->
    colbert_dim) and sparse_linear.pt (hidden -> 1), with torch's global generator (seed it first)."""
    colbert, sparse = torch.nn.Linear(hidden, colbert_dim), torch.nn.Linear(hidden, 1)
    with torch.no_grad():
        for p in (*colbert.parameters(), *sparse.parameters()):
            p.normal_(0.0, 0.5)
        sparse.bias.fill_(0.05)  # some weights positive, some cut by relu
    torch.save(colbert.state_dict(), folder / "colbert_linear.pt")
    torch.save(sparse.state_dict(), folder / "sparse_linear.pt")


@torch.inference_mode()
def m3_reference(folder: Path, texts: list[str]) -> dict[str, list]:
    """BGE-M3's three outputs of bert_m3_folder's model, computed with transformers' BertModel (eager, float32)
    one text at a time: the first token's row normalized; relu(sparse_linear) per token, the largest per
    token id, [CLS], [PAD], [UNK] and zeros left out; colbert_linear of every row but the first, normalized."""
    model = transformers.BertModel.from_pretrained(folder, add_pooling_layer=False, attn_implementation="eager")
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    colbert, sparse = torch.nn.Linear(32, 16), torch.nn.Linear(32, 1)
    colbert.load_state_dict(torch.load(folder / "colbert_linear.pt", weights_only=True))
    sparse.load_state_dict(torch.load(folder / "sparse_linear.pt", weights_only=True))
    unused = {tokenizer.cls_token_id, tokenizer.pad_token_id, tokenizer.unk_token_id}
    out: dict[str, list] = {"dense_vecs": [], "lexical_weights": [], "colbert_vecs": []}
    for text in texts:
        batch = tokenizer(text, return_tensors="pt")
        hidden = model.eval()(**batch).last_hidden_state[0]
        out["dense_vecs"].append(torch.nn.functional.normalize(hidden[0], dim=-1).numpy())
        weights: dict[str, float] = {}
        ids, values = batch["input_ids"][0].tolist(), torch.relu(sparse(hidden))[:, 0].tolist()
        for token_id, weight in zip(ids, values, strict=True):
            if token_id not in unused and weight > weights.get(str(token_id), 0.0):
                weights[str(token_id)] = weight
        out["lexical_weights"].append(weights)
        out["colbert_vecs"].append(torch.nn.functional.normalize(colbert(hidden[1:]), dim=-1).numpy())
    return out
