"""The command line: `python -m moe_model plan|simulate|parse-log|predict|recommend|calibrate`."""

from moe_model.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
