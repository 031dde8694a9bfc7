"""bertlite.capabilities: dtype="auto", the slow-dtype warning, `bertlite env`, and bf16's accuracy."""

from __future__ import annotations

import json
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import tokenizers
import torch

from bertlite import capabilities
from bertlite.capabilities import Capabilities, SlowDtypeWarning, resolve_dtype
from bertlite.cli import main
from bertlite.features import Embedder

AVX2_ONLY = Capabilities(
    cpu_capability="AVX2",
    bf16_native=False,
    fp16_native=False,
    model_name="AVX2 test CPU",
    flags=("avx2",),
)
AMX = Capabilities(
    cpu_capability="AVX512",
    bf16_native=True,
    fp16_native=True,
    model_name="AMX test CPU",
    flags=("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_int8"),
)


@pytest.fixture
def cpu(monkeypatch: pytest.MonkeyPatch):
    """cpu(caps): make the probe report caps, with no warning given yet in this process."""
    monkeypatch.setattr(capabilities, "_warned", set())

    def use(caps: Capabilities) -> None:
        monkeypatch.setattr(capabilities, "detect", lambda: caps)

    return use


def _slow_warnings(fn) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [w for w in caught if issubclass(w.category, SlowDtypeWarning)]


# --- dtype="auto" --------------------------------------------------------------------


def test_auto_is_bf16_only_on_a_cpu_with_native_bf16(cpu, real_model_path):
    cpu(AMX)
    assert resolve_dtype("auto", "cpu") == torch.bfloat16
    assert resolve_dtype("auto", None) == torch.bfloat16  # no device: the CPU
    assert Embedder.from_pretrained(real_model_path).dtype == torch.bfloat16  # "auto" is the default
    cpu(AVX2_ONLY)
    assert resolve_dtype("auto", "cpu") == torch.float32
    assert Embedder.from_pretrained(real_model_path).dtype == torch.float32


def test_auto_keeps_float32_off_the_cpu(cpu):
    cpu(AMX)  # a CPU's bf16 says nothing about a GPU's: Embedder ran float32 there before "auto" too
    assert resolve_dtype("auto", "cuda") == torch.float32
    assert resolve_dtype("auto", torch.device("meta")) == torch.float32


def test_explicit_dtypes_pass_through(cpu):
    cpu(AMX)
    assert resolve_dtype(None) == torch.float32
    assert resolve_dtype("float16") == torch.float16
    assert resolve_dtype("torch.bfloat16") == torch.bfloat16
    assert resolve_dtype(torch.float64) == torch.float64
    with pytest.raises(ValueError, match="dtype='int4' is not supported"):
        resolve_dtype("int4")


# --- the warning ---------------------------------------------------------------------


def test_explicit_bf16_warns_once_where_not_native(cpu, real_model_path):
    cpu(AVX2_ONLY)
    first = _slow_warnings(lambda: Embedder.from_pretrained(real_model_path, dtype="bfloat16"))
    assert len(first) == 1
    message = str(first[0].message)
    assert "dtype=bfloat16" in message and "AVX2" in message and "~5x slower than float32" in message
    assert Path(first[0].filename).name == "test_capabilities.py"  # points at the caller's line
    assert _slow_warnings(lambda: Embedder.from_pretrained(real_model_path, dtype="bfloat16")) == []
    fp16 = _slow_warnings(lambda: resolve_dtype("float16", "cpu"))  # once per dtype
    assert len(fp16) == 1 and "dtype=float16" in str(fp16[0].message)


def test_no_warning_where_native_or_for_float32_or_auto(cpu):
    cpu(AMX)
    assert _slow_warnings(lambda: [resolve_dtype(d, "cpu") for d in ("bfloat16", "float16", "auto")]) == []
    cpu(AVX2_ONLY)
    assert _slow_warnings(lambda: [resolve_dtype(d, "cpu") for d in ("float32", None, "auto")]) == []
    assert _slow_warnings(lambda: resolve_dtype("bfloat16", "cuda")) == []  # the CPU probe says nothing of a GPU


