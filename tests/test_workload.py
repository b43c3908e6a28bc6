"""Batching a token trace the way llama-server feeds the cache, and reading/writing traces."""

from __future__ import annotations

import contextlib
import io
import os
from dataclasses import replace

import numpy as np
import pytest
from conftest import GROUNDTRUTH, run_within

from moe_model.errors import WorkloadError
from moe_model.llama.batching import _keep_output_rows, build_workload, stream_build
from moe_model.readers.traces import (
    load_any,
    load_recorded,
    load_token_trace,
    make_token_trace,
    open_trace,
    save_npz,
    stream_recorded,
    token_trace_from_csv,
)
from moe_model.workload import (
    PHASE_DECODE,
    PHASE_PROMPT,
    PHASE_WARMUP,
    Batching,
    Workload,
    WorkloadStream,
    token_counts,
)


def labelled_trace(lengths, n_layer=3, k=2):
    """Token t of the whole trace routes to experts (t, t + 100) in every layer: ids name tokens."""
    n = sum(lengths)
    experts = np.stack([np.arange(n), np.arange(n) + 100], axis=1)[:, None, :].repeat(n_layer, axis=1)
    return make_token_trace(experts, np.concatenate([[0], np.cumsum(lengths)]))


def ubatch_tokens(work, layer=0):
    """Per ubatch, the tokens (first expert id) that the given layer saw."""
    out = []
    for r in np.flatnonzero(work.rec_layer == layer):
        ids = work.ids[work.rec_off[r] : work.rec_off[r] + work.k * work.rec_ntok[r]]
        out.append(ids[:: work.k].tolist())
    return out


def test_single_stream_decodes_one_token_per_ubatch_in_order():
    work = build_workload(labelled_trace([3, 2]), Batching(warmup=False), 256)
    assert ubatch_tokens(work) == [[0], [1], [2], [3], [4]]
    assert work.decode_tokens == 5 and set(work.rec_phase.tolist()) == {PHASE_DECODE}


def test_concurrency_deals_sequences_to_streams_and_refills_finished_ones():
    work = build_workload(labelled_trace([2, 4, 1, 2]), Batching(concurrency=2, warmup=False), 256)
    # streams: A takes seq0 (0,1), B seq1 (2..5); A finishes after 2 steps and takes seq2 (6), then seq3 (7,8)
    assert ubatch_tokens(work) == [[0, 2], [1, 3], [4, 6], [5, 7], [8]]


def test_speculative_verification_batches_hold_d_plus_1_tokens():
    always = build_workload(labelled_trace([7]), Batching(draft_tokens=2, accept_rate=1.0, warmup=False), 256)
    assert ubatch_tokens(always) == [[0, 1, 2], [3, 4, 5], [6]]
    never = build_workload(labelled_trace([4]), Batching(draft_tokens=2, accept_rate=0.0, warmup=False), 256)
    assert ubatch_tokens(never) == [[0, 1, 2], [1, 2, 3], [2, 3], [3]]


def test_warmup_is_two_tokens_and_its_last_layer_sees_one():
    work = build_workload(labelled_trace([2]), Batching(), 256)
    first = work.rec_ubatch == 0
    assert work.rec_phase[first].tolist() == [PHASE_WARMUP] * 3
    assert work.rec_ntok[first].tolist() == [2, 2, 1]


def test_prompt_ubatches_split_by_ubatch_size_and_only_the_last_outputs():
    work = build_workload(labelled_trace([2]), Batching(prompt_tokens=70, ubatch_size=32, warmup=False), 256)
    prompt = work.rec_phase == PHASE_PROMPT
    ntok = work.rec_ntok[prompt].reshape(-1, 3)
    assert ntok.tolist() == [[32, 32, 0], [32, 32, 0], [6, 6, 1]]


def test_a_layer_that_sees_only_the_output_keeps_the_ubatchs_last_token():
    keep = _keep_output_rows(np.array([3, 2]), np.array([[3, 1], [2, 0]]), 2)
    # rows: ubatch 0 layer 0 (3 tokens), layer 1 (3), ubatch 1 layer 0 (2), layer 1 (2)
    assert keep.tolist() == [True, True, True, False, False, True, True, True, False, False]


