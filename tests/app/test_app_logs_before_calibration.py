"""The Logs page sets each run of the sidebar's model beside the range predicted for its settings before
calibration, says which runs fell inside, and names the runs it could not check (AppTest)."""

from __future__ import annotations

import re

from test_app import open_page, upload_header

EXAMPLES = [f"real H200 run: server_{case}.log" for case in ("b10", "full", "minany_minus1")]


def test_the_logs_page_shows_each_runs_range_before_calibration_and_whether_it_fell_inside():
    at = open_page("pages/logs.py")
    upload_header(at)  # run1's model, as the examples ran it
    at.run()
    at.multiselect(key="log_examples").set_value(EXAMPLES).run()
    assert not at.exception
    (table,) = [d.value for d in at.dataframe if "decode t/s predicted (range)" in d.value.columns]
    assert table["run"].tolist() == ["real H200 run: server_b10.log#1", "real H200 run: server_full.log#1"]
    for _, row in table.iterrows():
        measured = float(row["decode t/s measured"].replace(",", ""))
        low, high = map(float, re.search(r"\(([\d.,]+)-([\d.,]+)\)", row["decode t/s predicted (range)"]).groups())
        assert (row["decode"] == "inside") == (low <= measured <= high)
    inside = int((table["decode"] == "inside").sum())
    summary = f"{inside} of 2 runs fell inside the range predicted before calibration (decode t/s)"
    assert any(m.value.startswith(f"**{summary}") for m in at.markdown)
    assert any("server_minany_minus1.log#1: did not start" in c.value for c in at.caption)
