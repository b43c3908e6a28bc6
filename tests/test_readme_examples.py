"""The README's example output is what the command prints today (every figure in it from the path a user runs)."""

from __future__ import annotations

import re
import shlex

from cli_runs import run_cli
from conftest import ROOT

BLOCK = re.compile(r"```text\n\$ python -m moe_model (?P<cmd>[^\n]+)\n(?P<out>.*?)```", re.S)


def test_the_readmes_predict_example_is_the_commands_output():
    found = list(BLOCK.finditer((ROOT / "README.md").read_text()))
    assert found
    for block in found:
        out = run_cli(*shlex.split(block["cmd"]))
        assert out.returncode == 0, out.stderr
        shown = block["out"].rstrip("\n").splitlines()
        printed = out.stdout.splitlines()
        assert shown == printed[1 : 1 + len(shown)], block["cmd"]