def test_a_given_ubatch_array_is_replayed_exactly_and_ignores_concurrency():
    trace = labelled_trace([5])
    trace = make_token_trace(trace.experts, trace.seq_offsets, ubatch=np.array([0, 0, 1, 2, 2]))
    work = build_workload(trace, Batching(concurrency=4, warmup=False), 256)
    assert ubatch_tokens(work) == [[0, 1], [2], [3, 4]]


def test_recorded_trace_keeps_each_layers_own_token_count():
    work = load_recorded(GROUNDTRUTH / "traces" / "b25.npz")
    prompt = work.rec_phase == PHASE_PROMPT
    assert work.rec_ntok[prompt].tolist() == [129] * 13 + [1]
    assert work.decode_tokens == 256


def test_traces_that_do_not_fit_the_model_say_which_part(gt_model):
    work = build_workload(labelled_trace([2], n_layer=3), Batching(warmup=False), 128)
    with pytest.raises(WorkloadError, match="3 layers, the model 14"):
        work.check_fits(gt_model.n_layer, gt_model.n_expert, gt_model.n_expert_used)
    wide = build_workload(make_token_trace(np.full((2, 14, 8), 200)), Batching(warmup=False), 201)
    with pytest.raises(WorkloadError, match="experts up to 200, the model has 128"):
        wide.check_fits(14, 128, 8)
    narrow = build_workload(make_token_trace(np.zeros((2, 14, 2), dtype=int) + [0, 1]), Batching(warmup=False), 128)
    with pytest.raises(WorkloadError, match="routes 2 experts per token, the model 8"):
        narrow.check_fits(14, 128, 8)


def test_csv_import_equals_the_npz_and_npz_export_round_trips(tmp_path):
    trace = labelled_trace([2, 3], n_layer=2)
    rows = ["seq,token,layer,e0,e1"]
    for s in range(trace.n_seq):
        for t in range(trace.seq_offsets[s], trace.seq_offsets[s + 1]):
            for layer in range(2):
                rows.append(f"{s},{t},{layer},{trace.experts[t, layer, 0]},{trace.experts[t, layer, 1]}")
    from_csv = token_trace_from_csv(io.StringIO("\n".join(rows)))
    assert np.array_equal(from_csv.experts, trace.experts) and np.array_equal(from_csv.seq_offsets, trace.seq_offsets)
    path = tmp_path / "t.npz"
    save_npz(path, trace)
    assert np.array_equal(load_token_trace(path).experts, trace.experts)
    work = build_workload(trace, Batching(concurrency=2), 256)
    save_npz(tmp_path / "w.npz", work)
    again = load_any(str(tmp_path / "w.npz"))
    assert np.array_equal(again.ids, work.ids) and np.array_equal(again.rec_ntok, work.rec_ntok)


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"not an npz", "not a readable NPZ"), (b"", "not a readable NPZ")],
)
def test_unreadable_trace_files_are_refused(content, message):
    with pytest.raises(WorkloadError, match=message):
        load_any(content, "x.npz")


@pytest.fixture()
def fifo(tmp_path):
    """A named pipe called trace.npz; opened for writing at the end so a reader blocked on it (the old code) ends."""
    path = tmp_path / "trace.npz"
    os.mkfifo(path)
    yield path
    with contextlib.suppress(OSError):  # ENXIO: nobody is reading it
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))


@pytest.mark.parametrize("reader", [load_any, open_trace, load_token_trace, token_trace_from_csv])
def test_only_regular_files_are_read_as_traces(fifo, tmp_path, reader):
    # `--trace /dev/zero` took 7.5 GiB before a MemoryError; a FIFO hung the reader until someone wrote to it
    with pytest.raises(WorkloadError, match=r"/dev/zero is a device, not a regular file: only regular files are read"):
        run_within(30, reader, "/dev/zero")
    with pytest.raises(WorkloadError, match=r"trace.npz is a FIFO \(named pipe\), not a regular file"):
        run_within(30, reader, str(fifo))
    with pytest.raises(WorkloadError, match="is a folder, not a regular file"):
        run_within(30, reader, str(tmp_path))
    with pytest.raises(WorkloadError, match="no such trace file: .*missing.npz"):
        reader(str(tmp_path / "missing.npz"))


