"""JinaBERT-v2 (jina-embeddings-v2-base-en's layout: model_type "bert", ALiBi, a gated feed-forward, auto_map to
jinaai/jina-bert-implementation's code) read without running that code, against a float64 reference of the
original's equations written here; padded, packed and long texts; what it does not compute is refused by name.

transformers has no JinaBERT module, so the reference is the original's model code as others read it:
huggingface/text-embeddings-inference, backends/candle/src/models/jina.rs (embeddings: words + token types,
LayerNorm, no positions; attention: BERT's query/key/value, scores / sqrt(d) + the ALiBi bias, output dense and
LayerNorm with the residual; mlp: gated_layers split into gated (first half) then non_gated, act(gated) *
non_gated, wo, layernorm with the residual) and backends/candle/src/alibi.rs (the slopes, -slope * |i - j|);
copies of the remote code's modeling_bert.py (JinaBertGLUMLP: act nn.GELU for "geglu", nn.ReLU for "reglu";
_get_alibi_head_slopes) read the same.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

import bertlite
from bertlite.config import JinaBertConfig
from bertlite.models.jina_bert import alibi_head_slopes
from bertlite.models.jina_bert_heads import JinaBertForMaskedLM, JinaBertForSequenceClassification, JinaBertModel

IMPL = "jinaai/jina-bert-implementation"
# jina-embeddings-v2-base-code's code: LayerNorms on query and key, the layer's own post-norms.
QK_IMPL = "jinaai/jina-bert-v2-qk-post-norm"


def auto_map(repo: str) -> dict[str, str]:
    """config.json's auto_map naming a repo's classes, as the hub folders write it."""
    return {
        "AutoConfig": f"{repo}--configuration_bert.JinaBertConfig",
        "AutoModel": f"{repo}--modeling_bert.JinaBertModel",
        "AutoModelForMaskedLM": f"{repo}--modeling_bert.JinaBertForMaskedLM",
        "AutoModelForSequenceClassification": f"{repo}--modeling_bert.JinaBertForSequenceClassification",
    }


AUTO_MAP = auto_map(IMPL)
VARIANTS = {"base": AUTO_MAP, "qk-post-norm": auto_map(QK_IMPL)}
# Six heads: not a power of 2, so the slopes take the original's second sequence.
TINY = {
    "vocab_size": 60,
    "hidden_size": 24,
    "num_hidden_layers": 2,
    "num_attention_heads": 6,
    "intermediate_size": 40,
    "max_position_embeddings": 4096,
    "type_vocab_size": 2,
}
TOL = 1e-5


def original_config(**overrides) -> dict:
    """config.json as jina-embeddings-v2-base-en's writes it (its fields, the original's code in auto_map)."""
    config = {
        "model_type": "bert",
        "architectures": ["JinaBertForMaskedLM"],
        "auto_map": AUTO_MAP,
        "position_embedding_type": "alibi",
        "feed_forward_type": "geglu",
        "attn_implementation": "torch",
        "emb_pooler": "mean",
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.0,
        "layer_norm_eps": 1e-12,
        "pad_token_id": 0,
        "initializer_range": 0.02,
        **TINY,
    }
    return {**config, **overrides}


def original_state(config: dict, head: str = "Model", seed: int = 0) -> dict[str, torch.Tensor]:
    """Random weights under the original's keys (a head's base model under `bert.`), far from any init."""
    g = torch.Generator().manual_seed(seed)
    H, inter, V = config["hidden_size"], config["intermediate_size"], config["vocab_size"]

    def rand(*shape: int, mean: float = 0.0) -> torch.Tensor:
        return mean + 0.3 * torch.randn(*shape, generator=g)

    def norm(prefix: str) -> dict[str, torch.Tensor]:
        return {prefix + ".weight": rand(H, mean=1.0), prefix + ".bias": rand(H)}

    def linear(prefix: str, out: int, inp: int, bias: bool = True) -> dict[str, torch.Tensor]:
        return {prefix + ".weight": rand(out, inp) / math.sqrt(inp), **({prefix + ".bias": rand(out)} if bias else {})}

    state = {
        "embeddings.word_embeddings.weight": rand(V, H),
        "embeddings.token_type_embeddings.weight": rand(config["type_vocab_size"], H),
        **norm("embeddings.LayerNorm"),
        **linear("pooler.dense", H, H),
    }
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        for name in ("query", "key", "value"):
            state.update(linear(p + "attention.self." + name, H, H))
        state.update(linear(p + "attention.output.dense", H, H))
        state.update(norm(p + "attention.output.LayerNorm"))
        if is_qk_post_norm(config):
            state.update({**norm(p + "attention.self.layer_norm_q"), **norm(p + "attention.self.layer_norm_k")})
            state.update({**norm(p + "layer_norm_1"), **norm(p + "layer_norm_2")})
            state.update(linear(p + "mlp.up_gated_layer", 2 * inter, H, bias=False))
            state.update(linear(p + "mlp.down_layer", H, inter))
            continue
        state.update(linear(p + "mlp.gated_layers", 2 * inter, H, bias=False))
        state.update(linear(p + "mlp.wo", H, inter))
        state.update(norm(p + "mlp.layernorm"))
    if head == "Model":
        return state
    state = {"bert." + k: v for k, v in state.items()}
    if head == "ForSequenceClassification":
        state.update(linear("classifier", len(config["id2label"]), H))
    else:
        state.update(linear("cls.predictions.transform.dense", H, H))
        state.update(norm("cls.predictions.transform.LayerNorm"))
        state["cls.predictions.bias"] = rand(V)
        state["cls.predictions.decoder.weight"] = state["bert.embeddings.word_embeddings.weight"]
    return state


def write_original(folder: Path, head: str = "Model", seed: int = 0, **overrides) -> Path:
    """A folder in the original layout: config.json and model.safetensors with the original's keys."""
    config = original_config(architectures=["JinaBert" + head], **overrides)
    if head == "ForSequenceClassification":
        config.setdefault("id2label", {"0": "a", "1": "b", "2": "c"})
    state = original_state(config, head, seed)
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous().clone() for k, v in state.items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def is_qk_post_norm(config: dict) -> bool:
    """Whether config.json names jina-embeddings-v2-base-code's qk-post-norm code."""
    return config["auto_map"]["AutoModel"].startswith(QK_IMPL + "--")


