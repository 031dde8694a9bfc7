"""Int8PrecisionWarning from every job points at the caller's line, as the slow-dtype warning does."""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path

import pytest

from bertlite.errors import Int8PrecisionWarning
from bertlite.jobs.cross_encoder import CrossEncoder
from bertlite.jobs.embedder import Embedder
from bertlite.jobs.multi_vector import MultiVectorEncoder
from bertlite.jobs.sparse_encoder import SparseEncoder
from bertlite.quant import kernels
from bertlite.quant.kernels import INT8_KERNELS, Int8Grid
from tests.helpers import colbert_folder, cross_encoder_folder, masked_lm_folder
from tests.serve_helpers import tiny_model_folder

SEVEN_BIT = Int8Grid(127, 127)  # 7-bit activations: the reduced grid that warns

# Per job, a tiny random checkpoint it loads, with the real tokenizer.
JOB_FOLDERS = {
    Embedder: lambda real, tmp: tiny_model_folder(real, tmp / "embedder"),
    CrossEncoder: lambda real, tmp: cross_encoder_folder(real, tmp / "cross", num_labels=1, save_with_st=False),
    SparseEncoder: lambda real, tmp: masked_lm_folder(real, tmp / "mlm"),
    MultiVectorEncoder: lambda real, tmp: colbert_folder(real, tmp / "colbert"),
}


@pytest.fixture
def seven_bit_grid(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make "auto" pick the "dequantize" kernel on a 7-bit grid: it multiplies any grid exactly on any CPU."""
    grids = {kernel: None for kernel in INT8_KERNELS} | {"dequantize": SEVEN_BIT}
    monkeypatch.setattr(kernels, "_grids", grids)


def _int8_warnings(fn) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [w for w in caught if issubclass(w.category, Int8PrecisionWarning)]


@pytest.mark.parametrize("job", list(JOB_FOLDERS), ids=lambda job: job.__name__)
def test_every_job_points_the_int8_warning_at_its_callers_line(seven_bit_grid, real_model_path, tmp_path, job):
    folder = JOB_FOLDERS[job](real_model_path, tmp_path)
    line = inspect.currentframe().f_lineno + 1
    warned = _int8_warnings(lambda: job.from_pretrained(folder, dtype="int8"))
    assert [(Path(w.filename).name, w.lineno) for w in warned] == [("test_int8_warning.py", line)]
    assert "7-bit activations" in str(warned[0].message)