def test_bad_arrays_are_refused_with_the_reason():
    with pytest.raises(WorkloadError, match="n_tokens, n_layers, k"):
        make_token_trace(np.zeros((3, 2)))
    with pytest.raises(WorkloadError, match="seq_offsets"):
        make_token_trace(np.zeros((3, 2, 1), dtype=int), seq_offsets=[0, 5])
    with pytest.raises(WorkloadError, match="non-decreasing"):
        make_token_trace(np.zeros((3, 2, 1), dtype=int), ubatch=[0, 2, 1])
    with pytest.raises(WorkloadError, match="concurrency"):
        Batching(concurrency=0)


def test_a_corrupt_recorded_trace_is_refused_not_crashed(tmp_path):
    path = tmp_path / "bad.npz"
    np.savez(path, rec_ubatch=[0, 0], rec_layer=[0, 1], rec_ntok=[1, 5], rec_off=[0, 2], rec_k=[2, 2], ids=[1, 2, 3])
    with pytest.raises(WorkloadError, match="records outside"):
        load_any(str(path))
    np.savez(path, rec_ubatch=[0], rec_layer=[0], rec_ntok=[1], rec_off=[0], rec_k=[2], ids=[1, 2])
    assert load_any(str(path)).n_records == 1  # positive control


# --- hostile traces: refused before any cast, allocation or decompression ---


def test_an_expert_id_of_40000_is_refused_not_wrapped_by_the_int16_cast():
    experts = np.zeros((600, 48, 8), dtype=np.int64)
    assert make_token_trace(experts).experts.dtype == np.int16  # positive control
    for bad in (40_000, 65_536 + 3, -1):  # 40000 wraps negative in int16; 65539 would read as 3
        experts[7, 3, 2] = bad
        with pytest.raises(WorkloadError, match=r"expert ids must be in 0\.\.4,095"):
            make_token_trace(experts)


@pytest.mark.parametrize(
    ("shape", "message"),
    [((3, 2000, 1), "layers in the trace is 2,000, above this tool's limit"), ((3, 2, 100), "experts per token")],
)
def test_trace_shapes_beyond_any_real_model_are_refused(shape, message):
    with pytest.raises(WorkloadError, match=message):
        make_token_trace(np.zeros(shape, dtype=np.int16))


def test_a_recorded_trace_with_ids_that_would_wrap_in_int32_is_refused(tmp_path):
    path = tmp_path / "wrap.npz"
    arrays = {"rec_ubatch": [0], "rec_layer": [0], "rec_ntok": [1], "rec_off": [0], "rec_k": [2]}
    np.savez(path, **arrays, ids=np.array([1, 2], dtype=np.int64))
    assert load_any(str(path)).n_records == 1  # positive control
    np.savez(path, **arrays, ids=np.array([1, 2**32 + 3], dtype=np.int64))  # astype(int32) would read 3
    with pytest.raises(WorkloadError, match="expert ids must be in"):
        load_any(str(path))


def test_a_recorded_token_count_that_overflows_int64_is_refused(tmp_path):
    path = tmp_path / "overflow.npz"
    huge = np.array([2**62], dtype=np.int64)  # k * ntok wraps negative and would pass `<= len(ids)`
    np.savez(path, rec_ubatch=[0], rec_layer=[0], rec_ntok=huge, rec_off=[0], rec_k=[8], ids=[1, 2])
    with pytest.raises(WorkloadError, match="records outside"):
        load_any(str(path))


def test_an_npz_that_expands_beyond_the_limit_is_refused_before_decompressing(tmp_path, monkeypatch):
    import zipfile

    import moe_model.readers.traces as workload

    path = tmp_path / "bomb.npz"
    np.savez_compressed(path, experts=np.zeros((4096, 48, 8), dtype=np.int16))  # 3 MiB of zeros, ~3 KB on disk
    assert path.stat().st_size < 50_000
    monkeypatch.setattr(workload, "MAX_NPZ_BYTES", 1024**2)

    def no_decompression(*args, **kwargs):
        raise AssertionError("a member was decompressed before its size was checked")

    monkeypatch.setattr(zipfile.ZipFile, "open", no_decompression)
    with pytest.raises(WorkloadError, match="expands to 3,145,.* bytes, above this tool's limit"):
        load_any(str(path))


