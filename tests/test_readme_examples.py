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


def test_the_readme_stays_short_and_every_doc_it_links_exists():
    """Issue 38: the README under 150 lines, the rest in docs/; a link to a moved section must still land."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    links = re.findall(r"\]\(((?:docs/)[^)#]+)(?:#([^)]+))?\)", text)
    assert links
    for path, anchor in links:
        assert (ROOT / path).is_file(), path
        if anchor:
            headings = re.findall(r"^#+ (.+)$", (ROOT / path).read_text(), re.M)
            slugs = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in headings}
            assert anchor in slugs, (path, anchor)