def slopes_of(n: int) -> list[float]:
    """The original's _get_alibi_head_slopes, written out from it."""

    def power_of_2(n: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + slopes_of(2 * closest)[0::2][: n - closest]


def reference(state: dict[str, torch.Tensor], config: dict, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """last_hidden_state (B, T, H) by the original's equations in float64, from its config.json and weights."""
    sd = {k.removeprefix("bert."): v.double() for k, v in state.items()}
    H, nh = config["hidden_size"], config["num_attention_heads"]
    d, eps, inter = H // nh, config["layer_norm_eps"], config["intermediate_size"]
    act = {"geglu": F.gelu, "reglu": F.relu}[config["feed_forward_type"]]
    ids, mask = batch["input_ids"], batch["attention_mask"]
    B, T = ids.shape
    types = batch.get("token_type_ids", torch.zeros_like(ids))
    x = sd["embeddings.word_embeddings.weight"][ids] + sd["embeddings.token_type_embeddings.weight"][types]
    x = F.layer_norm(x, (H,), sd["embeddings.LayerNorm.weight"], sd["embeddings.LayerNorm.bias"], eps)
    positions = torch.arange(T, dtype=torch.float64)
    distance = (positions[None, :] - positions[:, None]).abs()  # (T, T)
    alibi = -torch.tensor(slopes_of(nh), dtype=torch.float64)[:, None, None] * distance  # (nh, T, T)
    padding = torch.zeros(B, 1, 1, T, dtype=torch.float64).masked_fill(~mask.bool()[:, None, None], -math.inf)
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}."

        def lin(name: str, t: torch.Tensor) -> torch.Tensor:
            return F.linear(t, sd[p + name + ".weight"], sd.get(p + name + ".bias"))  # noqa: B023

        q, k, v = (lin("attention.self." + n, x) for n in ("query", "key", "value"))
        if is_qk_post_norm(config):  # LayerNorm over the whole query and key, before the heads are split
            q = F.layer_norm(q, (H,), *ln(sd, p + "attention.self.layer_norm_q"), eps)
            k = F.layer_norm(k, (H,), *ln(sd, p + "attention.self.layer_norm_k"), eps)
        q, k, v = (t.view(B, T, nh, d).transpose(1, 2) for t in (q, k, v))  # (B, nh, T, d)
        scores = q @ k.transpose(-1, -2) / math.sqrt(d) + padding
        context = (torch.softmax(scores + alibi, -1) @ v).transpose(1, 2).reshape(B, T, H)
        attention = F.layer_norm(
            lin("attention.output.dense", context) + x, (H,), *ln(sd, p + "attention.output.LayerNorm"), eps
        )
        if is_qk_post_norm(config):
            h = F.layer_norm(x + attention, (H,), *ln(sd, p + "layer_norm_1"), eps)
            up_gated = lin("mlp.up_gated_layer", h)
            up, gated = up_gated[..., :inter], up_gated[..., inter:]
            x = F.layer_norm(h + lin("mlp.down_layer", up * act(gated)), (H,), *ln(sd, p + "layer_norm_2"), eps)
            continue
        x = attention
        hidden = lin("mlp.gated_layers", x)
        gated, non_gated = hidden[..., :inter], hidden[..., inter:]
        x = F.layer_norm(lin("mlp.wo", act(gated) * non_gated) + x, (H,), *ln(sd, p + "mlp.layernorm"), eps)
    return x


def ln(sd: dict[str, torch.Tensor], prefix: str) -> tuple[torch.Tensor, torch.Tensor]:
    """A LayerNorm's weight and bias."""
    return sd[prefix + ".weight"], sd[prefix + ".bias"]


def read_state(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors import safe_open

    with safe_open(folder / "model.safetensors", "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def batch_of(lengths: list[int], vocab: int = TINY["vocab_size"], seed: int = 1) -> dict[str, torch.Tensor]:
    """A padded batch of texts of these lengths, random ids (never 0, the padding id), token types 0 and 1."""
    g = torch.Generator().manual_seed(seed)
    T = max(lengths)
    ids = torch.randint(1, vocab, (len(lengths), T), generator=g)
    mask = (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).long()
    types = (torch.arange(T)[None, :] >= torch.tensor(lengths)[:, None] // 2).long() * mask
    return {"input_ids": ids * mask, "attention_mask": mask, "token_type_ids": types}


def test_alibi_slopes_are_the_originals() -> None:
    assert alibi_head_slopes(8) == [2.0**-i for i in range(1, 9)]
    twelve = [2.0**-i for i in range(1, 9)] + [2.0 ** -(i + 0.5) for i in range(4)]
    np.testing.assert_allclose(alibi_head_slopes(12), twelve, rtol=1e-15)
    for n in (1, 2, 6, 12, 16, 20):
        assert alibi_head_slopes(n) == slopes_of(n)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("feed_forward_type", ["geglu", "reglu"])
def test_the_original_layout_equals_the_float64_reference(variant, feed_forward_type, tmp_path) -> None:
    folder = write_original(tmp_path / "jina", feed_forward_type=feed_forward_type, auto_map=VARIANTS[variant])
    ours = bertlite.AutoModel.from_pretrained(folder, attn_implementation="eager")
    assert type(ours) is JinaBertModel and ours.config.model_type == "jina_bert"
    assert ours.config.feed_forward_type == feed_forward_type
    assert ours.config.qk_post_norm == (variant == "qk-post-norm")
    batch = batch_of([9, 5, 1])
    real = batch["attention_mask"].bool()
    expected = reference(read_state(folder), json.loads((folder / "config.json").read_text()), batch)[real]
    sdpa = bertlite.AutoModel.from_pretrained(folder, attn_implementation="sdpa")
    with torch.no_grad():
        eager = ours(**batch).last_hidden_state
        got = {"eager": eager[real], "sdpa": sdpa(**batch).last_hidden_state[real]}
        packed = {"input_ids": batch["input_ids"][real], "token_type_ids": batch["token_type_ids"][real]}
        got["packed"] = sdpa(**packed, lengths=real.sum(dim=1)).last_hidden_state  # each text's distances from 0
        got["packed eager"] = ours(**packed, lengths=real.sum(dim=1)).last_hidden_state
        # Padding changes no text's output: each text alone equals its row of the batch.
        for row, length in enumerate(real.sum(dim=1).tolist()):
            alone = {k: v[row : row + 1, :length] for k, v in batch.items()}
            torch.testing.assert_close(ours(**alone).last_hidden_state[0], eager[row, :length], atol=TOL, rtol=0)
    for name, out in got.items():
        torch.testing.assert_close(out.double(), expected, atol=TOL, rtol=0, msg=name)


@pytest.mark.slow  # over a second: a 2,048-token float64 reference
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_long_text_equals_the_reference(variant, tmp_path) -> None:
    folder = write_original(tmp_path / "jina", auto_map=VARIANTS[variant])
    batch = batch_of([2048, 1500])
    real = batch["attention_mask"].bool()
    expected = reference(read_state(folder), json.loads((folder / "config.json").read_text()), batch)[real]
    ours = bertlite.AutoModel.from_pretrained(folder, attn_implementation="sdpa")
    with torch.no_grad():
        got = ours(**batch).last_hidden_state[real]
        packed = ours(batch["input_ids"][real], token_type_ids=batch["token_type_ids"][real], lengths=real.sum(1))
    torch.testing.assert_close(got.double(), expected, atol=TOL, rtol=0)
    torch.testing.assert_close(packed.last_hidden_state.double(), expected, atol=TOL, rtol=0)


def test_the_heads_equal_the_reference(tmp_path) -> None:
    batch = batch_of([7, 4])
    classifier_folder = write_original(tmp_path / "cls", "ForSequenceClassification")
    model = bertlite.AutoModelForSequenceClassification.from_pretrained(classifier_folder, attn_implementation="eager")
    assert type(model) is JinaBertForSequenceClassification and model.config.num_labels == 3
    state = read_state(classifier_folder)
    hidden = reference(state, json.loads((classifier_folder / "config.json").read_text()), batch)
    pooled = torch.tanh(
        F.linear(hidden[:, 0], state["bert.pooler.dense.weight"].double(), state["bert.pooler.dense.bias"].double())
    )
    logits = F.linear(pooled, state["classifier.weight"].double(), state["classifier.bias"].double())
    mlm_folder = write_original(tmp_path / "mlm", "ForMaskedLM")
    mlm = bertlite.AutoModelForMaskedLM.from_pretrained(mlm_folder, attn_implementation="eager")
    assert type(mlm) is JinaBertForMaskedLM
    state = {k: v.double() for k, v in read_state(mlm_folder).items()}
    hidden = reference(state, json.loads((mlm_folder / "config.json").read_text()), batch)
    t = F.gelu(
        F.linear(hidden, state["cls.predictions.transform.dense.weight"], state["cls.predictions.transform.dense.bias"])
    )
    t = F.layer_norm(t, (TINY["hidden_size"],), *ln(state, "cls.predictions.transform.LayerNorm"), 1e-12)
    scores = F.linear(t, state["bert.embeddings.word_embeddings.weight"], state["cls.predictions.bias"])
    with torch.no_grad():
        torch.testing.assert_close(model(**batch).logits.double(), logits, atol=TOL, rtol=0)
        real = batch["attention_mask"].bool()
        torch.testing.assert_close(mlm(**batch).logits[real].double(), scores[real], atol=TOL, rtol=0)
        # The masked-LM checkpoint (the hub embedders' architectures) read as the base model under its `bert.` prefix.
        base = bertlite.AutoModel.from_pretrained(mlm_folder, attn_implementation="eager")
        torch.testing.assert_close(base(**batch).last_hidden_state[real].double(), hidden[real], atol=TOL, rtol=0)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_save_pretrained_writes_the_original_layout_back(variant, tmp_path) -> None:
    folder = write_original(tmp_path / "jina", auto_map=VARIANTS[variant])
    ours = JinaBertModel.from_pretrained(folder)
    ours.save_pretrained(tmp_path / "saved")
    written = json.loads((tmp_path / "saved" / "config.json").read_text())
    original = json.loads((folder / "config.json").read_text())
    assert written["model_type"] == "bert" and written["auto_map"] == VARIANTS[variant]
    for key in ("position_embedding_type", "feed_forward_type", "attn_implementation", "emb_pooler", *TINY):
        assert written[key] == original[key], key
    assert sorted(read_state(tmp_path / "saved")) == sorted(read_state(folder))
    again = bertlite.AutoModel.from_pretrained(tmp_path / "saved")
    batch = batch_of([6, 3])
    with torch.no_grad():
        assert torch.equal(again(**batch).last_hidden_state, ours(**batch).last_hidden_state)
    assert bertlite.AutoConfig.from_pretrained(folder).model_type == "jina_bert"
    assert JinaBertConfig().position_embedding_type == "alibi" and JinaBertConfig().to_dict()["model_type"] == "bert"


# A "bert" config.json naming other code is read as BERT's, which has no ALiBi: refused by that name.
OTHER_CODE = "position_embedding_type='alibi' is not implemented"


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"feed_forward_type": "original"}, "feed_forward_type='original' is not implemented"),
        # Jina's other code, and the two variants' classes mixed in one auto_map.
        (
            {
                "auto_map": {
                    "AutoModel": "jinaai/xlm-roberta-flash-implementation--modeling_xlm_roberta.XLMRobertaModel"
                }
            },
            OTHER_CODE,
        ),
        ({"auto_map": {**AUTO_MAP, "AutoModel": f"{QK_IMPL}--modeling_bert.JinaBertModel"}}, OTHER_CODE),
        ({"auto_map": {"AutoModel": "someone/other--modeling.Model"}}, OTHER_CODE),
        ({"position_embedding_type": "absolute"}, "auto_map names the checkpoint's own code"),
    ],
)
def test_what_jina_bert_does_not_compute_is_refused_by_name(overrides, message, tmp_path) -> None:
    folder = write_original(tmp_path / "jina", **overrides)
    with pytest.raises(ValueError, match=message) as raised:
        bertlite.AutoModel.from_pretrained(folder)
    assert "\n" not in str(raised.value)
    # The plain BERT class never reads it as BERT.
    with pytest.raises(ValueError, match=f"auto_map names the checkpoint's own code|{OTHER_CODE}"):
        bertlite.BertModel.from_pretrained(folder)
    with pytest.raises(ValueError, match=f"auto_map names the checkpoint's own code|{OTHER_CODE}|not implemented"):
        bertlite.Embedder.from_pretrained(str(folder))


