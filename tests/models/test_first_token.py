"""BertModel(first_token_of=...): a packed batch's last layer computes only some sequences' [CLS] rows,
with transformers' numbers for those rows and their pooler output."""

import pytest
import torch

import bertlite
from bertlite.layers.onednn import optimize
from bertlite.quant.int8 import quantize_int8
from tests.helpers import PARITY_CONFIGS, TINY, make_hf_model, packed_inputs, random_batch, to_bertlite

SEQUENCES = torch.tensor([2, 0, 0, 3, 1])  # out of order, with a repeat


def equal_lengths_batch(config, batch: int = 4, seq: int = 9) -> dict:
    """A batch with no padding: the packed rows are already the grid."""
    g = torch.Generator().manual_seed(3)
    return {
        "input_ids": torch.randint(1, config.vocab_size, (batch, seq), generator=g),
        "attention_mask": torch.ones(batch, seq, dtype=torch.long),
        "token_type_ids": torch.randint(0, config.type_vocab_size, (batch, seq), generator=g),
    }


@pytest.mark.parametrize("name", sorted(PARITY_CONFIGS))
@pytest.mark.parametrize("optimized", [False, True])
@pytest.mark.parametrize("padding", [True, False])
def test_first_tokens_match_transformers(name, optimized, padding):
    hf = make_hf_model(attn="eager", **PARITY_CONFIGS[name])
    ours = to_bertlite(hf, attn="sdpa")
    if optimized:
        optimize(ours)
    batch = random_batch(hf.config, batch=4, seq=13) if padding else equal_lengths_batch(hf.config)
    with torch.no_grad():
        out = ours(**packed_inputs(batch), first_token_of=SEQUENCES)
        reference = hf(**batch)
    torch.testing.assert_close(out.last_hidden_state, reference.last_hidden_state[SEQUENCES, 0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.pooler_output, reference.pooler_output[SEQUENCES], atol=1e-5, rtol=1e-5)


def test_a_model_run_padded_keeps_the_rows_asked_for():
    torch.manual_seed(0)
    config = bertlite.BertConfig(**TINY, position_embedding_type="relative_key")  # not packable: run padded
    model = bertlite.BertModel(config).eval()
    batch = random_batch(config, batch=4, seq=13)
    with torch.no_grad():
        out = model(**packed_inputs(batch), first_token_of=SEQUENCES)
        reference = model(**batch)
    torch.testing.assert_close(out.last_hidden_state, reference.last_hidden_state[SEQUENCES, 0], atol=1e-6, rtol=0)
    torch.testing.assert_close(out.pooler_output, reference.pooler_output[SEQUENCES], atol=1e-6, rtol=0)


def test_int8_first_tokens_stay_close_to_the_full_int8_forward():
    hf = make_hf_model(attn="eager")
    ours = quantize_int8(to_bertlite(hf, attn="sdpa"))
    batch = packed_inputs(random_batch(hf.config, batch=4, seq=13))
    with torch.no_grad():
        full = ours(**batch)
        first = ours(**batch, first_token_of=SEQUENCES)
    starts = torch.cumsum(batch["lengths"], 0) - batch["lengths"]
    cosine = torch.nn.functional.cosine_similarity(first.last_hidden_state, full.last_hidden_state[starts[SEQUENCES]])
    assert cosine.min() > 0.999


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(padded=True), r"^first_token_of takes a packed batch \(lengths= or layout=\)$"),
        (dict(output_attentions=True), "not with output_attentions"),
        (
            dict(first_token_of=torch.tensor([0, 4])),
            r"contains 4, but the batch's sequences=4 \(valid ids are 0\.\.3\)$",
        ),
        (dict(first_token_of=torch.tensor([-1])), r"^first_token_of contains -1; ids must be >= 0$"),
        (
            dict(first_token_of=torch.zeros(2, 1, dtype=torch.long)),
            r"must be 1-D \(sequence numbers\), got shape \(2, 1\)$",
        ),
        (dict(first_token_of=torch.tensor([0.0])), "must be an integer tensor of ids, got dtype torch.float32"),
    ],
)
def test_bad_first_token_of_is_named(change, message):
    hf = make_hf_model(attn="eager")
    ours = to_bertlite(hf, attn="sdpa")
    batch = random_batch(hf.config, batch=4, seq=13)
    inputs = batch if change.pop("padded", False) else packed_inputs(batch)
    kwargs = {"first_token_of": torch.tensor([0]), **change}
    with pytest.raises(ValueError, match=message), torch.no_grad():
        ours(**inputs, **kwargs)
