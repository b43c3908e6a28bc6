"""Shopping's table view (ui/shopping_table.py): decode beside the card, empty columns dropped, widths within the
main column, a basis column with the figures it speaks for."""

from __future__ import annotations

import pandas as pd

from ui.shopping_table import COLUMNS, MAX_WIDTH_PX, view_columns


def _frame(**extra) -> pd.DataFrame:
    row = {
        "GPU": "RTX 4080 16GB",
        "machine": "yours (sidebar)",
        "link": "PCIe 4.0 x16",
        "best setting": "--cpu-moe + 9161 MiB cache",
        "what would fit": "",
        "decode t/s": 1.1,
        "decode range t/s": "0.1–1.6",
        "readings t/s": "",
        "prompt t/s": 120.0,
        "first token s": 4.2,
        "decode is": "modelled",
        "hit rate is": "modelled",
        "prompt is": "modelled",
        "cache verdict": "helps",
        "RAM": "streams from disk",
    }
    return pd.DataFrame([row | extra])


def _width(columns: list[str]) -> int:
    return sum(
        width for name, (_, width) in COLUMNS.items() if any(c == name or c.startswith(f"{name} (") for c in columns)
    )


def test_decode_sits_beside_the_card_and_empty_columns_are_dropped():
    shown = view_columns(_frame(), 1)
    assert shown[:4] == ["GPU", "decode t/s", "decode range t/s", "decode is"]
    assert "what would fit" not in shown and "readings t/s" not in shown  # nobody filled them
    assert _width(shown) <= MAX_WIDTH_PX


def test_the_least_needed_columns_go_to_the_csv_where_the_widths_would_not_fit_and_a_basis_goes_with_its_figures():
    crowded = _frame(**{"readings t/s": "0.1–1.4", "per stream t/s": 0.3})
    shown = view_columns(crowded, 1)
    assert _width(shown) <= MAX_WIDTH_PX and {"per stream t/s", "best setting", "link", "first token s"} <= set(shown)
    assert not {"prompt t/s", "cache verdict", "readings t/s"} & set(shown)  # dropped first, in the CSV still
    assert "prompt t/s" in view_columns(_frame(**{"cache verdict": ""}), 1)  # where there is room, shown
    if "prompt is" in shown:
        assert {"prompt t/s", "first token s"} & set(shown)  # a basis column only beside the figures it speaks for
    assert _width(view_columns(_frame(), 1)) <= MAX_WIDTH_PX


def test_at_four_streams_the_decode_columns_are_the_totals_the_page_names():
    frame = _frame().rename(columns={"decode t/s": "decode t/s (total over 4 streams)"})
    frame = frame.rename(columns={"decode range t/s": "decode range t/s (total over 4 streams)"})
    shown = view_columns(frame.assign(**{"per stream t/s": 0.3}), 4)
    assert shown[1:3] == ["decode t/s (total over 4 streams)", "decode range t/s (total over 4 streams)"]
