"""ui.text.literal: visitor text shown as typed, cut, never Markdown or HTML; and no page or ui module quotes a
value that carries visitor text in a message without it."""

from __future__ import annotations

import ast
import re

import pytest
from conftest import ROOT

from moe_model.limits import MAX_ECHO_CHARS
from ui.text import literal


def live_markup(body: str) -> list[str]:
    """What would render as a link, an image, an autolink, HTML, emphasis, code or a block: the marks left once
    escaped characters go."""
    bare = re.sub(r"\\.", "", body)
    marks = ("](", "![", "<", "://", "www.", "*", "_", "`", "&", ":", "@", "$", "~", "\n")
    return [m for m in marks if m in bare] + (["block"] if re.match(r"\s*([#>+=-]|\d+[.)])", bare) else [])


@pytest.mark.parametrize(
    "text",
    [
        "[click here](http://evil.example/gpu) ![t](http://evil.example/g.png)",
        '<img src="http://evil.example/x.png"><script>alert(1)</script>',
        "www.evil.example and https://evil.example and someone@evil.example",
        "**bold** _em_ `code` ~~gone~~ $x^2$ :red[red] :material/home: &lt;b&gt;",
        "# heading",
        "1. a list",
        "- item",
        "> quote",
        "line one\n\n# heading two\r\n---",
    ],
)
def test_markup_and_html_come_out_escaped_and_read_as_typed(text):
    shown = literal(text, None)
    assert not live_markup(shown), shown
    assert re.sub(r"\\(.)", r"\1", shown) == re.sub(r"[\r\n]", " ", text)  # unescaped, it is the text as typed


def test_a_long_echo_is_cut_and_says_how_long_it_was():
    shown = literal("x" * 20_000)
    assert shown.startswith("x" * MAX_ECHO_CHARS) and shown.endswith("(20,000 characters)")
    assert len(shown) < MAX_ECHO_CHARS + 40
    assert literal("y" * 20_000, None) == "y" * 20_000  # a library message: whole, its echoes already cut


def test_plain_text_is_unchanged():
    assert literal("Qwen3 30B A3B, 48 layers (Q4 K M)") == "Qwen3 30B A3B, 48 layers (Q4 K M)"


MESSAGES = {"markdown", "warning", "error", "info", "caption", "success", "toast", "subheader", "header", "title"}
MESSAGES |= {"expander", "metric", "write", "toggle", "button"}  # labels are Markdown too
# expressions that carry visitor text: a link's value, a typed or uploaded name, a header's fields, an error or a
# log's line (errors and logs quote what they were given)
VISITOR = re.compile(
    r"^(raw|typed|text|err|why|note|w|e|name|linked.*|source)$|\.name$|\.(architecture|file_type_name|program)$"
    r"|\b(upload|model|machine|calibrated\.hardware)\.name\b"
)
BUNDLED = {  # the same names where they come from this package's own data, not a visitor
    ("pages/explore.py", "preset.name"),
    ("pages/explore.py", "note"),  # a prediction's notes: the library's words on the setting
    ("pages/learn.py", "name"),  # a policy's name from the registry
    ("ui/sidebar.py", "note"),  # what a page says it shows instead (the page's own words)
    ("ui/sidebar.py", "name"),  # the GPU preset picked in the selectbox
}


def _quoted(node: ast.expr) -> list[ast.expr]:
    """The expressions a message's text is built from, outside literal(...)."""
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "literal":
        return []
    if isinstance(node, ast.JoinedStr):
        return [e for v in node.values if isinstance(v, ast.FormattedValue) for e in _quoted(v.value)]
    if isinstance(node, ast.BinOp):
        return _quoted(node.left) + _quoted(node.right)
    return [] if isinstance(node, ast.Constant) else [node]


def test_no_message_quotes_visitor_text_without_literal():
    found = []
    for path in sorted([*(ROOT / "pages").glob("*.py"), *(ROOT / "ui").glob("*.py")]):
        where = str(path.relative_to(ROOT))
        for call in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.args):
                continue
            if call.func.attr not in MESSAGES:
                continue
            for expr in _quoted(call.args[0]):
                text = ast.unparse(expr)
                if VISITOR.search(text) and (where, text) not in BUNDLED:
                    found.append(f"{where}:{call.lineno}: {text}")
    assert not found, found


def test_a_charts_text_is_cut_and_its_html_escaped_numbers_left_alone():
    import pandas as pd

    from ui.text import chart_literal

    frame = pd.DataFrame({"model": ['<a href="http://evil.example">x</a>', "y" * 20_000], "decode_tps": [1.5, None]})
    shown = chart_literal(frame)
    assert shown["model"][0] == "&lt;a href=&quot;http://evil.example&quot;&gt;x&lt;/a&gt;"
    assert len(shown["model"][1]) < MAX_ECHO_CHARS + 40 and frame["model"][1] == "y" * 20_000  # a copy
    assert shown["decode_tps"].equals(frame["decode_tps"]) and chart_literal(None) is None
