"""The Logs page sets each run of the sidebar's model beside the range predicted for its settings before
calibration, says which runs fell inside, and names the runs it could not check (AppTest)."""

from __future__ import annotations

import re

from test_app import open_page, upload_header

from moe_model.resources import data_path

RUN5 = data_path("groundtruth", "run5", "logs")

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


def test_six_uploaded_logs_are_counted_as_six_and_the_one_without_a_hit_rate_is_named():
    """run5's six mmap logs: every one gets a row beside its range, and the routing caption counts six uploads, five
    with a hit rate, naming the no-cache one and why (it once read "5 logs" after six were uploaded)."""
    at = open_page("pages/logs.py")
    upload_header(at, data_path("groundtruth", "run3", "model-header.gguf").read_bytes())  # run5 ran run3's model
    at.run()
    cases = ("mm_b10", "mm_b25", "mm_b50", "mm_b75", "mm_full", "mm_off")
    logs = [(f"server_{c}.log", (RUN5 / f"server_{c}.log").read_bytes(), "text/plain") for c in cases]
    next(u for u in at.get("file_uploader") if u.label.startswith("llama-server")).set_value(logs).run()
    assert not at.exception
    (table,) = [d.value for d in at.dataframe if "decode t/s predicted (range)" in d.value.columns]
    assert len(table) == 6 and set(table["timed"]) == {"steady state"}
    (routing,) = [c.value for c in at.caption if "uploaded logs pin the routing" in c.value]
    assert routing.startswith("5 of your 6 uploaded logs")
    assert "Not used: server_mm_off.log: no MoE cache" in routing
