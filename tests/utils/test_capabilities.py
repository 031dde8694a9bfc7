"""bertlite.utils.capabilities: dtype="auto", the slow-dtype warning, `bertlite env`, and bf16's accuracy."""

from __future__ import annotations

import inspect
import json
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import tokenizers
import torch

import bertlite
from bertlite.cli import main
from bertlite.errors import SlowDtypeWarning
from bertlite.jobs.cross_encoder import CrossEncoder
from bertlite.jobs.embedder import Embedder
from bertlite.jobs.multi_vector import MultiVectorEncoder
from bertlite.jobs.sparse_encoder import SparseEncoder
from bertlite.quant import int8 as quantization
from bertlite.quant import kernels
from bertlite.utils import auto_dtype, capabilities, measured
from bertlite.utils.capabilities import EMULATED_CPUS, ISA_VARIABLES, Capabilities, resolve_dtype
from tests.helpers import colbert_folder, cross_encoder_folder, masked_lm_folder, run_fresh_without_isa_caps

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


AVX512_BF16_INTEL = replace(AMX, model_name="Intel(R) Xeon(R) test CPU", flags=("avx2", "avx512f", "avx512_bf16"))
ZEN4 = replace(AMX, model_name="AMD EPYC test CPU", flags=("avx2", "avx512f", "avx512_bf16", "avx512_vnni"))


@pytest.fixture
def cpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """cpu(caps): make the probe report caps, with no warning given yet and an empty timings cache."""
    monkeypatch.setattr(capabilities, "_warned", set())
    monkeypatch.setenv("BERTLITE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("BERTLITE_AUTO_DTYPE", raising=False)

    def use(caps: Capabilities) -> None:
        monkeypatch.setattr(capabilities, "detect", lambda: caps)

    return use


def _slow_warnings(fn) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [w for w in caught if issubclass(w.category, SlowDtypeWarning)]


# --- dtype="auto" --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("caps", "expected", "because"),
    [
        (AMX, torch.bfloat16, "AMX bf16 tiles"),
        (ZEN4, torch.bfloat16, "AMD with AVX512_BF16"),
        (AVX512_BF16_INTEL, torch.float32, "AVX512_BF16 without AMX"),
        (AVX2_ONLY, torch.float32, "not native"),
    ],
    ids=["amx", "zen4", "avx512-bf16-intel", "avx2"],
)
def test_auto_follows_the_cpus_kind(cpu, caps, expected, because):
    cpu(caps)
    assert resolve_dtype("auto", "cpu") == expected
    assert resolve_dtype("auto", None) == expected  # no device: the CPU
    assert because in auto_dtype.auto_dtype(caps).reason


def test_auto_times_nothing_so_a_busy_machine_picks_what_a_quiet_one_does(cpu, monkeypatch):
    cpu(AMX)

    def no_timing(*args, **kwargs):
        raise AssertionError("dtype='auto' timed something")

    monkeypatch.setattr(measured, "time_rounds", no_timing)
    monkeypatch.setattr(measured, "choose", no_timing)
    assert [resolve_dtype("auto", "cpu") for _ in range(3)] == [torch.bfloat16] * 3
    assert not measured.cache_path().exists()


def test_bertlite_auto_dtype_forces_the_verdict(cpu, monkeypatch):
    cpu(AMX)
    monkeypatch.setenv("BERTLITE_AUTO_DTYPE", "float32")
    assert resolve_dtype("auto", "cpu") == torch.float32
    cpu(AVX2_ONLY)
    monkeypatch.setenv("BERTLITE_AUTO_DTYPE", "bfloat16")
    warned = _slow_warnings(lambda: resolve_dtype("auto", "cpu"))
    assert len(warned) == 1 and "dtype=bfloat16: this CPU (AVX2) has no native bfloat16" in str(warned[0].message)
    monkeypatch.setenv("BERTLITE_AUTO_DTYPE", "fp16")
    with pytest.raises(ValueError, match=r"^BERTLITE_AUTO_DTYPE='fp16': choose one of float32, bfloat16$"):
        resolve_dtype("auto", "cpu")


