"""Command line: `python -m moe_model {plan,simulate,...} ...`.

Flags and JSON fields are a contract other tools script against: keep their names.
Exit 0 when the input was read (also when the server would not start), 1 with a one-line
message on stderr when it could not be, and from `recommend` when no setting fits.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from moe_model.cli import logs, plan, predict, record, simulate
from moe_model.cli.args import check_trace_first
from moe_model.cli.output import to_json
from moe_model.errors import MoeModelError
from moe_model.limits import MAX_ARG_ERROR_CHARS, shown

__all__ = ["build_parser", "main", "to_json"]


class OneLineParser(argparse.ArgumentParser):
    """argparse with its refusals as every other bad input: one line on stderr and exit 1 (its subcommands' parsers
    are of this class too; a value's own line breaks are shown as \\n); --help still prints the usage."""

    def error(self, message: str) -> NoReturn:
        said = shown(message.replace("\n", "\\n"), MAX_ARG_ERROR_CHARS)
        self.exit(1, f"error: {self.prog}: {said}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m moe_model", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    plan.add_parser(sub)
    simulate.add_parser(sub)
    logs.add_parser(sub)
    predict.add_parsers(sub)
    predict.add_calibrate(sub)
    record.add_parser(sub)
    return parser


SIMULATING_COMMANDS = ("simulate", "predict", "recommend", "calibrate")  # the commands that run numba kernels


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        check_trace_first(args)
        if args.command in SIMULATING_COMMANDS:
            from moe_model.warmup import ensure_compiled

            ensure_compiled(lambda line: print(line, file=sys.stderr, flush=True))
        return func(args)
    except MoeModelError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except OSError as err:
        print(f"error: {err.strerror or err}: {getattr(err, 'filename', '') or ''}".rstrip(": "), file=sys.stderr)
        return 1
    except Exception as err:  # one line, no traceback (MOE_MODEL_DEBUG=1 shows it)
        if os.environ.get("MOE_MODEL_DEBUG"):
            raise
        print(f"error: unexpected {type(err).__name__}: {err}", file=sys.stderr)
        return 1
