"""cli/loading.load_job: each command's flags become the same from_pretrained keywords, once, and no command
builds a kernel of its own (recorded here, nothing is loaded or built; tests/cli/test_kernels.py loads)."""

from __future__ import annotations

import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import bertlite.jobs.kinds
import bertlite.quant.int8
from bertlite.cli import build_parser
from bertlite.cli.loading import load_job
from bertlite.errors import SlowDtypeWarning
from bertlite.layers import native_attention


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, dict[str, Any]]]:
    """Each (kind, model, keywords) load_job hands bertlite.jobs.kinds.load_job, which loads nothing."""
    seen: list[tuple[str, str, dict[str, Any]]] = []

    def record(kind: str, name_or_path: str, **kwargs: Any) -> SimpleNamespace:
        seen.append((kind, name_or_path, kwargs))
        return SimpleNamespace(precision="int8")  # not float32, so load_job prints no line about auto

    monkeypatch.setattr(bertlite.jobs.kinds, "load_job", record)
    monkeypatch.setattr(bertlite.jobs.kinds, "detect_kind", lambda name_or_path: "sparse")
    return seen


@pytest.fixture(autouse=True)
def builds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """One entry per build a command would start itself: "attention" (the C++ attention) or "int8" (int8's
    compiled quantization)."""
    seen: list[str] = []
    monkeypatch.setattr(native_attention, "build", lambda: seen.append("attention"))
    monkeypatch.setattr(bertlite.quant.int8, "build_compiled_quantization", lambda: seen.append("int8"))
    return seen


def parse(*argv: str) -> Any:
    """The arguments as the command's run() hands them to load_job (embed: its one input expanded)."""
    args = build_parser().parse_args(list(argv))
    if args.command == "embed":
        args.input = args.input[0]
    return args


PLACEMENT = {"device": None, "dtype": "int8", "pack_weights": False}


def test_every_command_maps_its_flags_to_the_same_keywords(loads: list, builds: list[str]) -> None:
    common = ("--dtype", "int8", "--no-pack-weights")
    load_job(
        parse("embed", "m", "-i", "-", "-o", "o.npy", *common, "--max-length", "64", "--pooling", "cls"), "embedding"
    )
    load_job(parse("embed", "m", "-i", "-", "-o", "o.jsonl", *common, "--truncate-dim", "8"), "multi-vector")
    load_job(parse("embed", "m", "-i", "-", "-o", "o.jsonl", *common), "token-embeddings")
    load_job(parse("rerank", "m", "-i", "-", "-o", "o.jsonl", *common, "--max-length", "32"), "cross-encoder")
    load_job(parse("serve", "m", *common))
    load_job(parse("serve", "m", *common, "--task", "cross-encoder", "--device", "cpu"))
    assert loads == [
        ("embedding", "m", {**PLACEMENT, "max_length": 64, "pooling": "cls"}),
        ("multi-vector", "m", {**PLACEMENT, "truncate_dim": 8}),
        ("embedding", "m", PLACEMENT),  # token embeddings are an Embedder's
        ("cross-encoder", "m", {**PLACEMENT, "max_length": 32}),
        ("sparse", "m", PLACEMENT),  # --task auto: detected
        ("cross-encoder", "m", {**PLACEMENT, "device": "cpu"}),
    ]
    assert all("quantize" not in keywords for _, _, keywords in loads)  # int8 is one spelling: dtype="int8"


def test_truncate_dim_for_a_kind_that_cannot_cut_is_refused_before_loading(loads: list, builds: list[str]) -> None:
    with pytest.raises(ValueError, match="--truncate-dim: the model is a sparse model, whose outputs cannot be cut"):
        load_job(parse("serve", "m", "--dtype", "int8", "--truncate-dim", "8"))
    assert loads == [] and builds == []


def test_the_commands_build_no_kernels_of_their_own(loads: list, builds: list[str], tmp_path: Path) -> None:
    """A job readies its own kernels when it is built (bertlite.jobs.prepare.ready), as a script's does."""
    big = tmp_path / "big.txt"
    big.write_text("a text\n" * 200_000)
    for argv in (
        ("serve", "m", "--dtype", "int8"),
        ("embed", "m", "-i", str(big), "-o", "o.npy", "--dtype", "int8"),
        ("embed", "m", "-i", "-", "-o", "o.npy"),
        ("rerank", "m", "-i", str(big), "-o", "o.jsonl", "--dtype", "int8"),
    ):
        load_job(parse(*argv), "embedding")
    assert len(loads) == 4 and builds == []


def test_dtype_warnings_are_one_line_on_stderr_except_in_serve(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def slow(kind: str, name_or_path: str, **kwargs: Any) -> SimpleNamespace:
        warnings.warn("bfloat16 is slow here", SlowDtypeWarning, stacklevel=2)
        return SimpleNamespace(precision="bfloat16")

    monkeypatch.setattr(bertlite.jobs.kinds, "load_job", slow)
    load_job(parse("rerank", "m", "-i", "-", "-o", "o.jsonl", "--dtype", "bfloat16"), "cross-encoder")
    assert capsys.readouterr().err == "bertlite rerank: warning: bfloat16 is slow here\n"
    # serve loads in its worker thread, where catching warnings would catch the other threads' too
    with pytest.warns(SlowDtypeWarning, match="bfloat16 is slow here"):
        load_job(parse("serve", "m", "--dtype", "bfloat16", "--task", "embedding"))