def test_the_cpus_verdict_says_nothing_about_a_gpu(cpu, monkeypatch):
    cpu(AMX)  # bf16 native and fast here; a GPU without bf16 tensor cores still gets float16
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 0))
    assert resolve_dtype("auto", "cuda") == torch.float16
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


@pytest.mark.slow
def test_explicit_bf16_warns_once_where_not_native(cpu, real_model_path):
    cpu(AVX2_ONLY)
    first = _slow_warnings(lambda: Embedder.from_pretrained(real_model_path, dtype="bfloat16"))
    assert len(first) == 1
    message = str(first[0].message)
    assert "dtype=bfloat16" in message and "AVX2" in message and "5-6x slower than float32 on two AVX2 CPUs" in message
    assert Path(first[0].filename).name == "test_capabilities.py"  # points at the caller's line
    assert _slow_warnings(lambda: Embedder.from_pretrained(real_model_path, dtype="bfloat16")) == []
    fp16 = _slow_warnings(lambda: resolve_dtype("float16", "cpu"))  # once per dtype
    assert len(fp16) == 1 and "dtype=float16" in str(fp16[0].message)


# Per job, a small checkpoint it loads (the real one, or a tiny random one with its tokenizer).
JOB_FOLDERS = {
    Embedder: lambda real, tmp: real,
    CrossEncoder: lambda real, tmp: cross_encoder_folder(real, tmp / "cross", num_labels=1, save_with_st=False),
    SparseEncoder: lambda real, tmp: masked_lm_folder(real, tmp / "mlm"),
    MultiVectorEncoder: lambda real, tmp: colbert_folder(real, tmp / "colbert"),
}


@pytest.mark.slow
@pytest.mark.parametrize("job", list(JOB_FOLDERS), ids=lambda job: job.__name__)
def test_every_job_points_the_warning_at_its_callers_line(cpu, real_model_path, tmp_path, job):
    folder = JOB_FOLDERS[job](real_model_path, tmp_path)
    cpu(AVX2_ONLY)
    line = inspect.currentframe().f_lineno + 1
    warned = _slow_warnings(lambda: job.from_pretrained(folder, dtype="bfloat16"))
    assert [(Path(w.filename).name, w.lineno) for w in warned] == [("test_capabilities.py", line)]


def test_no_warning_where_native_or_for_float32_or_auto(cpu):
    cpu(AMX)
    assert _slow_warnings(lambda: [resolve_dtype(d, "cpu") for d in ("bfloat16", "float16", "auto")]) == []
    cpu(AVX2_ONLY)
    assert _slow_warnings(lambda: [resolve_dtype(d, "cpu") for d in ("float32", None, "auto")]) == []
    assert _slow_warnings(lambda: resolve_dtype("bfloat16", "cuda")) == []  # the CPU probe says nothing of a GPU


@pytest.mark.slow
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
    cpu(AMX)  # auto's candidate is bfloat16 here; with no dtype the command still runs float32
    assert main(["embed", *common, "-o", str(tmp_path / "default_amx.npy")]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "(float32)" in lines[0]


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
    assert "model families: bert, roberta, xlm-roberta, camembert, electra, " in out
    assert "dtype='auto' on cpu: this CPU has AMX bf16 tiles" in out
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
        "isa_limits": [],
    }
    assert report["auto_dtype"]["cpu"] == "float32"
    assert "BertForMaskedLM" in report["families"]["bert"] and report["families"]["mpnet"][0] == "MPNetModel"
    for classes in report["families"].values():  # each class the report names is one bertlite has
        assert all(isinstance(getattr(bertlite, name), type) for name in classes)
    assert report["auto_dtype_reason"] == auto_dtype.auto_dtype(AVX2_ONLY).reason
    assert report["auto_dtype_reason"].startswith("bfloat16 is not native on this CPU")


def test_env_refuses_a_bad_forced_auto_dtype_in_one_line(cpu, monkeypatch, capsys):
    cpu(AMX)
    monkeypatch.setenv("BERTLITE_AUTO_DTYPE", "int8")
    assert main(["env"]) == 2
    captured = capsys.readouterr()
    assert captured.err == "bertlite env: error: BERTLITE_AUTO_DTYPE='int8': choose one of float32, bfloat16\n"