def st_folder(real_model_path: Path, folder: Path, **overrides) -> Path:
    """A sentence-transformers folder (mean pooling, BERT's WordPiece) holding a JinaBERT in the original layout."""
    shutil.copytree(real_model_path, folder)
    for name in ("config.json", "model.safetensors"):
        (folder / name).unlink()
    vocab = len((real_model_path / "vocab.txt").read_text(encoding="utf-8").splitlines())
    return write_original(folder, vocab_size=vocab, **overrides)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_embedder_gives_the_references_mean_pooled_vectors(variant, real_model_path, tmp_path) -> None:
    from tokenizers import Tokenizer

    folder = st_folder(real_model_path, tmp_path / "st", auto_map=VARIANTS[variant])
    texts = ["the list of items", "sort a dict by value", "zebra"]
    encodings = Tokenizer.from_file(str(folder / "tokenizer.json"))
    encodings.enable_padding(pad_id=0)
    batch_enc = encodings.encode_batch(texts)
    batch = {
        "input_ids": torch.tensor([e.ids for e in batch_enc]),
        "attention_mask": torch.tensor([e.attention_mask for e in batch_enc]),
        "token_type_ids": torch.tensor([e.type_ids for e in batch_enc]),
    }
    config = json.loads((folder / "config.json").read_text())
    hidden = reference(read_state(folder), config, batch)
    mask = batch["attention_mask"].double()[..., None]
    expected = (hidden * mask).sum(1) / mask.sum(1)
    if json.loads((folder / "1_Pooling" / "config.json").read_text()).get("pooling_mode_mean_tokens") is not True:
        pytest.fail("the copied folder is not a mean-pooling one")
    if any(m.get("type", "").endswith("Normalize") for m in json.loads((folder / "modules.json").read_text())):
        expected = F.normalize(expected, dim=-1)
    for unpad in (True, False):
        got = bertlite.Embedder.from_pretrained(str(folder), dtype="float32", unpad=unpad).encode(texts)
        np.testing.assert_allclose(got, expected.numpy(), atol=TOL, rtol=0)
    st = bertlite.SentenceTransformer(str(folder), device="cpu")
    assert type(st.transformers_model) is JinaBertModel
    np.testing.assert_allclose(st.encode(texts), expected.numpy(), atol=TOL, rtol=0)
    trusted = bertlite.SentenceTransformer(str(folder), device="cpu", trust_remote_code=True)
    np.testing.assert_allclose(trusted.encode(texts), expected.numpy(), atol=TOL, rtol=0)