def _npz_with_member(name: str, header: dict, payload: bytes) -> bytes:
    """An NPZ whose one member has the given .npy header dict and data bytes (hand-built, possibly lying)."""
    import zipfile

    npy = io.BytesIO()
    np.lib.format.write_array_header_1_0(npy, header)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        archive.writestr(name, npy.getvalue() + payload)
    return buf.getvalue()


def test_an_npy_header_declaring_more_data_than_the_member_holds_is_refused():
    good = _npz_with_member("experts.npy", {"descr": "<i2", "fortran_order": False, "shape": (1, 1, 2)}, b"\1\0\2\0")
    assert load_any(good, "t.npz").n_expert == 3  # positive control
    lying = _npz_with_member("experts.npy", {"descr": "<i8", "fortran_order": False, "shape": (10**9, 48, 8)}, b"")
    with pytest.raises(WorkloadError, match="declares 3,072,000,000,000 bytes"):
        load_any(lying, "t.npz")


@pytest.mark.parametrize(("descr", "shown"), [("<f8", "float64"), ("|O", "object")])
def test_npz_members_that_are_not_integers_are_refused_unread(descr, shown):
    data = _npz_with_member("experts.npy", {"descr": descr, "fortran_order": False, "shape": (1, 1, 1)}, b"\0" * 8)
    with pytest.raises(WorkloadError, match=f"holds {shown}, not integers"):
        load_any(data, "t.npz")


def test_prompt_routing_beyond_the_limit_is_refused_before_drawing():
    trace = labelled_trace([4] * 12)
    assert build_workload(trace, Batching(prompt_tokens=64), 256).n_records  # positive control
    with pytest.raises(WorkloadError, match="drawn routing is above this tool's limit of 100,000,000"):
        build_workload(make_token_trace(np.zeros((12, 48, 8), dtype=np.int16)), Batching(prompt_tokens=131_072), 128)


@pytest.mark.parametrize(
    ("layer", "message"),
    [("-5", r"CSV layer indices must be in 0\.\.1,023"), ("99999", "CSV layer indices"), ("x", "must hold integers")],
)
def test_csv_layer_indices_are_range_checked_before_reshaping(layer, message):
    assert load_any(b"seq,token,layer,e0\n0,0,0,1\n", "t.csv").n_layer == 1  # positive control
    with pytest.raises(WorkloadError, match=message):
        load_any(f"seq,token,layer,e0\n0,0,{layer},1\n".encode(), "t.csv")


def test_an_out_of_memory_sized_trace_is_refused_before_building_in_one_line(monkeypatch):
    from moe_model.llama import batching as workload

    trace = make_token_trace(np.zeros((20_000, 94, 8), dtype=np.int16) + np.arange(8, dtype=np.int16))
    monkeypatch.setattr(workload, "available_memory_bytes", lambda: 64 * 2**20)  # a machine with 64 MiB free
    with pytest.raises(WorkloadError, match=r"needs about 0\.5 GiB to build \(15,040,000 expert lookups\)") as info:
        build_workload(trace, Batching(warmup=False))
    assert "\n" not in str(info.value)
    monkeypatch.setattr(workload, "available_memory_bytes", lambda: 64 * 2**30)
    assert build_workload(trace, Batching(warmup=False)).n_records == 20_000 * 94  # positive control


# --- streaming: chunk by chunk, the same records as held whole ---

BUDGETS_GT = [14, 15, 19, 161, 403, 806, 1614]


def _counts(model, work) -> list[dict]:
    from moe_model.llama.simulate import simulate_budgets

    return [r.as_dict() for r in simulate_budgets(model, work, BUDGETS_GT)]


def assert_streams_as_loaded(model, opened, loaded, batching) -> None:
    """The streamed trace, read in chunks of 50 records, gives the loaded workload's ids, totals and counts."""
    stream = stream_build(opened, batching, 128, max_records=50)
    chunks = list(stream.chunks())
    assert len(chunks) > 10 and np.array_equal(np.concatenate([c.ids for c in chunks]), loaded.ids)
    assert (stream.n_records, stream.n_lookups, stream.decode_tokens) == (
        loaded.n_records,
        len(loaded.ids),
        loaded.decode_tokens,
    )
    assert _counts(model, stream) == _counts(model, loaded)


