"""A decode speed at -np > 1 is the total over the streams (issue 32): one function words it, the CLI says it."""

from __future__ import annotations

import json
import re

from cli_runs import run_cli
from conftest import ROOT

from moe_model.speed.streams import column_label, per_stream_tps, speed_label, speed_note, total_over_streams

MIXTRAL = str(ROOT / "sample_data" / "models" / "Mixtral-8x7B-Q4_K_M.gguf")  # 8 experts: a quick recommend


def test_a_speed_at_several_streams_is_named_a_total_with_each_streams_share():
    assert total_over_streams(4, 42.8) == "total over 4 streams (per stream 10.7 t/s)"
    assert speed_note(42.8, 4) == ", total over 4 streams (per stream 10.7 t/s)"
    assert per_stream_tps(42.8, 4) == 10.7


def test_one_streams_speed_is_its_own_and_says_nothing_more():
    assert total_over_streams(1, 42.8) == speed_note(42.8, 1) == "" and speed_label("decode t/s", 1) == "decode t/s"


def test_an_axis_or_column_names_the_total_and_a_mixed_column_each_runs_streams():
    assert speed_label("decode t/s", 4) == "decode t/s (total over 4 streams)"
    assert column_label("decode t/s", [4, 4]) == "decode t/s (total over 4 streams)"
    assert column_label("decode t/s", [1, 4]) == "decode t/s (total over each run's -np streams)"
    assert column_label("decode t/s", [1, 1]) == column_label("decode t/s", []) == "decode t/s"


def speeds_not_named_totals(text: str) -> list[str]:
    """Each line with a t/s figure that does not say it is a total over the streams."""
    lines = [line for line in text.splitlines() if re.search(r"\d t/s", line)]
    return [line for line in lines if "total over 4 streams" not in line]


def test_predicts_text_names_every_speed_at_four_streams_a_total_and_its_json_adds_the_per_stream_one():
    args = ["predict", "--model", MIXTRAL, "--hardware", "t4", "--budget-mib", "6000", "--concurrency", "4"]
    text = run_cli(*args).stdout
    assert "total over 4 streams (per stream " in text
    # under the decode line, its range's sources; a prompt's speed is one prompt's, not a total over the streams
    parts = ("    range from ", "  widest source: ", "  prompt of ")
    assert [line for line in speeds_not_named_totals(text) if not line.startswith(parts)] == []
    out = json.loads(run_cli(*args, "--json").stdout)
    assert out["decode_tps_per_stream"] == out["decode_tps"] / 4  # decode_tps keeps its meaning: the total


def test_recommends_text_names_its_speeds_at_four_streams_totals_and_its_json_adds_the_per_stream_one():
    args = ["recommend", "--model", MIXTRAL, "--hardware", "t4", "--concurrency", "4"]
    text = run_cli(*args).stdout
    assert text.splitlines()[0] == "decode t/s: total over 4 streams"  # heads the ranked list
    best = next(line for line in text.splitlines() if line.startswith("best: "))
    assert "total over 4 streams (per stream " in best
    assert "total over 4 streams (per stream " in next(ln for ln in text.splitlines() if ln.startswith("summary: "))
    out = json.loads(run_cli(*args, "--json").stdout)
    assert out["best"]["decode_tps_per_stream"] == out["best"]["decode_tps"] / 4


def test_a_logged_run_at_four_streams_keeps_its_total_and_adds_each_streams_mean():
    from moe_model.fits.log_timings import point_from_run, timed_requests
    from moe_model.readers.logs import parse_log

    (run,) = parse_log(ROOT / "sample_data" / "groundtruth" / "logs" / "server_np4_b25.log")
    point, timed = point_from_run(run, "np4"), timed_requests(run)
    assert point["decode_tps"] == sum(t.decode_tps for t in timed) and len(timed) == 4
    assert point["decode_tps_per_stream"] == point["decode_tps"] / 4
