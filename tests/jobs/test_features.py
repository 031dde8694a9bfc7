"""Embedder: the vectors, token ids and pooling modes, each against an independent reference."""

import json
import shutil

import numpy as np
import pytest
import torch
import transformers

import bertlite
import bertlite.jobs.embedder
from bertlite.jobs.embedder import POOLING_MODES, Embedder
from bertlite.layers.onednn import is_optimized
from bertlite.tokenization import load_tokenizer


@pytest.fixture(scope="module")
def embedder(real_model_path):
    return Embedder.from_pretrained(
        real_model_path, dtype="float32"
    )  # fp32 references; dtype="auto" is bf16 on a CPU with native bf16


@pytest.fixture(scope="module")
def hf_tokenizer(real_model_path):
    return transformers.AutoTokenizer.from_pretrained(real_model_path)


@pytest.fixture(scope="module")
def hf_model(real_model_path):
    return transformers.AutoModel.from_pretrained(real_model_path).eval()


def test_reads_sentence_transformers_settings(embedder):
    assert (embedder.pooling, embedder.normalize, embedder.max_length) == (["mean"], True, 256)


@pytest.mark.slow
def test_vectors_equal_transformers_mean_pooling_in_input_order(embedder, hf_tokenizer, hf_model, corpus_texts):
    texts = corpus_texts[:200]
    ours = embedder.encode(texts, batch_size=16)
    assert ours.shape == (200, 384) and ours.dtype == np.float32
    stats = embedder.last_stats
    # sorted batching is on: far fewer padded positions than batches in corpus order would compute
    corpus_order = sum(
        len(chunk) * max(len(hf_tokenizer(t, truncation=True, max_length=256)["input_ids"]) for t in chunk)
        for chunk in (texts[i : i + 16] for i in range(0, 200, 16))
    )
    assert stats.padded_tokens < 0.8 * corpus_order
    reference = []
    with torch.no_grad():
        for i in range(0, 200, 16):  # corpus order, padded batches, as a transformers user writes it
            batch = hf_tokenizer(texts[i : i + 16], padding=True, truncation=True, max_length=256, return_tensors="pt")
            hidden = hf_model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).float()
            mean = (hidden * mask).sum(1) / mask.sum(1)
            reference.append(torch.nn.functional.normalize(mean, dim=-1))
    np.testing.assert_allclose(ours, torch.cat(reference).numpy(), atol=1e-5, rtol=0)


def transformers_mean_pooled(model, tokenizer, texts: list[str]) -> torch.Tensor:
    """What a transformers user writes: padded batches of 16, masked mean, L2 normalize."""
    vectors = []
    with torch.no_grad():
        for i in range(0, len(texts), 16):
            batch = tokenizer(texts[i : i + 16], padding=True, truncation=True, max_length=256, return_tensors="pt")
            hidden = model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).float()
            vectors.append(torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1))
    return torch.cat(vectors)


@pytest.mark.slow
def test_eager_through_embedder_is_transformers_eager_within_pooling_rounding(
    real_model_path, hf_tokenizer, corpus_texts
):
    # "eager" selects the reference path whole (no oneDNN modules): only the pooling's rounding is left.
    eager = transformers.AutoModel.from_pretrained(real_model_path, attn_implementation="eager").eval()
    embedder = Embedder.from_pretrained(real_model_path, dtype="float32")
    assert is_optimized(embedder.model)
    embedder.model.set_attn_implementation("eager")
    assert not is_optimized(embedder.model)
    texts = corpus_texts[:300]
    batched = torch.from_numpy(embedder.encode(texts))
    assert (batched - transformers_mean_pooled(eager, hf_tokenizer, texts)).abs().max() <= 3e-7
    for text in (texts[7], texts[150]):
        single = torch.from_numpy(embedder.encode([text]))
        assert (single - transformers_mean_pooled(eager, hf_tokenizer, [text])).abs().max() <= 3e-7


