"""On a GPU (or the CPU): parity with transformers, then bertlite vs transformers vs sentence-transformers throughput.

One call yields everything a short lease on a device machine allows:
  1. parity: bertlite BertModel vs transformers BertModel, both fp32 eager on the device, on a padded batch of
     64 corpus texts (max |diff| of last_hidden_state over the real tokens, and of pooler_output); then
     Embedder vectors of 1,000 corpus texts in float32, "auto", and on CUDA bfloat16 and float16, each against
     the float32 Embedder's (min and mean cosine), and the float32 Embedder against sentence-transformers
     float32. Bars: fp32 max |diff| < 1e-4, "auto" min cosine >= 0.9999.
  2. throughput on the corpus (all 11,491 texts unless --texts): bertlite "auto", transformers sdpa fp16 on
     length-sorted batches with mean pooling in torch, sentence-transformers fp16, and bertlite float32 (the peers
     run float32 on a CPU, where float16 is emulated: 115 s for 200 texts on an AVX-512 EPYC). Each
     config repeats the corpus to fill --seconds of work per round; the median of --rounds rounds in rotated
     order counts, with CUDA synchronized before each clock read.
  3. useful TFLOP/s (the real tokens' encoder FLOPs, bench.flops) and their share of --peak-tflops (GPU only);
     bertlite auto's per-round ratio to transformers sorted (target >= 1.5x on a GPU, fp16) and to
     sentence-transformers (target >= 2x).
A step that fails (an import, a dtype the device lacks, out of memory) prints one FAILED line and the run goes on.
Exit status 1 when a step failed or a parity bar was missed, else 0.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import traceback
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch

from bench.common import (
    add_model_and_json_arguments,
    default_model_path,
    environment,
    per_round_ratio,
    read_corpus,
    timed,
    timed_rounds,
    write_json,
)
from bench.flops import useful_gflop
from bench.runners import MAX_LENGTH
from bench.runners.sentence_transformers import sentence_transformers_runner
from bench.runners.transformers import from_pretrained_dtype_keyword, transformers_runner

T = TypeVar("T")
Runner = Callable[[list[str]], np.ndarray]  # texts -> (N, H) vectors on the host

PARITY_TEXTS = 64  # the padded batch of the model parity check
COSINE_TEXTS = 1000  # the texts of the Embedder dtype check
FP32_MAX_ABS_DIFF = 1e-4  # bertlite fp32 eager vs transformers fp32 eager, last_hidden_state
AUTO_MIN_COSINE = 0.9999  # Embedder "auto" vs float32, every text
TARGETS = {"transformers_sdpa_sorted": 1.5, "sentence_transformers": 2.0}  # bertlite_auto's x over each
PEAK_TFLOPS = 790.0  # H200 bf16 dense, as torch's bf16 8192^3 GEMM measures it (the data sheet says 989)


def say(line: str) -> None:
    """Print a line at once: a device run's output must survive a timeout."""
    print(line, flush=True)


