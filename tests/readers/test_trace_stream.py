"""Traces read forward, never held whole (readers/token_stream, readers/recorded_stream): the records, totals and
counts of the trace loaded whole, and the same refusals."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from conftest import GROUNDTRUTH
from trace_cases import assert_streams_as_loaded, csv_text, labelled_trace, replay_counts

from moe_model.errors import WorkloadError
from moe_model.llama.batching import build_workload, stream_build
from moe_model.readers.traces import (
    load_any,
    load_recorded,
    open_trace,
    save_npz,
    stream_recorded,
    token_trace_from_csv,
)
from moe_model.workload import (
    Batching,
    Workload,
    WorkloadStream,
)


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
    assert replay_counts(gt_model, stream) == replay_counts(gt_model, loaded)


def test_a_recorded_trace_beyond_the_in_memory_limit_is_streamed_not_refused(tmp_path, monkeypatch):
    import moe_model.readers.trace_npz as trace_npz

    path = tmp_path / "long.npz"
    save_npz(path, load_recorded(GROUNDTRUTH / "traces" / "b25.npz"))
    monkeypatch.setattr(trace_npz, "MAX_NPZ_BYTES", 100_000)  # b25 holds 216 KB of arrays
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
    assert replay_counts(gt_model, opened) == replay_counts(gt_model, work)


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


@pytest.mark.parametrize("stored", [True, False])
@pytest.mark.parametrize(
    "batching",
    [Batching(), Batching(concurrency=3, draft_tokens=2, prompt_tokens=40, ubatch_size=16), Batching(concurrency=9)],
)
def test_a_token_trace_read_forward_from_its_npz_replays_to_the_counts_of_the_whole_trace(
    gt_model, tmp_path, monkeypatch, stored, batching
):
    import moe_model.llama.batching as batching_module
    import moe_model.readers.token_stream as token_stream
    from moe_model.routing.synthetic import Knobs, Shape, generate
    from moe_model.workload import StreamedTokens

    monkeypatch.setattr(batching_module, "TRACE_READ_AHEAD_ROWS", 2)  # windows refilled every other ubatch
    monkeypatch.setattr(token_stream, "_INFLATE_BLOCK", 7)  # cursors read the deflated bytes 7 at a time
    trace = generate(Shape(14, 128, 8), Knobs(), 300, seq_len=40)
    path = tmp_path / "t.npz"
    (np.savez if stored else np.savez_compressed)(path, experts=trace.experts, seq_offsets=trace.seq_offsets)
    opened = open_trace(str(path))
    assert isinstance(opened, StreamedTokens) and not hasattr(opened, "experts")
    assert_streams_as_loaded(gt_model, opened, build_workload(trace, batching, 128), batching)


def test_a_token_trace_beyond_the_in_memory_limits_is_streamed_not_refused(tmp_path, monkeypatch):
    import moe_model.readers.trace_checks as trace_checks
    from moe_model.workload import StreamedTokens

    path = tmp_path / "t.npz"
    save_npz(path, labelled_trace([5, 7]))  # 12 tokens x 3 layers x 2: 72 ids
    monkeypatch.setattr(trace_checks, "MAX_TRACE_IDS", 50)
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


@pytest.mark.parametrize(
    "batching",
    [Batching(), Batching(concurrency=3, draft_tokens=2, prompt_tokens=40, ubatch_size=16), Batching(concurrency=9)],
)
def test_a_csv_token_trace_read_forward_replays_to_the_counts_of_the_whole_trace(
    gt_model, tmp_path, monkeypatch, batching
):
    import moe_model.llama.batching as batching_module
    import moe_model.readers.token_stream as token_stream
    from moe_model.routing.synthetic import Knobs, Shape, generate
    from moe_model.workload import StreamedTokens

    monkeypatch.setattr(batching_module, "TRACE_READ_AHEAD_ROWS", 2)  # windows refilled every other ubatch
    monkeypatch.setattr(token_stream, "CSV_BLOCK_BYTES", 997)  # many blocks: cursors start inside them, lines cut
    trace = generate(Shape(14, 128, 8), Knobs(), 300, seq_len=40)
    path = tmp_path / "t.csv"
    path.write_bytes(csv_text(trace))
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
    text = csv_text(trace)
    assert isinstance(open_trace(text, "t.csv"), StreamedTokens)  # positive control
    if order == "shuffled":
        text = csv_text(trace, np.random.default_rng(0).permutation(21))
    elif order == "a token's layers apart":
        text = csv_text(trace, [0, 1, 3, 2, *range(4, 21)])
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

    import moe_model.readers.csv_lines as csv_lines
    import moe_model.readers.token_stream as token_stream
    from moe_model.llama.simulate import simulate_budgets
    from moe_model.routing.synthetic import Knobs, Shape, generate

    monkeypatch.setattr(token_stream, "CSV_BLOCK_BYTES", 1 << 16)  # blocks and chunks far shorter than either trace
    monkeypatch.setattr(csv_lines, "CSV_BLOCK_BYTES", 1 << 16)  # and the checks' blocks before it

    def peaks(n_tokens: int) -> tuple[int, int]:
        """Peak bytes allocated while replaying the CSV streamed, then loaded whole (the same counts)."""
        path = tmp_path / f"t{n_tokens}.csv"
        path.write_bytes(csv_text(generate(Shape(14, 128, 8), Knobs(), n_tokens, seq_len=500)))
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
    assert replay_counts(gt_model, stream) == replay_counts(gt_model, loaded)


def test_a_model_with_leading_dense_layers_counts_decode_tokens_at_its_first_moe_layer(tmp_path):
    # deepseek2's layer 0 is dense: its trace records layers 1 and 2 only; 3 ubatches: a 4-token prompt, 2 decodes
    layer = np.array([1, 2] * 3)
    ntok = np.array([4, 1, 1, 1, 1, 1])
    phase = np.array([1, 1, 2, 2, 2, 2])
    off = np.concatenate([[0], np.cumsum(ntok * 2)[:-1]])
    arrays = {"rec_phase": phase, "rec_ubatch": np.repeat([0, 1, 2], 2), "rec_layer": layer, "rec_k": np.full(6, 2)}
    arrays |= {"rec_ntok": ntok, "rec_off": off, "ids": np.arange(int(ntok.sum()) * 2) % 8}
    np.savez(tmp_path / "t.npz", **arrays)
    assert load_recorded(tmp_path / "t.npz").decode_tokens == 2
    assert stream_recorded(tmp_path / "t.npz", max_records=3).decode_tokens == 2  # blocks cut through ubatches


class _Session:
    """A session's should_stop: counts the asks, True once the session has ended."""

    def __init__(self) -> None:
        self.asks, self.ended = 0, False

    def __call__(self) -> bool:
        self.asks += 1
        return self.ended


