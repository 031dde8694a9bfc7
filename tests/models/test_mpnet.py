"""MPNet against transformers in the same run: the module tree and keys, eager bitwise, sdpa and the packed
path within 1e-5 (the relative attention bias included), every head, save and load both ways, the Auto
classes, the tokenizer, and the jobs against sentence-transformers on tiny folders built here."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from transformers.utils import find_labels

import bertlite
from bertlite.config import MPNetConfig
from bertlite.jobs.prepare import ready
from bertlite.layers.attention import PACKED_ATTENTION
from bertlite.layers.onednn import linear_add_works
from bertlite.models import mpnet
from bertlite.models.mpnet import MPNetModel

# MPNet's shape at a tiny size: positions from 2 (padding_idx 1), the relative bias in 32 buckets.
TINY_MPNET = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,  # head size 8: transformers divides by sqrt(8), which rounds unlike * 8**-0.5
    intermediate_size=37,
    max_position_embeddings=64,
    layer_norm_eps=1e-5,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)
# Model shapes checked; "long" has sequences past the buckets' exact range (8) and past max_distance (128).
CONFIGS = {
    "tiny": dict(),
    "long-2heads-gelu_new": dict(num_attention_heads=2, hidden_act="gelu_new", max_position_embeddings=300),
    "1head-3layers-40buckets": dict(
        hidden_size=24, num_attention_heads=1, num_hidden_layers=3, relative_attention_num_buckets=40, hidden_act="relu"
    ),
}
TOL = dict(atol=1e-5, rtol=1e-5)
HEADS = ("ForSequenceClassification", "ForMaskedLM", "ForTokenClassification", "ForQuestionAnswering")


def make_hf(name: str = "Model", config: str = "tiny", seed: int = 0, **overrides) -> transformers.PreTrainedModel:
    """A random transformers MPNet model (eager, its only attention) with every weight far from its init."""
    torch.manual_seed(seed)
    hf_config = transformers.MPNetConfig(**{**TINY_MPNET, **CONFIGS[config], **overrides})
    model = getattr(transformers, "MPNet" + name)(hf_config)
    with torch.no_grad():
        for p in model.parameters():  # a tied pair is one parameter here, so it stays tied
            p.normal_(0.0, 0.3)
    return model.eval()


def spread(model: transformers.PreTrainedModel) -> transformers.PreTrainedModel:
    """Weights drawn again at std 0.1, LayerNorm weights around 1, so different texts' vectors differ
    (make_hf's LayerNorm weights around 0 point every vector one way, which would hide a precision error)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(1.0 if name.endswith("LayerNorm.weight") else 0.0, 0.1)
    return model


def padded_batch(config: str = "tiny", seed: int = 1) -> dict[str, torch.Tensor]:
    """Three right-padded texts (pad id 1): the longest the position table takes, and two shorter ones; the
    first holds the pad id as a token (a literal "<pad>"), which takes no position of its own."""
    longest = {**TINY_MPNET, **CONFIGS[config]}["max_position_embeddings"] - 2
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 99, (3, longest), generator=g)
    ids[0, 3] = 1
    mask = torch.ones_like(ids)
    for row, length in ((1, 5), (2, longest * 2 // 3)):
        ids[row, length:], mask[row, length:] = 1, 0
    return {"input_ids": ids, "attention_mask": mask}


def packed(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    real = batch["attention_mask"].bool()
    return {"input_ids": batch["input_ids"][real], "lengths": real.sum(1)}


def test_distance_buckets_are_transformers() -> None:
    distances = torch.arange(-700, 701)[None, :]  # exact (|d| < 8), logarithmic, and capped (past 128) buckets
    expected = transformers.models.mpnet.modeling_mpnet.MPNetEncoder.relative_position_bucket(distances)
    assert torch.equal(mpnet.relative_position_bucket(distances), expected)
    assert set(expected.unique().tolist()) == set(range(32)) - {16}  # distance 0 is bucket 0, not 16


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def folder(request, tmp_path_factory) -> tuple[str, Path]:
    path = tmp_path_factory.mktemp(request.param)
    make_hf(config=request.param).save_pretrained(path)
    return request.param, path


def test_keys_and_eager_are_transformers_bitwise(folder) -> None:
    config, path = folder
    hf = make_hf(config=config)
    ours = MPNetModel.from_pretrained(path, attn_implementation="eager")
    assert type(ours.config) is MPNetConfig and list(ours.state_dict()) == list(hf.state_dict())
    batch = padded_batch(config)
    real = batch["attention_mask"].bool()
    flags = dict(output_hidden_states=True, output_attentions=True)
    with torch.no_grad():
        expected, got = hf(**batch, **flags), ours(**batch, **flags)
        embeds = ours.embeddings.word_embeddings(batch["input_ids"][:1])
        from_embeds, expected_embeds = ours(inputs_embeds=embeds), hf(inputs_embeds=embeds)
    assert (got.last_hidden_state - expected.last_hidden_state)[real].abs().max() == 0.0
    assert torch.equal(got.pooler_output, expected.pooler_output)
    for mine, theirs in zip(got.hidden_states, expected.hidden_states, strict=True):
        assert torch.equal(mine[real], theirs[real])
    for mine, theirs in zip(got.attentions, expected.attentions, strict=True):
        assert torch.equal(mine, theirs)
    assert torch.equal(from_embeds.last_hidden_state, expected_embeds.last_hidden_state)


def test_left_padding_and_given_positions_are_transformers_bitwise(folder) -> None:
    config, path = folder
    hf = make_hf(config=config)
    ours = MPNetModel.from_pretrained(path, attn_implementation="eager")
    batch = {k: v.flip(1) for k, v in padded_batch(config).items()}  # the padding first
    positions = torch.arange(2, batch["input_ids"].shape[1] + 2).flip(0)[None]
    with torch.no_grad():
        for extra in ({}, {"position_ids": positions}):
            assert torch.equal(ours(**batch, **extra).last_hidden_state, hf(**batch, **extra).last_hidden_state)


@pytest.mark.parametrize("attn", sorted(PACKED_ATTENTION))
def test_sdpa_and_every_packed_attention_match_transformers(folder, attn) -> None:
    config, path = folder
    hf = make_hf(config=config)
    ours = MPNetModel.from_pretrained(path, attn_implementation=attn)
    batch = padded_batch(config)
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
        torch.testing.assert_close(padded[real], expected.last_hidden_state[real], **TOL)


def test_the_cpu_fast_path_matches_transformers_and_eager_undoes_it(folder) -> None:
    config, path = folder
    hf = make_hf(config=config)
    ours = ready(MPNetModel.from_pretrained(path))
    layer = ours.encoder.layer[0]
    assert layer.attention.attn.qkv is not None and layer.attention.attn.attn_implementation == "auto"
    assert layer.attention.fuses_residual == linear_add_works(torch.float32)  # attn.o adds it in its GEMM
    batch = padded_batch(config)
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        expected = hf(**batch).last_hidden_state
        torch.testing.assert_close(ours(**packed(batch)).last_hidden_state, expected[real], **TOL)
        torch.testing.assert_close(ours(**batch).last_hidden_state[real], expected[real], **TOL)
        ours.set_attn_implementation("eager")
        assert layer.attention.attn.qkv is None and not layer.attention.fuses_residual
        assert torch.equal(ours(**batch).last_hidden_state[real], expected[real])


def test_token_type_ids_are_ignored_as_transformers_ignores_them(folder) -> None:
    config, path = folder
    hf = make_hf(config=config)
    ours = MPNetModel.from_pretrained(path, attn_implementation="eager")
    batch = padded_batch(config)
    types = torch.ones_like(batch["input_ids"])
    with torch.no_grad():
        expected = hf(**batch, token_type_ids=types).last_hidden_state
        assert torch.equal(ours(**batch, token_type_ids=types).last_hidden_state, expected)
    assert "token_type_ids" not in inspect.signature(MPNetModel.forward).parameters


def test_saved_by_bertlite_loads_in_transformers_and_back(folder, tmp_path) -> None:
    config, path = folder
    ours = MPNetModel.from_pretrained(path, attn_implementation="eager")
    ours.save_pretrained(tmp_path / "saved")
    assert json.loads((tmp_path / "saved" / "config.json").read_text())["model_type"] == "mpnet"
    theirs = transformers.AutoModel.from_pretrained(tmp_path / "saved").eval()
    again = bertlite.AutoModel.from_pretrained(tmp_path / "saved", attn_implementation="eager")
    assert type(theirs) is transformers.MPNetModel and type(again) is MPNetModel
    assert theirs.config.relative_attention_num_buckets == ours.config.relative_attention_num_buckets
    batch = padded_batch(config)
    with torch.no_grad():
        expected = theirs(**batch).last_hidden_state
        assert torch.equal(ours(**batch).last_hidden_state, expected)
        assert torch.equal(again(**batch).last_hidden_state, expected)


def test_auto_classes_dispatch_on_model_type(folder) -> None:
    config, path = folder
    assert type(bertlite.AutoConfig.from_pretrained(path)) is MPNetConfig
    assert type(bertlite.AutoModel.from_pretrained(path)) is MPNetModel
    assert type(bertlite.AutoConfig.for_model("mpnet", **TINY_MPNET)) is MPNetConfig
    assert type(bertlite.AutoModel.from_config(transformers.MPNetConfig(**TINY_MPNET))) is MPNetModel
    assert bertlite.MPNetModel is MPNetModel and bertlite.MPNetConfig is MPNetConfig
    with pytest.raises(ValueError, match=r"model_type='mpnet' has its base model in bertlite \(bertlite.AutoModel\)"):
        bertlite.AutoModelForCausalLM.from_pretrained(path)
    with pytest.raises(ValueError, match="model_type='bert' is not a"):
        bert = {k: v for k, v in {**TINY_MPNET, **CONFIGS[config]}.items() if k != "relative_attention_num_buckets"}
        MPNetModel.from_pretrained(path, config=bertlite.BertConfig(**bert))


def test_config_defaults_are_transformers_and_bad_values_are_named() -> None:
    theirs = transformers.MPNetConfig().to_dict()
    ours = MPNetConfig().to_dict()
    shared = sorted(set(theirs) & set(ours) - {"transformers_version", "dtype", "id2label", "label2id"})
    assert "relative_attention_num_buckets" in shared and "vocab_size" in shared
    assert {k: ours[k] for k in shared} == {k: theirs[k] for k in shared}
    assert MPNetConfig(max_position_embeddings=514).max_sequence_length == 512
    for value in (16, "32", True, 31.5):
        with pytest.raises(ValueError, match=r"relative_attention_num_buckets must be an integer >= 32.*got"):
            MPNetConfig(relative_attention_num_buckets=value)
    with pytest.raises(ValueError, match="an MPNet model is an encoder with absolute positions"):
        MPNetConfig(position_embedding_type="relative_key")
    with pytest.raises(ValueError, match="model_type='bert' is not a MPNet config"):
        MPNetConfig(model_type="bert")


def test_a_sequence_past_the_position_table_is_refused_by_name(folder) -> None:
    config, path = folder
    table = {**TINY_MPNET, **CONFIGS[config]}["max_position_embeddings"]
    model = MPNetModel.from_pretrained(path)
    message = rf"sequence length {table - 1} exceeds max_position_embeddings={table} \({table - 2} tokens\)"
    with pytest.raises(ValueError, match=message):
        model(input_ids=torch.full((1, table - 1), 5))
    with pytest.raises(ValueError, match=message):
        model(input_ids=torch.full((table - 1,), 5), lengths=torch.tensor([table - 1]))


def head_labels(head: str, batch: dict[str, torch.Tensor], num_labels: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    b, t = batch["input_ids"].shape
    padded = batch["attention_mask"] == 0
    if head == "ForSequenceClassification":
        return {"labels": torch.tensor([2, 0, 1])}
    if head == "ForQuestionAnswering":
        return {"start_positions": torch.tensor([0, 3, 400]), "end_positions": torch.tensor([5, 4, 2])}
    labels = torch.randint(0, num_labels, (b, t), generator=g).masked_fill(padded, -100)
    return {"labels": labels}


@pytest.mark.parametrize("config", ["tiny", "1head-3layers-40buckets"])
@pytest.mark.parametrize("head", HEADS)
def test_every_head_loads_and_equals_transformers(head, config, tmp_path) -> None:
    num_labels = {"ForQuestionAnswering": 2, "ForMaskedLM": 99}.get(head, 3)
    hf = make_hf(head, config, num_labels=2 if head == "ForQuestionAnswering" else 3)
    hf.save_pretrained(tmp_path)
    ours = getattr(mpnet, "MPNet" + head).from_pretrained(tmp_path, attn_implementation="eager")
    assert getattr(bertlite, "MPNet" + head) is type(ours)
    assert list(ours.state_dict()) == list(hf.state_dict())
    auto = getattr(bertlite, "AutoModel" + head)
    assert type(auto.from_pretrained(tmp_path)) is type(ours)
    batch = padded_batch(config)
    real = batch["attention_mask"].bool()
    labels = head_labels(head, batch, num_labels)
    with torch.no_grad():
        expected, got = hf(**batch, **labels), ours(**batch, **labels)
        as_tuple = ours(batch["input_ids"], batch["attention_mask"], return_dict=False)
    assert torch.equal(got.loss, expected.loss)
    fields = ("start_logits", "end_logits") if head == "ForQuestionAnswering" else ("logits",)
    per_text = head == "ForSequenceClassification"  # the others: per token, the padding's rows left out
    for field in fields:
        mine, theirs = getattr(got, field), getattr(expected, field)
        assert torch.equal(mine, theirs) if per_text else torch.equal(mine[real], theirs[real])
    assert torch.equal(as_tuple[0], getattr(got, fields[0]))
    ours.save_pretrained(tmp_path / "saved")  # and back into transformers
    theirs = getattr(transformers, "MPNet" + head).from_pretrained(tmp_path / "saved").eval()
    with torch.no_grad():
        assert torch.equal(getattr(theirs(**batch), fields[0]), getattr(got, fields[0]))
    if head != "ForQuestionAnswering":  # the packed rows (the classifier: each sequence's first)
        with torch.no_grad():
            logits = ours(**packed(batch)).logits
        torch.testing.assert_close(logits, expected.logits if per_text else expected.logits[real], **TOL)


def test_multiple_choice_loads_and_equals_transformers(tmp_path) -> None:
    hf = make_hf("ForMultipleChoice")
    hf.save_pretrained(tmp_path)
    ours = bertlite.AutoModelForMultipleChoice.from_pretrained(tmp_path, attn_implementation="eager")
    assert type(ours) is mpnet.MPNetForMultipleChoice and list(ours.state_dict()) == list(hf.state_dict())
    batch = padded_batch()
    choices = {k: torch.stack([v, v.roll(1, dims=0)], dim=1) for k, v in batch.items()}  # (B, 2, T)
    labels = torch.tensor([1, 0, 1])
    flat = {k: v.flatten(0, 1) for k, v in choices.items()}  # (B * 2, T): each choice a sequence
    with torch.no_grad():
        expected, got = hf(**choices, labels=labels), ours(**choices, labels=labels)
        assert torch.equal(ours.mpnet(**flat).pooler_output, hf.mpnet(**flat).pooler_output)
    # The classifier has one output: its GEMV's path, and last bit, follow the address the loaded weight has.
    torch.testing.assert_close(got.logits, expected.logits, atol=1e-6, rtol=0)
    torch.testing.assert_close(got.loss, expected.loss, atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match=r"MPNetForMultipleChoice takes input_ids of shape \(batch, num_choices"):
        ours(**batch)


@pytest.mark.parametrize("head", [*HEADS, "ForMultipleChoice"])
def test_head_signatures_serve_trainer_like_transformers(head) -> None:
    ours, theirs = getattr(bertlite, "MPNet" + head), getattr(transformers, "MPNet" + head)
    inputs = ["input_ids", "attention_mask", "position_ids", "inputs_embeds"]
    assert list(inspect.signature(ours.forward).parameters)[1:5] == inputs
    assert list(inspect.signature(theirs.forward).parameters)[1:5] == inputs
    assert find_labels(ours) == find_labels(theirs)


def test_masked_lm_is_tied_and_trains_as_transformers() -> None:
    hf = make_hf("ForMaskedLM")
    ours = bertlite.MPNetForMaskedLM(MPNetConfig(**TINY_MPNET), attn_implementation="eager")
    ours.load_state_dict(hf.state_dict())
    assert ours.lm_head.decoder.weight is ours.mpnet.embeddings.word_embeddings.weight
    batch = padded_batch()
    labels = head_labels("ForMaskedLM", batch, 99)["labels"]
    hf.train(), ours.train()
    ours.gradient_checkpointing_enable()
    hf(**batch, labels=labels).loss.backward()
    ours(**batch, labels=labels).loss.backward()
    theirs = dict(hf.named_parameters())
    for name, p in ours.named_parameters():
        torch.testing.assert_close(p.grad, theirs[name].grad, **TOL, msg=lambda m, name=name: f"{name}: {m}")
    assert ours.mpnet.encoder.relative_attention_bias.weight.grad.abs().sum() > 0


# --- the tokenizer and the jobs, on MPNet's vocabulary -------------------------------------

ADVERSARIAL = [
    "The quick brown fox jumps over the lazy dog.",
    "Crème brûlée, naïve café — façade; Ångström, Ünïcödé, Ærøskøbing",
    "日本語のテキストと中文混合，한국어 텍스트。",
    "emoji 🙂🚀 👩‍👩‍👧 ✓ ☃ and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "pneumonoultramicroscopicsilicovolcanoconiosis " + "x" * 120 + " antidisestablishmentarianism",
    "tabs\tand   runs   of\n\n  whitespace \u00a0 nbsp \u200b zero-width \u3000 ideographic",
    "a <mask> token, and <s> </s> <pad> written out",
    "",
    "UPPER lower MiXeD 12345 3.14159 $100 @user #tag e-mail@example.com",
]
PAIRS = [
    ("what is a list?", "A list is a mutable sequence."),
    ("日本語", "naïve café 🙂"),
    ("a long query " * 40, "a short document"),
    ("", "only the second text"),
]
# The CrossEncoder refuses an empty text; a literal "<pad>" takes the place of that pair.
RANKED_PAIRS = [*PAIRS[:3], ("a <pad> in the query", "crème brûlée " * 30)]


def mpnet_vocabulary(real_model_path: Path) -> list[str]:
    """MPNet's vocabulary as all-mpnet-base-v2 has it: <s>, <pad>, </s>, <unk>, BERT's uncased vocab, <mask>."""
    bert = (real_model_path / "vocab.txt").read_text(encoding="utf-8").splitlines()
    return ["<s>", "<pad>", "</s>", "<unk>", *bert, "<mask>"]


@pytest.fixture(scope="module")
def mpnet_folder(real_model_path: Path, tmp_path_factory) -> Path:
    """A tiny random MPNetModel (spread) on MPNet's real vocabulary (30527) and tokenizer, saved by transformers."""
    folder = tmp_path_factory.mktemp("mpnet-base")
    vocab = mpnet_vocabulary(real_model_path)
    tokenizer = transformers.MPNetTokenizer(vocab={token: i for i, token in enumerate(vocab)})
    tokenizer.save_pretrained(folder)
    spread(make_hf(vocab_size=len(vocab), max_position_embeddings=300)).save_pretrained(folder)
    return folder


def test_auto_tokenizer_gives_transformers_ids_on_adversarial_text(mpnet_folder: Path) -> None:
    theirs = transformers.AutoTokenizer.from_pretrained(mpnet_folder)
    ours = bertlite.AutoTokenizer.from_pretrained(mpnet_folder)
    assert type(theirs).__name__ == "MPNetTokenizer"
    for kwargs in ({}, {"padding": True}, {"padding": True, "truncation": True, "max_length": 7}):
        assert ours(ADVERSARIAL, **kwargs) == dict(theirs(ADVERSARIAL, **kwargs))
        firsts, seconds = [a for a, _ in PAIRS], [b for _, b in PAIRS]
        assert ours(firsts, seconds, **kwargs) == dict(theirs(firsts, seconds, **kwargs))
    first, second = (ours(text, add_special_tokens=False)["input_ids"] for text in PAIRS[1])
    assert ours(*PAIRS[1])["input_ids"] == [0, *first, 2, 2, *second, 2]  # <s> A </s></s> B </s>
    expected = theirs(ADVERSARIAL, padding=True, return_tensors="pt")
    got = ours(ADVERSARIAL, padding=True, return_tensors="pt")
    assert list(got) == list(expected) == ["input_ids", "attention_mask"]
    assert all(torch.equal(got[k], expected[k]) for k in expected)
    for text in ADVERSARIAL:
        ids = theirs(text)["input_ids"]
        assert ours.decode(ids, skip_special_tokens=True) == theirs.decode(ids, skip_special_tokens=True)


def test_vocab_txt_alone_gets_mpnets_template(real_model_path: Path, mpnet_folder: Path, tmp_path) -> None:
    from bertlite.tokenization import load_tokenizer

    (tmp_path / "vocab.txt").write_text("\n".join(mpnet_vocabulary(real_model_path)) + "\n", encoding="utf-8")
    for name in ("tokenizer_config.json", "config.json"):
        (tmp_path / name).write_bytes((mpnet_folder / name).read_bytes())
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path)
    ours = bertlite.AutoTokenizer.from_pretrained(tmp_path)
    firsts, seconds = [a for a, _ in PAIRS], [b for _, b in PAIRS]
    assert ours(ADVERSARIAL) == dict(theirs(ADVERSARIAL))
    assert ours(firsts, seconds) == dict(theirs(firsts, seconds))
    backend = load_tokenizer(tmp_path).encode(*PAIRS[0])  # what the jobs run
    assert backend.ids == theirs(*PAIRS[0])["input_ids"] and not any(backend.type_ids)


@pytest.fixture(scope="module")
def st_folder(mpnet_folder: Path, tmp_path_factory) -> Path:
    """all-mpnet-base-v2's shape, saved by sentence-transformers: the Transformer, mean pooling, Normalize."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    folder = tmp_path_factory.mktemp("mpnet-st")
    modules = [Transformer(str(mpnet_folder), max_seq_length=200), Pooling(32, "mean"), Normalize()]
    SentenceTransformer(modules=modules, device="cpu").save(str(folder))
    return folder


def test_embedder_gives_sentence_transformers_vectors(st_folder: Path) -> None:
    from sentence_transformers import SentenceTransformer

    texts = [*ADVERSARIAL, "long text " * 150]  # the last is cut to max_seq_length, past max_distance
    expected = SentenceTransformer(str(st_folder), device="cpu").encode(texts, convert_to_numpy=True)
    for unpad in (True, False):
        embedder = bertlite.Embedder.from_pretrained(st_folder, dtype="float32", unpad=unpad)
        assert type(embedder.model) is MPNetModel and embedder.max_length == 200
        np.testing.assert_allclose(embedder.encode(texts), expected, atol=1e-5, rtol=0)
    drop_in = bertlite.SentenceTransformer(str(st_folder), device="cpu", model_kwargs={"dtype": "float32"})
    np.testing.assert_allclose(drop_in.encode(texts), expected, atol=1e-5, rtol=0)


def test_bertlite_embed_on_an_mpnet_folder_gives_sentence_transformers_vectors(st_folder: Path, tmp_path) -> None:
    from sentence_transformers import SentenceTransformer

    from bertlite.cli import main
    from bertlite.jobs.kinds import detect_kind

    assert detect_kind(st_folder) == "embedding"
    texts = [t.replace("\n", " ") for t in ADVERSARIAL if t]
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    args = ["embed", str(st_folder), "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.npy")]
    assert main([*args, "--dtype", "float32", "--quiet"]) == 0
    expected = SentenceTransformer(str(st_folder), device="cpu").encode(texts, convert_to_numpy=True)
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), expected, atol=1e-5, rtol=0)


def test_int8_and_bfloat16_embedders_stay_close_to_float32(st_folder: Path) -> None:
    texts = [*ADVERSARIAL, "long text " * 150]
    expected = bertlite.Embedder.from_pretrained(st_folder, dtype="float32").encode(texts)
    assert (expected @ expected.T)[np.triu_indices(len(texts), 1)].mean() < 0.9  # the vectors differ
    int8 = bertlite.Embedder.from_pretrained(st_folder, dtype="int8")
    quantized = {name for name, m in int8.model.named_modules() if type(m).__name__ == "Int8Linear"}
    for path in ("attention.attn.qkv", "attention.attn.o", "intermediate.dense", "output.dense"):
        assert f"encoder.layer.1.{path}" in quantized
    assert (int8.encode(texts) * expected).sum(axis=1).min() >= 0.995
    bf16 = bertlite.Embedder.from_pretrained(st_folder, dtype="bfloat16")
    assert bf16.precision == "bfloat16" and (bf16.encode(texts) * expected).sum(axis=1).min() >= 0.99


def test_cross_encoder_gives_sentence_transformers_scores(real_model_path: Path, tmp_path: Path) -> None:
    from sentence_transformers import CrossEncoder as STCrossEncoder

    vocab = mpnet_vocabulary(real_model_path)
    transformers.MPNetTokenizer(vocab={token: i for i, token in enumerate(vocab)}).save_pretrained(tmp_path)
    spread(make_hf("ForSequenceClassification", vocab_size=len(vocab), num_labels=1)).save_pretrained(tmp_path)
    expected = STCrossEncoder(str(tmp_path), device="cpu", max_length=48).predict(RANKED_PAIRS)
    assert np.ptp(expected) > 0.01  # the pairs score apart
    for unpad in (True, False):
        ours = bertlite.CrossEncoder.from_pretrained(tmp_path, dtype="float32", max_length=48, unpad=unpad)
        assert type(ours.model) is mpnet.MPNetForSequenceClassification
        np.testing.assert_allclose(ours.predict(RANKED_PAIRS), expected, atol=1e-5, rtol=0)


def test_parity_compares_an_mpnet_folder_with_transformers(mpnet_folder: Path, tmp_path) -> None:
    from bertlite.cli import main
    from bertlite.parity import check

    report = check(mpnet_folder, texts=[*ADVERSARIAL, *PAIRS, "long text " * 200])
    assert report.ok and len(report.rows) > 10
    assert report.options["max_length"] == 256  # under the table's 298 tokens
    (tmp_path / "texts.txt").write_text("naïve café\tsecond text\nlong text " + "word " * 300, encoding="utf-8")
    assert main(["parity", str(mpnet_folder), "--attn", "sdpa", "--text-file", str(tmp_path / "texts.txt")]) == 0
    head = spread(make_hf("ForQuestionAnswering", vocab_size=30527, max_position_embeddings=300, num_labels=2))
    head.save_pretrained(tmp_path / "qa")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tmp_path / "qa" / name).write_bytes((mpnet_folder / name).read_bytes())
    report = check(tmp_path / "qa", texts=[*ADVERSARIAL[:4], *PAIRS[:2]])
    assert report.ok and {row.name for row in report.rows if row.kind == "logits"} == {"start_logits", "end_logits"}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_cuda_the_bias_runs_through_the_gpus_attention(tmp_path) -> None:
    config = "long-2heads-gelu_new"
    hf = spread(make_hf(config=config))
    hf.save_pretrained(tmp_path)
    batch = padded_batch(config)
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        expected = hf(**batch).last_hidden_state
    on_gpu = {k: v.cuda() for k, v in packed(batch).items()}
    ours = MPNetModel.from_pretrained(tmp_path, device="cuda", attn_implementation="sdpa")
    fast = ready(MPNetModel.from_pretrained(tmp_path, dtype="bfloat16", device="cuda"))
    # "varlen" is installed where flash attention runs; it adds no bias, so MPNet's layers run sdpa on the grid.
    assert {layer.attention.attn.attn_implementation for layer in fast.encoder.layer} == {"varlen"}
    with torch.no_grad():
        float32 = ours(**on_gpu).last_hidden_state.cpu()
        padded = ours(**{k: v.cuda() for k, v in batch.items()}).last_hidden_state.cpu()
        first = ours(**on_gpu, first_token_of=torch.tensor([2, 0, 1], device="cuda")).last_hidden_state.cpu()
        bfloat16 = fast(**on_gpu).last_hidden_state.float().cpu()
    torch.testing.assert_close(float32, expected[real], **TOL)
    torch.testing.assert_close(padded[real], expected[real], **TOL)
    torch.testing.assert_close(first, expected[[2, 0, 1], 0], **TOL)
    assert torch.nn.functional.cosine_similarity(bfloat16, expected[real], dim=-1).min() >= 0.99


def test_sparse_and_multi_vector_encoders_give_sentence_transformers_vectors(real_model_path: Path, tmp_path) -> None:
    from sentence_transformers import MultiVectorEncoder, SparseEncoder
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask
    from sentence_transformers.sparse_encoder.modules import SpladePooling

    vocab = mpnet_vocabulary(real_model_path)
    tokenizer = transformers.MPNetTokenizer(vocab={token: i for i, token in enumerate(vocab)})
    for name in ("ForMaskedLM", "Model"):
        tokenizer.save_pretrained(tmp_path / name)
        spread(make_hf(name, vocab_size=len(vocab), max_position_embeddings=300)).save_pretrained(tmp_path / name)
    texts = [t for t in ADVERSARIAL if t]
    transformer = Transformer(str(tmp_path / "ForMaskedLM"), max_seq_length=64, transformer_task="fill-mask")
    SparseEncoder(modules=[transformer, SpladePooling("max")], device="cpu").save(str(tmp_path / "splade"))
    expected = SparseEncoder(str(tmp_path / "splade"), device="cpu").encode(texts, convert_to_tensor=True).to_dense()
    ours = bertlite.SparseEncoder.from_pretrained(tmp_path / "splade", dtype="float32")
    assert type(ours.model) is mpnet.MPNetForMaskedLM
    got = ours.encode(texts).to_dense()
    assert (expected != 0).sum(dim=1).min() > 0
    assert torch.equal(got != 0, expected != 0) and (got - expected).abs().max().item() <= 1e-5
    torch.manual_seed(2)
    dense = Dense(32, 16, bias=False, activation_function=torch.nn.Identity(), module_input_name="token_embeddings")
    with torch.no_grad():
        dense.linear.weight.normal_(0.0, 0.5)
    modules = [
        Transformer(str(tmp_path / "Model"), max_seq_length=64),
        dense,
        MultiVectorMask(skiplist_words=[]),
        Normalize(module_input_name="token_embeddings"),
    ]
    MultiVectorEncoder(modules=modules, device="cpu").save_pretrained(str(tmp_path / "colbert"))
    expected = MultiVectorEncoder(str(tmp_path / "colbert"), device="cpu").encode_document(texts)
    ours = bertlite.MultiVectorEncoder.from_pretrained(tmp_path / "colbert", dtype="float32")
    assert type(ours.model) is MPNetModel
    got = ours.encode_document(texts)
    assert [g.shape for g in got] == [tuple(e.shape) for e in expected]
    for g, e in zip(got, expected, strict=True):
        assert (torch.as_tensor(g) - torch.as_tensor(e)).abs().max().item() <= 1e-5


def test_transformers_pipelines_run_the_bertlite_heads(real_model_path: Path, tmp_path) -> None:
    vocab = mpnet_vocabulary(real_model_path)
    tokenizer = transformers.MPNetTokenizer(vocab={token: i for i, token in enumerate(vocab)})
    tasks = {"ForMaskedLM": "fill-mask", "ForSequenceClassification": "text-classification"}
    for head, task in tasks.items():
        tokenizer.save_pretrained(tmp_path / head)
        spread(make_hf(head, vocab_size=len(vocab), max_position_embeddings=300)).save_pretrained(tmp_path / head)
        ours = getattr(bertlite, "MPNet" + head).from_pretrained(tmp_path / head, attn_implementation="eager")
        text = "the capital of france is <mask> ." if task == "fill-mask" else "naïve café in paris"
        expected = transformers.pipeline(task, model=str(tmp_path / head), device="cpu")(text)
        assert transformers.pipeline(task, model=ours, tokenizer=tokenizer, device="cpu")(text) == expected
