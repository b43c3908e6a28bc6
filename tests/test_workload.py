"""Batching a token trace the way llama-server feeds the cache, whole or chunk by chunk."""

from __future__ import annotations

import numpy as np
import pytest
from trace_cases import labelled_trace, replay_counts

from moe_model.errors import WorkloadError
from moe_model.llama.batching import _keep_output_rows, build_workload, stream_build
from moe_model.readers.traces import (
    make_token_trace,
)
from moe_model.workload import (
    PHASE_DECODE,
    PHASE_PROMPT,
    PHASE_WARMUP,
    Batching,
    token_counts,
)


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


def test_prompt_routing_beyond_the_limit_is_refused_before_drawing():
    trace = labelled_trace([4] * 12)
    assert build_workload(trace, Batching(prompt_tokens=64), 256).n_records  # positive control
    with pytest.raises(WorkloadError, match="drawn routing is above this tool's limit of 100,000,000"):
        build_workload(make_token_trace(np.zeros((12, 48, 8), dtype=np.int16)), Batching(prompt_tokens=131_072), 128)


def test_an_out_of_memory_sized_trace_is_refused_before_building_in_one_line(monkeypatch):
    from moe_model.llama import batching as workload

    trace = make_token_trace(np.zeros((20_000, 94, 8), dtype=np.int16) + np.arange(8, dtype=np.int16))
    monkeypatch.setattr(workload, "available_memory_bytes", lambda: 64 * 2**20)  # a machine with 64 MiB free
    with pytest.raises(WorkloadError, match=r"needs about 0\.5 GiB to build \(15,040,000 expert lookups\)") as info:
        build_workload(trace, Batching(warmup=False))
    assert "\n" not in str(info.value)
    monkeypatch.setattr(workload, "available_memory_bytes", lambda: 64 * 2**30)
    assert build_workload(trace, Batching(warmup=False)).n_records == 20_000 * 94  # positive control


@pytest.mark.parametrize(
    "batching",
    [
        Batching(),
        Batching(concurrency=3, draft_tokens=2, prompt_tokens=40, ubatch_size=16),
        Batching(prompt_tokens=40, ubatch_size=16, last_layer_prunes=False),  # gpt-oss before b11480
        Batching(warmup=False),
    ],
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
    assert replay_counts(gt_model, stream) == replay_counts(gt_model, whole)


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
        assert replay_counts(gt_model, stream) == replay_counts(gt_model, whole)


def test_token_counts_are_the_distinct_counts_ascending_as_np_unique_gives_them():
    for counts in ([], [3, 1, 1, 512, 3], [0, 7], [-1, 2], [5, 1 << 21]):
        ntok = np.array(counts, dtype=np.int32)
        got = token_counts(ntok)
        assert np.array_equal(got, np.unique(ntok)) and got.dtype == ntok.dtype
