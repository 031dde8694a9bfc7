"""bertlite.quant.allocator: the int8 forwards' freed blocks stay mapped, counted in page faults (not in time)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from tests.helpers import ROOT

# Three packed int8 forwards of 2,048 tokens through a random 2-layer model at all-MiniLM-L6-v2's
# widths, after a first one; prints the minor page faults of those three.
SCRIPT = """
import resource, torch
from bertlite import BertConfig, BertModel
from bertlite.quant.int8 import quantize_int8
torch.manual_seed(0)
config = BertConfig(hidden_size=384, num_hidden_layers=2, num_attention_heads=12, intermediate_size=1536)
model = quantize_int8(BertModel(config).eval())
ids, lengths = torch.randint(0, config.vocab_size, (2048,)), torch.full((32,), 64)
faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
with torch.inference_mode():
    model(input_ids=ids, lengths=lengths)
    before = faults()
    for _ in range(3):
        model(input_ids=ids, lengths=lengths)
print(faults() - before)
"""


def page_faults(keep: str) -> int:
    # The eager quantization's passes, whose activations were faulted in again (the C++ ops allocate fewer)
    env = {**os.environ, "BERTLITE_KEEP_FREED_MEMORY": keep, "BERTLITE_INT8_OPS": "0", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the thresholds are glibc's")
@pytest.mark.slow
def test_int8_forwards_reuse_freed_pages_unless_turned_off() -> None:
    kept, turned_off = page_faults("1"), page_faults("0")
    assert kept * 3 < turned_off, (kept, turned_off)
