"""argparse pieces the `bertlite` commands share (parity, embed, serve); torch-free, as the parsers are."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator

from bertlite.utils.capabilities import DTYPE_CHOICES, DTYPE_HELP


def add_command(
    commands: argparse._SubParsersAction, name: str, help: str, description: str, model_help: str
) -> argparse.ArgumentParser:
    """The subcommand `name`, whose --help prints `description` as written, with its MODEL argument."""
    p = commands.add_parser(
        name, help=help, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("model", metavar="MODEL", help=model_help)
    return p


def add_model_placement(p: argparse.ArgumentParser, extra_dtypes: tuple[str, ...] = ()) -> None:
    """--dtype and --device of a command that loads the model to use it (embed, serve); extra_dtypes: more
    --dtype choices this command takes (embed: int8)."""
    p.add_argument("--dtype", default="auto", choices=[*DTYPE_CHOICES, *extra_dtypes], help=DTYPE_HELP)
    p.add_argument("--device", help="torch device, e.g. cpu or cuda (default: cpu)")
    p.add_argument(
        "--pack-weights",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep float32 Linear weights in oneDNN's layout: faster, one more copy of the dense weights "
        "(default); --no-pack-weights saves the memory",
    )


@contextlib.contextmanager
def one_line_dtype_warnings(command: str) -> Iterator[None]:
    """Each SlowDtypeWarning or Int8PrecisionWarning as one `COMMAND: warning: ...` line on stderr;
    other warnings as usual."""
    import warnings

    from bertlite.errors import Int8PrecisionWarning, SlowDtypeWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        yield
    for w in caught:
        if issubclass(w.category, (SlowDtypeWarning, Int8PrecisionWarning)):
            print(f"{command}: warning: {w.message}", file=sys.stderr)
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)


def build_int8_kernel_for_input(args: argparse.Namespace) -> None:
    """With --dtype int8 and an input file large enough to repay it (bertlite.quant.compiled.repays), build
    int8's compiled input quantization now, before the job loads: its model then runs it on every token.
    Stdin, a pipe or a short file keep the eager ops (the same vectors); so does a machine where it cannot build."""
    if getattr(args, "dtype", None) != "int8" or args.input == "-" or not os.path.isfile(args.input):
        return
    from bertlite.quant import compiled as compiled_quant
    from bertlite.quant.int8 import build_compiled_quantization

    if compiled_quant.repays(os.path.getsize(args.input)):
        build_compiled_quantization()
