"""Traces the trace and batching tests share: labelled token traces, CSV text, replayed counts, an NPZ bomb."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from moe_model.llama.batching import stream_build
from moe_model.readers.traces import make_token_trace


def labelled_trace(lengths, n_layer=3, k=2):
    """Token t of the whole trace routes to experts (t, t + 100) in every layer: ids name tokens."""
    n = sum(lengths)
    experts = np.stack([np.arange(n), np.arange(n) + 100], axis=1)[:, None, :].repeat(n_layer, axis=1)
    return make_token_trace(experts, np.concatenate([[0], np.cumsum(lengths)]))


BUDGETS_GT = [14, 15, 19, 161, 403, 806, 1614]


def replay_counts(model, work) -> list[dict]:
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
    assert replay_counts(model, stream) == replay_counts(model, loaded)


def csv_text(trace, order=None) -> bytes:
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


BOMB_SHAPE = (2_000_000, 48, 8)  # 768,000,000 int8 expert ids: 768 MB of zeros, ~0.75 MB deflated


def write_npz_bomb(path: Path) -> Path:
    """A token-trace NPZ whose `experts` member is zeros: 768 MB inflated from ~0.75 MB (~2 s to write)."""
    with (
        zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive,
        archive.open("experts.npy", "w", force_zip64=True) as f,
    ):
        np.lib.format.write_array_header_1_0(f, {"descr": "|i1", "fortran_order": False, "shape": BOMB_SHAPE})
        chunk = bytes(BOMB_SHAPE[1] * BOMB_SHAPE[2] * 20_000)
        for _ in range(BOMB_SHAPE[0] // 20_000):
            f.write(chunk)
    return path