def _trace_file(tmp_path, kind: str):
    from moe_model.routing.synthetic import Knobs, Shape, generate

    if kind == "recorded":
        return GROUNDTRUTH / "traces" / "b25.npz"
    trace = generate(Shape(14, 128, 8), Knobs(), 300, seq_len=40)
    path = tmp_path / ("t.csv" if kind == "csv" else "t.npz")
    if kind == "csv":
        path.write_bytes(csv_text(trace))
    else:
        (np.savez if kind == "stored npz" else np.savez_compressed)(path, experts=trace.experts)
    return path


@pytest.mark.parametrize("kind", ["recorded", "stored npz", "deflated npz", "csv"])
def test_a_streamed_trace_stops_between_blocks_once_its_session_ends_while_checked_or_replayed(
    tmp_path, monkeypatch, kind
):
    """Issue 39: a stream's checking pass and every later read of its chunks or rows ask should_stop, as a whole read
    does: a session that ends stops the read there (ReadStoppedError), during the checks or the replay."""
    import moe_model.llama.batching as batching_module
    import moe_model.readers.recorded_stream as recorded_stream
    import moe_model.readers.token_stream as token_stream
    from moe_model.errors import ReadStoppedError
    from moe_model.readers.traces import stream_csv_trace, stream_token_trace

    monkeypatch.setattr(token_stream, "CSV_BLOCK_BYTES", 997)  # many blocks: the stop is asked between them
    monkeypatch.setattr(recorded_stream, "ID_BLOCK", 64)
    monkeypatch.setattr(batching_module, "TRACE_READ_AHEAD_ROWS", 2)  # rows read a few at a time by the replay
    path = _trace_file(tmp_path, kind)
    reader = {"recorded": stream_recorded, "csv": stream_csv_trace}.get(kind, stream_token_trace)
    with pytest.raises(ReadStoppedError):  # ended before the checking pass was done
        reader(str(path), should_stop=lambda: True)

    session = _Session()
    opened = open_trace(str(path), should_stop=session)
    assert session.asks > 0 and not isinstance(opened, Workload) and not hasattr(opened, "experts")
    many = stream_build(opened, Batching(), 128, max_records=14 * 10) if kind != "recorded" else opened
    chunks = many.chunks()
    next(chunks)  # the replay reads its first chunk, then the session ends
    session.ended, asked = True, session.asks
    with pytest.raises(ReadStoppedError):
        for _ in chunks:
            pass
    assert session.asks == asked + 1  # stopped at the first ask after the end: nothing more read
