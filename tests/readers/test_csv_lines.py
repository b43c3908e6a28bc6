"""A CSV trace's cheap facts checked before pandas parses it (readers/csv_lines), through the entry the app and the
CLI read uploads with (readers/traces): hostile CSVs refused in one line in bounded memory, and reads that stop
when asked (should_stop)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from hostile_csv import hostile_csvs, run_measured
from trace_cases import csv_text, labelled_trace

from moe_model.errors import ReadStoppedError, WorkloadError
from moe_model.limits import MAX_CSV_COLUMNS, MAX_CSV_LINE_BYTES
from moe_model.readers.csv_lines import scan_csv_lines
from moe_model.readers.traces import ReplayCap, declared_lookups, load_trace, open_trace

PEAK_RSS_MIB = 300  # issue 39: a hostile CSV refused under 300 MiB (a bare interpreter with numpy is ~60 MiB)


def _scan(text: bytes):
    return scan_csv_lines(io.BytesIO(text))


def test_every_line_is_counted_blank_and_crlf_lines_included_with_or_without_a_last_newline():
    text = b"seq,token,layer,e0\r\n0,0,0,1\r\n\r\n\n0,1,0,2"
    lines = _scan(text)
    assert lines.names == ("seq", "token", "layer", "e0") and lines.lines == 4 and lines.data_at == 20
    assert _scan(text + b"\n").lines == 4


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (b"0,0,0", "line 3 of the CSV trace has 3 fields; its header has 4"),
        (b"0,0,0,1,2", "line 3 of the CSV trace has 5 fields; its header has 4"),
        (b"0,0,0,1," + b"7" * MAX_CSV_LINE_BYTES, "line 3 of the CSV trace is longer than 1,024 KiB"),
    ],
    ids=["short", "long", "huge"],
)
def test_a_line_of_other_than_the_headers_fields_or_too_long_is_named_by_its_number(row, message):
    head = b"seq,token,layer,e0\n0,0,0,1\n"
    with pytest.raises(WorkloadError, match=f"^{message}$"):
        _scan(head + row + b"\n0,1,0,1\n")
    with pytest.raises(WorkloadError, match=f"^{message}$"):
        _scan(head + row)  # the last line, without its newline


def test_a_line_cut_across_blocks_is_checked_whole(monkeypatch):
    import moe_model.readers.csv_lines as csv_lines

    monkeypatch.setattr(csv_lines, "CSV_BLOCK_BYTES", 7)  # every line falls across blocks
    text = csv_text(labelled_trace([5, 7]))
    assert _scan(text).lines == len(text.splitlines()) - 1
    lines = text.splitlines()
    lines[4] += b",9"
    with pytest.raises(WorkloadError, match="^line 5 of the CSV trace has 6 fields; its header has 5$"):
        _scan(b"\n".join(lines))


def test_a_header_too_wide_or_too_long_is_refused_before_pandas_sees_it(monkeypatch):
    import pandas as pd

    def no_pandas(*args, **kwargs):
        raise AssertionError("pandas was handed the file")

    monkeypatch.setattr(pd, "read_csv", no_pandas)
    wide = b"seq,token,layer," + b",".join(b"e%d" % i for i in range(MAX_CSV_COLUMNS)) + b"\n"
    with pytest.raises(WorkloadError, match=f"^the CSV trace's header has {MAX_CSV_COLUMNS + 3} columns, above"):
        load_trace(wide, "t.csv")
    with pytest.raises(WorkloadError, match="^the CSV trace's first line is longer than 1,024 KiB"):
        open_trace(b"seq,token,layer" + b",e" * MAX_CSV_LINE_BYTES + b"\n", "t.csv")


@pytest.mark.parametrize("kind", ["10^7 columns", "100,003 fields"])
@pytest.mark.parametrize("given", ["bytes", "path"])
def test_the_hostile_csvs_of_issue_39_are_refused_in_one_line_in_bounded_memory(tmp_path_factory, kind, given):
    """Through load_trace, which the app's upload reader calls (bytes) and the CLI (a path): before, the
    10^7-column header ran for over 600 s at 1.2-4.7 GiB and the 100,003-field row peaked at 3.6 GiB."""
    path = hostile_csvs(tmp_path_factory.getbasetemp())[kind]
    source = f"open({str(path)!r}, 'rb').read()" if given == "bytes" else repr(str(path))
    body = (
        "from moe_model.readers.traces import load_trace\n"
        f"source = {source}\n"
        "try:\n    load_trace(source, 'upload.csv')\n    result = {'error': None}\n"
        "except Exception as err:\n    result = {'error': f'{type(err).__name__}: {err}'}"
    )
    result = run_measured(body)
    print(f"load_trace {kind} ({given}): {result['seconds']:.3f} s, peak RSS {result['peak_rss_mib']:.0f} MiB")
    assert result["error"].startswith("WorkloadError: ") and "\n" not in result["error"]
    assert ("header has 10,000,000" in result["error"] or "first line is longer" in result["error"]) == (
        kind == "10^7 columns"
    )
    assert result["peak_rss_mib"] < PEAK_RSS_MIB


def test_the_memory_measure_sees_a_peak_above_the_bound():
    """Positive control for the bound above: a child that holds 400 MiB for a moment is measured above it."""
    assert run_measured("bytearray(400 * 2**20)\nresult = {}")["peak_rss_mib"] > PEAK_RSS_MIB


def test_a_read_stops_between_blocks_once_should_stop_says_so(monkeypatch):
    import moe_model.readers.csv_lines as csv_lines

    monkeypatch.setattr(csv_lines, "CSV_BLOCK_BYTES", 64)
    text = csv_text(labelled_trace([5, 7]))
    asked = []

    def after(n: int):
        def should_stop() -> bool:
            asked.append(1)
            return len(asked) > n

        return should_stop

    assert load_trace(text, "t.csv", should_stop=after(10**6)).experts.shape == (12, 3, 2)  # positive control
    for reader in (load_trace, open_trace, declared_lookups):
        asked.clear()
        with pytest.raises(ReadStoppedError, match="^reading the trace was stopped before it finished$"):
            reader(text, "t.csv", should_stop=after(2))
        assert len(asked) == 3  # stopped at the first ask that said so


def test_an_npz_read_whole_stops_between_its_blocks():
    experts = np.random.default_rng(0).integers(0, 128, (60_000, 48, 8)).astype(np.int16)  # 46 MB: 11 blocks
    buf = io.BytesIO()
    np.savez(buf, experts=experts)
    asked = []

    def should_stop() -> bool:
        asked.append(1)
        return len(asked) > 3

    with pytest.raises(ReadStoppedError):
        load_trace(buf.getvalue(), "t.npz", ReplayCap(10**9, "the test", ""), should_stop)
    assert len(asked) == 4
    loaded = load_trace(buf.getvalue(), "t.npz", ReplayCap(10**9, "the test", ""), lambda: False)
    assert np.array_equal(loaded.experts, experts)  # never told to stop: the whole trace
