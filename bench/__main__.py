"""`python -m bench JOB [flags]`: one subcommand per benchmark job; `python -m bench JOB --help` for its flags."""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> module of bench with add_arguments(parser) and run(args)
JOBS = {
    "throughput": "throughput",
    "cold-start": "cold_start",
    "profile": "profile",
    "serve": "serve",
    "ray": "ray",
    "int8": "int8",
    "kernels": "kernels",
    "grids": "grids",
    "compare": "compare",
    "table": "table",
    "memory": "memory",
    "rerank": "rerank",
    "sparse": "sparse",
    "m3": "m3",
    "gpu": "gpu",
}


def main(argv: list[str] | None = None) -> None:
    """Parse the job and its flags, and run it.

    Args:
        argv: the arguments after `python -m bench` (default: sys.argv[1:]).
    """
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    jobs = parser.add_subparsers(dest="job", required=True, metavar="JOB")
    for name, module_name in JOBS.items():
        module = importlib.import_module(f"bench.{module_name}")
        summary = module.__doc__.strip().splitlines()[0]
        sub = jobs.add_parser(
            name, help=summary, description=module.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        module.add_arguments(sub)
        sub.set_defaults(run=module.run)
    args = parser.parse_args(argv)
    args.argv = argv
    args.run(args)


if __name__ == "__main__":
    main()