def test_embed_prints_the_warning_as_one_line_and_the_dtype_in_its_summary(cpu, real_model_path, tmp_path, capsys):
    source = tmp_path / "in.txt"
    source.write_text("first text\nsecond text\n", encoding="utf-8")
    cpu(AVX2_ONLY)
    common = [str(real_model_path), "-i", str(source), "--quiet"]
    assert main(["embed", *common, "-o", str(tmp_path / "bf16.npy"), "--dtype", "bfloat16"]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("bertlite embed: warning: dtype=bfloat16: this CPU (AVX2) has no native bfloat16")
    assert lines[1].startswith("embedded 2 texts") and "(bfloat16)" in lines[1]
    assert main(["embed", *common, "-o", str(tmp_path / "auto.npy")]) == 0
    assert "(float32)" in capsys.readouterr().err
    cpu(AMX)
    assert main(["embed", *common, "-o", str(tmp_path / "auto_amx.npy")]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "(bfloat16)" in lines[0]


# --- the probe and `bertlite env` ----------------------------------------------------


def test_cpuinfo_flags_and_model_name(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    entry = "processor\t: {n}\nmodel name\t: Test CPU {n}\nflags\t\t: fpu sse avx2 avx512f amx_int8 avx512_bf16\n\n"
    cpuinfo.write_text(entry.format(n=0) + entry.format(n=1), encoding="utf-8")
    assert capabilities._read_cpuinfo(str(cpuinfo)) == ("Test CPU 0", ("avx2", "avx512f", "avx512_bf16", "amx_int8"))
    assert capabilities._read_cpuinfo(str(tmp_path / "missing")) == (None, None)
    assert replace(AVX2_ONLY, flags=None).summary().endswith("flags unknown (no /proc/cpuinfo)")
    assert AMX.as_dict()["flags"] == ["avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_int8"]


def test_env_prints_versions_capabilities_and_the_auto_dtype(cpu, capsys):
    cpu(AMX)
    assert main(["env"]) == 0
    out = capsys.readouterr().out
    assert f"torch {torch.__version__}\n" in out and f"tokenizers {tokenizers.__version__}\n" in out
    assert "cpu: AMX test CPU; torch AVX512; bf16 native, fp16 native; flags avx2 avx512f" in out
    assert "dtype='auto' resolves to: bfloat16 on cpu" in out
    cpu(AVX2_ONLY)
    assert main(["env", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report["versions"]) == {"bertlite", "torch", "tokenizers", "python"}
    assert report["capabilities"] == {
        "cpu_capability": "AVX2",
        "bf16_native": False,
        "fp16_native": False,
        "model_name": "AVX2 test CPU",
        "flags": ["avx2"],
    }
    assert report["auto_dtype"]["cpu"] == "float32"


def test_detect_is_probed_once():
    assert capabilities.detect() is capabilities.detect()
    assert capabilities.detect().cpu_capability == torch.backends.cpu.get_cpu_capability()


# --- why "auto" may pick bf16 --------------------------------------------------------


def test_bf16_vectors_keep_min_cosine_to_fp32(real_model_path, corpus_texts):
    # The bar dtype="auto" must meet: min cosine >= 0.9999 to float32 vectors. Every 57th corpus
    # paragraph (up to 256 tokens), in bf16 natively where the CPU has it, emulated elsewhere.
    texts = corpus_texts[::57][:200]
    fp32 = Embedder.from_pretrained(real_model_path, dtype="float32").encode(texts)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SlowDtypeWarning)
        bf16 = Embedder.from_pretrained(real_model_path, dtype="bfloat16").encode(texts)
    cosine = (bf16 * fp32).sum(1) / (np.linalg.norm(bf16, axis=1) * np.linalg.norm(fp32, axis=1))
    assert cosine.min() >= 0.9999, f"min cosine {cosine.min():.6f}: dtype='auto' must not pick bfloat16"
