"""A script's job runs the kernels the commands run: each is chosen when the job readies its model
(bertlite.jobs.prepare.ready, bertlite.quant.int8.quantize_int8), from nothing the entry point decides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bertlite import Embedder
from bertlite.cli import build_parser
from bertlite.cli.loading import load_job
from bertlite.layers import native_attention
from bertlite.layers.roles import attention_of, model_layers
from bertlite.quant import ops
from bertlite.quant.linear import Int8Linear


def kernels(job: Any) -> tuple[set[str], set[str]]:
    """The attention each layer runs and the route each int8 Linear quantizes its input by."""
    attention = {attention_of(layer).attn_implementation for layer in model_layers(job.model)}
    return attention, {m.route for m in job.model.modules() if isinstance(m, Int8Linear)}


def command(*argv: str) -> Any:
    args = build_parser().parse_args(list(argv))
    if args.command == "embed":
        args.input = args.input[0]
    return load_job(args, "embedding")


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8"])
def test_a_script_runs_the_kernels_the_commands_run(dtype: str, real_model_path: Path, tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_text("a text\n")
    model = str(real_model_path)
    script = Embedder.from_pretrained(model, dtype=dtype)
    embed = command("embed", model, "-i", str(source), "-o", str(tmp_path / "o.npy"), "--dtype", dtype, "--quiet")
    serve = command("serve", model, "--dtype", dtype)
    attention, routes = kernels(script)
    assert kernels(embed) == kernels(serve) == (attention, routes)
    # float32: one SDPA call per text; a fast mode: the C++ attention where this machine builds it and it times
    # faster.
    fast = dtype != "float32" and native_attention.built()
    assert attention == ({"varlen"} if fast else {"auto"}), native_attention.describe()
    if dtype == "int8":
        assert routes <= {"ops", "compiled", "eager"} and len(routes) == 1
        assert ("ops" in routes) == ops.built(), ops.reason()
    else:
        assert routes == set()


def test_no_entry_point_builds_a_kernel() -> None:
    # The commands and bench ready models through the same functions a script calls; only bench's compare child
    # builds, for an older tree whose Python API readied nothing itself.
    root = Path(__file__).resolve().parents[2]
    builds = ("native_attention.build(", "build_compiled_quantization(", "ops.build(", "OP.build(", "build_kernels(")
    files = [*(root / "bertlite" / "cli").rglob("*.py"), *(root / "bench").rglob("*.py")]
    found = [
        f"{path.relative_to(root)}: {call}"
        for path in files
        if path.name != "compare_child.py"
        for call in builds
        if call in path.read_text()
    ]
    assert len(files) > 20 and found == []
