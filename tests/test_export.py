"""Tracing, export and compile give transformers' numbers on inputs other than the example.

Each graph is recorded on an example without padding (the trap: a shortcut taken
because "nothing is masked" would be frozen in) and then run on a padded batch of
another batch size and length, against transformers eager on that batch.
"""

from __future__ import annotations

import io
import warnings

import pytest
import torch
import torch.nn.functional as F
import transformers

import bertlite
from bertlite.models.bert import DEFAULT_ATTENTION
from tests.helpers import TINY, make_hf_head, make_hf_model, random_batch, to_bertlite, to_ours

pytestmark = pytest.mark.slow  # tracing, torch.export, ONNX and torch.compile builds

NAMES = ("input_ids", "attention_mask", "token_type_ids")  # BertModel.forward's first positional arguments
ATOL = 1e-5  # traced / exported / compiled graphs against transformers eager, fp32
ONNX_ATOL = 1e-4  # onnxruntime's kernels accumulate in another order


def unpadded_example(config, batch: int = 2, seq: int = 8) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(7)
    input_ids = torch.randint(1, config.vocab_size, (batch, seq), generator=g)
    token_type_ids = (torch.arange(seq) >= seq // 2).long().expand(batch, seq).contiguous()
    return input_ids, torch.ones(batch, seq, dtype=torch.long), token_type_ids


def padded_batch(config) -> dict[str, torch.Tensor]:
    batch = random_batch(config, batch=3, seq=13, seed=3)
    assert not batch["attention_mask"].all() and batch["attention_mask"][0].all()  # some rows padded, one not
    return batch


def as_args(batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    return tuple(batch[name] for name in NAMES)


def real_token_diff(ours: torch.Tensor, reference: torch.Tensor, mask: torch.Tensor) -> float:
    """Max abs difference over the real tokens (padded positions carry no meaning)."""
    ours = torch.as_tensor(ours)
    return (ours[mask.bool()] - reference[mask.bool()]).abs().max().item()


def dynamic_dims() -> tuple[dict[int, torch.export.Dim], ...]:
    # One pair of Dims shared by the three inputs: they must agree in shape. The length is bounded by
    # max_position_embeddings, which the forward checks (torch.export would otherwise suggest the bound).
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq", max=TINY["max_position_embeddings"])
    return tuple({0: batch, 1: seq} for _ in NAMES)


@pytest.fixture(scope="module")
def hf():
    return make_hf_model()


@pytest.fixture(scope="module")
def model(hf):
    model = to_bertlite(hf, attn="sdpa")  # the default implementation, the one users export
    model.config.return_dict = False  # graphs return tuples: (last_hidden_state, pooler_output)
    return model


@pytest.fixture(scope="module")
def batch(hf):
    return padded_batch(hf.config)


@pytest.fixture(scope="module")
def reference(hf, batch):
    with torch.no_grad():
        out = hf(**batch)
    return out.last_hidden_state, out.pooler_output


@pytest.fixture(scope="module")
def exported(model, hf):
    with torch.no_grad():
        return torch.export.export(model, unpadded_example(hf.config), dynamic_shapes=dynamic_dims())


def trace_quietly(module: torch.nn.Module, example: tuple[torch.Tensor, ...]) -> torch.jit.ScriptModule:
    """torch.jit.trace, failing on a TracerWarning: each one marks a value frozen into the trace."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch 2.13 deprecates jit.trace itself
        warnings.simplefilter("error", torch.jit.TracerWarning)
        # check_trace re-traces and compares on the example; the tests compare on another batch, which
        # says more, and skipping it saves most of the trace's time.
        return torch.jit.trace(module, example, check_trace=False)


def test_jit_trace_of_an_unpadded_example_masks_a_padded_batch(model, hf, batch, reference):
    traced = trace_quietly(model, unpadded_example(hf.config))
    with torch.no_grad():
        last_hidden_state, pooler_output = traced(*as_args(batch))
    assert last_hidden_state.shape == reference[0].shape
    assert real_token_diff(last_hidden_state, reference[0], batch["attention_mask"]) <= ATOL
    torch.testing.assert_close(pooler_output, reference[1], atol=ATOL, rtol=0)


def test_tracing_leaves_eager_validation_in_place(model, hf):
    trace_quietly(model, unpadded_example(hf.config))
    with pytest.raises(ValueError, match="input_ids contains 99, but vocab_size=99"):
        model(input_ids=torch.tensor([[5, 99, 7]]))


def test_legacy_onnx_export_runs_in_onnxruntime(model, hf, batch, reference):
    import onnxruntime as ort

    # The TorchScript exporter fills keyword-only parameters in positionally (torch 2.13), which
    # BertModel.forward has; exporting the traced module sidesteps that, and it is the same trace.
    traced = trace_quietly(model, unpadded_example(hf.config))
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # "legacy TorchScript-based ONNX export"
        warnings.simplefilter("ignore", UserWarning)  # "no signature found for <ScriptMethod>"
        torch.onnx.export(
            traced,
            unpadded_example(hf.config),
            f,
            dynamo=False,
            input_names=list(NAMES),
            output_names=["last_hidden_state", "pooler_output"],
            dynamic_axes={name: {0: "batch", 1: "seq"} for name in NAMES},
        )
    session = ort.InferenceSession(f.getvalue(), providers=["CPUExecutionProvider"])
    last_hidden_state, pooler_output = session.run(None, {name: batch[name].numpy() for name in NAMES})
    assert real_token_diff(last_hidden_state, reference[0], batch["attention_mask"]) <= ONNX_ATOL
    torch.testing.assert_close(torch.from_numpy(pooler_output), reference[1], atol=ONNX_ATOL, rtol=0)


def test_torch_export_with_dynamic_batch_and_length(exported, batch, reference):
    with torch.no_grad():
        last_hidden_state, pooler_output = exported.module()(*as_args(batch))
    assert real_token_diff(last_hidden_state, reference[0], batch["attention_mask"]) <= ATOL
    torch.testing.assert_close(pooler_output, reference[1], atol=ATOL, rtol=0)


def test_torch_export_returns_the_output_dict(hf, batch, reference):
    # The ModelOutputs are pytree nodes, so an exported program gives back the same dict (return_dict=True).
    model = to_bertlite(hf, attn="sdpa")
    with torch.no_grad():
        program = torch.export.export(model, unpadded_example(hf.config), dynamic_shapes=dynamic_dims())
        out = program.module()(*as_args(batch))
    assert isinstance(out, bertlite.BaseModelOutputWithPooling) and list(out) == ["last_hidden_state", "pooler_output"]
    assert real_token_diff(out["last_hidden_state"], reference[0], batch["attention_mask"]) <= ATOL
    torch.testing.assert_close(out.pooler_output, reference[1], atol=ATOL, rtol=0)


def test_exported_graph_reads_no_tensor_value(exported):
    # A Python branch on a value would show as an item / _local_scalar_dense node (or fail the export).
    targets = {str(node.target) for node in exported.graph.nodes if node.op == "call_function"}
    assert not {t for t in targets if "item" in t or "local_scalar_dense" in t}
    assert any("scaled_dot_product_attention" in t for t in targets)  # the graph is the model's, not empty


def test_onnx_dynamo_export_runs_in_onnxruntime(exported, batch, reference):
    import onnxruntime as ort  # the test extra has it (and onnxscript, which dynamo=True needs)

    # Given the exported program, the dynamo exporter only translates it; given the model, it would
    # first run this same torch.export.export (scripts/export_parity.py measures that path too).
    program = torch.onnx.export(exported, dynamo=True, output_names=["last_hidden_state", "pooler_output"])
    session = ort.InferenceSession(program.model_proto.SerializeToString(), providers=["CPUExecutionProvider"])
    last_hidden_state, pooler_output = session.run(None, {name: batch[name].numpy() for name in NAMES})
    assert real_token_diff(last_hidden_state, reference[0], batch["attention_mask"]) <= ONNX_ATOL
    torch.testing.assert_close(torch.from_numpy(pooler_output), reference[1], atol=ONNX_ATOL, rtol=0)


def test_compile_fullgraph_serves_another_shape_without_recompiling():
    hf = make_hf_model(num_hidden_layers=1)  # the smallest model: inductor's compile time grows with the graph
    model = to_bertlite(hf, attn="sdpa")
    batch = padded_batch(hf.config)
    compiled = torch.compile(model, fullgraph=True, dynamic=True)  # fullgraph: a graph break is an error
    with torch.no_grad():
        compiled(*unpadded_example(hf.config))
        with torch.compiler.set_stance("fail_on_recompile"):  # the graph of the unpadded example serves
            ours = compiled(*as_args(batch)).last_hidden_state
        reference = hf(**batch).last_hidden_state
    assert real_token_diff(ours, reference, batch["attention_mask"]) <= ATOL


def make_classifier() -> tuple[transformers.BertForSequenceClassification, bertlite.BertForSequenceClassification]:
    hf = make_hf_head("BertForSequenceClassification")  # 3 labels
    ours = to_ours(hf, attn=DEFAULT_ATTENTION)
    ours.config.return_dict = False
    return hf, ours


def test_a_head_traces_and_exports():
    hf, ours = make_classifier()
    batch = padded_batch(hf.config)
    example = unpadded_example(hf.config)
    with torch.no_grad():
        reference = hf(**batch).logits
        traced = trace_quietly(ours, example)(*as_args(batch))[0]
        exported = torch.export.export(ours, example, dynamic_shapes=dynamic_dims()).module()(*as_args(batch))[0]
    torch.testing.assert_close(traced, reference, atol=ATOL, rtol=0)
    torch.testing.assert_close(exported, reference, atol=ATOL, rtol=0)


def test_a_decoder_traces_and_exports_with_its_causal_mask():
    hf = make_hf_model(is_decoder=True)
    model = to_bertlite(hf, attn="sdpa")
    model.config.return_dict = False
    batch = padded_batch(hf.config)
    example = unpadded_example(hf.config)
    with torch.no_grad():
        reference = hf(**batch).last_hidden_state
        traced = trace_quietly(model, example)(*as_args(batch))[0]
        exported = torch.export.export(model, example, dynamic_shapes=dynamic_dims()).module()(*as_args(batch))[0]
    assert real_token_diff(traced, reference, batch["attention_mask"]) <= ATOL
    assert real_token_diff(exported, reference, batch["attention_mask"]) <= ATOL


def test_relative_positions_trace_and_export():
    # transformers 5 dropped relative positions; bertlite eager is the reference here, which
    # tests_legacy/ proves bitwise equal to transformers 4.57's eager.
    torch.manual_seed(0)
    config = bertlite.BertConfig(**TINY, position_embedding_type="relative_key_query", return_dict=False)
    model = bertlite.BertModel(config, attn_implementation="sdpa")
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    model.eval()
    reference_model = bertlite.BertModel(config, attn_implementation="eager").eval()
    reference_model.load_state_dict(model.state_dict())
    batch = padded_batch(config)
    example = unpadded_example(config)
    with torch.no_grad():
        reference = reference_model(**batch)[0]
        traced = trace_quietly(model, example)(*as_args(batch))[0]
        exported = torch.export.export(model, example, dynamic_shapes=dynamic_dims()).module()(*as_args(batch))[0]
    assert real_token_diff(traced, reference, batch["attention_mask"]) <= ATOL
    assert real_token_diff(exported, reference, batch["attention_mask"]) <= ATOL


# --- eager mode keeps its behaviour ----------------------------------------------


@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "padded"])
def test_eager_stays_bitwise_equal_to_transformers(hf, padded):
    ours = to_bertlite(hf, attn="eager")
    if padded:
        inputs = padded_batch(hf.config)
    else:
        inputs = dict(zip(NAMES, unpadded_example(hf.config), strict=True))
    with torch.no_grad():
        expected, got = hf(**inputs), ours(**inputs)
    assert torch.equal(got.last_hidden_state, expected.last_hidden_state)
    assert torch.equal(got.pooler_output, expected.pooler_output)


def test_eager_sdpa_gets_no_bias_when_nothing_is_masked(hf, monkeypatch):
    seen = []
    sdpa = F.scaled_dot_product_attention

    def recording_sdpa(*args, attn_mask=None, **kwargs):
        seen.append(attn_mask)
        return sdpa(*args, attn_mask=attn_mask, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", recording_sdpa)
    model = to_bertlite(hf, attn="sdpa")
    with torch.no_grad():
        model(*unpadded_example(hf.config))  # an all-ones mask
        unmasked, seen[:] = list(seen), []
        model(*as_args(padded_batch(hf.config)))
    assert len(unmasked) == hf.config.num_hidden_layers and all(mask is None for mask in unmasked)
    assert len(seen) == hf.config.num_hidden_layers and all(isinstance(mask, torch.Tensor) for mask in seen)
