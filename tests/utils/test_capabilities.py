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


@pytest.fixture
def cpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """cpu(caps, bf16_x=1.3): make the probe report caps and the timing of "auto" say bf16 runs bf16_x times
    float32 in each of measured.ROUNDS rounds (or bf16_x[i] in round i, a list), with no warning given,
    nothing timed yet and an empty cache. Returns the list of timed shapes."""
    monkeypatch.setattr(capabilities, "_warned", set())
    monkeypatch.setattr(auto_dtype, "_verdicts", {})
    monkeypatch.setenv("BERTLITE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("BERTLITE_AUTO_DTYPE", raising=False)
    timed: list[list[tuple[int, int]]] = []

    def use(caps: Capabilities, bf16_x: float | list[float] = 1.3) -> list[list[tuple[int, int]]]:
        per_round = bf16_x if isinstance(bf16_x, list) else [bf16_x] * measured.ROUNDS

        def measure(shapes, dtypes=auto_dtype.CANDIDATES):
            timed.append(list(shapes))
            return measured.Rounds({"float32": [0.02] * len(per_round), "bfloat16": [0.02 / x for x in per_round]})

        monkeypatch.setattr(capabilities, "detect", lambda: caps)
        monkeypatch.setattr(auto_dtype, "measure", measure)
        return timed

    return use


def _forget_verdicts() -> None:
    """As a new process with an empty cache would start."""
    auto_dtype._verdicts.clear()
    measured.cache_path().unlink(missing_ok=True)


def _slow_warnings(fn) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [w for w in caught if issubclass(w.category, SlowDtypeWarning)]


# --- dtype="auto" --------------------------------------------------------------------


@pytest.mark.slow
def test_auto_is_bf16_only_on_a_cpu_with_native_bf16(cpu, real_model_path):
    timed = cpu(AMX)
    assert resolve_dtype("auto", "cpu") == torch.bfloat16
    assert resolve_dtype("auto", None) == torch.bfloat16  # no device: the CPU
    assert Embedder.from_pretrained(real_model_path).dtype == torch.bfloat16  # "auto" is the default
    assert timed[-1] == [(1152, 384), (384, 384), (1536, 384), (384, 1536)]  # the model's own Linears
    cpu(AVX2_ONLY)
    assert resolve_dtype("auto", "cpu") == torch.float32
    assert Embedder.from_pretrained(real_model_path).dtype == torch.float32


def test_auto_times_bf16_against_float32_and_picks_it_only_when_10_percent_faster(cpu):
    cases = ((1.3, torch.bfloat16), (1.12, torch.bfloat16), (1.05, torch.float32), (0.6, torch.float32))
    for n, (bf16_x, expected) in enumerate(cases, 1):
        _forget_verdicts()
        timed = cpu(AMX, bf16_x)
        assert resolve_dtype("auto", "cpu") == expected, bf16_x
        assert len(timed) == n
    hidden, intermediate = auto_dtype.DEFAULT_SIZES  # no model named: BERT-base's four Linears
    assert timed[0] == [(3 * hidden, hidden), (hidden, hidden), (intermediate, hidden), (hidden, intermediate)]


def test_auto_times_nothing_where_bf16_is_not_native(cpu, monkeypatch):
    timed = cpu(AVX2_ONLY, bf16_x=5.0)
    assert resolve_dtype("auto", "cpu") == torch.float32
    assert timed == []
    assert "not native" in auto_dtype.auto_dtype(AVX2_ONLY).reason


def test_the_verdict_is_timed_once_then_read_from_the_process_and_the_cache_file(cpu):
    timed = cpu(AMX, bf16_x=1.3)
    assert resolve_dtype("auto", "cpu") == torch.bfloat16
    assert resolve_dtype("auto", "cpu") == torch.bfloat16
    assert len(timed) == 1
    auto_dtype._verdicts.clear()  # a new process: the file answers
    verdict = auto_dtype.auto_dtype(AMX)
    assert (verdict.dtype, len(timed)) == ("bfloat16", 1)
    assert "timed earlier on this CPU (cached in" in verdict.reason
    assert verdict.ratios()["bfloat16"] == pytest.approx(1.3)
    entries = json.loads(measured.cache_path().read_text())
    [(key, seconds)] = entries.items()
    assert key.startswith("AMX test CPU; avx2 avx512f avx512_bf16 amx_bf16 amx_int8; ; torch ")
    assert key.endswith(f"{torch.get_num_threads()} threads; dtype auto: hidden 768 intermediate 3072")
    assert seconds == {"rounds": {"float32": [0.02] * 5, "bfloat16": [pytest.approx(0.02 / 1.3)] * 5}, "busy": 0}
    assert resolve_dtype("auto", "cpu", sizes=(384, 1536)) == torch.bfloat16  # other sizes: timed again
    assert len(timed) == 2 and timed[1][0] == (1152, 384)


def test_auto_keeps_float32_and_times_again_when_the_rounds_disagree(cpu):
    timed = cpu(AMX, [1.5, 0.8, 1.6, 1.4, 0.9])  # bfloat16 wins three rounds of five
    verdict = auto_dtype.auto_dtype(AMX)
    assert (verdict.dtype, verdict.kept) == ("float32", False)
    assert verdict.spread == pytest.approx({"rounds": 5, "busy": 0, "min": 0.8, "median": 1.4, "max": 1.6})
    auto_dtype._verdicts.clear()  # a new process: nothing was kept, so it times again
    assert auto_dtype.auto_dtype(AMX).dtype == "float32" and len(timed) == 2
    [entry] = json.loads(measured.cache_path().read_text()).values()
    assert entry["undecided"] == 2


def test_auto_times_again_over_a_verdict_cached_in_the_old_format(cpu):
    timed = cpu(AMX, bf16_x=1.3)
    key = measured.machine_key(AMX, "dtype auto: hidden 768 intermediate 3072")
    measured.cache_path().parent.mkdir(parents=True)
    measured.cache_path().write_text(json.dumps({key: {"float32": 0.02, "bfloat16": 0.01}}))  # one best pass each
    verdict = auto_dtype.auto_dtype(AMX)
    assert (verdict.dtype, verdict.kept, len(timed)) == ("bfloat16", True, 1)
    assert verdict.reason.startswith("timed on this CPU: bfloat16 ran 1.30x float32 (1.30-1.30x over 5 rounds)")
    assert json.loads(measured.cache_path().read_text())[key]["rounds"]["float32"] == [0.02] * 5


@pytest.mark.parametrize("damage", ["{not json", "[1, 2]", '{"x": 1}', None])
def test_a_damaged_or_unwritable_cache_costs_a_timing_not_an_error(cpu, damage, monkeypatch, tmp_path):
    timed = cpu(AMX, bf16_x=1.3)
    if damage is None:  # the cache folder cannot be made: a file stands where it would be
        (tmp_path / "blocked").write_text("")
        monkeypatch.setenv("BERTLITE_CACHE_DIR", str(tmp_path / "blocked" / "cache"))
    else:
        measured.cache_path().parent.mkdir(parents=True)
        measured.cache_path().write_text(damage)
    assert resolve_dtype("auto", "cpu") == torch.bfloat16
    assert len(timed) == 1
    if damage is not None:  # rewritten, and now it answers
        entries = json.loads(measured.cache_path().read_text())
        assert [seconds for key, seconds in entries.items() if key.startswith("AMX test CPU")] == [
            {"rounds": {"float32": [0.02] * 5, "bfloat16": [pytest.approx(0.02 / 1.3)] * 5}, "busy": 0}
        ]
        assert not list(measured.cache_path().parent.glob("*.tmp"))


def test_bertlite_auto_dtype_forces_the_verdict(cpu, monkeypatch):
    timed = cpu(AMX, bf16_x=1.3)
    monkeypatch.setenv("BERTLITE_AUTO_DTYPE", "float32")
    assert resolve_dtype("auto", "cpu") == torch.float32
    cpu(AVX2_ONLY)
    monkeypatch.setenv("BERTLITE_AUTO_DTYPE", "bfloat16")
    warned = _slow_warnings(lambda: resolve_dtype("auto", "cpu"))
    assert len(warned) == 1 and "dtype=bfloat16: this CPU (AVX2) has no native bfloat16" in str(warned[0].message)
    assert timed == []
    monkeypatch.setenv("BERTLITE_AUTO_DTYPE", "fp16")
    with pytest.raises(ValueError, match=r"^BERTLITE_AUTO_DTYPE='fp16': choose one of float32, bfloat16$"):
        resolve_dtype("auto", "cpu")


def test_the_timing_runs_both_dtypes_on_small_linears(monkeypatch):
    monkeypatch.setattr(measured, "MIN_SHARE", 0.0)  # every round counts, however busy the machine ...
    monkeypatch.setattr(measured, "BUDGET_SECONDS", float("inf"))  # ... and slow
    rounds = auto_dtype.measure([(8, 16), (16, 8)])
    assert set(rounds.seconds) == {"float32", "bfloat16"} and rounds.busy == 0
    assert all(len(s) == measured.ROUNDS and all(0 < x < float("inf") for x in s) for s in rounds.seconds.values())


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
    assert "model families: bert, roberta, xlm-roberta, camembert, electra, " in out
    assert (
        "dtype='auto' on cpu: timed on this CPU: bfloat16 ran 1.30x float32 (1.30-1.30x over 5 rounds): bfloat16 "
        "(bfloat16 is picked at >= 1.10x in every round)"
    ) in out
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
    assert report["auto_dtype_measurement"] == {
        "reason": "bfloat16 is not native on this CPU, so it is not timed",
        "seconds": {},
        "x_float32": {},
        "spread": {},
        "kept": False,
    }


def test_env_shows_the_spread_of_the_rounds_and_whether_the_verdict_was_kept(cpu, capsys):
    cpu(AMX, [1.5, 0.8, 1.6, 1.4, 0.9])
    assert main(["env"]) == 0
    assert (
        "dtype='auto' on cpu: timed on this CPU: bfloat16 ran 1.40x float32 (0.80-1.60x over 5 rounds): float32, "
        "not kept: some rounds have bfloat16 at >= 1.10x, some not (try 1 of 3) (BERT-base's Linears;"
    ) in capsys.readouterr().out
    assert main(["env", "--json"]) == 0
    timing = json.loads(capsys.readouterr().out)["auto_dtype_measurement"]
    assert timing["spread"] == pytest.approx({"rounds": 5, "busy": 0, "min": 0.8, "median": 1.4, "max": 1.6})
    assert timing["kept"] is False and timing["x_float32"] == pytest.approx({"float32": 1.0, "bfloat16": 1.4})
    assert timing["seconds"] == pytest.approx({"float32": 0.02, "bfloat16": 0.02 / 1.4})


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
            "inputs quantized and outputs scaled by eager ops, or by C++ ops (else a torch.compile kernel) where "
            "they build: `bertlite serve`, `bertlite embed` of 2,000,000+ tokens",
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
    """isa_env(**variables): run detect() afresh with exactly these ISA_VARIABLES set (none by default)."""
    monkeypatch.setattr(capabilities, "_warned", set())
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
    assert report["auto_dtype_measurement"] == {
        "reason": "bfloat16 is not native on this CPU, so it is not timed",
        "seconds": {},
        "x_float32": {},
        "spread": {},
        "kept": False,
    }


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