@pytest.mark.parametrize(
    "batching",
    [Batching(), Batching(concurrency=3, draft_tokens=2, prompt_tokens=40, ubatch_size=16), Batching(warmup=False)],
)
def test_a_token_trace_batched_chunk_by_chunk_equals_the_whole_build(gt_model, batching):
    from moe_model.routing.synthetic import Knobs, Shape, generate

    trace = generate(Shape(14, 128, 8), Knobs(), 300, seq_len=60)
    whole = build_workload(trace, batching, 128)
    stream = stream_build(trace, batching, 128, max_records=50)  # 3 ubatches of 14 layers a chunk
    chunks = list(stream.chunks())
    assert len(chunks) > 10 and all(c.n_records <= 50 for c in chunks)
    assert np.array_equal(np.concatenate([c.ids for c in chunks]), whole.ids)
    assert np.array_equal(np.concatenate([c.rec_ubatch for c in chunks]), whole.rec_ubatch)
    assert (stream.n_records, stream.n_lookups, stream.decode_tokens) == (
        whole.n_records,
        len(whole.ids),
        whole.decode_tokens,
    )
    assert np.array_equal(stream.ntok_values, np.unique(whole.rec_ntok))
    assert _counts(gt_model, stream) == _counts(gt_model, whole)


@pytest.mark.parametrize("case", ["b25", "np4_b25", "short_b25"])
def test_a_recorded_trace_read_chunk_by_chunk_replays_to_the_counts_of_the_loaded_one(gt_model, case):
    path = GROUNDTRUTH / "traces" / f"{case}.npz"
    stream = stream_recorded(path, max_records=50)
    chunks = list(stream.chunks())
    assert all(c.n_records <= 100 for c in chunks)  # one block and the rest of a ubatch
    firsts, lasts = [c.rec_ubatch[0] for c in chunks], [c.rec_ubatch[-1] for c in chunks]
    assert all(a < b for a, b in zip(lasts, firsts[1:], strict=False))  # no ubatch split between chunks
    loaded = load_recorded(path)
    assert (stream.n_records, stream.n_ubatches, stream.decode_tokens) == (
        loaded.n_records,
        loaded.n_ubatches,
        loaded.decode_tokens,
    )
    assert _counts(gt_model, stream) == _counts(gt_model, loaded)


def test_a_recorded_trace_beyond_the_in_memory_limit_is_streamed_not_refused(tmp_path, monkeypatch):
    import moe_model.readers.traces as workload

    path = tmp_path / "long.npz"
    save_npz(path, load_recorded(GROUNDTRUTH / "traces" / "b25.npz"))
    monkeypatch.setattr(workload, "MAX_NPZ_BYTES", 100_000)  # b25 holds 216 KB of arrays
    with pytest.raises(WorkloadError, match="expands to .* above this tool's limit"):
        load_any(str(path))
    assert isinstance(open_trace(str(path)), WorkloadStream)


