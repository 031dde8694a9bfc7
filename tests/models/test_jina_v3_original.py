"""jina-embeddings-v3's original hub layout (model_type "xlm-roberta", auto_map to
jinaai/xlm-roberta-flash-implementation's code, each Linear's and Embedding's weight under torch parametrizations with
its task adapters) loaded with no code run: built here from transformers' native folder by the inverse of
transformers' conversion mapping, plus random adapters. Without a task it gives transformers' native outputs; with
tasks, a float64 reference of the adapters' equations: transformers' native module loaded from weights merged per
task as the original's modeling_lora.py merges them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

import bertlite
from bertlite.jobs.prepare import ready
from bertlite.models.jina_embeddings_v3 import JinaEmbeddingsV3Model
from tests.models.family import packed
from tests.models.test_gte import padded_batch
from tests.models.test_jina_v3 import TINY_JINA, make_hf

TASKS = ["retrieval.query", "retrieval.passage", "separation", "classification", "text-matching"]
INSTRUCTIONS = {
    "retrieval.query": "Represent the query for retrieving evidence documents: ",
    "retrieval.passage": "Represent the document for retrieval: ",
    "separation": "",
    "classification": "",
    "text-matching": "",
}
RANK, ALPHA = 4, 3.0
CODE = "jinaai/xlm-roberta-flash-implementation"
# The modules the original's LoRAParametrization.add_to_layer adapts: every nn.Linear and nn.Embedding.
EMBEDDINGS = ("embeddings.word_embeddings", "embeddings.token_type_embeddings")
LINEARS = ("mixer.Wqkv", "mixer.out_proj", "mlp.fc1", "mlp.fc2", "pooler.dense")
TOL = dict(atol=1e-5, rtol=1e-5)


def original_config(native: dict, **overrides) -> dict:
    """The original's config.json for a native one: its model_type, rotary fields, auto_map and adapters."""
    config = {key: value for key, value in native.items() if key not in ("rope_parameters", "model_type")}
    config |= {
        "model_type": "xlm-roberta",
        "architectures": ["XLMRobertaLoRA"],
        "position_embedding_type": "rotary",
        "rotary_emb_base": native["rope_parameters"]["rope_theta"],
        "auto_map": {
            "AutoConfig": f"{CODE}--configuration_xlm_roberta.XLMRobertaFlashConfig",
            "AutoModel": f"{CODE}--modeling_lora.XLMRobertaLoRA",
            "AutoModelForMaskedLM": f"{CODE}--modeling_xlm_roberta.XLMRobertaForMaskedLM",
        },
        "lora_adaptations": TASKS,
        "lora_rank": RANK,
        "lora_alpha": ALPHA,
        "lora_dropout_p": 0.0,
        "lora_main_params_trainable": False,
        "load_trained_adapters": True,
        "task_instructions": INSTRUCTIONS,
        "use_flash_attn": True,
        "use_reentrant": False,
        "emb_pooler": None,
        "matryoshka_dimensions": [8, 16, 32],
        "truncate_dim": None,
    }
    return config | overrides