@pytest.mark.parametrize(
    ("grid", "expected"),
    [
        (kernels.FULL_GRID, "kernel onednn, 8-bit activations and weights; inputs quantized"),
        (
            quantization.Int8Grid(255, 127, pair_limit=128),
            "kernel onednn, 8-bit activations and weights, each row's weights k and k + 1 summing to at most 128",
        ),
        (quantization.Int8Grid(127, 127), "kernel onednn, 7-bit activations, 8-bit weights: the vectors drift more"),
    ],
    ids=["full", "pairs", "7-bit"],
)
def test_env_says_which_int8_kernel_and_grid_run_here(monkeypatch, capsys, grid, expected):
    monkeypatch.setattr(kernels, "_grids", {"onednn": grid})
    assert main(["env"]) == 0
    assert f"dtype='int8' runs: {expected}" in capsys.readouterr().out
    assert main(["env", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["int8"]["grid"] == grid._asdict()


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        (
            "1",
            "inputs quantized and outputs scaled by C++ ops where they build, check and time faster, else by eager "
            "ops (a torch.compile kernel where asked for: quantize_int8(compile_quantization=True))",
        ),
        ("0", "inputs quantized and outputs scaled by eager ops (BERTLITE_INT8_COMPILE=0)"),
    ],
)
def test_env_says_how_int8_inputs_are_quantized(monkeypatch, capsys, setting, expected):
    monkeypatch.setenv("BERTLITE_INT8_COMPILE", setting)
    assert main(["env"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("dtype='int8' runs:"))
    assert line.endswith(expected)


def test_detect_is_probed_once():
    assert capabilities.detect() is capabilities.detect()
    assert capabilities.detect().cpu_capability == torch.backends.cpu.get_cpu_capability()


# --- ISA caps: emulating a CPU that has less -------------------------------------------


@pytest.fixture
def isa_env(monkeypatch: pytest.MonkeyPatch):
    """isa_env(**variables): run detect() afresh with exactly these ISA_VARIABLES set (none by default), and auto's
    verdict not forced."""
    monkeypatch.setattr(capabilities, "_warned", set())
    monkeypatch.delenv("BERTLITE_AUTO_DTYPE", raising=False)
    for name in ISA_VARIABLES:
        monkeypatch.delenv(name, raising=False)

    def use(**variables: str) -> Capabilities:
        for name in ISA_VARIABLES:
            monkeypatch.delenv(name, raising=False)
        for name, value in variables.items():
            monkeypatch.setenv(name, value)
        capabilities.detect.cache_clear()
        return capabilities.detect()

    yield use
    capabilities.detect.cache_clear()  # before monkeypatch restores the environment; the next call re-probes


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ONEDNN_MAX_CPU_ISA", "AVX2"),
        ("ONEDNN_MAX_CPU_ISA", "avx512_core_vnni"),  # AVX-512 without bf16: torch's own probe still says bf16
        ("DNNL_MAX_CPU_ISA", "AVX2_VNNI"),
        ("ATEN_CPU_CAPABILITY", "avx2"),
        ("ATEN_CPU_CAPABILITY", "default"),
        ("MKL_ENABLE_INSTRUCTIONS", "AVX2"),
        ("FBGEMM_ENABLE_INSTRUCTIONS", "avx2"),
    ],
)
def test_an_isa_cap_below_bf16_makes_bf16_not_native_and_auto_float32(isa_env, name, value):
    caps = isa_env(**{name: value})
    assert (caps.bf16_native, caps.fp16_native) == (False, False)
    assert caps.isa_limits == (f"{name}={value}",)
    assert resolve_dtype("auto", "cpu") == torch.float32
    assert caps.summary().endswith(f"; ISA restricted by {name}={value} (emulated: not this CPU's own speed)")
    assert caps.as_dict()["isa_limits"] == [f"{name}={value}"]
    warned = _slow_warnings(lambda: resolve_dtype("bfloat16", "cpu"))
    assert len(warned) == 1 and f"ISA restricted by {name}={value}) has no native bfloat16" in str(warned[0].message)


