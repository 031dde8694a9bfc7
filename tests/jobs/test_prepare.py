"""Readying a model (bertlite.jobs.prepare): one spelling of int8, the dtype "auto" picks per device, the
modules each device gets, and on CUDA the varlen attention and every job against float32 on the CPU."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import bertlite
from bertlite import CrossEncoder, Embedder, MultiVectorEncoder, SparseEncoder
from bertlite.jobs import prepare
from bertlite.layers.attention import packed_eager_attention, packed_varlen_attention
from bertlite.layers.onednn import FusedQKV, OneDNNLinear
from bertlite.layers.packing import PackedLayout
from bertlite.utils.capabilities import resolve_dtype
from tests.helpers import cross_encoder_folder, make_hf_model, masked_lm_folder, to_bertlite

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_quantize_int8_still_works_but_warns_at_the_callers_line(real_model_path: Path) -> None:
    with pytest.warns(FutureWarning, match=r"quantize='int8' is deprecated.*use dtype='int8'") as caught:
        embedder = Embedder.from_pretrained(real_model_path, quantize="int8")
    assert caught[0].filename == __file__
    assert embedder.precision == "int8"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"quantize": "int4"}, r"quantize='int4' is not supported; int8 is dtype='int8'"),
        ({"quantize": "int8", "dtype": "bfloat16"}, r"dtype='bfloat16' cannot go with it"),
        ({"dtype": "int8", "device": "meta"}, r"dtype='int8' runs on the CPU only .* device='meta'"),
    ],
)
def test_bad_precision_options_are_named(real_model_path: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Embedder.from_pretrained(real_model_path, **kwargs)


@pytest.mark.parametrize(
    ("capability", "expected"),
    [((9, 0), torch.bfloat16), ((8, 0), torch.bfloat16), ((7, 5), torch.float16), ((6, 1), torch.float16)],
)
def test_auto_on_cuda_is_bfloat16_from_ampere_on_else_float16(
    monkeypatch: pytest.MonkeyPatch, capability: tuple[int, int], expected: torch.dtype
) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    assert resolve_dtype("auto", "cuda") == expected
    assert resolve_dtype("auto", "cuda:1") == expected
    assert resolve_dtype("float32", "cuda") == torch.float32  # a dtype asked for is kept
    assert resolve_dtype("auto", "mps") == torch.float32


def test_the_cpu_gets_onednn_modules_and_a_gpu_model_none(monkeypatch: pytest.MonkeyPatch) -> None:
    cpu = prepare.ready(to_bertlite(make_hf_model(), attn="sdpa"))
    assert isinstance(cpu.encoder.layer[0].attention.self.qkv, FusedQKV)
    # float32 keeps one SDPA call per text (a fast mode runs the C++ attention where it builds)
    assert cpu.encoder.layer[0].attention.self.attn_implementation == "auto"
    # A model off the CPU ("meta" stands in for a GPU here): no oneDNN module, the packed attention the
    # device's probe names, asked for with the model's own device, dtype and head size.
    asked = []
    monkeypatch.setattr(prepare, "packed_attention_for", lambda *key: asked.append(key) or "varlen")
    gpu = prepare.ready(to_bertlite(make_hf_model(), attn="sdpa").to("meta", torch.float16))
    assert asked == [(torch.device("meta"), torch.float16, 8)]
    assert not any(isinstance(m, OneDNNLinear) for m in gpu.modules())
    assert all(isinstance(layer.attention.self.qkv, FusedQKV) for layer in gpu.encoder.layer)
    assert {layer.attention.self.attn_implementation for layer in gpu.encoder.layer} == {"varlen"}


def test_the_fused_query_key_value_off_onednn_equals_the_three_linears() -> None:
    torch.manual_seed(0)
    model = to_bertlite(make_hf_model()).double()  # float64: a dtype oneDNN does not take, F.linear's path
    attention = model.encoder.layer[0].attention.self
    x = torch.randn(5, 32, dtype=torch.float64)
    expected = torch.cat([attention.query(x), attention.key(x), attention.value(x)], dim=-1)
    with torch.no_grad():
        torch.testing.assert_close(FusedQKV(attention.query, attention.key, attention.value)(x), expected)


def test_a_masked_lm_decoder_runs_on_onednn_and_eager_stays_the_reference() -> None:
    from tests.helpers import make_hf_head, to_ours

    head = prepare.ready(to_ours(make_hf_head("BertForMaskedLM"), attn="sdpa"))
    assert isinstance(head.cls.predictions.decoder, OneDNNLinear)
    eager = prepare.ready(to_ours(make_hf_head("BertForMaskedLM")))
    assert not any(isinstance(m, (FusedQKV, OneDNNLinear)) for m in eager.modules())
    from bertlite.models.roberta import RobertaConfig, RobertaForMaskedLM

    sizes = dict(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=20)
    roberta = prepare.ready(RobertaForMaskedLM(RobertaConfig(**sizes, max_position_embeddings=20, type_vocab_size=1)))
    assert isinstance(roberta.lm_head.decoder, OneDNNLinear)  # RoBERTa's head is lm_head
    assert roberta.lm_head.decoder.weight is roberta.roberta.embeddings.word_embeddings.weight  # still tied


def test_no_varlen_attention_off_cuda_or_in_float32() -> None:
    assert prepare.packed_attention_for(torch.device("cpu"), torch.bfloat16, 8) is None
    assert prepare.packed_attention_for(torch.device("cuda"), torch.float32, 8) is None


def test_varlen_attention_off_the_cpu_and_cuda_is_refused_by_name() -> None:
    # On the CPU "varlen" is bertlite's C++ attention (tests/layers/test_native_attention.py).
    layout = PackedLayout.from_lengths(torch.tensor([3, 1]), torch.float32, device="meta")
    qkv = torch.empty(4, 3 * 2 * 8, device="meta")
    with pytest.raises(ValueError, match=r"'varlen' runs on the CPU, or on CUDA in float16 or bfloat16, got meta"):
        packed_varlen_attention(qkv, layout, 2, 8**-0.5, 0.0)


def test_a_layout_built_for_another_device_keeps_its_runs_and_cumulative_lengths() -> None:
    layout = PackedLayout.from_lengths(torch.tensor([4, 4, 2]), torch.bfloat16, device="meta")
    assert layout.cu_seqlens.device.type == "meta" and layout.cu_seqlens.dtype == torch.int32
    assert layout.runs == [(0, 2, 4), (8, 1, 2)]
    here = PackedLayout.from_lengths(torch.tensor([4, 4, 2]))
    assert here.cu_seqlens.tolist() == [0, 4, 8, 10]


# --- on a GPU ------------------------------------------------------------------------------------------


@cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_varlen_attention_matches_the_eager_reference(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    heads, head_size = 4, 32
    layout = PackedLayout.from_lengths(torch.tensor([37, 5, 5, 128, 1]), dtype, device="cuda")
    qkv = torch.randn(int(layout.lengths.sum()), 3 * heads * head_size, device="cuda")
    expected, _ = packed_eager_attention(qkv, layout, heads, head_size**-0.5, 0.0)  # float32
    got, _ = packed_varlen_attention(qkv.to(dtype), layout, heads, head_size**-0.5, 0.0)
    # Within a few roundings of the inputs to the half dtype.
    half_error = packed_eager_attention(qkv.to(dtype), layout, heads, head_size**-0.5, 0.0)[0].float() - expected
    assert (got.float() - expected).abs().max() <= 4 * half_error.abs().max() + 1e-3


def _min_cosine(a: np.ndarray | torch.Tensor, b: np.ndarray | torch.Tensor) -> float:
    a, b = (x.float().cpu().numpy() if isinstance(x, torch.Tensor) else x for x in (a, b))
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return float((a * b).sum(axis=1).min())


@cuda
def test_embedder_on_cuda_picks_a_half_dtype_with_varlen_and_keeps_float32s_vectors(
    real_model_path: Path, corpus_texts: list[str]
) -> None:
    texts = corpus_texts[:1000]
    reference = Embedder.from_pretrained(real_model_path, dtype="float32").encode(texts)
    gpu = Embedder.from_pretrained(real_model_path, device="cuda", dtype="auto")
    assert gpu.dtype in (torch.bfloat16, torch.float16)
    assert {layer.attention.self.attn_implementation for layer in gpu.bert.encoder.layer} == {"varlen"}
    assert _min_cosine(gpu.encode(texts), reference) >= 0.9999
    fp32 = Embedder.from_pretrained(real_model_path, device="cuda", dtype="float32").encode(texts)
    assert _min_cosine(fp32, reference) >= 0.999999


@cuda
def test_bertmodel_on_cuda_equals_transformers_in_float32() -> None:
    hf = make_hf_model().to("cuda")
    ours = to_bertlite(make_hf_model()).to("cuda")
    ids = torch.randint(0, 99, (3, 11), device="cuda")
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    with torch.no_grad():
        theirs = hf(input_ids=ids, attention_mask=mask).last_hidden_state
        got = ours(input_ids=ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(got[mask.bool()], theirs[mask.bool()], atol=1e-5, rtol=1e-5)


@cuda
def test_every_job_runs_on_cuda_close_to_float32_on_the_cpu(real_model_path: Path, tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    pairs = [("what is a list", "a list is a mutable sequence"), ("sort a dict", "use sorted() on its items")]
    texts = ["a mutable sequence of items", "sorted() returns a new list", "json.dumps writes JSON"]
    on = (("cpu", "float32"), ("cuda", "auto"))
    rerank = cross_encoder_folder(real_model_path, tmp_path / "ce", num_labels=1, save_with_st=False)
    scores = {d: CrossEncoder.from_pretrained(rerank, device=d, dtype=t).predict(pairs) for d, t in on}
    np.testing.assert_allclose(scores["cuda"], scores["cpu"], atol=2e-2)
    splade = masked_lm_folder(real_model_path, tmp_path / "mlm")
    sparse = {d: SparseEncoder.from_pretrained(splade, device=d, dtype=t).encode(texts) for d, t in on}
    assert _min_cosine(sparse["cuda"].to_dense(), sparse["cpu"].to_dense()) >= 0.999
    tokenizer = Tokenizer.from_file(str(real_model_path / "tokenizer.json"))
    tokens = {}
    for device, dtype in ((torch.device("cpu"), torch.float32), (torch.device("cuda"), torch.bfloat16)):
        model = bertlite.BertModel.from_pretrained(real_model_path, dtype=dtype, device=device)
        encoder = MultiVectorEncoder(model, tokenizer, torch.nn.Identity())
        tokens[device.type] = encoder.encode(texts)
    for cpu_rows, gpu_rows in zip(tokens["cpu"], tokens["cuda"], strict=True):
        assert _min_cosine(gpu_rows, cpu_rows) >= 0.999


@cuda
def test_bertlite_env_names_the_gpus_auto_dtype(capsys: pytest.CaptureFixture[str]) -> None:
    from bertlite.cli import main

    assert main(["env"]) == 0
    out = capsys.readouterr().out
    assert "cuda available: yes" in out
    assert any(f"{name} on cuda" in out for name in ("bfloat16", "float16"))
