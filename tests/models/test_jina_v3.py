"""jina-embeddings-v3 against transformers' native module in the same run: the config, the module tree and keys
(the fused names its checkpoints hold), eager bitwise, sdpa and every packed attention within 1e-5, every head, save
and load both ways, and a long text. The task adapters and the original layout are in test_jina_v3_original.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

import bertlite
from bertlite.config import JinaEmbeddingsV3Config
from bertlite.errors import CheckpointError
from bertlite.jobs.prepare import ready
from bertlite.layers.attention import PACKED_ATTENTION
from bertlite.models.jina_embeddings_v3 import JinaEmbeddingsV3Model
from tests.models.family import head_labels, packed, saved_keys
from tests.models.test_gte import padded_batch
from tests.models.test_roberta import unigram_tokenizer

TINY_JINA = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=64,
    type_vocab_size=2,
)
TOL = dict(atol=1e-5, rtol=1e-5)
HEADS = ("ForMaskedLM", "ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering")


def make_hf(name: str = "Model", seed: int = 0, **overrides) -> transformers.PreTrainedModel:
    """A random transformers jina-embeddings-v3 model (eager) with every weight far from its init."""
    torch.manual_seed(seed)
    values = {**TINY_JINA, **overrides}
    hf_config = transformers.JinaEmbeddingsV3Config(**values, attn_implementation=values.pop("attn", "eager"))
    model = getattr(transformers, "JinaEmbeddingsV3" + name)(hf_config)
    with torch.no_grad():
        for param_name, p in model.named_parameters():  # a tied pair is one parameter here, so it stays tied
            is_norm = "norm" in param_name.lower() and param_name.endswith("weight")
            p.normal_(1.0 if is_norm else 0.0, 0.3)
    return model.eval()


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory) -> Path:
    """A folder with a random JinaEmbeddingsV3Model saved by transformers, and an XLM-RoBERTa-like tokenizer."""
    path = tmp_path_factory.mktemp("jina-v3")
    make_hf().save_pretrained(path)
    unigram_tokenizer(path)
    return path


def test_config_is_transformers_and_bad_values_are_named() -> None:
    for values in ({}, TINY_JINA, {**TINY_JINA, "rope_parameters": {"rope_type": "default", "rope_theta": 500.0}}):
        theirs = transformers.JinaEmbeddingsV3Config.from_dict(values).to_dict()
        ours = JinaEmbeddingsV3Config.from_dict(values)
        for key in ("_name_or_path", "chunk_size_feed_forward", "dtype", "is_encoder_decoder", "transformers_version"):
            theirs.pop(key, None)
        theirs.setdefault("architectures", None)
        assert {"architectures": None, **ours.to_dict()} == theirs
    assert JinaEmbeddingsV3Config().rope_theta == 20_000.0 and JinaEmbeddingsV3Config().lora_adaptations == []
    for bad, message in (
        (dict(rope_parameters={"rope_type": "yarn", "factor": 2.0}), "rope_type='yarn' is not implemented"),
        (dict(type_vocab_size=0), "type_vocab_size must be a positive integer"),
        (dict(lora_adaptations="query"), "lora_adaptations must be a non-empty list of task names"),
        (dict(lora_adaptations=["a"], lora_rank=0), "lora_rank must be a positive integer"),
        (dict(model_type="bert"), "model_type='bert' is not a JinaEmbeddingsV3 config"),
    ):
        with pytest.raises(ValueError, match=message) as raised:
            JinaEmbeddingsV3Config.from_dict(bad)
        assert "\n" not in str(raised.value)


def test_keys_and_eager_are_transformers_bitwise(model_folder) -> None:
    hf = make_hf()
    ours = JinaEmbeddingsV3Model.from_pretrained(model_folder, attn_implementation="eager")
    assert type(ours.config) is JinaEmbeddingsV3Config
    # The checkpoint's fused names (emb_ln, encoder.layers, mixer.Wqkv, norm1, ...), as transformers saves them.
    assert sorted(ours.state_dict()) == saved_keys(model_folder)
    batch = padded_batch()
    flags = dict(output_hidden_states=True, output_attentions=True)
    with torch.no_grad():
        expected, got = hf(**batch, **flags), ours(**batch, **flags)
        embeds = torch.randn(1, 7, TINY_JINA["hidden_size"], generator=torch.Generator().manual_seed(2))
        from_embeds, expected_embeds = ours(inputs_embeds=embeds), hf(inputs_embeds=embeds)
        no_mask = ours(input_ids=batch["input_ids"]).last_hidden_state
        expected_no_mask = hf(input_ids=batch["input_ids"]).last_hidden_state
        positions = torch.arange(30).flip(0)[None] + 5
        given = ours(**batch, position_ids=positions).last_hidden_state
        expected_given = hf(**batch, position_ids=positions).last_hidden_state
    assert torch.equal(got.last_hidden_state, expected.last_hidden_state)  # the padding's rows too
    assert torch.equal(got.pooler_output, expected.pooler_output)
    assert len(got.hidden_states) == 3 and len(got.attentions) == 2
    assert torch.equal(got.hidden_states[-1], expected.last_hidden_state)
    for mine, theirs in zip(got.attentions, expected.attentions, strict=True):
        assert torch.equal(mine, theirs)
    assert torch.equal(from_embeds.last_hidden_state, expected_embeds.last_hidden_state)
    assert torch.equal(no_mask, expected_no_mask) and torch.equal(given, expected_given)


@pytest.mark.parametrize("attn", sorted(PACKED_ATTENTION))
def test_sdpa_and_every_packed_attention_match_transformers(model_folder, attn) -> None:
    hf, hf_sdpa = make_hf(), make_hf(attn="sdpa")
    ours = JinaEmbeddingsV3Model.from_pretrained(model_folder, attn_implementation=attn)
    batch = padded_batch()
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        expected = hf(**batch)
        got = ours(**packed(batch))
        first = ours(**packed(batch), first_token_of=torch.tensor([2, 0, 1]))
    torch.testing.assert_close(got.last_hidden_state, expected.last_hidden_state[real], **TOL)
    torch.testing.assert_close(got.pooler_output, expected.pooler_output, **TOL)
    torch.testing.assert_close(first.last_hidden_state, expected.last_hidden_state[[2, 0, 1], 0], **TOL)
    torch.testing.assert_close(first.pooler_output, expected.pooler_output[[2, 0, 1]], **TOL)
    if attn in ("sdpa", "eager"):
        with torch.no_grad():
            padded = ours(**batch).last_hidden_state
            expected_sdpa = hf_sdpa(**batch).last_hidden_state
        torch.testing.assert_close(padded[real], expected_sdpa[real], **TOL)


def test_saved_by_bertlite_loads_in_transformers_and_back(model_folder, tmp_path) -> None:
    ours = JinaEmbeddingsV3Model.from_pretrained(model_folder, attn_implementation="eager")
    ours.save_pretrained(tmp_path / "saved")
    saved = json.loads((tmp_path / "saved" / "config.json").read_text())
    assert saved["model_type"] == "jina_embeddings_v3" and "position_embedding_type" not in saved
    assert saved_keys(tmp_path / "saved") == saved_keys(model_folder)
    theirs = transformers.AutoModel.from_pretrained(tmp_path / "saved", attn_implementation="eager").eval()
    again = bertlite.AutoModel.from_pretrained(tmp_path / "saved", attn_implementation="eager")
    assert type(theirs) is transformers.JinaEmbeddingsV3Model and type(again) is JinaEmbeddingsV3Model
    batch = padded_batch()
    with torch.no_grad():
        expected = theirs(**batch).last_hidden_state
        assert torch.equal(ours(**batch).last_hidden_state, expected)
        assert torch.equal(again(**batch).last_hidden_state, expected)


def test_auto_classes_and_the_layer_count_check(model_folder) -> None:
    assert type(bertlite.AutoConfig.from_pretrained(model_folder)) is JinaEmbeddingsV3Config
    assert type(bertlite.AutoModel.from_pretrained(model_folder)) is JinaEmbeddingsV3Model
    assert (
        type(bertlite.AutoModel.from_config(transformers.JinaEmbeddingsV3Config(**TINY_JINA))) is JinaEmbeddingsV3Model
    )
    assert bertlite.JinaEmbeddingsV3Model is JinaEmbeddingsV3Model
    with pytest.raises(CheckpointError, match="num_hidden_layers=1, but the checkpoint .* holds 2 encoder layers"):
        JinaEmbeddingsV3Model.from_pretrained(
            model_folder, config=JinaEmbeddingsV3Config(**{**TINY_JINA, "num_hidden_layers": 1})
        )


def head_inputs(head: str, batch: dict[str, torch.Tensor], num_labels: int) -> dict[str, torch.Tensor]:
    """A head's loss inputs: span positions for question answering, else head_labels'."""
    if head == "ForQuestionAnswering":
        g = torch.Generator().manual_seed(3)
        return {name: torch.randint(0, 11, (3,), generator=g) for name in ("start_positions", "end_positions")}
    return head_labels(head, batch, num_labels)


@pytest.mark.parametrize("head", HEADS)
def test_every_head_loads_and_equals_transformers(head, tmp_path) -> None:
    num_labels = {"ForMaskedLM": TINY_JINA["vocab_size"], "ForQuestionAnswering": 2}.get(head, 3)
    hf = make_hf(head, num_labels=2 if head == "ForQuestionAnswering" else 3)
    hf.save_pretrained(tmp_path)
    ours = getattr(bertlite, "JinaEmbeddingsV3" + head).from_pretrained(tmp_path, attn_implementation="eager")
    assert sorted(set(ours.state_dict()) - set(ours.tied_weights_keys())) == saved_keys(tmp_path)  # tied: saved once
    assert type(getattr(bertlite, "AutoModel" + head).from_pretrained(tmp_path)) is type(ours)
    batch = padded_batch()
    inputs = head_inputs(head, batch, num_labels)
    with torch.no_grad():
        expected, got = hf(**batch, **inputs), ours(**batch, **inputs)
    assert torch.equal(got.loss, expected.loss)
    for name in ("logits",) if head != "ForQuestionAnswering" else ("start_logits", "end_logits"):
        assert torch.equal(getattr(got, name), getattr(expected, name)), name
    ours.save_pretrained(tmp_path / "saved")  # and back into transformers
    theirs = getattr(transformers, "JinaEmbeddingsV3" + head).from_pretrained(
        tmp_path / "saved", attn_implementation="eager"
    )
    with torch.no_grad():
        name = "logits" if head != "ForQuestionAnswering" else "start_logits"
        assert torch.equal(getattr(theirs.eval()(**batch), name), getattr(got, name))


def test_masked_lm_is_tied(tmp_path) -> None:
    make_hf("ForMaskedLM").save_pretrained(tmp_path)
    ours = bertlite.JinaEmbeddingsV3ForMaskedLM.from_pretrained(tmp_path)
    assert ours.lm_head.decoder.weight is ours.roberta.embeddings.word_embeddings.weight
    assert ours.lm_head.decoder.bias is ours.lm_head.bias


def test_the_cpu_fast_path_matches_transformers(model_folder) -> None:
    hf = make_hf()
    ours = ready(JinaEmbeddingsV3Model.from_pretrained(model_folder))
    batch = padded_batch()
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        expected = hf(**batch).last_hidden_state
        torch.testing.assert_close(ours(**packed(batch)).last_hidden_state, expected[real], **TOL)
        torch.testing.assert_close(ours(**batch).last_hidden_state[real], expected[real], **TOL)


def test_an_8192_token_text_matches_transformers(tmp_path) -> None:
    hf = make_hf(max_position_embeddings=8194, attn="sdpa")
    hf.save_pretrained(tmp_path)
    ours = ready(JinaEmbeddingsV3Model.from_pretrained(tmp_path))
    ids = torch.randint(4, TINY_JINA["vocab_size"], (1, 8192), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        expected = hf(input_ids=ids).last_hidden_state[0]
        got = ours(input_ids=ids[0], lengths=torch.tensor([8192])).last_hidden_state
    torch.testing.assert_close(got, expected, **TOL)


def test_cross_and_sparse_encoders_give_sentence_transformers_numbers(tmp_path) -> None:
    from sentence_transformers import CrossEncoder as STCrossEncoder
    from sentence_transformers import SparseEncoder
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sparse_encoder.modules import SpladePooling

    from tests.models.test_gte import PAIRS, TEXTS

    make_hf("ForSequenceClassification", num_labels=1).save_pretrained(tmp_path / "ce")
    unigram_tokenizer(tmp_path / "ce")
    expected = STCrossEncoder(str(tmp_path / "ce"), device="cpu", max_length=24).predict(PAIRS)
    assert np.ptp(expected) > 1e-3  # the scores differ
    make_hf("ForMaskedLM").save_pretrained(tmp_path / "mlm")
    unigram_tokenizer(tmp_path / "mlm")
    transformer = Transformer(str(tmp_path / "mlm"), max_seq_length=24, transformer_task="fill-mask")
    SparseEncoder(modules=[transformer, SpladePooling("max")], device="cpu").save(str(tmp_path / "splade"))
    sparse = SparseEncoder(str(tmp_path / "splade"), device="cpu").encode(TEXTS, convert_to_tensor=True).to_dense()
    for unpad in (True, False):
        ours = bertlite.CrossEncoder.from_pretrained(tmp_path / "ce", dtype="float32", max_length=24, unpad=unpad)
        assert type(ours.model) is bertlite.JinaEmbeddingsV3ForSequenceClassification
        np.testing.assert_allclose(ours.predict(PAIRS), expected, atol=1e-5, rtol=0)
        splade = bertlite.SparseEncoder.from_pretrained(tmp_path / "splade", dtype="float32", unpad=unpad)
        got = splade.encode(TEXTS).to_dense()
        assert torch.equal(got != 0, sparse != 0) and (got - sparse).abs().max().item() <= 1e-5


def test_parity_compares_a_jina_folder_with_transformers(model_folder) -> None:
    from bertlite.cli import main
    from bertlite.parity import check

    report = check(model_folder, texts=["the list of items", ("what is a list?", "the list"), "the list " * 30])
    names = {row.name for row in report.rows}
    assert report.ok and not report.only_in_bertlite and not report.only_in_transformers
    # Weights in the checkpoint's layout, each layer's parts under transformers' names for them.
    assert {"encoder.layers.1.mixer.Wqkv.weight", "encoder.layers.1.mlp.fc1.weight"} <= names
    assert {"emb_ln", "encoder.layers.1.mixer", "encoder.layers.1.norm2", "last_hidden_state"} <= names
    assert main(["parity", str(model_folder), "--head", "none"]) == 0
