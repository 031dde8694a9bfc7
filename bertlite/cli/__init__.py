"""`bertlite` command line: a thin layer over the Python API.

Exit codes scripts can trust: 0 success (parity holds), 1 parity fails,
2 usage or load error (one line on stderr), 130 interrupted (Ctrl-C), 143 terminated
(SIGTERM, `bertlite embed` and `bertlite rerank`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from bertlite import __version__
from bertlite.cli import embed, env, parity, rerank, serve

COMMANDS = {"parity": parity, "embed": embed, "rerank": rerank, "serve": serve, "env": env}


def build_parser() -> argparse.ArgumentParser:
    """The `bertlite` parser with one subcommand per module of this package."""
    parser = argparse.ArgumentParser(prog="bertlite", description="bertlite: a small, exact, fast BERT.")
    parser.add_argument("--version", action="version", version=f"bertlite {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS.values():
        command.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run `bertlite ARGV`; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return COMMANDS[args.command].run(args)
    except KeyboardInterrupt:
        written = "" if args.command == "serve" else "; no output written"
        print(f"bertlite {args.command}: interrupted{written}", file=sys.stderr)
        return 130