def to_original(native_folder: Path, folder: Path) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Write the original layout of a native folder into `folder`; return each adapted weight's (lora_A, lora_B)."""
    g = torch.Generator().manual_seed(5)
    tensors, adapters = {}, {}
    for key, value in load_file(native_folder / "model.safetensors").items():
        module, _, name = key.rpartition(".")
        if name == "weight" and module.endswith(EMBEDDINGS + LINEARS):
            rows, cols = value.shape
            # An Embedding's pair: (tasks, rows, r), (tasks, r, dim); a Linear's: (tasks, r, in), (tasks, out, r).
            shapes = ((rows, RANK), (RANK, cols)) if module.endswith(EMBEDDINGS) else ((RANK, cols), (rows, RANK))
            a, b = (torch.randn(len(TASKS), *shape, generator=g) * 0.2 for shape in shapes)
            prefix = f"roberta.{module}.parametrizations.weight"
            tensors |= {f"{prefix}.original": value, f"{prefix}.0.lora_A": a, f"{prefix}.0.lora_B": b}
            adapters[key] = (a, b)
        else:
            tensors[f"roberta.{key}"] = value
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    native = json.loads((native_folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(original_config(native)))
    return adapters


def merged_reference(
    native_folder: Path,
    adapters: dict,
    task: int | None,
    folder: Path,
    dtype: torch.dtype = torch.float64,
    attn: str = "eager",
) -> transformers.PreTrainedModel:
    """transformers' native module in `dtype` on weights merged (in float64) for `task` by the original's equations
    (jinaai/xlm-roberta-flash-implementation, modeling_lora.py, LoRAParametrization.lora_forward): a Linear's
    W + alpha / rank * B[t] @ A[t], an Embedding's W + alpha / rank * A[t] @ B[t]; task None: the plain weights."""
    tensors = {key: value.double() for key, value in load_file(native_folder / "model.safetensors").items()}
    if task is not None:
        for key, (a, b) in adapters.items():
            a, b = a[task].double(), b[task].double()
            product = a @ b if key.rpartition(".")[0].endswith(EMBEDDINGS) else b @ a
            tensors[key] = tensors[key] + ALPHA / RANK * product
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {key: value.to(dtype) for key, value in tensors.items()}
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    (folder / "config.json").write_text((native_folder / "config.json").read_text())
    model = transformers.JinaEmbeddingsV3Model.from_pretrained(folder, dtype=dtype, attn_implementation=attn)
    return model.eval()


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict:
    """The native folder, its original layout, and the float64 references for no task and each task."""
    root = tmp_path_factory.mktemp("jina-v3-original")
    make_hf().save_pretrained(root / "native")
    adapters = to_original(root / "native", root / "original")
    references = {
        task: merged_reference(root / "native", adapters, task, root / f"merged-{task}")
        for task in (None, *range(len(TASKS)))
    }
    return {"native": root / "native", "original": root / "original", "references": references}


def expected_rows(references: dict, batch: dict[str, torch.Tensor], tasks: list[int | None]) -> tuple:
    """Each sequence's last hidden state and pooler output, from the reference of its task."""
    batch64 = dict(batch)
    hidden, pooled = [], []
    with torch.no_grad():
        for row, task in enumerate(tasks):
            out = references[task](**batch64)
            hidden.append(out.last_hidden_state[row])
            pooled.append(out.pooler_output[row])
    return torch.stack(hidden).float(), torch.stack(pooled).float()


def test_the_original_loads_without_code_and_without_a_task_is_the_native_module(folders) -> None:
    ours = bertlite.AutoModel.from_pretrained(folders["original"], attn_implementation="eager", trust_remote_code=False)
    assert type(ours) is JinaEmbeddingsV3Model and ours.config.lora_adaptations == TASKS
    assert ours.config.task_instructions == INSTRUCTIONS and ours.config.rope_theta == 20_000.0
    assert ours.encoder.layers[0].mixer.Wqkv.lora_A.shape == (len(TASKS), RANK, TINY_JINA["hidden_size"])
    hf = transformers.JinaEmbeddingsV3Model.from_pretrained(folders["native"], attn_implementation="eager").eval()
    batch = padded_batch()
    with torch.no_grad():
        expected, got = hf(**batch), ours(**batch)
    assert torch.equal(got.last_hidden_state, expected.last_hidden_state)
    assert torch.equal(got.pooler_output, expected.pooler_output)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_tasks_match_the_float64_reference_padded_and_packed(folders, attn) -> None:
    ours = JinaEmbeddingsV3Model.from_pretrained(folders["original"], attn_implementation=attn)
    batch = padded_batch()
    real = batch["attention_mask"].bool()
    for tasks in ([0, 0, 0], [4, 1, None], [None, 2, 3]):
        adapter_mask = ours.task_ids([None if t is None else TASKS[t] for t in tasks], 3)
        hidden, pooled = expected_rows(folders["references"], batch, tasks)
        with torch.no_grad():
            got = ours(**batch, adapter_mask=adapter_mask)
            got_packed = ours(**packed(batch), adapter_mask=adapter_mask)
            first = ours(**packed(batch), adapter_mask=adapter_mask, first_token_of=torch.tensor([2, 0]))
        torch.testing.assert_close(got.last_hidden_state[real], hidden[real], **TOL)
        torch.testing.assert_close(got.pooler_output, pooled, **TOL)
        torch.testing.assert_close(got_packed.last_hidden_state, hidden[real], **TOL)
        torch.testing.assert_close(got_packed.pooler_output, pooled, **TOL)
        torch.testing.assert_close(first.last_hidden_state, hidden[[2, 0], 0], **TOL)
        torch.testing.assert_close(first.pooler_output, pooled[[2, 0]], **TOL)
    # The adapters change the outputs, each its own way (the test can fail).
    with torch.no_grad():
        outs = [ours(**batch, adapter_mask=ours.task_ids(t, 3)).pooler_output for t in (None, *TASKS)]
    assert all((a - b).abs().max() > 1e-2 for i, a in enumerate(outs) for b in outs[i + 1 :])


def test_a_task_is_checked_by_name(folders) -> None:
    ours = JinaEmbeddingsV3Model.from_pretrained(folders["original"])
    with pytest.raises(ValueError, match=r"unknown task 'query'; the tasks are retrieval\.query, .*text-matching$"):
        ours.task_ids("query", 2)
    with pytest.raises(ValueError, match="adapter_mask must have shape \\(3,\\)"):
        ours(**padded_batch(), adapter_mask=torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="adapter_mask holds task indices outside -1..4"):
        ours(**padded_batch(), adapter_mask=torch.tensor([0, 1, 5]))
    native = JinaEmbeddingsV3Model.from_pretrained(folders["native"])
    with pytest.raises(ValueError, match="this model has no task adapters"):
        native.task_ids("retrieval.query", 1)


def test_an_auto_map_naming_other_code_is_refused_by_name(folders, tmp_path) -> None:
    native = json.loads((folders["native"] / "config.json").read_text())
    other = original_config(native)
    other["auto_map"]["AutoModelForSequenceClassification"] = "someone/else--modeling.Classifier"
    (tmp_path / "config.json").write_text(json.dumps(other))
    with pytest.raises(
        ValueError, match="auto_map names the checkpoint's own code .*someone/else--modeling.Classifier"
    ):
        bertlite.AutoModel.from_pretrained(tmp_path)
    interleaved = original_config(native, rotary_emb_interleaved=True)
    (tmp_path / "config.json").write_text(json.dumps(interleaved))
    with pytest.raises(ValueError, match="rotary_emb_interleaved=True is not implemented"):
        bertlite.AutoConfig.from_pretrained(tmp_path)


def test_saved_with_adapters_loads_back(folders, tmp_path) -> None:
    ours = JinaEmbeddingsV3Model.from_pretrained(folders["original"], attn_implementation="eager")
    ours.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["model_type"] == "jina_embeddings_v3" and saved["lora_adaptations"] == TASKS
    assert "auto_map" not in saved and "use_flash_attn" not in saved
    again = bertlite.AutoModel.from_pretrained(tmp_path, attn_implementation="eager")
    batch = padded_batch()
    adapter_mask = ours.task_ids(["separation", None, "retrieval.query"], 3)
    with torch.no_grad():
        expected = ours(**batch, adapter_mask=adapter_mask).last_hidden_state
        assert torch.equal(again(**batch, adapter_mask=adapter_mask).last_hidden_state, expected)


def test_an_8192_token_text_with_a_task_matches_the_reference(tmp_path) -> None:
    """Packed, on the CPU's fast path, against transformers' sdpa on float32 weights merged for the task."""
    make_hf(max_position_embeddings=8194, attn="sdpa").save_pretrained(tmp_path / "native")
    adapters = to_original(tmp_path / "native", tmp_path / "original")
    reference = merged_reference(tmp_path / "native", adapters, 1, tmp_path / "merged", torch.float32, "sdpa")
    ours = ready(JinaEmbeddingsV3Model.from_pretrained(tmp_path / "original"))
    ids = torch.randint(4, TINY_JINA["vocab_size"], (1, 8192), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        expected = reference(input_ids=ids).last_hidden_state[0]
        got = ours(input_ids=ids[0], lengths=torch.tensor([8192]), adapter_mask=torch.tensor([1])).last_hidden_state
    torch.testing.assert_close(got, expected, **TOL)


_LONG_PEAK_SCRIPT = """
import sys, torch
from bertlite.jobs.prepare import ready
from bertlite.models.jina_embeddings_v3 import JinaEmbeddingsV3Model

def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key)) / 1024

model = ready(JinaEmbeddingsV3Model.from_pretrained(sys.argv[1]))
ids = torch.randint(4, 99, (8192,), generator=torch.Generator().manual_seed(0))
task = torch.tensor([2])
with torch.inference_mode():
    model(input_ids=ids[:300], lengths=torch.tensor([300]), adapter_mask=task)  # every kernel built once
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = status("VmRSS:")
    model(input_ids=ids, lengths=torch.tensor([8192]), adapter_mask=task)
print(status("VmHWM:") - before)
"""


def test_an_8192_token_text_with_a_task_takes_memory_linear_in_its_tokens(folders, tmp_path) -> None:
    from tests.helpers import run_fresh_without_isa_caps

    # hidden 32, intermediate 37: the activations of 8,192 tokens are a few MiB; one (T, T) float32 grid is 256 MiB.
    config = json.loads((folders["original"] / "config.json").read_text()) | {"max_position_embeddings": 8194}
    shutil.copytree(folders["original"], tmp_path / "long")
    (tmp_path / "long" / "config.json").write_text(json.dumps(config))
    result = run_fresh_without_isa_caps(["-c", _LONG_PEAK_SCRIPT, str(tmp_path / "long")], timeout=300)
    growth = float(result.stdout.split()[-1])
    assert growth < 96, f"peak RSS grew {growth:.0f} MiB for one 8,192-token text"


def test_int8_refuses_a_model_with_adapters_and_quantizes_the_native_one(folders) -> None:
    from bertlite.quant.int8 import quantize_int8

    with pytest.raises(ValueError, match="the model has task adapters"):
        quantize_int8(JinaEmbeddingsV3Model.from_pretrained(folders["original"]), compile_quantization=False)
    hf = transformers.JinaEmbeddingsV3Model.from_pretrained(folders["native"]).eval()
    int8 = quantize_int8(JinaEmbeddingsV3Model.from_pretrained(folders["native"]), compile_quantization=False)
    assert type(int8.encoder.layers[0].mlp.fc2).__name__ == "Int8Linear"
    batch = padded_batch()
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        expected, low = hf(**batch).last_hidden_state[real], int8(**packed(batch)).last_hidden_state
    # Random weights far from any trained model's: int8 keeps the rows' direction, not 1e-5.
    assert torch.nn.functional.cosine_similarity(low, expected, dim=-1).mean() >= 0.99
