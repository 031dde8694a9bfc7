"""Compare bertlite with transformers on one checkpoint, and say where they part: the base
model, and the task head's weights and logits when config.json names a head bertlite has.

transformers is imported here, lazily: it is the reference, not a dependency of
the model. Reference = transformers' eager attention in float32. In float32 a
tensor passes when it is allclose(atol, rtol) to the reference; in bfloat16 /
float16 our error against the fp32 reference may be at most twice the error of
transformers itself run in that dtype (plus atol), as flash-attention's tests do.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from bertlite import __version__
from bertlite.config import SIZE_FIELDS, SUPPORTED_ACTIVATIONS, BertConfig
from bertlite.errors import CheckpointError, ParityLoadError, one_line
from bertlite.models.auto import ARCHITECTURES
from bertlite.models.bert import BertModel
from bertlite.models.heads import MODEL_CLASSES
from bertlite.tokenization import load_tokenizer
from bertlite.utils.capabilities import DTYPE_NAMES
from bertlite.utils.dtypes import parse_dtype

# Varied on purpose: short, long, two segments (token_type_ids), non-ASCII, and
# lengths that force padding in every batch.
BUILTIN_TEXTS: list[str | tuple[str, str]] = [
    "Hello world.",
    "a",
    "Return the absolute value of a number. The argument may be an integer, a floating point number, or an "
    "object implementing __abs__(). If the argument is a complex number, its magnitude is returned.",
    ("What does len() return?", "Return the length (the number of items) of an object."),
    ("Is this a pair?", "Yes: the second segment gets token_type_id 1."),
    "Zürich, São Paulo, Kraków and Ålesund are cities; naïve café crème brûlée.",
    "東京は日本の首都です。",
    "Привет, мир! Это проверка.",
    "emoji 🙂 and symbols ∑ ∫ √ ≠ ≤ ≥ ← →",
    "   leading and trailing spaces   ",
    "UPPER CASE and lower case and MiXeD CaSe",
    "numbers 3.14159 2.71828 1e-12 0x1F 1,000,000",
    "def f(x):\n    return x ** 2  # code with newlines and indentation",
    "https://example.org/path?query=1&other=two#fragment",
    " ".join(["This sentence is repeated to build a long input."] * 30),
    ("A long second segment follows.", " ".join(["Padding matters for the shorter rows in this batch."] * 12)),
    "The quick brown fox jumps over the lazy dog.",
    "Tabs\tand\tother\twhitespace.",
]

# The heads `--head auto` compares: architecture -> its logits fields, each per token (padded
# positions excluded) or per sequence. The reference is transformers' Auto class of the same
# architecture (bertlite.models.auto.ARCHITECTURES).
HEAD_LOGITS = {
    "BertForPreTraining": {"prediction_logits": "token", "seq_relationship_logits": "pooled"},
    "BertForMaskedLM": {"logits": "token"},
    "BertLMHeadModel": {"logits": "token"},
    "BertForNextSentencePrediction": {"logits": "pooled"},
    "BertForSequenceClassification": {"logits": "pooled"},
    "BertForMultipleChoice": {"logits": "pooled"},  # each batch runs as one question whose choices are its texts
    "BertForTokenClassification": {"logits": "token"},
    "BertForQuestionAnswering": {"start_logits": "token", "end_logits": "token"},
}


@dataclass
class Row:
    """One compared tensor of a ParityReport."""

    kind: str  # "weight" | "module" | "attention" | "output" | "logits"
    name: str
    max_abs: float
    mean_abs: float
    max_rel: float  # max |ours - ref| / (|ref| + atol)
    allowed: float  # the largest max_abs that passes (fp32: atol + rtol * |ref| at the worst element)
    ok: bool
    reference_error: float | None = None  # transformers' own error in --dtype vs fp32, when that is the bar


@dataclass
class ParityReport:
    """What check() compared and found; to_json() gives the schema docs/parity.md describes."""

    model: str
    options: dict[str, Any]
    head: str | None = None  # the task head whose weights and logits are compared (an architecture name)
    rows: list[Row] = field(default_factory=list)
    only_in_bertlite: list[str] = field(default_factory=list)
    only_in_transformers: list[str] = field(default_factory=list)
    first_divergence: str | None = None
    suggestions: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    texts: int = 0
    tokens: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether every row passed and both models have the same weights."""
        return all(r.ok for r in self.rows) and not self.only_in_bertlite and not self.only_in_transformers

    def to_dict(self) -> dict[str, Any]:
        """The report as a JSON-ready dict, with "ok" and the library "versions"; non-finite errors are None."""
        out = dataclasses.asdict(self)
        for row in out["rows"]:  # strict JSON has no Infinity/NaN: a non-finite error becomes null
            for key, value in row.items():
                if isinstance(value, float) and not math.isfinite(value):
                    row[key] = None
        out["ok"] = self.ok
        out["versions"] = _versions()
        return out

    def to_json(self) -> str:
        """The report as strict JSON (to_dict())."""
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)

    def format_table(self, all_weights: bool = False) -> str:
        """The report as the text table `bertlite parity` prints.

        Args:
            all_weights: list every weight row; False: only the failing ones.

        Returns:
            The table, with the first divergence, likely causes and the verdict.
        """
        opts = self.options
        reference = opts.get("reference")
        lines = [
            f"bertlite parity: {self.model}" + (f"  (transformers: {reference})" if reference != self.model else ""),
            f"dtype={opts['dtype']} attn={opts['attn']} atol={opts['atol']:g} rtol={opts['rtol']:g}  "
            f"texts={self.texts} tokens={self.tokens}",
        ]
        lines += [f"note: {n}" for n in self.notes]
        weights = [r for r in self.rows if r.kind == "weight"]
        bad = [r for r in weights if not r.ok]
        lines.append(
            f"\nweights: {len(weights)} compared, {len(weights) - len(bad)} equal, "
            f"{len(self.only_in_bertlite)} only in bertlite, {len(self.only_in_transformers)} only in transformers"
            f"  {'PASS' if not bad and not self.only_in_bertlite and not self.only_in_transformers else 'FAIL'}"
        )
        lines += [f"  only in bertlite: {k}" for k in self.only_in_bertlite]
        lines += [f"  only in transformers: {k}" for k in self.only_in_transformers]
        shown = [r for r in self.rows if r.kind != "weight" or all_weights or not r.ok]
        width = max([len(r.name) for r in shown] + [20])
        lines.append(f"\n{'tensor':<{width}}  {'max_abs':>9}  {'mean_abs':>9}  {'max_rel':>9}  {'allowed':>9}  result")
        for r in shown:
            lines.append(
                f"{r.name:<{width}}  {r.max_abs:9.3g}  {r.mean_abs:9.3g}  {r.max_rel:9.3g}  {r.allowed:9.3g}  "
                f"{'PASS' if r.ok else 'FAIL'}"
            )
        lines.append(f"\nfirst divergence: {self.first_divergence or 'none'}")
        lines += [f"likely cause: {s}" for s in self.suggestions]
        failed = sum(not r.ok for r in self.rows)
        verdict = "PARITY HOLDS" if self.ok else "PARITY FAILS"
        lines.append(f"verdict: {verdict} ({len(self.rows)} tensors compared, {failed} failed) in {self.seconds:.1f} s")
        return "\n".join(lines)


