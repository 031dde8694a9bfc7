"""The cost of bertlite's safety checks: the input checks on every forward, and the NaN/Inf check at load."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import torch

from bench.common import timed, timed_rounds


def bench_validation(model_path: str, texts: list[str], rounds: int = 15) -> dict[str, Any]:
    """Forward with and without bertlite.models.inputs's input checks, and the checks alone, in rotated rounds
    on the same length-sorted batches of 32.

    Args:
        model_path: the checkpoint folder.
        texts: the texts to batch.
        rounds: rounds of each.

    Returns:
        Median seconds of each, and the overhead in % end to end and of the checks alone.
    """
    import bertlite.models.bert
    from bertlite import Embedder
    from bertlite.models.inputs import check_inputs, check_packed_inputs

    embedder = Embedder.from_pretrained(model_path)
    model = embedder.model
    encodings = sorted(embedder.encodings(texts), key=lambda e: len(e.ids))
    batches = [embedder.collate(encodings[i : i + 32], torch.device("cpu")) for i in range(0, len(encodings), 32)]

    def forward_all() -> None:
        with torch.inference_mode():
            for batch in batches:
                model(**batch)

    def checks_only() -> None:
        for batch in batches:
            check_inputs(model.config, batch["input_ids"], None, batch["attention_mask"], batch["token_type_ids"], None)
            ids = batch["input_ids"][batch["attention_mask"].bool()]
            check_packed_inputs(model.config, ids, batch["attention_mask"].sum(1), None)

    def without_checks() -> None:
        bertlite.models.bert.check_inputs = lambda *args: None
        try:
            forward_all()
        finally:
            bertlite.models.bert.check_inputs = check_inputs

    forward_all()
    runs = {"with_checks": forward_all, "without_checks": without_checks, "checks_alone": checks_only}
    timings, _ = timed_rounds(runs, rounds, pause_s=0.0, label="validation ")
    medians = {name: statistics.median(values) for name, values in timings.items()}
    return {
        "batches": len(batches),
        "rounds": rounds,
        **{f"{name}_s": value for name, value in medians.items()},
        "overhead_pct_end_to_end": 100 * (medians["with_checks"] / medians["without_checks"] - 1),
        "overhead_pct_checks_alone": 100 * medians["checks_alone"] / medians["without_checks"],
    }


def format_validation(v: dict[str, Any]) -> str:
    """bench_validation's result in one line."""
    return (
        f"Input validation, {v['batches']} batches of 32, median of {v['rounds']}: forward "
        f"{v['with_checks_s']:.3f} s with checks vs {v['without_checks_s']:.3f} s without "
        f"({v['overhead_pct_end_to_end']:+.2f}%); the checks alone {v['checks_alone_s'] * 1e3:.2f} ms "
        f"= {v['overhead_pct_checks_alone']:.3f}% of the forward"
    )


def bench_nonfinite_check(model_path: str, rounds: int = 31) -> dict[str, Any]:
    """from_pretrained with and without its NaN/Inf check (one sum per tensor), each followed by one short
    forward (which reads every weight too), and the check alone, in rotated rounds.

    Args:
        model_path: the checkpoint folder.
        rounds: rounds of each.

    Returns:
        Median and min milliseconds of each, with the values checked and the CPU's capability.
    """
    import bertlite
    import bertlite.checkpoint.safety

    check = bertlite.checkpoint.safety.all_finite
    ids = torch.randint(1000, 2000, (1, 16))
    load_seconds: dict[str, list[float]] = {"with_check": [], "without_check": []}

    def load_and_forward(name: str, fn: Callable[[torch.Tensor], bool]) -> Callable[[], None]:
        def call() -> None:
            bertlite.checkpoint.safety.all_finite = fn
            try:
                seconds, model = timed(lambda: bertlite.BertModel.from_pretrained(model_path))
            finally:
                bertlite.checkpoint.safety.all_finite = check
            load_seconds[name].append(seconds)
            with torch.inference_mode():
                model(input_ids=ids)

        return call

    tensors = list(bertlite.BertModel.from_pretrained(model_path).state_dict().values())
    runs = {
        "load_forward_with_check": load_and_forward("with_check", check),
        "load_forward_without_check": load_and_forward("without_check", lambda tensor: True),
        "check_alone": lambda: all(check(t) for t in tensors),
    }
    timings, passed = timed_rounds(runs, rounds, pause_s=0.0, label="load check ")
    assert passed["check_alone"]
    timings |= {f"load_{name}": seconds for name, seconds in load_seconds.items()}
    return {
        "rounds": rounds,
        "threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "bf16_supported": torch.ops.mkldnn._is_mkldnn_bf16_supported(),
        "values_m": sum(t.numel() for t in tensors) / 1e6,
        **{f"{name}_ms_median": 1e3 * statistics.median(v) for name, v in timings.items()},
        **{f"{name}_ms_min": 1e3 * min(v) for name, v in timings.items()},
    }


def format_nonfinite_check(c: dict[str, Any]) -> str:
    """bench_nonfinite_check's result in one line."""
    return (
        f"NaN/Inf check at load ({c['values_m']:.1f} M values; {c['cpu_capability']}, bf16 "
        f"{c['bf16_supported']}, {c['threads']} threads), median (min) of {c['rounds']}: from_pretrained "
        f"{c['load_with_check_ms_median']:.1f} ({c['load_with_check_ms_min']:.1f}) ms with the check vs "
        f"{c['load_without_check_ms_median']:.1f} ({c['load_without_check_ms_min']:.1f}) ms without; "
        f"load + first forward {c['load_forward_with_check_ms_median']:.1f} vs "
        f"{c['load_forward_without_check_ms_median']:.1f} ms; the check alone {c['check_alone_ms_median']:.1f} "
        f"({c['check_alone_ms_min']:.1f}) ms"
    )