@pytest.mark.slow  # over a second: oneDNN and int8 swaps on two models
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_onednn_swap_and_int8_go_through_the_layer_roles(variant, real_model_path, tmp_path) -> None:
    from bertlite.layers.gated import GatedProduct, product_works
    from bertlite.layers.onednn import OneDNNLinear, optimize, restore
    from bertlite.layers.roles import attention_of, part

    model = JinaBertModel.from_pretrained(write_original(tmp_path / "jina", auto_map=VARIANTS[variant])).eval()
    batch = batch_of([8, 3])
    with torch.no_grad():
        expected = model(**batch).last_hidden_state
        optimize(model)
        fast = model(**batch).last_hidden_state
    layer = model.encoder.layer[0]
    gated = product_works(torch.float32)  # act(gate) * up in two GEMMs' epilogues (layers.gated)
    assert attention_of(layer).qkv is not None and isinstance(layer.mlp.gated_product, GatedProduct) == gated
    assert (type(part(layer, "intermediate")) is OneDNNLinear) == (not gated)
    assert model.encoder.layer[0].mlp.fuses_residual
    torch.testing.assert_close(fast, expected, atol=1e-5, rtol=1e-5)
    restore(model)
    with torch.no_grad():
        assert torch.equal(model(**batch).last_hidden_state, expected)
    folder = st_folder(real_model_path, tmp_path / "st", auto_map=VARIANTS[variant])
    texts = ["the list of items", "sort a dict by value", "zebra"]
    full = torch.as_tensor(bertlite.Embedder.from_pretrained(str(folder), dtype="float32").encode(texts))
    low = torch.as_tensor(bertlite.Embedder.from_pretrained(str(folder), dtype="int8").encode(texts))
    assert F.cosine_similarity(low, full, dim=1).min().item() >= 0.99


