"""Wrong inputs end in a ValueError with the numbers, before any kernel runs."""

import re

import pytest
import torch

from bertlite.jobs.embedder import Embedder
from bertlite.tokenization import load_tokenizer
from tests.helpers import make_hf_model, to_bertlite


@pytest.fixture(scope="module")
def model():
    return to_bertlite(make_hf_model(type_vocab_size=2), attn="sdpa")


def ids(*shape, high=99):
    return torch.randint(0, high, shape)


BAD_INPUTS = {
    "id too large": (dict(input_ids=torch.tensor([[5, 99, 7]])), "input_ids contains 99, but vocab_size=99"),
    "id far too large": (dict(input_ids=torch.tensor([[5, 10**6]])), "input_ids contains 1000000, but vocab_size=99"),
    "negative id": (dict(input_ids=torch.tensor([[5, -1, 7]])), "input_ids contains -1; ids must be >= 0"),
    "float ids": (dict(input_ids=torch.tensor([[5.0, 6.0]])), "input_ids must be an integer tensor of ids, got dtype"),
    "too long": (dict(input_ids=ids(1, 65)), "sequence length 65 exceeds max_position_embeddings=64; truncate"),
    "token type too large": (
        dict(input_ids=ids(2, 4), token_type_ids=torch.tensor([[0, 0, 1, 2], [0, 0, 0, 0]])),
        "token_type_ids contains 2, but type_vocab_size=2",
    ),
    "token type shape": (
        dict(input_ids=ids(2, 4), token_type_ids=torch.zeros(2, 5, dtype=torch.long)),
        "token_type_ids has shape (2, 5), expected (2, 4)",
    ),
    "mask shape": (
        dict(input_ids=ids(2, 4), attention_mask=torch.ones(2, 3, dtype=torch.long)),
        "attention_mask has shape (2, 3), expected (batch, seq_len) = (2, 4)",
    ),
    "position id too large": (
        dict(input_ids=ids(1, 3), position_ids=torch.tensor([[0, 1, 64]])),
        "position_ids contains 64, but max_position_embeddings=64",
    ),
    "neither ids nor embeds": (dict(), "pass exactly one of input_ids or inputs_embeds"),
    "both ids and embeds": (
        dict(input_ids=ids(1, 3), inputs_embeds=torch.zeros(1, 3, 32)),
        "pass exactly one of input_ids or inputs_embeds",
    ),
    "embeds width": (
        dict(inputs_embeds=torch.zeros(1, 3, 31)),
        "inputs_embeds must have shape (batch",
    ),
    "ids not 2-d": (dict(input_ids=ids(3)), "input_ids must have shape (batch, seq_len), got (3,)"),
    # Round 2: each of these used to end in a RuntimeError from deep inside torch.
    "uint8 ids": (
        dict(input_ids=ids(2, 4).to(torch.uint8)),
        "input_ids must be an integer tensor of ids, got dtype torch.uint8 (use .long())",
    ),
    "int16 token types": (
        dict(input_ids=ids(2, 4), token_type_ids=torch.zeros(2, 4, dtype=torch.int16)),
        "token_type_ids must be an integer tensor of ids, got dtype torch.int16",
    ),
    "empty sequences": (
        dict(input_ids=torch.zeros(2, 0, dtype=torch.long)),
        "input_ids has shape (2, 0): the model needs at least one sequence of at least one token",
    ),
    "empty batch of embeds": (
        dict(inputs_embeds=torch.zeros(0, 3, 32)),
        "inputs_embeds has shape (0, 3, 32): the model needs at least one sequence",
    ),
    "position ids shape": (
        dict(input_ids=ids(2, 5), position_ids=torch.arange(6).expand(2, 6)),
        "position_ids has shape (2, 6), expected (batch, seq_len) = (2, 5), (1, 5) or (5,)",
    ),
    "position ids of another batch": (
        dict(input_ids=ids(2, 5), position_ids=torch.arange(5).expand(3, 5)),
        "position_ids has shape (3, 5), expected (batch, seq_len) = (2, 5)",
    ),
}


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_forward_refuses_bad_input_with_the_numbers(model, case):
    kwargs, message = BAD_INPUTS[case]
    with pytest.raises(ValueError, match=re.escape(message)):
        model(**kwargs)


def test_the_refused_inputs_would_otherwise_crash_or_read_out_of_bounds(model):
    # The check exists because the unguarded op fails obscurely (or, on some
    # devices, reads another row): show the embedding lookup itself misbehaves.
    with pytest.raises(IndexError):
        model.embeddings.word_embeddings(torch.tensor([[5, 99]]))


def test_valid_edge_values_pass(model):
    # the largest legal id, type id and length go through
    input_ids = torch.full((1, 64), 98)
    token_type_ids = torch.ones(1, 64, dtype=torch.long)
    out = model(input_ids=input_ids, token_type_ids=token_type_ids, attention_mask=torch.ones(1, 64, dtype=torch.int32))
    assert out.last_hidden_state.shape == (1, 64, 32)


@pytest.mark.parametrize(
    "packed, message",
    [
        (dict(input_ids=torch.tensor([1, 2, 99]), lengths=torch.tensor([1, 2])), "input_ids contains 99"),
        (
            dict(input_ids=torch.tensor([1, 2, 3]), lengths=torch.tensor([1, 1])),
            "lengths sum to 2",
        ),
        (dict(input_ids=torch.tensor([1, 2]), lengths=torch.tensor([2, 0])), "at least one token"),
        (dict(input_ids=ids(65), lengths=torch.tensor([65])), "sequence length 65 exceeds max_position_embeddings=64"),
        (
            dict(input_ids=torch.tensor([1, 2]), lengths=torch.tensor([2]), token_type_ids=torch.tensor([0, 5])),
            "token_type_ids contains 5, but type_vocab_size=2",
        ),
    ],
)
def test_packed_path_refuses_bad_input(model, packed, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        model(**packed)


def test_embedder_with_a_tokenizer_from_a_bigger_vocab_names_the_id(model, real_model_path):
    # A 30522-token tokenizer on a 99-token model: the mistake of pairing files from two checkpoints.
    embedder = Embedder(model, load_tokenizer(real_model_path), pooling="mean")
    with pytest.raises(ValueError, match=r"input_ids contains \d+, but vocab_size=99"):
        embedder.encode(["the tokenizer of another model"])
    embedder.unpad = False  # the padded path checks too
    with pytest.raises(ValueError, match=r"input_ids contains \d+, but vocab_size=99"):
        embedder.encode(["the tokenizer of another model"])


def test_validation_does_not_change_results(model):
    hf = make_hf_model(type_vocab_size=2)
    batch = {"input_ids": ids(2, 7), "attention_mask": torch.ones(2, 7, dtype=torch.long)}
    with torch.no_grad():
        torch.testing.assert_close(model(**batch).last_hidden_state, hf(**batch).last_hidden_state, atol=1e-5, rtol=0)


@pytest.mark.parametrize("shape", [(5,), (1, 5), (2, 5)])
def test_position_ids_that_broadcast_over_the_batch_pass(model, shape):
    # transformers' own position_ids buffer is (1, max_len): these shapes must keep working, with its results.
    hf = make_hf_model(type_vocab_size=2)
    input_ids = ids(2, 5)
    position_ids = torch.arange(4, 9).expand(shape).contiguous()
    with torch.no_grad():
        ours = model(input_ids=input_ids, position_ids=position_ids).last_hidden_state
        theirs = hf(input_ids=input_ids, position_ids=position_ids.expand(2, 5)).last_hidden_state
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)