def test_a_recorded_trace_whose_ids_run_backwards_is_loaded_whole_and_replays_the_same(gt_model, tmp_path):
    work = load_recorded(GROUNDTRUTH / "traces" / "b25.npz")
    spans = [work.ids[o : o + work.k * n] for o, n in zip(work.rec_off, work.rec_ntok, strict=True)]
    ends = np.cumsum([len(s) for s in spans[::-1]])[::-1]  # the last record's ids first
    backwards = replace(work, ids=np.concatenate(spans[::-1]), rec_off=ends - [len(s) for s in spans])
    save_npz(tmp_path / "back.npz", backwards)
    assert stream_recorded(tmp_path / "back.npz") is None  # a forward-only read cannot serve it
    opened = open_trace(str(tmp_path / "back.npz"))
    assert isinstance(opened, Workload)
    assert _counts(gt_model, opened) == _counts(gt_model, work)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"ids": [1, 40_000]}, r"expert ids must be in 0\.\.4,095, got 1\.\.40,000"),
        ({"rec_layer": [0, 5000]}, "layer indices must be in"),
        ({"rec_k": [2, 3]}, r"mixes experts-per-token values \[2, 3\]"),
        ({"rec_ntok": [1, 9]}, "records outside `ids`"),
        ({"rec_ntok": [1, 2**62]}, "records outside `ids`"),
        ({"rec_ubatch": [0]}, "record arrays of different lengths"),
    ],
)
def test_a_streamed_recorded_trace_is_refused_with_the_message_of_a_loaded_one(tmp_path, edit, message):
    arrays = {"rec_ubatch": [0, 1], "rec_layer": [0, 0], "rec_ntok": [1, 1], "rec_off": [0, 2], "rec_k": [2, 2]}
    np.savez(tmp_path / "ok.npz", **arrays, ids=[1, 2, 3, 4])
    assert open_trace(str(tmp_path / "ok.npz")).n_records == 2  # positive control
    np.savez(tmp_path / "bad.npz", **({**arrays, "ids": [1, 2, 3, 4]} | edit))
    with pytest.raises(WorkloadError, match=message) as loaded:
        load_any(str(tmp_path / "bad.npz"))
    with pytest.raises(WorkloadError) as streamed:
        open_trace(str(tmp_path / "bad.npz"))
    assert str(streamed.value) == str(loaded.value)


# --- token traces read forward from their NPZ: the records of the whole trace, never held whole ---


@pytest.mark.parametrize("stored", [True, False])
@pytest.mark.parametrize(
    "batching",
    [Batching(), Batching(concurrency=3, draft_tokens=2, prompt_tokens=40, ubatch_size=16), Batching(concurrency=9)],
)
def test_a_token_trace_read_forward_from_its_npz_replays_to_the_counts_of_the_whole_trace(
    gt_model, tmp_path, monkeypatch, stored, batching
):
    import moe_model.llama.batching as batching_module
    import moe_model.readers.traces as traces
    from moe_model.routing.synthetic import Knobs, Shape, generate
    from moe_model.workload import StreamedTokens

    monkeypatch.setattr(batching_module, "TRACE_READ_AHEAD_ROWS", 2)  # windows refilled every other ubatch
    monkeypatch.setattr(traces, "_INFLATE_BLOCK", 7)  # cursors read the deflated bytes 7 at a time
    trace = generate(Shape(14, 128, 8), Knobs(), 300, seq_len=40)
    path = tmp_path / "t.npz"
    (np.savez if stored else np.savez_compressed)(path, experts=trace.experts, seq_offsets=trace.seq_offsets)
    opened = open_trace(str(path))
    assert isinstance(opened, StreamedTokens) and not hasattr(opened, "experts")
    assert_streams_as_loaded(gt_model, opened, build_workload(trace, batching, 128), batching)


def test_a_token_trace_beyond_the_in_memory_limits_is_streamed_not_refused(tmp_path, monkeypatch):
    import moe_model.readers.traces as traces
    from moe_model.workload import StreamedTokens

    path = tmp_path / "t.npz"
    save_npz(path, labelled_trace([5, 7]))  # 12 tokens x 3 layers x 2: 72 ids
    monkeypatch.setattr(traces, "MAX_TRACE_IDS", 50)
    with pytest.raises(WorkloadError, match="expert ids in the trace is 72, above this tool's limit of 50"):
        load_any(str(path))
    opened = open_trace(str(path))
    assert isinstance(opened, StreamedTokens) and (opened.n_tokens, opened.n_seq, opened.n_expert) == (12, 2, 112)


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        ({"experts": np.full((4, 2, 2), 40_000)}, r"expert ids must be in 0\.\.4,095"),
        ({"experts": np.zeros((4, 2, 2, 1), dtype=np.int16)}, "must be a non-empty integer array"),
        ({"experts": np.zeros((4, 2, 2), dtype=np.int16), "seq_offsets": [0, 5]}, "must rise from 0 to n_tokens"),
        ({"experts": np.zeros((4, 2, 2), dtype=np.int16), "ubatch": [0, 1, 0, 1]}, "non-decreasing index"),
        ({"experts": np.zeros((4, 2, 2), dtype=np.float32)}, "holds float32, not integers"),
    ],
)
def test_a_streamed_token_trace_is_refused_with_the_message_of_a_loaded_one(tmp_path, arrays, message):
    np.savez_compressed(tmp_path / "bad.npz", **arrays)
    with pytest.raises(WorkloadError, match=message) as loaded:
        load_any(str(tmp_path / "bad.npz"))
    with pytest.raises(WorkloadError) as streamed:
        open_trace(str(tmp_path / "bad.npz"))
    assert str(streamed.value) == str(loaded.value)


