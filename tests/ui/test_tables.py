"""Tables as the pages show them: readable column names, a logged run as rows of text with units."""

from __future__ import annotations

import pandas as pd
from conftest import GROUNDTRUTH

from moe_model.readers.logs import parse_log
from ui.tables import readable, run_summary


def test_readable_names_columns_with_units_and_leaves_no_field_name():
    frame = pd.DataFrame(columns=["moe_cache_mib", "decode_tps", "hit_rate_pct", "a_new_field", "GPU"])
    assert list(readable(frame).columns) == ["budget MiB", "decode t/s", "hit rate %", "a new field", "GPU"]


def test_a_logged_run_reads_as_rows_of_what_the_log_says():
    (run,) = parse_log(GROUNDTRUTH / "logs" / "server_np4_b25.log")
    rows = run_summary(run).set_index("what")["logged"]
    assert rows["GPU"] == "NVIDIA H200 (143,155 MiB)" and rows["streams (-np)"] == "4"
    assert rows["MoE cache on CUDA0"] == "402.75 MiB for 1,611 MiB of host experts"
    assert rows["ubatches <= 8 tokens"] == "33,275 hits, 62,914 misses (34.6 %), 56,549 MiB uploaded"
    assert sum(what.startswith("request ") for what in rows.index) == len(run.timings) == 4
    assert "command line" not in rows  # the log shows none: no empty row
