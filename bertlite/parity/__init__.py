"""Compare bertlite with transformers on one checkpoint, and say where they part: the base
model, and the task head's weights and logits when config.json names a head bertlite has.

transformers is imported lazily (load.py): it is the reference, not a dependency of
the model. Reference = transformers' eager attention in float32. In float32 a
tensor passes when it is allclose(atol, rtol) to the reference; in bfloat16 /
float16 our error against the fp32 reference may be at most twice the error of
transformers itself run in that dtype (plus atol), as flash-attention's tests do.

check() runs the parts in order: inputs.py (texts and batches), load.py (the three models), compare.py
(run them, one Row per tensor), diagnosis.py (likely causes) into report.py's ParityReport. Every public
name of the parts is importable from bertlite.parity, where it lived before the package was split.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

import torch
from torch import Tensor, nn

from bertlite.config import BertConfig
from bertlite.errors import ParityLoadError
from bertlite.parity.compare import HEAD_LOGITS as HEAD_LOGITS
from bertlite.parity.compare import capture as capture
from bertlite.parity.compare import (
    compare_activations,
    compare_logits,
    compare_weights,
    module_names,
    reference_names,
    run,
    run_head,
)
from bertlite.parity.compare import error_stats as error_stats
from bertlite.parity.compare import make_row as make_row
from bertlite.parity.compare import select_valid as select_valid
from bertlite.parity.diagnosis import CAUSES as CAUSES
from bertlite.parity.diagnosis import diagnose
from bertlite.parity.inputs import BUILTIN_TEXTS, make_batches, read_text_file
from bertlite.parity.load import head_architecture, head_classes, load_models
from bertlite.parity.report import ParityReport
from bertlite.parity.report import Row as Row
from bertlite.utils.capabilities import DTYPE_NAMES
from bertlite.utils.dtypes import parse_dtype


def check(
    name_or_path: str | os.PathLike,
    *,
    reference: str | os.PathLike | None = None,
    texts: list[str | tuple[str, str]] | None = None,
    text_file: str | os.PathLike | None = None,
    revision: str | None = None,
    dtype: str | torch.dtype = "float32",
    attn: str = "eager",
    atol: float = 1e-5,
    rtol: float = 1e-5,
    batch_size: int = 8,
    max_length: int = 256,
    head: str = "auto",
    subfolder: str = "",
    local_files_only: bool = False,
) -> ParityReport:
    """Compare bertlite with transformers on `name_or_path` (folder or hub id).

    Weights are compared bit for bit, then every module's output, the attention maps, the outputs and
    a task head's logits on the texts.

    Args:
        name_or_path: the checkpoint bertlite loads.
        reference: what transformers loads, when it is not the same checkpoint (e.g. the original of a
            converted copy); None: name_or_path. Hub options apply to both.
        texts: texts or (text_a, text_b) pairs; None: the built-in texts.
        text_file: read the texts from a file instead (read_text_file()).
        revision: a hub branch, tag or commit.
        dtype: "float32", "bfloat16" or "float16" (or a torch dtype). Below float32 a tensor passes
            within twice transformers' own error in that dtype against fp32, plus atol.
        attn: bertlite's attn_implementation (default "eager", the reference path).
        atol, rtol: the tolerances, finite and >= 0.
        batch_size: texts per batch.
        max_length: tokens per text, longer ones truncated.
        head: "auto": compare the task head config.json names, when bertlite implements it; "none":
            the base model only.
        subfolder: the folder inside the repo or local folder.
        local_files_only: use the hub cache only.

    Returns:
        The ParityReport (report.ok: parity holds).

    Raises:
        ParityLoadError: bad options, or a model or text file that cannot be loaded.
    """
    start = time.perf_counter()
    name = os.fspath(name_or_path)
    reference_name = os.fspath(reference) if reference is not None else name
    torch_dtype = _check_options(dtype, attn, batch_size, max_length, head, atol, rtol)
    texts = read_text_file(text_file) if text_file is not None else list(texts or BUILTIN_TEXTS)
    report = _new_report(name, reference_name, torch_dtype, attn, atol, rtol, batch_size, max_length, head, revision)
    hub_kwargs = dict(revision=revision, subfolder=subfolder, local_files_only=local_files_only)
    heads, bases = _load(report, name, reference_name, torch_dtype, attn, head, hub_kwargs)
    batches = _batches(report, texts, bases[0].config, batch_size, hub_kwargs)
    _compare(report, heads, bases, batches, torch_dtype, atol, rtol)
    report.seconds = time.perf_counter() - start
    return report


def _new_report(
    name: str,
    reference_name: str,
    torch_dtype: torch.dtype,
    attn: str,
    atol: float,
    rtol: float,
    batch_size: int,
    max_length: int,
    head: str,
    revision: str | None,
) -> ParityReport:
    """An empty ParityReport of `name`, holding check()'s options (the dtype by name).

    Args:
        name, reference_name: what bertlite and transformers load.
        torch_dtype, attn, atol, rtol, batch_size, max_length, head, revision: check()'s, checked.

    Returns:
        The report, with no rows yet.
    """
    options = dict(
        dtype=str(torch_dtype).removeprefix("torch."),
        attn=attn,
        atol=atol,
        rtol=rtol,
        batch_size=batch_size,
        max_length=max_length,
        head=head,
        revision=revision,
        reference=reference_name,
    )
    return ParityReport(model=name, options=options)


def _load(
    report: ParityReport,
    name: str,
    reference_name: str,
    torch_dtype: torch.dtype,
    attn: str,
    head: str,
    hub_kwargs: dict[str, Any],
) -> tuple[tuple[nn.Module, nn.Module, nn.Module | None], tuple[nn.Module, ...]]:
    """Load the three models (load_models), with the task head config.json names when head="auto" finds one.

    Args:
        report: the report; its head is set and its notes appended to.
        name, reference_name: what bertlite and transformers load.
        torch_dtype, attn, head: check()'s.
        hub_kwargs: hub options for both.

    Returns:
        (the models as load_models gives them, the base model of each: the BertModel inside a head, or the
        model itself without one).

    Raises:
        ParityLoadError: a model that cannot be loaded.
    """
    architecture = head_architecture(name, head, hub_kwargs, report.notes)
    heads = load_models(name, reference_name, torch_dtype, attn, hub_kwargs, report.notes, architecture)
    # The base model's rows come from the BertModel inside a head, under the same names as without one.
    bases = tuple(m.base_model if architecture and m is not None else m for m in heads)
    if architecture:
        report.head = architecture
        report.notes.append(
            f"task head {architecture}: its weights and {', '.join(HEAD_LOGITS[architecture])} are compared "
            f"with transformers.{head_classes(architecture)[1]}"
        )
    return heads, bases


def _batches(
    report: ParityReport,
    texts: list[str | tuple[str, str]],
    config: BertConfig,
    batch_size: int,
    hub_kwargs: dict[str, Any],
) -> list[dict[str, Tensor]]:
    """Tokenize the texts at report.options["max_length"], clamped to the model's maximum (and noted).

    Args:
        report: the report; its texts and tokens are set, its notes appended to.
        texts: texts or (text_a, text_b) pairs.
        config: bertlite's config (max_position_embeddings, vocab_size).
        batch_size: texts per batch.
        hub_kwargs: hub options for the tokenizer.

    Returns:
        make_batches()'s batches.
    """
    max_length = report.options["max_length"]
    if max_length > config.max_sequence_length:
        # The default (256) is longer than small models take: compare at the model's maximum.
        max_length = report.options["max_length"] = config.max_sequence_length
        report.notes.append(f"texts truncated to the model's maximum of {max_length} tokens")
    batches = make_batches(report.model, texts, config, batch_size, max_length, hub_kwargs, report.notes)
    report.texts = len(texts)
    report.tokens = int(sum(b["attention_mask"].sum() for b in batches))
    return batches


def _compare(
    report: ParityReport,
    heads: tuple[nn.Module, nn.Module, nn.Module | None],
    bases: tuple[nn.Module, ...],
    batches: list[dict[str, Tensor]],
    dtype: torch.dtype,
    atol: float,
    rtol: float,
) -> None:
    """Fill the report: weights, each module's output, attention maps and outputs, the head's logits, then
    the likely causes of any failure.

    Args:
        report: the report, appended to (report.head: the head to compare, or None).
        heads: load_models()'s (bertlite, transformers fp32, transformers in dtype or None).
        bases: the same, each its base BertModel.
        batches: the batches to run.
        dtype: the dtype bertlite runs in.
        atol, rtol: the tolerances.
    """
    ours, ref, theirs = bases
    compare_weights(report, heads[0], heads[1], dtype if theirs is not None else None)
    names = module_names(ours, ours.pooler is not None and getattr(ref, "pooler", None) is not None)
    aliases = reference_names(ours.config.model_type, names)
    ours_run, ref_run = run(ours, batches, names), run(ref, batches, names, aliases)
    theirs_run = run(theirs, batches, names, aliases) if theirs is not None else None
    compare_activations(report, batches, names, ours_run, ref_run, theirs_run, atol, rtol)
    if report.head:
        architecture = report.head
        ours_logits, ref_logits = run_head(heads[0], batches, architecture), run_head(heads[1], batches, architecture)
        theirs_logits = run_head(heads[2], batches, architecture) if heads[2] is not None else None
        compare_logits(report, architecture, ours_logits, ref_logits, theirs_logits, atol, rtol)
    if report.first_divergence or not report.ok:
        report.suggestions = diagnose(report, ours, ref, batches, ours_run, ref_run, atol, rtol)


def _check_options(
    dtype: Any, attn: str, batch_size: int, max_length: int, head: str, atol: float, rtol: float
) -> torch.dtype:
    """Refuse check()'s options a user can get wrong, naming the CLI flag.

    Args:
        dtype, attn, batch_size, max_length, head, atol, rtol: as check() takes them.

    Returns:
        The dtype to run bertlite in, parsed.

    Raises:
        ParityLoadError: an option out of its range, with the flag's name and the value given.
    """
    try:
        torch_dtype = parse_dtype(dtype)
    except ValueError as e:
        raise ParityLoadError(str(e)) from e
    if str(torch_dtype).removeprefix("torch.") not in DTYPE_NAMES:
        raise ParityLoadError(f"--dtype must be one of {', '.join(DTYPE_NAMES)}, got {dtype!r}")
    if attn not in ("eager", "sdpa"):
        raise ParityLoadError(f"--attn must be eager or sdpa, got {attn!r}")
    if head not in ("auto", "none"):
        raise ParityLoadError(f"--head must be auto or none, got {head!r}")
    for option, value, least in (("--batch-size", batch_size, 1), ("--max-length", max_length, 2)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ParityLoadError(f"{option} must be an integer >= {least}, got {value!r}")
    for option, value in (("--atol", atol), ("--rtol", rtol)):
        # NaN compares false with everything, so `< 0` lets it through; an infinite tolerance passes anything.
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ParityLoadError(f"{option} must be a finite number >= 0, got {value!r}")
    return torch_dtype
