"""The public entry to trace files (readers/traces): the expert ids a trace declares before it is read, and the
replay cap open_trace and load_trace hold it to (work bounded, not only memory)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from conftest import GROUNDTRUTH, SAMPLE
from trace_cases import csv_text, labelled_trace

from moe_model.errors import WorkloadError
from moe_model.readers.traces import (
    CLI_REPLAY,
    ReplayCap,
    declared_lookups,
    load_any,
    load_trace,
    open_trace,
    replay_lookups,
    save_npz,
)

CAP_50 = ReplayCap(50, "the CLI", "--max-lookups raises it")


def _npz(item) -> bytes:
    buf = io.BytesIO()
    save_npz(buf, item)
    return buf.getvalue()


@pytest.mark.parametrize(
    "path",
    [SAMPLE / "traces" / "gpt-oss-20b" / "routing.npz", GROUNDTRUTH / "traces" / "np4_b25.npz"],
    ids=["token trace", "recorded"],
)
def test_a_trace_declares_the_ids_a_replay_looks_up(path):
    assert declared_lookups(str(path)) == replay_lookups(load_any(str(path))) > 0


def test_a_csv_declares_its_id_columns_times_its_lines_with_or_without_a_last_newline():
    text = csv_text(labelled_trace([5, 7]))  # 12 tokens x 3 layers, 2 ids a row
    assert declared_lookups(text, "t.csv") == declared_lookups(text + b"\n", "t.csv") == 72
    assert replay_lookups(load_any(text, "t.csv")) == 72


@pytest.mark.parametrize("reader", [open_trace, load_trace])
@pytest.mark.parametrize("kind", ["t.npz", "t.csv", "w.npz"])
def test_a_trace_above_the_replay_cap_is_refused_naming_the_cap(reader, kind):
    from moe_model.llama.batching import build_workload
    from moe_model.workload import Batching

    trace = labelled_trace([5, 7])  # 72 ids (a workload of it, without the warm-up: 72 lookups)
    data = {"t.npz": _npz(trace), "t.csv": csv_text(trace)}.get(kind) or _npz(
        build_workload(trace, Batching(warmup=False), 128)
    )
    assert replay_lookups(reader(data, kind, ReplayCap(72, "the CLI", ""))) == 72  # positive control
    with pytest.raises(WorkloadError) as refused:
        reader(data, kind, CAP_50)
    assert str(refused.value) == "this trace holds 72 expert ids; the CLI replays at most 50; --max-lookups raises it"


@pytest.mark.parametrize("reader", [open_trace, load_trace])
def test_a_recorded_trace_whose_records_share_ids_is_held_to_the_cap_on_what_it_replays(reader):
    buf = io.BytesIO()  # 4 ids, 6 records each looking all 4 up: 24 lookups
    records = {"rec_layer": [0] * 6, "rec_ntok": [2] * 6, "rec_off": [0] * 6, "rec_k": [2] * 6}
    np.savez(buf, rec_ubatch=np.arange(6), **records, ids=[1, 2, 3, 4])
    assert declared_lookups(buf.getvalue(), "w.npz") == 4
    with pytest.raises(WorkloadError, match="this trace holds 24 expert ids; the CLI replays at most 20"):
        reader(buf.getvalue(), "w.npz", ReplayCap(20, "the CLI", "--max-lookups raises it"))


def test_the_cli_replays_the_real_trace_by_default():
    path = SAMPLE / "traces" / "gpt-oss-20b" / "routing.npz"
    assert declared_lookups(str(path)) <= CLI_REPLAY.max_lookups