def _versions() -> dict[str, str]:
    import transformers

    return {"bertlite": __version__, "transformers": transformers.__version__, "torch": torch.__version__}


# --- inputs --------------------------------------------------------------------


def read_text_file(path: str | os.PathLike) -> list[str | tuple[str, str]]:
    """Read parity's texts: one per line; a tab splits a line into a (text_a, text_b) pair.

    Args:
        path: a UTF-8 text file.

    Returns:
        The non-empty lines, as texts or pairs.

    Raises:
        ParityLoadError: the file cannot be read or has no non-empty lines.
    """
    try:
        with open(path, encoding="utf-8") as f:
            lines = [line.rstrip("\n") for line in f]
    except (OSError, UnicodeDecodeError) as e:
        raise ParityLoadError(f"cannot read --text-file {path}: {e}") from e
    texts = [tuple(line.split("\t", 1)) if "\t" in line else line for line in lines if line.strip()]
    if not texts:
        raise ParityLoadError(f"--text-file {path} has no non-empty lines")
    return texts


def make_batches(
    name_or_path: str,
    texts: list[str | tuple[str, str]],
    config: BertConfig,
    batch_size: int,
    max_length: int,
    hub_kwargs: dict[str, Any],
    notes: list[str],
) -> list[dict[str, Tensor]]:
    """Tokenize the texts into padded batches with transformers' tokenizer of the checkpoint.

    Without a tokenizer, random ids with the texts' word counts as lengths, so weights-only
    checkpoints can still be checked (and a note says so).

    Args:
        name_or_path: the checkpoint.
        texts: texts or (text_a, text_b) pairs.
        config: its config (vocab_size, for the random ids).
        batch_size: texts per batch.
        max_length: tokens per text, longer ones truncated.
        hub_kwargs: hub options for the tokenizer.
        notes: the report's notes, appended to.

    Returns:
        Batches of input_ids, attention_mask (and token_type_ids where the tokenizer gives them), (B, T).

    Raises:
        ParityLoadError: a tokenizer.json or vocab.txt that cannot be read as one.
    """
    import transformers

    try:
        # bertlite's reader first: a damaged tokenizer file is an error naming it, where transformers
        # would print a traceback (or be taken for "no tokenizer" below).
        load_tokenizer(name_or_path, **hub_kwargs)
    except CheckpointError as e:
        raise ParityLoadError(f"cannot load the tokenizer of {name_or_path}: {e}") from e
    except (OSError, ValueError):
        pass  # no tokenizer files: random ids, as below
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(name_or_path, **hub_kwargs)
    except (OSError, ValueError, KeyError, TypeError):
        tokenizer = None
    batches = []
    g = torch.Generator().manual_seed(0)
    for i in range(0, len(texts), batch_size):
        chunk = texts[i : i + batch_size]
        if tokenizer is not None:
            firsts = [t[0] if isinstance(t, tuple) else t for t in chunk]
            seconds = [t[1] if isinstance(t, tuple) else None for t in chunk]
            pairs = [(a, b) if b is not None else a for a, b in zip(firsts, seconds, strict=True)]
            enc = tokenizer(pairs, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
            batch = {k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc}
        else:
            lengths = [min(max_length, 2 + len(str(t).split())) for t in chunk]
            seq = max(lengths)
            mask = torch.tensor([[1] * n + [0] * (seq - n) for n in lengths])
            ids = torch.randint(1, config.vocab_size, (len(chunk), seq), generator=g).masked_fill(mask == 0, 0)
            batch = {"input_ids": ids, "attention_mask": mask}
        batches.append(batch)
    if tokenizer is None:
        notes.append("no tokenizer found: random token ids with the texts' word counts as lengths")
    return batches


# --- capturing and comparing ---------------------------------------------------


def module_names(num_layers: int, has_pooler: bool) -> list[str]:
    """List the compared sub-modules in execution order: the first that leaves tolerance is the divergence.

    Args:
        num_layers: the encoder's layers.
        has_pooler: include the pooler.

    Returns:
        The module names (embeddings, each layer's attention, intermediate, output, then pooler).
    """
    names = ["embeddings"]
    for i in range(num_layers):
        names += [f"encoder.layer.{i}.attention", f"encoder.layer.{i}.intermediate", f"encoder.layer.{i}.output"]
    return names + (["pooler"] if has_pooler else [])


@contextmanager
def capture(model: nn.Module, names: list[str]) -> Iterator[dict[str, list[tuple[Tensor, Tensor]]]]:
    """Record (first input, output) of each named module on every forward, while the block runs.

    Args:
        model: the model.
        names: its sub-module names.

    Yields:
        name -> list of (input, output) tensors, one pair per forward, filled as the model runs.
    """
    found = dict(model.named_modules())
    records: dict[str, list[tuple[Tensor, Tensor]]] = {n: [] for n in names}
    handles = []
    for name in names:

        def hook(module, args, output, name=name):
            out = output[0] if isinstance(output, tuple) else output
            records[name].append((args[0].detach() if args else None, out.detach()))

        handles.append(found[name].register_forward_hook(hook))
    try:
        yield records
    finally:
        for h in handles:
            h.remove()


def run(model: nn.Module, batches: list[dict[str, Tensor]], names: list[str]) -> dict[str, Any]:
    """Run every batch and collect what parity compares.

    Args:
        model: a BertModel (bertlite's or transformers').
        batches: make_batches()'s output.
        names: the sub-modules to capture (module_names()).

    Returns:
        {"modules": capture()'s records, "last_hidden_state", "pooler_output", "attentions"}: one entry
        per batch each.
    """
    with torch.no_grad(), capture(model, names) as records:
        outs = [model(**b) for b in batches]
    with torch.no_grad():
        # A separate call: asking for probabilities may change the attention path.
        probs = [model(**b, output_attentions=True).attentions for b in batches]
    return {
        "modules": records,
        "last_hidden_state": [o.last_hidden_state for o in outs],
        "pooler_output": [o.pooler_output for o in outs],
        "attentions": probs,
    }


def select_valid(t: Tensor, mask: Tensor, kind: str) -> Tensor:
    """Keep the elements that belong to real tokens (padded positions excluded).

    Args:
        t: (B, T, ...) per-token values, (B, nh, T, T) attention, or (B, ...) pooled values.
        mask: (B, T) attention mask.
        kind: "token", "attention" or "pooled" (kept whole).

    Returns:
        The kept elements, (valid tokens, ...) or flattened.
    """
    mask = mask.bool()
    if kind == "pooled":
        return t.reshape(-1)
    if kind == "attention":
        pair = mask[:, None, :, None] & mask[:, None, None, :]  # (B, 1, T, T)
        return t[pair.expand_as(t)]
    return t[mask]  # (B, T, ...) -> (valid tokens, ...)


def error_stats(ours: list[Tensor], ref: list[Tensor], atol: float, rtol: float) -> tuple[float, float, float, float]:
    """Measure the error of `ours` against `ref` over all batches.

    Args:
        ours: bertlite's tensors.
        ref: the reference's, same shapes.
        atol, rtol: the tolerances of the allclose bar.

    Returns:
        (max_abs, mean_abs, max_rel, the allclose bar atol + rtol * |ref| at the worst element).
    """
    o = torch.cat([x.double().reshape(-1) for x in ours])
    r = torch.cat([x.double().reshape(-1) for x in ref])
    if o.numel() == 0:
        return 0.0, 0.0, 0.0, atol
    diff = (o - r).abs().nan_to_num(nan=math.inf)
    worst = int((diff - (atol + rtol * r.abs())).argmax())
    max_rel = (diff / (r.abs() + max(atol, 1e-12))).max().item()
    return diff.max().item(), diff.mean().item(), max_rel, atol + rtol * r[worst].abs().item()


def make_row(
    kind: str, name: str, ours: list[Tensor], ref: list[Tensor], theirs: list[Tensor] | None, atol: float, rtol: float
) -> Row:
    """Compare one tensor and decide whether it passes.

    Args:
        kind: the Row kind ("module", "attention", "output", "logits", ...).
        name: its label.
        ours: bertlite's tensors, one per batch.
        ref: transformers' fp32 tensors.
        theirs: transformers' in the low dtype; None (fp32): pass by allclose(atol, rtol). Given, the
            bar is twice transformers' own error against fp32, plus atol.
        atol, rtol: the tolerances.

    Returns:
        The Row.
    """
    max_abs, mean_abs, max_rel, allowed = error_stats(ours, ref, atol, rtol)
    if theirs is None:
        ok = all(torch.allclose(a.double(), b.double(), atol=atol, rtol=rtol) for a, b in zip(ours, ref, strict=True))
        return Row(kind, name, max_abs, mean_abs, max_rel, allowed, ok)
    reference_error = error_stats(theirs, ref, atol, rtol)[0]
    allowed = 2 * reference_error + atol
    return Row(kind, name, max_abs, mean_abs, max_rel, allowed, max_abs <= allowed, reference_error)


# --- the check -----------------------------------------------------------------


def head_architecture(name_or_path: str, head: str, hub_kwargs: dict[str, Any], notes: list[str]) -> str | None:
    """Pick the task head to compare.

    Args:
        name_or_path: the checkpoint.
        head: "auto": the first of config.json's architectures that bertlite implements (HEAD_LOGITS);
            "none": the base model only.
        hub_kwargs: hub options for config.json.
        notes: the report's notes, appended to.

    Returns:
        The head's architecture name; None compares the base model only.

    Raises:
        ParityLoadError: the config cannot be loaded.
    """
    try:
        config = BertConfig.from_pretrained(name_or_path, **hub_kwargs)
    except (OSError, ValueError) as e:
        raise ParityLoadError(f"cannot load {name_or_path} with bertlite: {e}") from e
    architectures = config.extra.get("architectures") or []
    found = next((a for a in architectures if a in HEAD_LOGITS), None)
    if head == "none":
        if found:
            notes.append(f"--head none: the {found} head is not compared, only the base model under it")
        return None
    if found is None:
        notes.append(
            f"no task head bertlite implements in config.json's architectures {architectures}: base model only"
        )
    return found


def _check_reference_version(config: BertConfig, name_or_path: str, version: str) -> None:
    position_type = config.position_embedding_type
    if position_type != "absolute" and int(version.split(".")[0]) >= 5:
        # v5 would load the checkpoint and run it without its distance embeddings: a wrong reference.
        raise ParityLoadError(
            f"{name_or_path} uses position_embedding_type={position_type!r}, which transformers "
            f"{version} no longer implements (it drops distance_embedding); compare with "
            "transformers 4.x installed, e.g. in the .venv-legacy that `make test-legacy` builds"
        )


def load_models(
    name_or_path: str,
    reference: str,
    dtype: torch.dtype,
    attn: str,
    hub_kwargs: dict[str, Any],
    notes: list[str],
    architecture: str | None = None,
) -> tuple[nn.Module, nn.Module, nn.Module | None]:
    """Load the three models parity compares.

    Args:
        name_or_path: bertlite's checkpoint.
        reference: transformers' checkpoint.
        dtype: the dtype bertlite (and the low-precision reference) runs in.
        attn: bertlite's attn_implementation.
        hub_kwargs: hub options for both.
        notes: the report's notes, appended to (e.g. no pooler weights: both built without one).
        architecture: a head class name: all three are that head; None: BertModel.

    Returns:
        (bertlite on name_or_path in (dtype, attn); transformers eager fp32 on reference; transformers
        eager in dtype, whose own error sets the bar for low precision, or None for float32).

    Raises:
        ParityLoadError: transformers is missing, either side cannot load, or the two differ in shape.
    """
    try:
        import transformers
    except ImportError as e:
        raise ParityLoadError(
            "transformers is not installed; it is the reference: pip install transformers (or 'bertlite[test]')"
        ) from e
    transformers.utils.logging.disable_progress_bar()  # keep the report the only thing on the terminal
    if architecture is not None:
        return _load_heads(name_or_path, reference, dtype, attn, hub_kwargs, architecture)
    pooler = True
    try:
        try:
            ours = BertModel.from_pretrained(name_or_path, dtype=dtype, attn_implementation=attn, **hub_kwargs)
        except CheckpointError as e:
            # Sentence-embedding checkpoints often ship without a pooler: compare
            # both sides without one rather than fail on two missing keys.
            if e.report is None or not e.report.missing or any(not k.startswith("pooler.") for k in e.report.missing):
                raise
            pooler = False
            notes.append("the checkpoint has no pooler weights: both models are built without a pooler")
            ours = BertModel.from_pretrained(
                name_or_path, dtype=dtype, attn_implementation=attn, add_pooling_layer=False, **hub_kwargs
            )
    except (OSError, ValueError) as e:
        raise ParityLoadError(f"cannot load {name_or_path} with bertlite: {_for_parity(e)}") from e
    _check_reference_version(ours.config, name_or_path, transformers.__version__)
    kwargs = {k: v for k, v in hub_kwargs.items() if v is not None}
    if not pooler:
        kwargs["add_pooling_layer"] = False
    try:
        ref = transformers.AutoModel.from_pretrained(
            reference, attn_implementation="eager", dtype=torch.float32, **kwargs
        ).eval()
        theirs = None
        if dtype != torch.float32:
            theirs = transformers.AutoModel.from_pretrained(
                reference, attn_implementation="eager", dtype=dtype, **kwargs
            ).eval()
    except Exception as e:  # the reference refusing the checkpoint, in whatever type: StrictDataclassError, ...
        raise ParityLoadError(f"cannot load {reference} with transformers: {type(e).__name__}: {one_line(e)}") from e
    _check_same_shape(ours.config, ref.config, name_or_path, reference)
    return ours, ref, theirs


def _load_heads(
    name_or_path: str, reference: str, dtype: torch.dtype, attn: str, hub_kwargs: dict[str, Any], architecture: str
) -> tuple[nn.Module, nn.Module, nn.Module | None]:
    import transformers

    try:
        ours = MODEL_CLASSES[architecture].from_pretrained(
            name_or_path, dtype=dtype, attn_implementation=attn, **hub_kwargs
        )
    except (OSError, ValueError) as e:
        raise ParityLoadError(f"cannot load {name_or_path} as {architecture} with bertlite: {_for_parity(e)}") from e
    _check_reference_version(ours.config, name_or_path, transformers.__version__)
    auto = getattr(transformers, ARCHITECTURES[architecture])
    kwargs = {k: v for k, v in hub_kwargs.items() if v is not None}
    try:
        ref = auto.from_pretrained(reference, attn_implementation="eager", dtype=torch.float32, **kwargs).eval()
        theirs = None
        if dtype != torch.float32:
            theirs = auto.from_pretrained(reference, attn_implementation="eager", dtype=dtype, **kwargs).eval()
    except Exception as e:  # the reference refusing the checkpoint, in whatever type
        raise ParityLoadError(
            f"cannot load {reference} with transformers.{auto.__name__}: {type(e).__name__}: {one_line(e)}"
        ) from e
    _check_same_shape(ours.config, ref.config, name_or_path, reference)
    return ours, ref, theirs


def _check_same_shape(ours: BertConfig, theirs: Any, name: str, reference: str) -> None:
    differ = [
        f"{k} {getattr(theirs, k, None)} vs {getattr(ours, k)}"
        for k in SIZE_FIELDS  # a reference that differs in one cannot be compared
        if getattr(ours, k) != getattr(theirs, k, None)
    ]
    if differ:
        raise ParityLoadError(
            f"--reference {reference} has another shape than {name} ({', '.join(differ)}): parity compares one "
            "checkpoint in two implementations; give a reference of the same architecture"
        )


def _for_parity(error: BaseException) -> str:
    """A load error in one line, with what to do in parity instead of Python-only options (strict=, ...)."""
    return one_line(
        error,
        strict="(parity compares complete checkpoints: missing weights would be random and prove nothing)",
        nonfinite="NaN and Inf weights cannot be compared; use a checkpoint with finite weights",
    )


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
    report = ParityReport(model=name, options=options)
    hub_kwargs = dict(revision=revision, subfolder=subfolder, local_files_only=local_files_only)
    architecture = head_architecture(name, head, hub_kwargs, report.notes)
    heads = load_models(name, reference_name, torch_dtype, attn, hub_kwargs, report.notes, architecture)
    # The base model's rows come from the BertModel inside a head, under the same names as without one.
    ours, ref, theirs = (m.bert if architecture and m is not None else m for m in heads)
    if architecture:
        report.head = architecture
        report.notes.append(
            f"task head {architecture}: its weights and {', '.join(HEAD_LOGITS[architecture])} are compared "
            f"with transformers.{ARCHITECTURES[architecture]}"
        )
    if max_length > ours.config.max_position_embeddings:
        # The default (256) is longer than small models take: compare at the model's maximum.
        max_length = options["max_length"] = ours.config.max_position_embeddings
        report.notes.append(f"texts truncated to max_position_embeddings={max_length} tokens")
    batches = make_batches(name, texts, ours.config, batch_size, max_length, hub_kwargs, report.notes)
    report.texts = len(texts)
    report.tokens = int(sum(b["attention_mask"].sum() for b in batches))

    compare_weights(report, heads[0], heads[1], torch_dtype if theirs is not None else None)
    names = module_names(ours.config.num_hidden_layers, ours.pooler is not None and ref.pooler is not None)
    ours_run, ref_run = run(ours, batches, names), run(ref, batches, names)
    theirs_run = run(theirs, batches, names) if theirs is not None else None
    compare_activations(report, batches, names, ours_run, ref_run, theirs_run, atol, rtol)
    if architecture:
        ours_logits, ref_logits = run_head(heads[0], batches, architecture), run_head(heads[1], batches, architecture)
        theirs_logits = run_head(heads[2], batches, architecture) if heads[2] is not None else None
        compare_logits(report, architecture, ours_logits, ref_logits, theirs_logits, atol, rtol)
    if report.first_divergence or not report.ok:
        report.suggestions = diagnose(report, ours, ref, batches, ours_run, ref_run, atol, rtol)
    report.seconds = time.perf_counter() - start
    return report


def _check_options(dtype: Any, attn: str, batch_size: int, max_length: int, head: str, atol: float, rtol: float):
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


def compare_weights(report: ParityReport, ours: nn.Module, ref: nn.Module, low_dtype: torch.dtype | None) -> None:
    """Compare every tensor bertlite loaded with the one transformers loaded for the same name, bit for bit.

    A head's base-model tensors are named without the `bert.` prefix, as the module rows are.

    Args:
        report: gets one "weight" row per shared name, and the names only one side has.
        ours: bertlite's model.
        ref: transformers' fp32 model.
        low_dtype: the dtype bertlite runs in when the fp32 reference must be cast to it first, else None.
    """
    mine, theirs = _base_names(ours.state_dict()), _base_names(ref.state_dict())
    report.only_in_bertlite = sorted(set(mine) - set(theirs))
    report.only_in_transformers = sorted(set(theirs) - set(mine))
    for key in (k for k in theirs if k in mine):
        reference = theirs[key].to(low_dtype) if low_dtype is not None else theirs[key]
        max_abs, mean_abs, max_rel, _ = error_stats([mine[key]], [reference], 0.0, 0.0)
        ok = mine[key].shape == reference.shape and torch.equal(mine[key], reference)
        report.rows.append(Row("weight", key, max_abs, mean_abs, max_rel, 0.0, ok))


def _base_names(state: dict[str, Tensor]) -> dict[str, Tensor]:
    return {k.removeprefix("bert."): v for k, v in state.items()}


def run_head(model: nn.Module, batches: list[dict[str, Tensor]], architecture: str) -> dict[str, list[Tensor]]:
    """Run a head on every batch and keep its logits.

    Args:
        model: the head model.
        batches: make_batches()'s output (for multiple choice, one question whose choices are the batch).
        architecture: its class name, a key of HEAD_LOGITS.

    Returns:
        Each logits field -> one tensor per batch, only real tokens kept for per-token logits.
    """
    fields = HEAD_LOGITS[architecture]
    out: dict[str, list[Tensor]] = {key: [] for key in fields}
    with torch.no_grad():
        for b in batches:
            if architecture == "BertForMultipleChoice":
                b = {k: v[None] for k, v in b.items()}  # (1, B, T): one question, B choices
            result = model(**b)
            for key, kind in fields.items():
                out[key].append(select_valid(result[key], b["attention_mask"], kind))
    return out


def compare_logits(
    report: ParityReport,
    architecture: str,
    ours: dict[str, list[Tensor]],
    ref: dict[str, list[Tensor]],
    theirs: dict[str, list[Tensor]] | None,
    atol: float,
    rtol: float,
) -> None:
    """Add a "logits" row per logits field of the head to the report (see make_row for ours/ref/theirs)."""
    for key in HEAD_LOGITS[architecture]:
        theirs_key = theirs[key] if theirs is not None else None
        _add_row(report, make_row("logits", key, ours[key], ref[key], theirs_key, atol, rtol), divergence=key)


def _add_row(report: ParityReport, row: Row, divergence: str | None = None) -> None:
    """Append `row`; a failing row that can locate the fault (divergence: its name) is the first divergence
    unless an earlier one is."""
    report.rows.append(row)
    if divergence is not None and not row.ok and report.first_divergence is None:
        report.first_divergence = divergence


def _module_label(name: str) -> str:
    """A module's row label; an output that transformers returns in hidden_states says which one."""
    if name.endswith(".output") and ".layer." in name:
        return f"{name} (hidden_states[{int(name.split('.')[2]) + 1}])"
    if name == "embeddings":
        return "embeddings (hidden_states[0])"
    return name


def compare_activations(
    report: ParityReport,
    batches: list[dict[str, Tensor]],
    names: list[str],
    ours: dict,
    ref: dict,
    theirs: dict | None,
    atol: float,
    rtol: float,
) -> None:
    """Add rows for every module, attention map and output to the report; the first failing module is
    the first divergence, a failing attention map only when no module fails.

    Args:
        report: the report, appended to.
        batches: the batches run (their attention masks select the real tokens).
        names: the compared modules (module_names()).
        ours, ref, theirs: run()'s results for bertlite, transformers fp32 and transformers in the low
            dtype (None in float32); see make_row.
        atol, rtol: the tolerances.
    """
    masks = [b["attention_mask"] for b in batches]

    def pick(run_: dict | None, key: str, kind: str, index: int | None) -> list[Tensor] | None:
        if run_ is None:
            return None
        if key in run_["modules"]:
            tensors = [out for _, out in run_["modules"][key]]
        elif index is not None:
            tensors = [probs[index] for probs in run_[key]]
        else:
            tensors = run_[key]
        return [select_valid(t, m, kind) for t, m in zip(tensors, masks, strict=True)]

    def row(row_kind: str, label: str, key: str, kind: str, index: int | None = None) -> Row:
        picked = (pick(run_, key, kind, index) for run_ in (ours, ref, theirs))
        return make_row(row_kind, label, *picked, atol, rtol)

    # The first failing module is the first divergence; a failing attention map only when no module fails.
    for name in names:
        kind = "pooled" if name == "pooler" else "token"
        _add_row(report, row("module", _module_label(name), name, kind), divergence=name)
    for i in range(len(ours["attentions"][0])):
        _add_row(report, row("attention", f"attentions[{i}]", "attentions", "attention", i), f"attentions[{i}]")
    for key, kind in (("last_hidden_state", "token"), ("pooler_output", "pooled")):
        if ours[key][0] is not None and ref[key][0] is not None:
            _add_row(report, row("output", key, key, kind))


# --- diagnosis -----------------------------------------------------------------

CAUSES = {
    "embeddings": "embeddings: word/position/token-type tables, position_ids, or the embedding LayerNorm (eps)",
    "attention": "self-attention: softmax scaling, the attention mask value, or the dense/LayerNorm after it",
    "intermediate": "the feed-forward activation: a different GELU variant (gelu vs gelu_new / gelu_pytorch_tanh)",
    "output": "the feed-forward output: dense weights, the residual, or LayerNorm eps",
    "pooler": "the pooler: [CLS] selection or its tanh",
    "head": "the task head: its weights (cls / classifier / qa_outputs), num_labels or id2label in config.json, "
    "or the activation of cls.predictions.transform (hidden_act)",
}


def diagnose(
    report: ParityReport,
    ours: nn.Module,
    ref: nn.Module,
    batches: list[dict[str, Tensor]],
    ours_run: dict,
    ref_run: dict,
    atol: float,
    rtol: float,
) -> list[str]:
    """Turn the pattern of failures into likely causes, most specific first.

    Args:
        report: the filled report.
        ours, ref: bertlite's and transformers' fp32 models.
        batches: the batches run.
        ours_run, ref_run: run()'s results for both.
        atol, rtol: the tolerances.

    Returns:
        The likely causes, as sentences.
    """
    causes = []
    bad_weights = [r.name for r in report.rows if r.kind == "weight" and not r.ok]
    if bad_weights:
        causes.append(
            f"{len(bad_weights)} loaded weight(s) differ from transformers' (first: {bad_weights[0]}): "
            "a key remap bug or a different tensor in the file; fix loading before reading activations"
        )
    if report.only_in_bertlite or report.only_in_transformers:
        causes.append("the two models do not have the same parameters: a module is missing on one side")
    eps = [
        f"{name} (bertlite {m.eps:g}, transformers {dict(ref.named_modules())[name].eps:g})"
        for name, m in ours.named_modules()
        if isinstance(m, nn.LayerNorm)
        and name in dict(ref.named_modules())
        and m.eps != dict(ref.named_modules())[name].eps
    ]
    if eps:
        causes.append(f"LayerNorm eps differs at {len(eps)} LayerNorm(s), e.g. {eps[0]}: check layer_norm_eps")
    first = report.first_divergence
    if first is None:
        return causes
    specific = len(causes)
    in_first = [w for w in bad_weights if w.startswith(first + ".")]
    if in_first:
        causes[0] += f"; {first} uses {in_first[0]}"
    part = first.rsplit(".", 1)[-1] if first.startswith("encoder.") else first
    if report.head and first in HEAD_LOGITS[report.head]:
        part = "head"
    if part == "intermediate":
        activation = _probe_activation(first, ours, ref, ours_run, ref_run)
        if activation:
            causes.append(activation)
    if first in ours_run["modules"] and _only_in_padded_sequences(first, batches, ours_run, ref_run, atol, rtol):
        causes.append(
            f"{first} differs only in sequences that contain padding: the attention mask value or how "
            "padded keys are excluded differs (transformers adds finfo(dtype).min)"
        )
    if len(causes) == specific and not in_first:
        causes.append(f"{first} is the first module out of tolerance; look at {CAUSES.get(part, part)}")
    return causes


def _probe_activation(name: str, ours: nn.Module, ref: nn.Module, ours_run: dict, ref_run: dict) -> str | None:
    """Which activation function reproduces each side's intermediate output; None if the same one does."""
    from transformers.activations import ACT2FN  # the reference's own functions, whatever bertlite does

    (x_ref, ref_out), (x_ours, ours_out) = ref_run["modules"][name][0], ours_run["modules"][name][0]
    with torch.no_grad():
        pre_ref = dict(ref.named_modules())[name].dense(x_ref)
        pre_ours = dict(ours.named_modules())[name].dense(x_ours)

    def matches(out: Tensor, z: Tensor) -> list[str]:
        return [
            n
            for n in SUPPORTED_ACTIVATIONS
            if torch.allclose(ACT2FN[n](z).double(), out.double(), atol=1e-6, rtol=1e-5)
        ]

    theirs_like, ours_like = matches(ref_out, pre_ref), matches(ours_out, pre_ours)
    if set(theirs_like) & set(ours_like):
        return None
    return (
        f"{name}: transformers' activation behaves like {theirs_like or '?'}, bertlite's like {ours_like or '?'} "
        f"(config hidden_act={ours.config.hidden_act!r}): a different GELU variant / activation function"
    )


def _only_in_padded_sequences(
    name: str, batches: list[dict[str, Tensor]], ours_run: dict, ref_run: dict, atol: float, rtol: float
) -> bool:
    padded_bad = unpadded_bad = False
    for b, (_, o), (_, r) in zip(batches, ours_run["modules"][name], ref_run["modules"][name], strict=True):
        mask = b["attention_mask"].bool()
        for row in range(mask.shape[0]):
            if o.dim() < 3:
                continue
            valid = mask[row]
            bad = not torch.allclose(o[row][valid].double(), r[row][valid].double(), atol=atol, rtol=rtol)
            if bad and bool(valid.all()):
                unpadded_bad = True
            elif bad:
                padded_bad = True
    return padded_bad and not unpadded_bad