@pytest.mark.slow
def test_vectors_equal_sentence_transformers(embedder, real_model_path, corpus_texts):
    sentence_transformers = pytest.importorskip("sentence_transformers")  # a test extra: CI has it
    texts = corpus_texts[200:300]
    reference = sentence_transformers.SentenceTransformer(str(real_model_path), device="cpu").encode(texts)
    np.testing.assert_allclose(embedder.encode(texts), reference, atol=1e-5, rtol=0)


@pytest.fixture(scope="module")
def vocab_only_folder(real_model_path, tmp_path_factory):
    folder = tmp_path_factory.mktemp("vocab_only")
    for name in ("config.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json", "model.safetensors"):
        shutil.copy(real_model_path / name, folder / name)
    return folder


@pytest.mark.parametrize("source", ["tokenizer.json", "vocab.txt"])
def test_token_ids_equal_auto_tokenizer(source, real_model_path, vocab_only_folder, corpus_texts):
    folder = real_model_path if source == "tokenizer.json" else vocab_only_folder
    assert (folder / "tokenizer.json").exists() == (source == "tokenizer.json")
    texts = corpus_texts[:1000]
    ours = Embedder(bertlite.BertModel.from_pretrained(folder), load_tokenizer(folder), max_length=512).tokenize(texts)
    theirs = transformers.AutoTokenizer.from_pretrained(folder)(texts, truncation=True, max_length=512)
    assert [e.ids for e in ours] == theirs["input_ids"]
    assert [e.type_ids for e in ours] == theirs["token_type_ids"]


def test_tokenizer_json_padding_does_not_leak(embedder):
    encodings = embedder.tokenize(["short", "a somewhat longer text than the first"])
    assert len(encodings[0].ids) == 3  # [CLS] short [SEP], not padded to the file's 128


def test_pairs_get_second_segment_type_ids(embedder, hf_tokenizer, hf_model):
    pairs = [("How long is a piece of string?", "Twice half its length."), ("Question", "Answer")]
    (e, _) = embedder.tokenize(pairs)
    sep = e.ids.index(hf_tokenizer.sep_token_id)
    assert set(e.type_ids[: sep + 1]) == {0} and set(e.type_ids[sep + 1 :]) == {1}
    ours = embedder.encode(pairs)
    with torch.no_grad():
        for i, (a, b) in enumerate(pairs):
            batch = hf_tokenizer(a, b, return_tensors="pt")
            assert batch["token_type_ids"].sum() > 0
            mean = hf_model(**batch).last_hidden_state.mean(1)
            np.testing.assert_allclose(ours[i], torch.nn.functional.normalize(mean, dim=-1)[0].numpy(), atol=1e-5)


def _hand_pooled(hidden: torch.Tensor, pooled: torch.Tensor, mode: str) -> torch.Tensor:
    """One unpadded sequence (1, T, H): nothing to mask, so the formulas are the definitions."""
    tokens = hidden[0]
    return {
        "cls": tokens[0],
        "mean": tokens.sum(0) / len(tokens),
        "max": tokens.max(0).values,
        "mean_sqrt_len": tokens.sum(0) / len(tokens) ** 0.5,
        "pooler": pooled[0],
    }[mode]


@pytest.mark.parametrize("mode", POOLING_MODES)
def test_pooling_modes_against_unpadded_reference(mode, real_model_path, hf_tokenizer, hf_model, corpus_texts):
    # negative values matter for max pooling: padded zeros must never win
    texts = corpus_texts[:6] + ["x"]
    ours = Embedder.from_pretrained(real_model_path, dtype="float32", pooling=mode, normalize=False).encode(
        texts, batch_size=4
    )
    with torch.no_grad():
        for i, text in enumerate(texts):
            out = hf_model(**hf_tokenizer(text, truncation=True, max_length=256, return_tensors="pt"))
            expected = _hand_pooled(out.last_hidden_state, out.pooler_output, mode)
            np.testing.assert_allclose(ours[i], expected.numpy(), atol=1e-5, rtol=0)