class Failures:
    """The steps that failed: each one printed as one line when it happens, all of them kept for the JSON."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def attempt(self, what: str, step: Callable[[], T]) -> T | None:
        """Run one step; on any error print `FAILED what: ...` and return None.

        Args:
            what: the step, as the line names it.
            step: the step.

        Returns:
            Its result, or None when it raised.
        """
        try:
            return step()
        except Exception as e:  # noqa: BLE001 - one device call reports every step it can, whatever ends one
            frame = traceback.extract_tb(e.__traceback__)[-1]
            message = (str(e).strip().splitlines() or [""])[0][:300]
            line = f"FAILED {what}: {type(e).__name__}: {message} ({Path(frame.filename).name}:{frame.lineno})"
            say(line)
            self.lines.append(line)
            return None


def quiet_transformers() -> None:
    """No "Loading weights" bar per model: the device's output tail is for the numbers."""
    import transformers

    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work, so a clock read after it counts that work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def free(device: torch.device) -> None:
    """Give back the memory of models that went out of scope."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity of two (N, H) arrays, in float64."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def embedder_dtypes(device: torch.device) -> list[str]:
    """The Embedder dtypes checked on this device: half precisions only on CUDA (on a CPU they may be emulated)."""
    return ["float32", "auto", "bfloat16", "float16"] if device.type == "cuda" else ["float32", "auto"]


def peer_dtype(device: torch.device) -> torch.dtype:
    """The dtype transformers and sentence-transformers run in: float16 on CUDA, float32 where float16 is emulated."""
    return torch.float16 if device.type == "cuda" else torch.float32


def model_parity(model_path: str, texts: list[str], device: torch.device) -> dict[str, Any]:
    """bertlite BertModel vs transformers BertModel, fp32 eager on `device`, on one padded batch.

    Args:
        model_path: the checkpoint folder both load.
        texts: the batch, padded to its longest text (truncated at MAX_LENGTH tokens).
        device: where both run.

    Returns:
        texts, width (padded tokens), max_abs_diff_last_hidden_state (real tokens only), max_abs_diff_pooler_output.
    """
    import transformers

    from bertlite import BertModel

    tokenizer = transformers.AutoTokenizer.from_pretrained(model_path)
    batch = tokenizer(texts, padding=True, truncation=True, max_length=MAX_LENGTH, return_tensors="pt").to(device)
    keyword = from_pretrained_dtype_keyword()
    theirs = transformers.BertModel.from_pretrained(model_path, attn_implementation="eager", **{keyword: torch.float32})
    theirs = theirs.to(device).eval()
    ours = BertModel.from_pretrained(model_path, attn_implementation="eager", dtype=torch.float32, device=device).eval()
    with torch.inference_mode():
        expected, got = theirs(**batch), ours(**batch)
    real = batch["attention_mask"].bool()  # (B, T): padding rows are no model's output
    hidden = (got.last_hidden_state - expected.last_hidden_state).abs()[real]
    return {
        "texts": len(texts),
        "width": int(real.shape[1]),
        "max_abs_diff_last_hidden_state": float(hidden.max()),
        "max_abs_diff_pooler_output": float((got.pooler_output - expected.pooler_output).abs().max()),
    }


def load_embedders(model_path: str, device: torch.device, dtypes: list[str], failures: Failures) -> dict[str, Any]:
    """Embedder.from_pretrained for each dtype that loads on `device`.

    Returns:
        dtype name -> Embedder, without the ones that failed.
    """
    from bertlite import Embedder

    loaded = {}
    for name in dtypes:
        embedder = failures.attempt(
            f"load Embedder dtype={name!r} on {device}",
            partial(Embedder.from_pretrained, model_path, device=device, dtype=name),
        )
        if embedder is not None:
            loaded[name] = embedder
    return loaded


def embedder_parity(
    model_path: str, embedders: dict[str, Any], texts: list[str], device: torch.device, failures: Failures
) -> dict[str, Any]:
    """Each Embedder's vectors against the float32 Embedder's, and float32's against sentence-transformers fp32.

    Args:
        model_path: the checkpoint folder (for sentence-transformers).
        embedders: load_embedders()'s Embedders, float32 among them.
        texts: the texts every one embeds.
        device: where they run.
        failures: where a failed step is reported.

    Returns:
        texts; dtypes: per dtype name its resolved dtype and min/mean cosine to float32;
        min_cosine_st_fp32_vs_bertlite_fp32 (None when a side failed).
    """
    vectors = {}
    for name, embedder in embedders.items():
        run = partial(embedder.encode, texts, show_progress_bar=False)
        got = failures.attempt(f"Embedder dtype={name!r} encode on {device}", run)
        if got is not None:
            vectors[name] = got
    result: dict[str, Any] = {"texts": len(texts), "dtypes": {}, "min_cosine_st_fp32_vs_bertlite_fp32": None}
    reference = vectors.get("float32")
    if reference is None:
        return result
    for name, got in vectors.items():
        cos = cosines(got, reference)
        result["dtypes"][name] = {
            "dtype": str(embedders[name].dtype).removeprefix("torch."),
            "min_cosine_vs_float32": float(cos.min()),
            "mean_cosine_vs_float32": float(cos.mean()),
        }

    st = failures.attempt(
        f"sentence-transformers fp32 on {device}",
        lambda: sentence_transformers_runner(model_path, device, torch.float32)(texts),
    )
    if st is not None:
        result["min_cosine_st_fp32_vs_bertlite_fp32"] = float(cosines(st, reference).min())
    return result


def build_runners(
    model_path: str, embedders: dict[str, Any], device: torch.device, batch_size: int, failures: Failures
) -> dict[str, tuple[str, Runner]]:
    """The throughput configs that load on `device`.

    Returns:
        config name -> (its dtype's name, runner), in table order: bertlite_auto, transformers_sdpa_sorted and
        sentence_transformers (in peer_dtype), bertlite_fp32.
    """
    runners: dict[str, tuple[str, Runner]] = {}
    if "auto" in embedders:
        auto = embedders["auto"]
        runners["bertlite_auto"] = (
            str(auto.dtype).removeprefix("torch."),
            partial(auto.encode, show_progress_bar=False),
        )
    half = peer_dtype(device)
    half_name = str(half).removeprefix("torch.")
    hf = failures.attempt(
        f"load transformers sdpa {half_name} on {device}",
        partial(transformers_runner, model_path, "sdpa", half, sort=True, device=device, batch_size=batch_size),
    )
    if hf is not None:
        runners["transformers_sdpa_sorted"] = (half_name, hf)
    st = failures.attempt(
        f"load sentence-transformers {half_name} on {device}",
        partial(sentence_transformers_runner, model_path, device, half, batch_size),
    )
    if st is not None:
        runners["sentence_transformers"] = (half_name, st)
    if "float32" in embedders:
        runners["bertlite_fp32"] = ("float32", partial(embedders["float32"].encode, show_progress_bar=False))
    return runners


def passes(run: Runner, texts: list[str], device: torch.device, reps: int) -> Callable[[], int]:
    """`reps` passes of `run` over the texts, the device's queue drained after them, so a clock read after the
    call counts their work (each call starts on a drained queue: the previous one drained it); returns reps."""

    def call() -> int:
        for _ in range(reps):
            run(texts)
        synchronize(device)
        return reps

    return call


def throughput(
    runners: dict[str, tuple[str, Runner]],
    texts: list[str],
    device: torch.device,
    seconds: float,
    rounds: int,
    failures: Failures,
) -> dict[str, dict[str, Any]]:
    """Time each config: a warm-up, one timed pass that sets its repetitions, then rounds in rotated order
    (bench.common.timed_rounds).

    Args:
        runners: build_runners()'s configs.
        texts: the texts of one pass.
        device: where they run.
        seconds: the work per config per round to aim at (whole passes, at least one).
        rounds: timed rounds.
        failures: where a failed step is reported; a config that fails leaves the later rounds.

    Returns:
        Per config that finished every round: dtype, reps, texts_per_s (per round), median texts/s.
    """
    reps = {}
    for name, (_, run) in runners.items():

        def calibrate(run: Runner = run) -> float:
            run(texts[:64])  # first-call allocations and kernel choices; the timed pass warms the rest
            synchronize(device)
            return timed(passes(run, texts, device, 1))[0]

        one_pass = failures.attempt(f"warm-up {name}", calibrate)
        if one_pass is not None:
            reps[name] = max(1, round(seconds / one_pass))
            say(f"  warm {name}: one pass {one_pass:.3f} s, {reps[name]} per round")
    failed: set[str] = set()

    def attempt(name: str) -> Callable[[], None]:
        call = passes(runners[name][1], texts, device, reps[name])

        def run() -> None:
            if name not in failed and failures.attempt(f"timed round of {name}", call) is None:
                failed.add(name)

        return run

    per_round, _ = timed_rounds({name: attempt(name) for name in reps}, rounds, 0.0, len(texts))
    return {
        name: {
            "dtype": runners[name][0],
            "reps": reps[name],
            "texts_per_s_per_round": rates,
            "texts_per_s": statistics.median(rates),
        }
        for name, seconds_per_round in per_round.items()
        if name not in failed
        for rates in [[reps[name] * len(texts) / s for s in seconds_per_round]]
    }


def add_work(
    configs: dict[str, dict[str, Any]], gflop_per_pass: float | None, texts: int, peak_tflops: float | None
) -> dict[str, Any]:
    """Add useful TFLOP/s and % of peak to each config, and return bertlite_auto's per-round ratios to the peers."""
    for r in configs.values():
        tflops = None if gflop_per_pass is None else gflop_per_pass * r["texts_per_s"] / texts / 1e3
        r["useful_tflops"] = tflops
        r["pct_of_peak"] = None if tflops is None or peak_tflops is None else 100 * tflops / peak_tflops
    ratios = {}
    auto = configs.get("bertlite_auto")
    for peer, target in TARGETS.items():
        if auto is None or peer not in configs:
            continue
        # seconds per text, round by round: the ratio is auto's texts/s over the peer's in the same round
        x = per_round_ratio(
            [1 / v for v in configs[peer]["texts_per_s_per_round"]],
            [1 / v for v in auto["texts_per_s_per_round"]],
        )
        ratios[peer] = {"x": x, "target": target, "meets": x >= target}
    return ratios


def verdict(ok: bool | None) -> str:
    """A bar's outcome as the report prints it (n/a: its step failed)."""
    return "n/a" if ok is None else ("PASS" if ok else "FAIL")


def format_parity(result: dict[str, Any]) -> str:
    """The parity part of the report."""
    lines = []
    model = result.get("model")
    if model is not None:
        lines.append(
            f"bertlite BertModel vs transformers BertModel, fp32 eager, {model['texts']} texts padded to "
            f"{model['width']} tokens: max |diff| last_hidden_state {model['max_abs_diff_last_hidden_state']:.2e}, "
            f"pooler_output {model['max_abs_diff_pooler_output']:.2e}"
        )
    embed = result.get("embedder")
    if embed is not None:
        lines.append(f"Embedder vs Embedder float32, {embed['texts']} texts:")
        lines.append(f"  {'dtype':<10}{'resolved':<10}{'min cos':>10}{'mean cos':>11}")
        for name, r in embed["dtypes"].items():
            lines.append(
                f"  {name:<10}{r['dtype']:<10}{r['min_cosine_vs_float32']:>10.6f}{r['mean_cosine_vs_float32']:>11.7f}"
            )
        st = embed["min_cosine_st_fp32_vs_bertlite_fp32"]
        lines.append(f"  sentence-transformers fp32 vs bertlite float32: min cos {'-' if st is None else f'{st:.7f}'}")
    bars = result["bars"]
    lines.append(
        f"bar: fp32 max |diff| < {FP32_MAX_ABS_DIFF:g}: {verdict(bars['fp32_max_abs_diff'])}; "
        f"auto min cosine >= {AUTO_MIN_COSINE} to float32: {verdict(bars['auto_min_cosine'])}"
    )
    return "\n".join(lines)


def format_throughput(result: dict[str, Any]) -> str:
    """The throughput part of the report."""
    lines = [
        f"Throughput on {result['device_name']}: {result['texts']:,} corpus texts a pass, ~{result['seconds']:g} s of "
        f"work per config per round, median of {result['rounds']} rotated rounds; peak "
        + ("n/a" if result["peak_tflops"] is None else f"{result['peak_tflops']:g} TFLOP/s bf16 dense"),
        f"{'config':<32}{'dtype':<10}{'texts/s':>11}{'TFLOP/s':>10}{'% peak':>8}{'passes':>8}",
    ]
    for name, r in result["configs"].items():
        tflops = "-" if r["useful_tflops"] is None else f"{r['useful_tflops']:.3f}"
        pct = "n/a" if r["pct_of_peak"] is None else f"{r['pct_of_peak']:.1f}%"
        lines.append(f"{name:<32}{r['dtype']:<10}{r['texts_per_s']:>11,.1f}{tflops:>10}{pct:>8}{r['reps']:>8}")
    for peer, r in result["ratios"].items():
        lines.append(
            f"bertlite_auto / {peer}: {r['x']:.2f}x per round (target >= {r['target']:g}x): "
            f"{'meets' if r['meets'] else 'BELOW'}"
        )
    return "\n".join(lines)


def check_parity(
    model_path: str, texts: list[str], device: torch.device, failures: Failures
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The parity step: model_parity, then embedder_parity of every dtype of embedder_dtypes, and the bars.

    Returns:
        The parity result (model, embedder, bars), and the Embedders it loaded, by dtype name.
    """
    parity: dict[str, Any] = {
        "model": failures.attempt(
            f"bertlite vs transformers fp32 eager on {device}",
            partial(model_parity, model_path, texts[:PARITY_TEXTS], device),
        )
    }
    free(device)
    embedders = load_embedders(model_path, device, embedder_dtypes(device), failures)
    parity["embedder"] = embedder_parity(model_path, embedders, texts[:COSINE_TEXTS], device, failures)
    auto = parity["embedder"]["dtypes"].get("auto")
    parity["bars"] = {
        "fp32_max_abs_diff": None
        if parity["model"] is None
        else parity["model"]["max_abs_diff_last_hidden_state"] < FP32_MAX_ABS_DIFF,
        "auto_min_cosine": None if auto is None else auto["min_cosine_vs_float32"] >= AUTO_MIN_COSINE,
    }
    say(format_parity(parity))
    return parity, embedders


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The gpu job's flags."""
    parser.add_argument("--device", default=None, help="where to run (default: cuda if available, else cpu)")
    parser.add_argument("--texts", type=int, default=0, help="first N corpus texts for every step; 0 = all 11,491")
    parser.add_argument("--seconds", type=float, default=10.0, help="work per config per round (default 10)")
    parser.add_argument("--rounds", type=int, default=3, help="rotated throughput rounds (default 3)")
    parser.add_argument(
        "--batch-size", type=int, default=256, help="texts per batch of transformers and sentence-transformers"
    )
    parser.add_argument(
        "--peak-tflops",
        type=float,
        default=PEAK_TFLOPS,
        help=f"the GPU's bf16 dense peak for %% of peak (default {PEAK_TFLOPS:g}: an H200 as torch measures it)",
    )
    add_model_and_json_arguments(parser)


def run(args: argparse.Namespace) -> None:
    """Run parity and throughput on the device, print the report, write the JSON."""
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    model_path = args.model or default_model_path()
    env = environment(model_path, ("sentence-transformers",))
    cuda = device.type == "cuda"
    name = torch.cuda.get_device_name(device) if cuda else env["cpu"]
    say(
        f"device {device}: {name}; torch {env['versions']['torch']}, transformers {env['versions']['transformers']}, "
        f"sentence-transformers {env['versions']['sentence-transformers']}, commit {env['commit']}"
    )
    failures = Failures()
    failures.attempt("quieting transformers' progress bars", quiet_transformers)
    texts = read_corpus(args.texts)

    say("parity")
    parity_s, (parity, embedders) = timed(partial(check_parity, model_path, texts, device, failures))
    write_json(args.json, "gpu", {"parity": parity, "throughput": None, "failures": failures.lines}, env)  # if cut off
    for dtype in set(embedders) - {"auto", "float32"}:  # the throughput configs keep auto and float32
        del embedders[dtype]
    free(device)

    say(f"throughput ({parity_s:.0f} s in)")
    runners = build_runners(model_path, embedders, device, args.batch_size, failures)
    throughput_s, configs = timed(partial(throughput, runners, texts, device, args.seconds, args.rounds, failures))
    gflop = failures.attempt("counting the corpus FLOPs", partial(useful_gflop, model_path, texts))
    peak = args.peak_tflops if cuda else None
    result = {
        "device": str(device),
        "device_name": name,
        "device_capability": list(torch.cuda.get_device_capability(device)) if cuda else None,
        "texts": len(texts),
        "seconds": args.seconds,
        "rounds": args.rounds,
        "batch_size": args.batch_size,
        "peak_tflops": peak,
        "useful_gflop_per_pass": gflop,
        "configs": configs,
        "ratios": add_work(configs, gflop, len(texts), peak),
    }
    say(format_throughput(result))
    say(f"done in {parity_s + throughput_s:.0f} s")
    write_json(args.json, "gpu", {"parity": parity, "throughput": result, "failures": failures.lines}, env)
    if failures.lines or False in parity["bars"].values():
        say(f"{len(failures.lines)} step(s) failed; parity bars {parity['bars']}")
        raise SystemExit(1)
