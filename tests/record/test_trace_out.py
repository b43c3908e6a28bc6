"""The recorded routing as the trace layout the simulator replays (readers.traces.load_recorded reads it back)."""

from __future__ import annotations

import numpy as np
import pytest

from moe_model.readers.traces import load_recorded, open_trace
from moe_model.record.callback import LayerRecord
from moe_model.record.runtime import RecordError
from moe_model.record.trace_out import Ubatch, trace_arrays, write_trace
from moe_model.workload import PHASE_DECODE, PHASE_PROMPT, PHASE_WARMUP, Workload, WorkloadStream


def _ubatch(phase: int, call: int, tokens: list[int], k: int = 2) -> Ubatch:
    rng = np.random.default_rng(len(tokens) + phase)
    return Ubatch(
        phase, call, tuple(LayerRecord(il, rng.integers(0, 8, (n, k)).astype(np.int32)) for il, n in enumerate(tokens))
    )


UBATCHES = (
    _ubatch(PHASE_WARMUP, -1, [2, 2, 1]),
    _ubatch(PHASE_PROMPT, 0, [5, 5, 0]),
    _ubatch(PHASE_PROMPT, 1, [3, 3, 1]),
    _ubatch(PHASE_DECODE, 2, [1, 1, 1]),
)


def test_records_follow_the_ubatches_token_major_with_offsets_into_ids():
    arrays = trace_arrays(UBATCHES)
    assert arrays["rec_ubatch"].tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert arrays["rec_call"].tolist() == [-1] * 3 + [0] * 3 + [1] * 3 + [2] * 3
    assert arrays["rec_ntok"].tolist() == [2, 2, 1, 5, 5, 0, 3, 3, 1, 1, 1, 1]
    assert arrays["rec_off"][-1] + 2 == len(arrays["ids"])
    third = UBATCHES[1].layers[1].ids
    assert (
        arrays["ids"][arrays["rec_off"][4] : arrays["rec_off"][4] + third.size].tolist() == third.reshape(-1).tolist()
    )


def test_the_written_trace_is_read_whole_and_streamed_as_the_same_workload(tmp_path):
    path = tmp_path / "t.npz"
    write_trace(path, UBATCHES)
    whole = load_recorded(path)
    assert isinstance(whole, Workload) and whole.k == 2 and whole.n_layer == 3
    assert whole.rec_phase.tolist()[:3] == [PHASE_WARMUP] * 3 and whole.decode_tokens == 1
    assert isinstance(open_trace(path), WorkloadStream)


def test_layers_selecting_different_numbers_of_experts_are_refused():
    mixed = (
        Ubatch(
            PHASE_PROMPT, 0, (LayerRecord(0, np.zeros((1, 2), np.int32)), LayerRecord(1, np.zeros((1, 3), np.int32)))
        ),
    )
    with pytest.raises(RecordError, match="experts per token"):
        trace_arrays(mixed)


def test_nothing_recorded_writes_nothing(tmp_path):
    with pytest.raises(RecordError, match="no ubatch"):
        write_trace(tmp_path / "t.npz", ())
    assert not list(tmp_path.iterdir())
