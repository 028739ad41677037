"""The ``servopt`` command line.

Each subcommand lives in its own module under ``optimizer/commands/`` and exposes
``register(subparsers)``, which adds its parser and sets ``handler`` (a function of the parsed
arguments returning an exit code). Bad input raises :class:`~servopt.costmodels.errors.InputError`
anywhere below; it is printed as one line and the process exits with code 2 (so is a path the user
gave that cannot be written or read). Output cut short by its reader (``servopt gpus | head``) ends
quietly, as a command killed by SIGPIPE would.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn, TextIO

from pydantic import ValidationError

from ..costmodels.errors import InputError, format_validation_error, one_line
from ..costmodels.escaping import terminal_text
from ..costmodels.userfiles import shown
from .commands import COMMANDS, command_module

EXIT_INPUT_ERROR = 2
MAX_MESSAGE_CHARS = 2000
EXIT_BROKEN_PIPE = 128 + 13  # the status of a process that SIGPIPE ended


def servopt_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("servopt")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


class OneLineParser(argparse.ArgumentParser):
    """argparse's parser, its errors printed as every servopt error is: one line, ``servopt COMMAND:
    error: ...``, exit code 2 (argparse's own prints its usage block first). Subcommand parsers are
    of the same class (``add_subparsers`` makes them so)."""

    def error(self, message: str) -> NoReturn:
        words = self.prog.split()
        command, rest = " ".join(words[:2]), " ".join(words[2:])
        text = one_line(f"{rest}: {message}" if rest else message)[:MAX_MESSAGE_CHARS]
        self.exit(EXIT_INPUT_ERROR, f"{command}: error: {text} (see {self.prog} --help)\n")


class _Version(argparse.Action):
    """``--version``: the installed version, looked up only when asked for (reading the installed
    packages' metadata costs start-up time)."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{parser.prog} {servopt_version()}")  # on stdout, as argparse's own version action prints
        parser.exit()


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser of every command or, given the arguments, of the command they name only (the
    others listed by name and help, their modules not imported: a command starts without paying
    for the others' imports)."""
    parser = OneLineParser(
        prog="servopt",
        description="Search-based deployment optimizer for LLM inference: predict cost and latency "
        "distributions, search deployments, export vLLM launch flags.",
    )
    parser.add_argument("--version", action=_Version, nargs=0, help="show the version and exit")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = None if argv is None else next((a for a in argv if not a.startswith("-")), "")
    for name, (module, summary) in COMMANDS.items():
        if name in subparsers.choices:  # a module that registers several commands
            continue
        if chosen is None or (chosen in COMMANDS and COMMANDS[chosen][0] == module):
            command_module(name).register(subparsers)
        else:
            subparsers.add_parser(name, help=summary)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):  # one line, as every servopt error (not the usage block)
        parser.error(f"choose a command: {', '.join(COMMANDS)}")
    printed, sys.stdout = sys.stdout, TerminalStream(sys.stdout)
    try:
        code = int(args.handler(args) or 0)
        sys.stdout.flush()  # a reader that left shows here, not at exit
        return code
    except InputError as err:
        return _input_error(args.command, str(err))
    except ValidationError as err:
        return _input_error(args.command, format_validation_error(err))
    except KeyboardInterrupt:
        print(f"servopt {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # Python would report the pipe again when it flushes stdout at exit: point stdout at
        # /dev/null first (the recipe of Python's signal module docs).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except OSError as err:  # a folder or file the user named that cannot be created or written
        where = f" '{shown(err.filename)}'" if err.filename else ""
        return _input_error(args.command, f"cannot write or read{where}: {err.strerror or err}; check the path")
    finally:
        sys.stdout = printed


class TerminalStream:
    """stdout as every command prints to it: each line through
    :func:`~servopt.costmodels.escaping.terminal_text`, so that no user string (a study or file name,
    a hardware file's notes) writes an escape sequence or a carriage return to the terminal. Commands
    escape the line breaks of the strings they print themselves (they cannot be told apart here)."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(terminal_text(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _input_error(command: str, message: str) -> int:
    """Print one line (control characters escaped, clipped) and return exit code 2."""
    text = one_line(message)
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[:MAX_MESSAGE_CHARS] + " ..."
    print(f"servopt {command}: error: {text}", file=sys.stderr)
    return EXIT_INPUT_ERROR


if __name__ == "__main__":
    sys.exit(main())
