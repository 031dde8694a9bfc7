"""`bertlite parity`: compare bertlite with transformers on a checkpoint."""

from __future__ import annotations

import argparse
import sys

from bertlite.cli.args import add_command
from bertlite.utils.capabilities import DTYPE_NAMES

PARITY_HELP = """\
Prove that bertlite computes what transformers computes on a checkpoint.

Loads MODEL (a folder or a hub id) with bertlite and with transformers.AutoModel
(eager attention, float32: the reference), runs both on a built-in set of varied
texts (or --text-file), and compares every loaded weight, every sub-module's
output (embeddings, each layer's attention / intermediate / output, pooler),
every attention map, last_hidden_state and pooler_output, padded positions
excluded. It names the first module that leaves tolerance and suggests causes.

With --head auto (the default), when config.json's architectures name a head
bertlite implements (BertForPreTraining, BertForMaskedLM, BertLMHeadModel,
BertForNextSentencePrediction, BertForSequenceClassification,
BertForMultipleChoice, BertForTokenClassification, BertForQuestionAnswering),
both sides load that head (transformers: the matching AutoModelFor<Task>) and
its weights and logits are compared too (logits, or prediction_logits +
seq_relationship_logits, or start_logits + end_logits; per-token logits at real
tokens only). --head none compares the base model only.

In float32 a tensor passes when allclose(atol, rtol); in bfloat16/float16 our
error against the fp32 reference must be <= 2x transformers' own error in that
dtype (+ atol).

exit status: 0 parity holds, 1 parity fails, 2 usage or load error."""


def add_parser(commands: argparse._SubParsersAction) -> None:
    p = add_command(
        commands,
        "parity",
        help="compare bertlite with transformers on a checkpoint",
        description=PARITY_HELP,
        model_help="a folder with config.json + weights, or a hub id (org/name)",
    )
    p.add_argument(
        "--reference",
        metavar="REF",
        help="checkpoint transformers loads (default: MODEL), e.g. the original of a converted MODEL",
    )
    p.add_argument("--text-file", metavar="F", help="texts to run, one per line; a tab splits a line into a pair")
    p.add_argument("--revision", metavar="R", help="hub revision: branch, tag or commit hash")
    p.add_argument(
        "--dtype",
        default="float32",
        choices=DTYPE_NAMES,
        help="dtype bertlite runs in (default: float32)",
    )
    p.add_argument(
        "--attn",
        default="eager",
        choices=["eager", "sdpa"],
        help="bertlite's attention implementation (default: eager, bitwise equal in fp32)",
    )
    p.add_argument("--atol", type=float, default=1e-5, metavar="A", help="absolute tolerance (default: 1e-5)")
    p.add_argument("--rtol", type=float, default=1e-5, metavar="R", help="relative tolerance (default: 1e-5)")
    p.add_argument("--batch-size", type=int, default=8, metavar="N", help="texts per batch (default: 8)")
    p.add_argument("--max-length", type=int, default=256, metavar="L", help="truncate texts to L tokens (default: 256)")
    p.add_argument("--json", metavar="PATH", help="also write the full report as JSON (schema: docs/parity.md)")
    p.add_argument(
        "--head",
        default="auto",
        choices=["auto", "none"],
        help="auto: also compare the task head's weights and logits when config.json's architectures name a head "
        "bertlite implements (default); none: the base model only",
    )
    p.add_argument("--all-weights", action="store_true", help="list every weight in the table, not only failures")


def run(args: argparse.Namespace) -> int:
    from bertlite.errors import ParityLoadError
    from bertlite.parity import check

    try:
        report = check(
            args.model,
            reference=args.reference,
            text_file=args.text_file,
            revision=args.revision,
            dtype=args.dtype,
            attn=args.attn,
            atol=args.atol,
            rtol=args.rtol,
            batch_size=args.batch_size,
            max_length=args.max_length,
            head=args.head,
        )
    except ParityLoadError as e:
        print(f"bertlite parity: error: {e}", file=sys.stderr)
        return 2
    print(report.format_table(all_weights=args.all_weights))
    if args.json:
        try:
            with open(args.json, "w", encoding="utf-8") as f:
                f.write(report.to_json() + "\n")
        except OSError as e:
            print(f"bertlite parity: error: cannot write --json {args.json}: {e}", file=sys.stderr)
            return 2
    return 0 if report.ok else 1