def test_defaults_without_sentence_transformers_metadata(vocab_only_folder):
    e = Embedder.from_pretrained(vocab_only_folder)
    assert (e.pooling, e.normalize, e.max_length) == (["mean"], False, 512)
    e = Embedder.from_pretrained(vocab_only_folder, pooling="cls", normalize=True, max_length=64)
    assert (e.pooling, e.normalize, e.max_length) == (["cls"], True, 64)


def test_unsupported_sentence_transformers_module(real_model_path, tmp_path):
    folder = tmp_path / "dense"
    shutil.copytree(real_model_path, folder)
    modules = json.loads((folder / "modules.json").read_text())
    modules.append({"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"})
    (folder / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(ValueError, match="modules.json has a 'Dense' module"):
        Embedder.from_pretrained(folder)


def test_concatenated_pooling_modes_from_metadata(real_model_path, tmp_path):
    folder = tmp_path / "two_modes"
    shutil.copytree(real_model_path, folder)
    config = json.loads((folder / "1_Pooling/config.json").read_text())
    config["pooling_mode_cls_token"] = True  # sentence-transformers concatenates: cls then mean
    (folder / "1_Pooling/config.json").write_text(json.dumps(config))
    e = Embedder.from_pretrained(folder, normalize=False, dtype="float32")  # as the reference: any CPU's auto
    assert e.pooling == ["cls", "mean"] and e.dimension == 768
    both = e.encode(["hello there"])
    cls = Embedder.from_pretrained(real_model_path, pooling="cls", normalize=False, dtype="float32")
    cls = cls.encode(["hello there"])
    np.testing.assert_allclose(both[:, :384], cls, atol=1e-6)


@pytest.mark.slow
def test_max_tokens_budget_and_long_texts(embedder, corpus_texts, monkeypatch):
    seen = []
    original = embedder._run_packed

    def record(encodings, device):
        seen.append([len(e.ids) for e in encodings])
        return original(encodings, device)

    embedder._run_packed = record
    try:
        vectors = embedder.encode(corpus_texts[:100], batch_size=64, max_tokens=1024)
    finally:
        del embedder._run_packed
    lengths = [n for batch in seen for n in batch]
    assert len(lengths) == 100 and lengths == sorted(lengths, reverse=True)  # every text once, longest first
    assert max(lengths) > 1024 // 64  # the budget, not batch_size, is what limits the batches here
    for i, batch in enumerate(seen):
        # Within the budget (a lone text may exceed it), and full: one text more would break it.
        assert len(batch) <= 64 and (len(batch) * batch[0] <= 1024 or len(batch) == 1), batch
        if i + 1 < len(seen):
            assert len(batch) == 64 or (len(batch) + 1) * batch[0] > 1024, batch
    np.testing.assert_allclose(vectors, embedder.encode(corpus_texts[:100]), atol=1e-6)
    long_text = " ".join(["word"] * 600)
    embedder.encode([long_text, "short"])
    assert embedder.last_stats.truncated == 1
    with pytest.raises(ValueError, match=r"text 0 \(0-based\) is longer than max_length=256"):
        embedder.encode([long_text], on_long="error")
    monkeypatch.setattr(bertlite.jobs.base, "CHUNK_TEXTS", 2)  # the index counts from the input, not the chunk
    with pytest.raises(ValueError, match=r"text 4 \(0-based\)"):
        embedder.encode(["a", "b", "c", "d", long_text], on_long="error")


@pytest.mark.parametrize("mode", POOLING_MODES)
@pytest.mark.slow
def test_unpadded_path_equals_padded_path(mode, real_model_path, corpus_texts):
    texts = corpus_texts[:40] + [("a pair", "of texts")]
    fast = Embedder.from_pretrained(real_model_path, dtype="float32", pooling=mode)
    assert fast.unpad
    slow = Embedder(fast.model, fast.tokenizer, pooling=mode, normalize=True, max_length=256, unpad=False)
    np.testing.assert_allclose(fast.encode(texts, batch_size=8), slow.encode(texts, batch_size=8), atol=1e-6, rtol=0)


def test_outputs_and_arguments(embedder):
    as_torch = embedder.encode(["a", "b"], convert_to="torch")
    assert isinstance(as_torch, torch.Tensor) and as_torch.shape == (2, 384)
    assert embedder.encode([]).shape == (0, 384)
    with pytest.raises(TypeError, match="wrap a single string in a list"):
        embedder.encode("just a string")
    with pytest.raises(ValueError, match="pooling='sum' is not one of"):
        Embedder(embedder.model, embedder.tokenizer, pooling="sum")


@pytest.mark.slow
def test_bf16_vectors_close_to_fp32(real_model_path, embedder, corpus_texts):
    low = Embedder.from_pretrained(real_model_path, dtype="bfloat16").encode(corpus_texts[:50])
    cosine = (low * embedder.encode(corpus_texts[:50])).sum(1)
    assert cosine.min() > 0.99


def test_max_length_can_be_changed_later(real_model_path):
    e = Embedder.from_pretrained(real_model_path)
    long_text = " ".join(["word"] * 100)
    assert len(e.tokenize([long_text])[0].ids) == 102
    e.max_length = 16
    assert len(e.tokenize([long_text])[0].ids) == 16
    e.max_length = 10_000  # capped by the model's position table
    assert e.max_length == 512


@pytest.mark.slow
def test_four_threads_give_the_sequential_vectors(embedder, corpus_texts):
    from concurrent.futures import ThreadPoolExecutor

    chunks = [corpus_texts[i * 50 : (i + 1) * 50] for i in range(4)]
    sequential = [embedder.encode(c) for c in chunks]
    with ThreadPoolExecutor(4) as pool:
        threaded = list(pool.map(embedder.encode, chunks))
    for a, b in zip(sequential, threaded, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow
def test_checkpoint_without_pooler_and_training_after_encode(real_model_path, tmp_path, corpus_texts):
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "no_pooler"
    shutil.copytree(real_model_path, folder)
    state = {k: v for k, v in load_file(folder / "model.safetensors").items() if not k.startswith("pooler.")}
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    e = Embedder.from_pretrained(folder)  # mean pooling never needs the pooler
    vectors = e.encode(corpus_texts[:8])
    with pytest.raises(ValueError, match="pooling='pooler' needs a model with a pooler"):
        Embedder(e.model, e.tokenizer, pooling="pooler")
    # the fused QKV made during encode must leave the parameters trainable
    out = e.model(input_ids=torch.tensor([[101, 7592, 102]])).last_hidden_state
    out.sum().backward()
    assert e.model.encoder.layer[0].attention.self.query.weight.grad is not None
    np.testing.assert_allclose(vectors, Embedder.from_pretrained(real_model_path).encode(corpus_texts[:8]), atol=1e-6)


def _metadata_folder(real_model_path, folder, **edits):
    """The checkpoint's sentence-transformers files alone (they are read before the model), edited."""
    folder.mkdir()
    for name in ("modules.json", "sentence_bert_config.json"):
        shutil.copy(real_model_path / name, folder / name)
    shutil.copytree(real_model_path / "1_Pooling", folder / "1_Pooling")
    for name, content in edits.items():
        (folder / f"{name}.json").write_text(json.dumps(content))
    return folder


@pytest.mark.parametrize("value", [-4, 0, "128", True, 12.5])
def test_bad_max_seq_length_in_metadata_is_refused_by_name(real_model_path, tmp_path, value):
    # 0 and "128" used to fall back to the model's maximum without a word, -4 to crash in the tokenizer.
    folder = _metadata_folder(real_model_path, tmp_path / "st", sentence_bert_config={"max_seq_length": value})
    with pytest.raises(ValueError) as e:
        Embedder.from_pretrained(folder)
    assert str(e.value) == (
        f"{folder}: sentence_bert_config.json has max_seq_length={value!r}; it must be a positive integer "
        "(or null for the model's maximum)"
    )


def test_null_max_seq_length_means_the_model_maximum(real_model_path, tmp_path):
    folder = _metadata_folder(real_model_path, tmp_path / "st", sentence_bert_config={"max_seq_length": None})
    assert bertlite.jobs.embedder.read_sentence_transformers_settings(folder).max_length is None


def test_modules_json_that_is_not_a_list(real_model_path, tmp_path):
    modules = {"0": {"type": "sentence_transformers.models.Transformer", "path": ""}}
    folder = _metadata_folder(real_model_path, tmp_path / "st", modules=modules)
    with pytest.raises(ValueError, match=r"modules.json: expected a JSON list of modules \(objects with 'type'"):
        Embedder.from_pretrained(folder)


def test_bad_metadata_through_the_cli_is_one_line_and_exit_2(real_model_path, tmp_path, capsys):
    from bertlite.cli import main

    folder = _metadata_folder(real_model_path, tmp_path / "st", sentence_bert_config={"max_seq_length": -4})
    (tmp_path / "in.txt").write_text("one text\n")
    assert main(["embed", str(folder), "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.npy")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "max_seq_length=-4; it must be a positive integer" in err
    assert not (tmp_path / "out.npy").exists()


@pytest.fixture(scope="module")
def tiny(real_model_path):
    """A random 2-layer, 32-wide model with the real tokenizer: where only the arguments matter."""
    torch.manual_seed(0)
    config = bertlite.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37)
    return Embedder(bertlite.BertModel(config), load_tokenizer(real_model_path))


def test_each_embedder_owns_its_truncation(tiny, real_model_path):
    tokenizer = load_tokenizer(real_model_path)
    first = Embedder(tiny.model, tokenizer)
    second = Embedder(first.model, first.tokenizer, max_length=16)
    long_text = " ".join(["word"] * 100)
    assert [len(e.tokenize([long_text])[0].ids) for e in (first, second)] == [102, 16]
    second.max_length = 8
    first.max_length = 32
    assert [len(e.tokenize([long_text])[0].ids) for e in (first, second)] == [32, 8]
    assert tokenizer.truncation is None and len(tokenizer.encode(long_text).ids) == 102  # the caller's, untouched


def test_padding_stored_in_the_tokenizer_is_not_taken_for_text(tiny, real_model_path):
    from tokenizers import Tokenizer

    raw = Tokenizer.from_file(str(real_model_path / "tokenizer.json"))
    assert raw.padding["length"] == 128  # the packaged file pads every text to 128
    texts = ["a short text", ("a", "pair")]
    for unpad in (True, False):
        ours = Embedder(tiny.model, raw, unpad=unpad).encode(texts)
        np.testing.assert_array_equal(
            ours, Embedder(tiny.model, load_tokenizer(real_model_path), unpad=unpad).encode(texts)
        )
    assert raw.padding["length"] == 128


def test_bad_items_are_named_by_index_and_type(tiny):
    with pytest.raises(ValueError, match=r"texts\[1\] is int 123; each text must be a str or a \(text_a, text_b\)"):
        tiny.encode(["fine", 123])
    with pytest.raises(ValueError, match=r"texts\[0\] is tuple \('only one',\)"):
        tiny.encode([("only one",)])
    with pytest.raises(ValueError, match=r"texts\[2\] holds a lone surrogate \(\\ud800\)"):
        tiny.encode(["a", "b", "broken \ud800 text"])
    # a proper surrogate pair is one character, and fine
    assert tiny.encode(["emoji \U0001f600", ["a", "pair"]]).shape == (2, 32)


@pytest.mark.parametrize(
    ("argument", "value"),
    [("max_length", 0), ("max_length", -1), ("batch_size", 2.5), ("batch_size", True), ("max_tokens", 0)],
)
def test_counts_are_refused_by_name(tiny, argument, value):
    message = rf"{argument} must be an integer >= 1 \(or None for .*\), got {value!r}"
    if argument == "max_length":
        with pytest.raises(ValueError, match=message):
            Embedder(tiny.model, tiny.tokenizer, max_length=value)
        with pytest.raises(ValueError, match=message):
            tiny.max_length = value
        assert tiny.max_length == 512  # the refused value changed nothing
    else:
        with pytest.raises(ValueError, match=message):
            tiny.encode(["a", "b"], **{argument: value})


def test_numpy_integers_are_counts_too(tiny):
    np.testing.assert_array_equal(tiny.encode(["a", "b"], batch_size=np.int64(1)), tiny.encode(["a", "b"]))


def test_encode_chunks_streams_an_endless_iterator(tiny, monkeypatch):
    import itertools

    monkeypatch.setattr(bertlite.jobs.base, "CHUNK_TEXTS", 3)
    endless = (f"text number {i}" for i in itertools.count())
    chunks = tiny.encode_chunks(endless, show_progress_bar=False)
    first_row, vectors = next(chunks)
    second_row, more = next(chunks)
    chunks.close()
    assert (first_row, second_row, len(vectors), len(more)) == (0, 3, 3, 3)
    assert tiny.last_stats.texts == 6
    expected = tiny.encode([f"text number {i}" for i in range(6)])
    np.testing.assert_allclose(torch.cat([vectors, more]).numpy(), expected, atol=1e-6, rtol=0)


def test_encode_tokenized_gives_encode_s_vectors_from_tokenize_s_encodings(tiny, corpus_texts):
    # What bertlite serve does: its handlers tokenize (they need the token counts), its worker runs the encodings.
    texts = [*corpus_texts[:20], ("a pair", "of texts"), ""]
    encodings = tiny.tokenize(texts)
    np.testing.assert_array_equal(tiny.encode_tokenized(encodings), tiny.encode(texts))  # the same batches
    assert (tiny.last_stats.texts, tiny.last_stats.tokens) == (len(texts), sum(len(e.ids) for e in encodings))
    one_forward = tiny.encode_tokenized(encodings, batch_size=len(texts))
    np.testing.assert_allclose(one_forward, tiny.encode(texts), atol=1e-6, rtol=0)
    cut = Embedder(tiny.model, tiny.tokenizer, truncate_dim=8)
    np.testing.assert_array_equal(cut.encode_tokenized(cut.tokenize(texts)), cut.encode(texts))
    assert tiny.encode_tokenized([]).shape == (0, 32)
    with pytest.raises(ValueError, match=r"batch_size must be an integer >= 1"):
        tiny.encode_tokenized(encodings, batch_size=0)


def test_single_texts_keep_the_token_types_their_tokenizer_gives(embedder, hf_model):
    # A template that marks a single text as type 1: a packed batch must read the types, not assume BERT's 0.
    from tokenizers import Tokenizer
    from tokenizers.processors import TemplateProcessing

    tokenizer = Tokenizer.from_str(embedder.tokenizer.to_str())
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = TemplateProcessing(
        single="[CLS]:1 $A:1 [SEP]:1",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    typed = Embedder(embedder.model, tokenizer, pooling="mean", normalize=True)
    texts = ["the first text", "a second, longer text than the first"]
    encodings = tokenizer.encode_batch(texts)
    expected = []
    with torch.no_grad():
        for e in encodings:
            ids, types = torch.tensor([e.ids]), torch.tensor([e.type_ids])
            assert types.all()
            hidden = hf_model(input_ids=ids, token_type_ids=types).last_hidden_state[0]
            expected.append(torch.nn.functional.normalize(hidden.mean(0), dim=0))
    np.testing.assert_allclose(typed.encode(texts), torch.stack(expected).numpy(), atol=1e-5, rtol=0)
    assert np.abs(typed.encode(texts) - embedder.encode(texts)).max() > 1e-3  # the types changed the vectors
