"""python -m bench throughput --isa: on an emulated smaller CPU it re-executes itself under the ISA caps and says so."""

from __future__ import annotations

import json

import pytest

from bertlite.utils.capabilities import EMULATED_CPUS
from tests.helpers import run_fresh_without_isa_caps

pytestmark = pytest.mark.slow  # a benchmark run in a fresh interpreter


def test_bench_isa_avx2_runs_under_the_caps_and_records_them(tmp_path):
    out = tmp_path / "result.json"
    result = run_fresh_without_isa_caps(
        ["-m", "bench", "throughput", "--isa", "avx2", "--configs", "none"]
        + ["--cold-rounds", "0", "--texts", "1", "--json", str(out)],
        drop=("CT2_FORCE_CPU_ISA",),
        ATEN_CPU_CAPABILITY="default",  # a cap the emulated CPU does not have: it must not leak into the run
    )
    variables = EMULATED_CPUS["avx2"][0]
    peer_variables = {"CT2_FORCE_CPU_ISA": "AVX2"}
    lines = result.stdout.splitlines()
    assert lines[0].startswith("EMULATED CPU (--isa avx2): AVX2 + FMA without AVX-512"), lines
    assert "(emulated: not this CPU's own speed); dtype='auto' is float32" in lines[1]
    header = json.loads(out.read_text(encoding="utf-8"))["capabilities"]
    # isa_limits is what detect() found in the process's own environment: only the re-executed one has them
    assert header["isa_limits"] == [f"{name}={value}" for name, value in variables.items()]
    assert header["bf16_native"] is False
    emulated = header["emulated_cpu"]
    assert (emulated["isa"], emulated["variables"]) == ("avx2", variables | peer_variables)
    assert "not a real such CPU" in emulated["note"]
    assert "onnxruntime_fp32_fused_sorted" in emulated["not_capped"]  # MLAS: no variable caps it
