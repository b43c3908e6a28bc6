"""Visitor text as text: what a link, a file name, a header or a log puts on a page is shown as typed, never as
Markdown or HTML (a link's `[x](http://...)` or `![](http://...)` would be a live link or a remote image) and cut
(moe_model.limits.shown). Every st.* message, caption, label or heading that quotes such text goes through literal."""

from __future__ import annotations

import html
import re
import unicodedata

import pandas as pd

from moe_model.limits import MAX_ECHO_CHARS, shown

# Markdown's inline syntax, GFM's and Streamlit's own: code, emphasis, links and images, HTML and autolinks,
# strikethrough, math, :emoji:/:material/icons:/:color[...], entities, tables, e-mail autolinks, braces of directives
_INLINE = re.compile(r"([\\`*\[\]<>!~$:&|@{}]|(?<![^\W_])_|_(?![^\W_]))")  # "_" between letters makes no emphasis
_WWW = re.compile(r"(www)\.", re.IGNORECASE)  # GFM links a bare www.example.com
_BLOCK_START = re.compile(r"^(\s*)([#>+=-]|\d+(?=[.)]))")  # a heading, quote, list or rule where a line starts


def _one_line(text: str) -> str:
    """Line breaks and other control characters as spaces: quoted text cannot start a block of its own."""
    return "".join(" " if unicodedata.category(c) in ("Cc", "Zl", "Zp") else c for c in text)


def literal(text: object, limit: int | None = MAX_ECHO_CHARS) -> str:
    """`text` as Markdown renders it literally: one line, cut to `limit` characters (None: a library message,
    which cuts its own echoes), every markup character escaped. Safe inside st.markdown, st.warning, st.caption,
    labels and headings, anywhere in the line."""
    line = _one_line(str(text))
    if limit is not None:
        line = shown(line, limit)
    line = _WWW.sub(r"\1\\.", _INLINE.sub(r"\\\1", line))
    match = _BLOCK_START.match(line)
    if match is None:
        return line
    lead, mark = match.groups()
    if mark.isdigit():  # "1." starts an ordered list: escape its dot
        return f"{lead}{mark}\\{line[match.end()]}{line[match.end() + 1 :]}"
    return f"{lead}\\{line[len(lead) :]}"


def chart_literal(frame: pd.DataFrame | None) -> pd.DataFrame | None:
    """A frame whose text a chart draws, as text: plotly reads <a href>, <b> and <br> in names and hovers (a log's
    model name or a file name could be a live link), so every text cell is cut and its HTML escaped."""
    if frame is None:
        return None
    out = frame.copy()
    for column in out.columns:
        if out[column].map(lambda v: isinstance(v, str)).any():
            out[column] = out[column].map(lambda v: html.escape(shown(v)) if isinstance(v, str) else v)
    return out
