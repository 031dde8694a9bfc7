"""Property-based parity: hypothesis draws small BERT configs and inputs, transformers
computes the reference in the same run.

The "ci" profile (default) is derandomized and small so the suite stays fast; run
many more examples by hand with
    BERTLITE_HYPOTHESIS_PROFILE=thorough pytest tests/models/test_property_parity.py
"""

import os

import pytest
import torch
import transformers
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bertlite
from bertlite.layers.attention import PACKED_ATTENTION, PADDED_ATTENTION
from tests.helpers import TINY, make_hf_model, to_bertlite

settings.register_profile(
    "ci", max_examples=25, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("thorough", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("BERTLITE_HYPOTHESIS_PROFILE", "ci"))

# Activations that exist under the same name in transformers' ACT2FN.
ACTIVATIONS = ["gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "silu", "tanh", "quick_gelu", "mish", "sigmoid"]


@st.composite
def configs(draw) -> dict:
    heads = draw(st.integers(1, 4))
    return dict(
        vocab_size=draw(st.integers(2, 60)),
        hidden_size=heads * draw(st.integers(1, 8)),
        num_attention_heads=heads,
        num_hidden_layers=draw(st.integers(1, 3)),
        intermediate_size=draw(st.integers(1, 40)),
        hidden_act=draw(st.sampled_from(ACTIVATIONS)),
        max_position_embeddings=draw(st.integers(4, 24)),
        type_vocab_size=draw(st.integers(1, 3)),
        layer_norm_eps=draw(st.sampled_from([1e-12, 1e-6, 1e-3])),
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )


@st.composite
def cases(draw) -> tuple[dict, dict, int]:
    config = draw(configs())
    batch = draw(st.integers(1, 4))
    seq = draw(st.integers(1, config["max_position_embeddings"]))
    ids = draw(st.lists(st.integers(0, config["vocab_size"] - 1), min_size=batch * seq, max_size=batch * seq))
    types = draw(st.lists(st.integers(0, config["type_vocab_size"] - 1), min_size=batch * seq, max_size=batch * seq))
    # Padding patterns: right padding (what tokenizers make), left padding, or holes;
    # every row keeps at least one attended token.
    pattern = draw(st.sampled_from(["right", "left", "holes"]))
    lengths = draw(st.lists(st.integers(1, seq), min_size=batch, max_size=batch))
    position = torch.arange(seq)[None, :]
    length = torch.tensor(lengths)[:, None]
    if pattern == "right":
        mask = position < length
    elif pattern == "left":
        mask = position >= seq - length
    else:
        bits = draw(st.lists(st.booleans(), min_size=batch * seq, max_size=batch * seq))
        mask = torch.tensor(bits).view(batch, seq)
        mask[:, 0] = True
    inputs = dict(
        input_ids=torch.tensor(ids).view(batch, seq),
        token_type_ids=torch.tensor(types).view(batch, seq),
        attention_mask=mask.long(),
    )
    return config, inputs, draw(st.integers(0, 2**16))


def build(config: dict, seed: int) -> tuple[transformers.BertModel, bertlite.BertModel]:
    assert set(TINY) <= set(config)  # the drawn config alone decides the model, none of TINY's values
    hf = make_hf_model(seed, **config)
    return hf, to_bertlite(hf)


@given(cases(), st.sampled_from(sorted(PADDED_ATTENTION)))
@pytest.mark.slow
def test_forward_matches_transformers(case, attn):
    config, inputs, seed = case
    hf, ours = build(config, seed)
    ours.set_attn_implementation(attn)
    with torch.no_grad():
        expected = hf(**inputs)
        got = ours(**inputs)
    torch.testing.assert_close(got.last_hidden_state, expected.last_hidden_state, atol=1e-5, rtol=0)
    torch.testing.assert_close(got.pooler_output, expected.pooler_output, atol=1e-5, rtol=0)


# "varlen" on the CPU is bertlite's C++ attention (tests/layers/test_native_attention.py builds and checks it).
@given(cases(), st.sampled_from(sorted(PACKED_ATTENTION)))
@pytest.mark.slow
def test_unpadded_path_matches_transformers_on_real_tokens(case, attn):
    config, inputs, seed = case
    hf, ours = build(config, seed)
    ours.set_attn_implementation(attn)
    # The packed path takes right-padded sequences: keep each row's first `length` tokens.
    lengths = inputs["attention_mask"].sum(1)
    keep = torch.arange(inputs["input_ids"].shape[1])[None, :] < lengths[:, None]
    with torch.no_grad():
        expected = hf(
            input_ids=inputs["input_ids"], token_type_ids=inputs["token_type_ids"], attention_mask=keep.long()
        )
        packed = {"input_ids": inputs["input_ids"][keep], "token_type_ids": inputs["token_type_ids"][keep]}
        hidden = ours(**packed, lengths=lengths).last_hidden_state
    torch.testing.assert_close(hidden, expected.last_hidden_state[keep], atol=1e-5, rtol=0)
