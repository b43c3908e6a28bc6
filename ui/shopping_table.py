"""Shopping's table as a reader sees it at 1400 px (issue 38: the decode column was cut to its first digit behind an
empty "what would fit" column): decode t/s beside the card, each shown number's basis in a column beside it,
columns nobody filled dropped, the widths adding up to no more than the main column (the least needed columns left
to the CSV where they would not), long text wrapped in tall rows instead of cut.

The frame keeps every column (the CSV download and scripts read them); only the view is narrowed here. What would
fit is listed above the table (the page's lead), so the table does not repeat it."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from moe_model.speed.streams import speed_label

# the grid's width at a 1400x900 viewport beside the sidebar (tests/browser measures that the columns fit it)
MAX_WIDTH_PX = 900
ROW_HEIGHT_PX = 72  # above Streamlit's 4rem: the grid wraps a cell's text instead of cutting it
# shown columns, most needed first: (header, width px); decode columns named a total at -np > 1 (speed_label)
COLUMNS = {
    "GPU": ("GPU", 120),
    "decode t/s": ("decode t/s", 75),
    "decode range t/s": ("range", 75),
    "decode is": ("decode is", 80),
    "best setting": ("best setting", 160),
    "link": ("link", 90),
    "per stream t/s": ("per stream", 75),
    "readings t/s": ("readings", 80),
    "first token s": ("first token s", 90),
    "prompt t/s": ("prompt t/s", 75),
    "prompt is": ("prompt is", 80),
    "cache verdict": ("cache", 85),
}
DROPPED_FIRST = ("prompt t/s", "cache verdict", "readings t/s", "first token s")  # in the CSV still
FORMATS = {"decode t/s": "%.1f", "per stream t/s": "%.1f", "first token s": "%.2f", "prompt t/s": "%.0f"}
HEADER_PX = 38  # the grid's header row and borders: the table's height shows every row without scrolling
TOTAL_HEADERS = {"decode t/s": "total t/s"}  # at -np > 1 (the range is the total's too)


def _filled(column: pd.Series) -> bool:
    """Whether any row has something in the column (not only "" or 0)."""
    return bool(((column != "") & (column != 0) & column.notna()).any())


def _name(column: str, concurrency: int) -> str:
    """The frame's name of a shown column (the page's `shown` names a total's columns so)."""
    return speed_label(column, concurrency) if column.startswith("decode") and column.endswith("t/s") else column


def view_columns(frame: pd.DataFrame, concurrency: int) -> list[str]:
    """The columns the table shows, in COLUMNS' order: those somebody filled, then those of DROPPED_FIRST left out
    in turn until their widths fit MAX_WIDTH_PX (a basis column with the figures it speaks for). The frame's names
    (as `shown` names them)."""
    shown = [c for c in COLUMNS if _name(c, concurrency) in frame.columns and _filled(frame[_name(c, concurrency)])]
    for column in DROPPED_FIRST:
        if sum(COLUMNS[c][1] for c in shown) <= MAX_WIDTH_PX:
            break
        shown = [c for c in shown if c != column]
        if not {"prompt t/s", "first token s"} & set(shown):
            shown = [c for c in shown if c != "prompt is"]
    return [_name(c, concurrency) for c in shown]


def _config(column: str, concurrency: int):
    header, width = COLUMNS[column]
    header = TOTAL_HEADERS.get(column, header) if concurrency > 1 else header
    if column in FORMATS:  # "1.0", not "1"
        return st.column_config.NumberColumn(header, width=width, format=FORMATS[column])
    return st.column_config.TextColumn(header, width=width)


def table(frame: pd.DataFrame, concurrency: int, where=st) -> None:
    """The table in `where` (a placeholder while cards are still simulated): the shown columns at their widths."""
    columns = view_columns(frame, concurrency)
    config = {_name(c, concurrency): _config(c, concurrency) for c in COLUMNS if _name(c, concurrency) in columns}
    where.dataframe(
        frame,
        hide_index=True,
        width="stretch",
        height=HEADER_PX + ROW_HEIGHT_PX * len(frame),
        column_order=columns,
        column_config=config,
        row_height=ROW_HEIGHT_PX,
    )
