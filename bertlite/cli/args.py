"""argparse pieces the `bertlite` commands share (parity, embed, rerank, serve); torch-free, as the parsers are.
loading.py turns the flags they share into a loaded job."""

from __future__ import annotations

import argparse

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
    p.add_argument("--dtype", default="float32", choices=[*DTYPE_CHOICES, *extra_dtypes], help=DTYPE_HELP)
    p.add_argument("--device", help="torch device, e.g. cpu or cuda (default: cpu)")
    p.add_argument(
        "--pack-weights",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep float32 Linear weights in oneDNN's layout: faster, one more copy of the dense weights "
        "(default); --no-pack-weights saves the memory",
    )
