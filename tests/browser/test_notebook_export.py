"""The README's notebook snippet, exported to HTML, draws its figure in a real browser with no network."""

from __future__ import annotations

import re

import pytest
from conftest import ROOT

from moe_model.llama.builds import MAINLINE_BUILD

pytestmark = pytest.mark.browser


def _readme_snippet() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## In Jupyter") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readmes_notebook_figure_exported_to_html_draws_offline(browser, tmp_path):
    *body, last = _readme_snippet().strip().splitlines()
    scope: dict = {}
    exec("\n".join(body), scope)  # the snippet as a notebook runs it; its last line is the cell's shown value
    shown = eval(last.split("  #")[0], scope)
    page = tmp_path / "exported.html"
    page.write_text(f"<!doctype html><html><body>{shown._repr_mimebundle_()['text/html']}</body></html>")
    tab = browser.new_page()
    outside = []
    tab.route(re.compile(r"^https?://"), lambda route: (outside.append(route.request.url), route.abort()))
    tab.goto(page.as_uri())
    tab.locator(".plotly-graph-div .main-svg").first.wait_for(timeout=30_000)  # plotly.js drew the figure
    assert tab.locator(".plotly-graph-div .scatterlayer .trace").count() >= 1 and not outside, outside
    drawn = tab.locator(".plotly-graph-div .infolayer").first.text_content()  # the policy and build it replayed
    assert f"class-lru-b12170 (modelled), llama.cpp b{MAINLINE_BUILD}" in drawn, drawn
    tab.close()