def test_chunks_are_bounded_in_ids_too_so_large_ubatches_make_fewer_records_a_chunk(gt_model):
    from moe_model.routing.synthetic import Knobs, Shape, generate
    from moe_model.workload import stream_of

    trace = generate(Shape(14, 128, 8), Knobs(), 400, seq_len=50)
    batching = Batching(concurrency=8, prompt_tokens=30, ubatch_size=16)  # decode ubatches of 8 x 14 x 8 ids
    whole = build_workload(trace, batching, 128)
    for stream in (stream_build(trace, batching, 128, max_lookups=2000), stream_of(whole, max_lookups=2000)):
        chunks = list(stream.chunks())
        one_ubatch = [len(np.unique(c.rec_ubatch)) == 1 for c in chunks]
        assert all(len(c.ids) <= 2000 or single for c, single in zip(chunks, one_ubatch, strict=True))
        assert len(chunks) > 20 and not all(one_ubatch)
        assert np.array_equal(np.concatenate([c.ids for c in chunks]), whole.ids)
        assert _counts(gt_model, stream) == _counts(gt_model, whole)


def _csv_text(trace, order=None) -> bytes:
    """A token trace as CSV rows (seq, token, layer, e0..), in (seq, token, layer) order or the rows given."""
    seq = np.repeat(np.arange(trace.n_seq), np.diff(trace.seq_offsets))
    rows = [
        (s, t, layer, *trace.experts[t, layer].tolist())
        for t, s in enumerate(seq.tolist())
        for layer in range(trace.n_layer)
    ]
    rows = rows if order is None else [rows[i] for i in order]
    header = "seq,token,layer," + ",".join(f"e{j}" for j in range(trace.k))
    return "\n".join([header, *(",".join(map(str, r)) for r in rows)]).encode()


@pytest.mark.parametrize(
    "batching",
    [Batching(), Batching(concurrency=3, draft_tokens=2, prompt_tokens=40, ubatch_size=16), Batching(concurrency=9)],
)
def test_a_csv_token_trace_read_forward_replays_to_the_counts_of_the_whole_trace(
    gt_model, tmp_path, monkeypatch, batching
):
    import moe_model.llama.batching as batching_module
    import moe_model.readers.traces as traces
    from moe_model.routing.synthetic import Knobs, Shape, generate
    from moe_model.workload import StreamedTokens

    monkeypatch.setattr(batching_module, "TRACE_READ_AHEAD_ROWS", 2)  # windows refilled every other ubatch
    monkeypatch.setattr(traces, "CSV_BLOCK_BYTES", 997)  # many blocks: cursors start inside them, lines cut across
    trace = generate(Shape(14, 128, 8), Knobs(), 300, seq_len=40)
    path = tmp_path / "t.csv"
    path.write_bytes(_csv_text(trace))
    opened = open_trace(str(path))
    assert isinstance(opened, StreamedTokens) and not hasattr(opened, "experts")
    whole = token_trace_from_csv(str(path))
    assert np.array_equal(opened.seq_offsets, whole.seq_offsets) and opened.n_expert == whole.n_expert
    assert np.array_equal(opened.expert_counts.sum(axis=1), np.full(14, 300 * 8))
    assert_streams_as_loaded(gt_model, opened, build_workload(whole, batching, 128), batching)


