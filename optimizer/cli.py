"""The ``servopt`` command line.

Each subcommand lives in its own module under ``optimizer/commands/`` and exposes
``register(subparsers)``, which adds its parser and sets ``handler`` (a function of the parsed
arguments returning an exit code). Bad input raises :class:`~servopt.costmodels.errors.InputError`
anywhere below; it is printed as one line and the process exits with code 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pydantic import ValidationError

from ..costmodels.errors import InputError, format_validation_error
from .commands import COMMAND_MODULES

EXIT_INPUT_ERROR = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="servopt",
        description="Search-based deployment optimizer for LLM inference: predict cost and latency "
        "distributions, search deployments, export vLLM launch flags.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return EXIT_INPUT_ERROR
    try:
        return int(args.handler(args) or 0)
    except InputError as err:
        print(f"servopt {args.command}: error: {err}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    except ValidationError as err:
        print(f"servopt {args.command}: error: {format_validation_error(err)}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    except KeyboardInterrupt:
        print(f"servopt {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