def test_an_isa_cap_that_keeps_bf16_is_recorded_and_changes_nothing_else(isa_env):
    own = isa_env()
    assert own.isa_limits == () and "ISA restricted" not in own.summary()
    for variables in (
        {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_AMX"},
        {"ATEN_CPU_CAPABILITY": "AVX2"},  # torch matches its values exactly and ignores this one
        {"MKL_ENABLE_INSTRUCTIONS": "AVX512_E3", "FBGEMM_ENABLE_INSTRUCTIONS": "AVX512"},
    ):
        caps = isa_env(**variables)
        assert caps.isa_limits == tuple(f"{n}={v}" for n, v in variables.items())
        assert (caps.bf16_native, caps.fp16_native) == (own.bf16_native, own.fp16_native), variables
        assert "(emulated: not this CPU's own speed)" in caps.summary()


def test_emulated_cpus_without_bf16_report_it(isa_env):
    assert set(EMULATED_CPUS) == {"avx2", "avx512_vnni", "avx512_bf16"}
    for name, (variables, _) in EMULATED_CPUS.items():
        assert set(variables) <= set(ISA_VARIABLES), name
        caps = isa_env(**variables)
        assert len(caps.isa_limits) == len(variables)
        if name != "avx512_bf16":
            assert not caps.bf16_native, name


def test_bf16_on_x86_needs_bf16_dot_products(isa_env, monkeypatch):
    # torch's probe says bf16 on every AVX-512 CPU; only AVX512_BF16 or AMX makes it fast.
    monkeypatch.setattr(capabilities, "_probe", lambda fn: True)
    monkeypatch.setattr(capabilities.platform, "machine", lambda: "x86_64")
    cascade_lake = ("avx2", "avx512f", "avx512_vnni")
    for flags, native in (
        (cascade_lake, False),
        ((*cascade_lake, "avx512_bf16"), True),  # Cooper Lake, Zen 4
        ((*cascade_lake, "avx512_bf16", "amx_bf16", "amx_int8"), True),
        (None, True),  # no /proc/cpuinfo: the probe decides
    ):
        monkeypatch.setattr(capabilities, "_read_cpuinfo", lambda flags=flags: ("test CPU", flags))
        assert isa_env().bf16_native is native, flags
    assert capabilities._has_bf16_dot((), "aarch64")  # x86 flags say nothing of an Arm CPU's bf16


def test_env_says_which_variable_restricts_the_isa(isa_env, capsys):
    isa_env(ONEDNN_MAX_CPU_ISA="AVX2", MKL_ENABLE_INSTRUCTIONS="AVX2")
    assert main(["env"]) == 0
    out = capsys.readouterr().out
    assert "bf16 not native, fp16 not native;" in out
    assert "; ISA restricted by ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 (emulated" in out
    assert "dtype='auto' resolves to: float32 on cpu" in out


@pytest.mark.slow
def test_env_json_in_a_process_started_with_onednn_capped_to_avx2():
    # A fresh process, as a user runs it: oneDNN reads the variable at its first use.
    result = run_fresh_without_isa_caps(["-m", "bertlite.cli", "env", "--json"], ONEDNN_MAX_CPU_ISA="AVX2")
    report = json.loads(result.stdout)
    assert report["capabilities"]["isa_limits"] == ["ONEDNN_MAX_CPU_ISA=AVX2"]
    assert report["capabilities"]["bf16_native"] is False
    assert report["auto_dtype"]["cpu"] == "float32"
    assert "BertForMaskedLM" in report["families"]["bert"] and report["families"]["mpnet"][0] == "MPNetModel"
    for classes in report["families"].values():  # each class the report names is one bertlite has
        assert all(isinstance(getattr(bertlite, name), type) for name in classes)
    assert report["auto_dtype_reason"].startswith("bfloat16 is not native on this CPU")


# --- why "auto" may pick bf16 --------------------------------------------------------


@pytest.mark.slow
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