@pytest.mark.parametrize(
    "order",
    ["shuffled", "a token's layers apart", "a float id", "an id out of range"],
)
def test_a_csv_trace_that_cannot_be_read_forward_is_loaded_whole_with_its_answer_or_message(tmp_path, order):
    from moe_model.workload import StreamedTokens, TokenTrace

    trace = labelled_trace([3, 4], n_layer=3)
    text = _csv_text(trace)
    assert isinstance(open_trace(text, "t.csv"), StreamedTokens)  # positive control
    if order == "shuffled":
        text = _csv_text(trace, np.random.default_rng(0).permutation(21))
    elif order == "a token's layers apart":
        text = _csv_text(trace, [0, 1, 3, 2, *range(4, 21)])
    elif order == "a float id":
        text = text.replace(b"\n0,1,0,1,101", b"\n0,1,0,1.5,101")
    else:
        text = text.replace(b"\n0,1,0,1,101", b"\n0,1,0,5000,101")
    if order in ("shuffled", "a token's layers apart"):
        opened = open_trace(text, "t.csv")
        assert isinstance(opened, TokenTrace) and np.array_equal(opened.experts, load_any(text, "t.csv").experts)
        return
    with pytest.raises(WorkloadError) as streamed:
        open_trace(text, "t.csv")
    with pytest.raises(WorkloadError) as loaded:
        load_any(text, "t.csv")
    assert str(streamed.value) == str(loaded.value)


def test_a_long_csv_trace_streams_in_memory_that_does_not_grow_with_its_length(gt_model, tmp_path, monkeypatch):
    import tracemalloc

    import moe_model.readers.traces as traces
    from moe_model.llama.simulate import simulate_budgets
    from moe_model.routing.synthetic import Knobs, Shape, generate

    monkeypatch.setattr(traces, "CSV_BLOCK_BYTES", 1 << 16)  # blocks and chunks far shorter than either trace

    def peaks(n_tokens: int) -> tuple[int, int]:
        """Peak bytes allocated while replaying the CSV streamed, then loaded whole (the same counts)."""
        path = tmp_path / f"t{n_tokens}.csv"
        path.write_bytes(_csv_text(generate(Shape(14, 128, 8), Knobs(), n_tokens, seq_len=500)))
        out = []
        for whole in (False, True):
            tracemalloc.start()
            opened = load_any(str(path)) if whole else open_trace(str(path))
            stream = stream_build(opened, Batching(), 128, max_records=1_000, max_lookups=8_000)
            counts = [r.as_dict() for r in simulate_budgets(gt_model, stream, [300])]
            out.append((tracemalloc.get_traced_memory()[1], counts))
            tracemalloc.stop()
            del opened, stream
        assert out[0][1] == out[1][1]  # the stream counts what the whole trace counts
        return out[0][0], out[1][0]

    peaks(200)  # once first: what a process allocates once (parsers, kernels) is not the trace's
    short, long = peaks(1_000), peaks(4_000)
    assert long[1] > 3 * short[1]  # the whole load grows with the trace: the measure sees it
    assert long[0] < 1.25 * short[0] and long[0] < long[1] / 3  # the stream does not


def test_a_recorded_trace_is_streamed_in_chunks_bounded_in_ids_not_only_records(gt_model):
    path = GROUNDTRUTH / "traces" / "np4_b25.npz"
    loaded = load_recorded(path)
    per_ubatch = np.bincount(loaded.rec_ubatch, weights=loaded.rec_ntok * loaded.k).astype(int)
    bound = max(int(per_ubatch.max()), 2_000)  # the largest ubatch fits: every chunk is held to the bound
    stream = stream_recorded(path, max_records=10_000, max_lookups=bound)
    chunks = list(stream.chunks())
    assert len(chunks) > len(list(stream_recorded(path, max_records=10_000, max_lookups=10**9).chunks()))
    assert all(len(c.ids) <= bound for c in chunks)
    firsts, lasts = [c.rec_ubatch[0] for c in chunks], [c.rec_ubatch[-1] for c in chunks]
    assert all(a < b for a, b in zip(lasts, firsts[1:], strict=False))  # no ubatch split between chunks
    assert np.array_equal(np.concatenate([c.ids for c in chunks]), loaded.ids)
    assert _counts(gt_model, stream) == _counts(gt_model, loaded)


def test_token_counts_are_the_distinct_counts_ascending_as_np_unique_gives_them():
    for counts in ([], [3, 1, 1, 512, 3], [0, 7], [-1, 2], [5, 1 << 21]):
        ntok = np.array(counts, dtype=np.int32)
        got = token_counts(ntok)
        assert np.array_equal(got, np.unique(ntok)) and got.dtype == ntok.dtype
