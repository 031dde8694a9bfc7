"""SparseEncoder and MultiVectorEncoder on a model of BERT's family other than BERT (XLM-RoBERTa: its own
positions, masked-LM head and SentencePiece tokenizer), against sentence-transformers on folders it saved in
the same run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers

import bertlite
from bertlite.models import roberta
from tests.models.test_roberta import TINY_ROBERTA, unigram_tokenizer

TEXTS = ["the list of items", "sort a dict by value", "json writes a new sequence", "zebra", "a " * 40, ""]
TOL = 1e-5


def xlmr_masked_lm_folder(folder: Path, seed: int = 0) -> Path:
    """A tiny random XLMRobertaForMaskedLM saved by transformers, with a unigram tokenizer."""
    torch.manual_seed(seed)
    model = transformers.XLMRobertaForMaskedLM(transformers.XLMRobertaConfig(**TINY_ROBERTA)).eval()
    with torch.no_grad():
        for p in model.parameters():  # far from the init, the head's bias included
            p.normal_(0.0, 0.3)
    model.save_pretrained(folder)
    unigram_tokenizer(folder)
    return folder


@pytest.fixture(scope="module")
def splade(tmp_path_factory: pytest.TempPathFactory):
    from sentence_transformers import SparseEncoder
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sparse_encoder.modules import SpladePooling

    base = xlmr_masked_lm_folder(tmp_path_factory.mktemp("family") / "mlm")
    transformer = Transformer(str(base), max_seq_length=24, transformer_task="fill-mask")
    folder = base.with_name("splade")
    SparseEncoder(modules=[transformer, SpladePooling("max")], device="cpu").save(str(folder))
    return folder, SparseEncoder(str(folder), device="cpu")


@pytest.mark.parametrize("unpad", [True, False], ids=["packed", "padded"])
def test_sparse_encoder_on_xlm_roberta_gives_sentence_transformers_vectors(splade, unpad: bool) -> None:
    folder, st = splade
    expected = st.encode(TEXTS, convert_to_tensor=True).to_dense()
    ours = bertlite.SparseEncoder.from_pretrained(folder, dtype="float32", unpad=unpad)
    assert type(ours.model) is roberta.XLMRobertaForMaskedLM
    got = ours.encode(TEXTS).to_dense()
    assert torch.equal(got != 0, expected != 0), "active dimensions differ"
    assert (got - expected).abs().max().item() <= TOL


def test_sparse_encoder_int8_on_xlm_roberta_close_to_float32(splade) -> None:
    folder, _ = splade
    full = bertlite.SparseEncoder.from_pretrained(folder, dtype="float32").encode(TEXTS).to_dense()
    low = bertlite.SparseEncoder.from_pretrained(folder, dtype="int8").encode(TEXTS).to_dense()
    cosine = torch.nn.functional.cosine_similarity(low, full, dim=1)
    assert cosine.min().item() >= 0.995


def test_a_family_base_model_without_mlm_head_is_refused_by_name(tmp_path: Path) -> None:
    torch.manual_seed(0)
    transformers.XLMRobertaModel(transformers.XLMRobertaConfig(**TINY_ROBERTA)).save_pretrained(tmp_path)
    unigram_tokenizer(tmp_path)
    with pytest.raises(bertlite.CheckpointError, match=r"architectures \['XLMRobertaModel'\], no \.\.\.ForMaskedLM"):
        bertlite.SparseEncoder.from_pretrained(tmp_path, dtype="float32")
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "architectures": ["XLMRobertaForMaskedLM"]}))
    with pytest.raises(bertlite.CheckpointError, match=r"no MLM head \(lm_head\.bias, lm_head\.dense\.bias"):
        bertlite.SparseEncoder.from_pretrained(tmp_path, dtype="float32")


def test_multi_vector_encoder_on_xlm_roberta_gives_sentence_transformers_vectors(tmp_path: Path) -> None:
    from sentence_transformers import MultiVectorEncoder
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask

    base = tmp_path / "xlmr"
    torch.manual_seed(1)
    model = transformers.XLMRobertaModel(transformers.XLMRobertaConfig(**TINY_ROBERTA), add_pooling_layer=False)
    with torch.no_grad():
        for name, p in model.named_parameters():  # LayerNorms around 1, so the token vectors differ
            p.normal_(1.0 if "LayerNorm.weight" in name else 0.0, 0.1)
    model.save_pretrained(base)
    unigram_tokenizer(base)
    torch.manual_seed(2)
    dense = Dense(32, 16, bias=False, activation_function=torch.nn.Identity(), module_input_name="token_embeddings")
    with torch.no_grad():
        dense.linear.weight.normal_(0.0, 0.5)
    modules = [
        Transformer(str(base), max_seq_length=24),
        dense,
        MultiVectorMask(skiplist_words=[]),
        Normalize(module_input_name="token_embeddings"),
    ]
    MultiVectorEncoder(modules=modules, device="cpu").save_pretrained(str(tmp_path / "colbert"))
    st = MultiVectorEncoder(str(tmp_path / "colbert"), device="cpu")
    texts = [t for t in TEXTS if t]
    expected = st.encode_document(texts)
    ours = bertlite.MultiVectorEncoder.from_pretrained(tmp_path / "colbert", dtype="float32")
    assert type(ours.model) is roberta.XLMRobertaModel
    got = ours.encode_document(texts)
    assert [g.shape for g in got] == [tuple(e.shape) for e in expected]
    for g, e in zip(got, expected, strict=True):
        assert (torch.as_tensor(g) - torch.as_tensor(e)).abs().max().item() <= TOL


def family_folder(
    auto_class: type, model_type: str, folder: Path, real_model_path: Path, norms_at: float, std: float
) -> None:
    """A tiny random `model_type` model of `auto_class` with the real WordPiece tokenizer (so both libraries read
    the same ids), saved by transformers: every weight normal around 0 (LayerNorm weights around norms_at)."""
    sizes = dict(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37)
    config = transformers.AutoConfig.for_model(model_type, **sizes, max_position_embeddings=64)
    torch.manual_seed(0)
    model = auto_class.from_config(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(norms_at if "norm" in name.lower() and name.endswith("weight") else 0.0, std)
    model.save_pretrained(folder)
    transformers.AutoTokenizer.from_pretrained(real_model_path).save_pretrained(folder)


@pytest.mark.slow
@pytest.mark.parametrize("model_type", ["distilbert", "electra", "mpnet", "roberta"])
def test_sparse_encoder_on_every_family_gives_sentence_transformers_vectors(
    model_type: str, real_model_path: Path, tmp_path: Path
) -> None:
    # Each family's masked-LM head under SPLADE, with the real WordPiece tokenizer, so both libraries read the
    # same ids; sentence-transformers saves and loads the folder.
    from sentence_transformers import SparseEncoder
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sparse_encoder.modules import SpladePooling

    family_folder(
        transformers.AutoModelForMaskedLM, model_type, tmp_path / "mlm", real_model_path, norms_at=0.0, std=0.3
    )
    transformer = Transformer(str(tmp_path / "mlm"), max_seq_length=24, transformer_task="fill-mask")
    SparseEncoder(modules=[transformer, SpladePooling("max")], device="cpu").save(str(tmp_path / "splade"))
    texts = ["The weather is lovely today.", "a", "naïve café, 日本語 🙂", "It's so sunny outside! " * 5]
    expected = SparseEncoder(str(tmp_path / "splade"), device="cpu").encode(texts, convert_to_tensor=True).to_dense()
    ours = bertlite.SparseEncoder.from_pretrained(tmp_path / "splade", dtype="float32")
    assert ours.model.config.model_type == model_type
    got = ours.encode(texts).to_dense()
    assert torch.equal(got != 0, expected != 0), "active dimensions differ"
    assert (got - expected).abs().max().item() <= TOL


@pytest.mark.slow
@pytest.mark.parametrize("model_type", ["distilbert", "electra", "mpnet", "roberta"])
def test_multi_vector_encoder_on_every_family_gives_sentence_transformers_vectors(
    model_type: str, real_model_path: Path, tmp_path: Path
) -> None:
    from sentence_transformers import MultiVectorEncoder
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask

    # LayerNorms around 1, so the token vectors differ.
    family_folder(transformers.AutoModel, model_type, tmp_path / "base", real_model_path, norms_at=1.0, std=0.1)
    dense = Dense(32, 16, bias=False, activation_function=torch.nn.Identity(), module_input_name="token_embeddings")
    with torch.no_grad():
        dense.linear.weight.normal_(0.0, 0.5)
    modules = [
        Transformer(str(tmp_path / "base"), max_seq_length=24),
        dense,
        MultiVectorMask(skiplist_words=[".", "!"]),
        Normalize(module_input_name="token_embeddings"),
    ]
    MultiVectorEncoder(modules=modules, device="cpu").save_pretrained(str(tmp_path / "colbert"))
    texts = ["The weather is lovely today.", "a", "naïve café, 日本語 🙂", "It's so sunny outside! " * 5]
    expected = MultiVectorEncoder(str(tmp_path / "colbert"), device="cpu").encode_document(texts)
    ours = bertlite.MultiVectorEncoder.from_pretrained(tmp_path / "colbert", dtype="float32")
    assert ours.bert.config.model_type == model_type
    got = ours.encode_document(texts)
    for g, e in zip(got, expected, strict=True):
        assert tuple(g.shape) == tuple(e.shape)
        assert (torch.as_tensor(g) - torch.as_tensor(e)).abs().max().item() <= TOL
