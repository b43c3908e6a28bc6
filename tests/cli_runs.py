"""The CLI run as the CLI tests run it: in a subprocess as a user does, or its main() in this process."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys

from conftest import ROOT


def run_process(*args: str) -> subprocess.CompletedProcess:
    """The CLI as a user runs it: `python -m moe_model ...` in a subprocess (the few end-to-end tests)."""
    return subprocess.run(
        [sys.executable, "-m", "moe_model", *args], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """The CLI's main() in this process, with its exit code and output as a subprocess would give them."""
    from moe_model.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as stop:  # argparse's usage errors
            code = stop.code
    return subprocess.CompletedProcess(["moe_model", *args], code, out.getvalue(), err.getvalue())


def main_exit(capsys, *args: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of the CLI run in this process (faster than a subprocess)."""
    from moe_model.cli.main import main

    try:
        code = main(list(args))
    except SystemExit as stop:  # argparse's usage errors
        code = stop.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err