def tokenizer_folder(real_model_path: Path, folder: Path) -> int:
    """BERT's WordPiece tokenizer files of the bundled model copied into folder; returns its vocabulary size."""
    folder.mkdir(parents=True)
    for name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(real_model_path / name, folder / name)
    return len((real_model_path / "vocab.txt").read_text(encoding="utf-8").splitlines())


def tokenized(folder: Path, inputs: list) -> dict[str, torch.Tensor]:
    """The tokenizers library's padded encoding of texts or (query, document) pairs, as tensors."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.enable_padding(pad_id=0)
    encodings = tokenizer.encode_batch(inputs)
    return {
        "input_ids": torch.tensor([e.ids for e in encodings]),
        "attention_mask": torch.tensor([e.attention_mask for e in encodings]),
        "token_type_ids": torch.tensor([e.type_ids for e in encodings]),
    }


def test_the_cross_encoder_gives_the_references_scores(real_model_path, tmp_path) -> None:
    folder = tmp_path / "reranker"
    vocab = tokenizer_folder(real_model_path, folder)
    write_original(folder, "ForSequenceClassification", vocab_size=vocab, id2label={"0": "LABEL_0"})
    pairs = [("a list", "the list of items"), ("sort", "sort a dict by value"), ("zebra", "an animal")]
    batch = tokenized(folder, pairs)
    state = {k: v.double() for k, v in read_state(folder).items()}
    hidden = reference(state, json.loads((folder / "config.json").read_text()), batch)
    pooled = torch.tanh(F.linear(hidden[:, 0], state["bert.pooler.dense.weight"], state["bert.pooler.dense.bias"]))
    expected = torch.sigmoid(F.linear(pooled, state["classifier.weight"], state["classifier.bias"]))[:, 0]
    got = bertlite.CrossEncoder(str(folder)).predict(pairs)
    np.testing.assert_allclose(got, expected.numpy(), atol=TOL, rtol=0)


def test_the_sparse_encoder_gives_the_references_splade_vectors(real_model_path, tmp_path) -> None:
    folder = tmp_path / "splade"
    vocab = tokenizer_folder(real_model_path, folder)
    write_original(folder, "ForMaskedLM", vocab_size=vocab)
    texts = ["the list of items", "sort a dict by value", "zebra"]
    batch = tokenized(folder, texts)
    state = {k: v.double() for k, v in read_state(folder).items()}
    hidden = reference(state, json.loads((folder / "config.json").read_text()), batch)
    t = F.gelu(
        F.linear(hidden, state["cls.predictions.transform.dense.weight"], state["cls.predictions.transform.dense.bias"])
    )
    t = F.layer_norm(t, (TINY["hidden_size"],), *ln(state, "cls.predictions.transform.LayerNorm"), 1e-12)
    logits = F.linear(t, state["bert.embeddings.word_embeddings.weight"], state["cls.predictions.bias"])
    scores = torch.log1p(torch.relu(logits)) * batch["attention_mask"][..., None]
    expected = scores.max(dim=1).values
    got = bertlite.SparseEncoder.from_pretrained(folder, dtype="float32").encode(texts).to_dense()
    torch.testing.assert_close(got.double(), expected, atol=TOL, rtol=0)


def test_a_checkpoint_without_a_pooler_loads_for_embedding(real_model_path, tmp_path) -> None:
    """The embedding checkpoints may hold no pooler: mean pooling never reads it."""
    folder = st_folder(real_model_path, tmp_path / "st")
    state = {k: v for k, v in read_state(folder).items() if not k.startswith("pooler.")}
    save_file(state, str(folder / "model.safetensors"))
    texts = ["the list of items", "zebra"]
    batch = tokenized(folder, texts)
    hidden = reference(state, json.loads((folder / "config.json").read_text()), batch)
    mask = batch["attention_mask"].double()[..., None]
    expected = F.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)
    got = bertlite.Embedder.from_pretrained(str(folder), dtype="float32").encode(texts)
    np.testing.assert_allclose(got, expected.numpy(), atol=TOL, rtol=0)


def test_parity_says_transformers_has_no_module_to_compare_with(tmp_path, capsys) -> None:
    from bertlite.cli import main

    folder = write_original(tmp_path / "jina")
    assert main(["parity", str(folder)]) != 0
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "is a JinaBERT-v2 model, which transformers has no module for" in error[0]
