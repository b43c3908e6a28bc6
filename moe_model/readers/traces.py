"""Routing traces, the public entry: token traces (NPZ `experts [n, n_layer, k]` or CSV) and traces recorded inside
llama.cpp (already workloads), read whole (trace_formats) or streamed chunk by chunk (token_stream,
recorded_stream); open_trace picks the reader, read_peak_bytes sizes a file from what it declares.

Every NPZ member's declared size, shape and dtype are checked before anything is decompressed (trace_npz).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from moe_model.errors import WorkloadError, one_line
from moe_model.limits import WORKLOAD_BYTES_PER_LOOKUP
from moe_model.readers.recorded_stream import stream_recorded
from moe_model.readers.token_stream import stream_csv_trace, stream_token_trace
from moe_model.readers.trace_checks import make_token_trace
from moe_model.readers.trace_formats import load_any, load_recorded, load_token_trace, save_npz, token_trace_from_csv
from moe_model.readers.trace_npz import NPZ_ERRORS, npy_header, npz_members, open_zip
from moe_model.workload import StreamedTokens, TokenTrace, Workload, WorkloadStream

__all__ = [
    "load_any",
    "load_recorded",
    "load_token_trace",
    "make_token_trace",
    "open_trace",
    "read_peak_bytes",
    "save_npz",
    "stream_csv_trace",
    "stream_recorded",
    "stream_token_trace",
    "token_trace_from_csv",
]


def read_peak_bytes(source: bytes, name: str = "") -> int:
    """The estimated peak memory of load_any and batching this trace, from declared sizes only (the NPZ's
    directory and each member's .npy header; a CSV's length): a server checks it before any array is built."""
    if name.lower().endswith(".csv"):
        return len(source) // 2 * WORKLOAD_BYTES_PER_LOOKUP  # an id takes at least a digit and a comma
    try:
        with open_zip(source) as archive:
            members = {m.filename.removesuffix(".npy"): m for m in npz_members(archive)}
            inflated = sum(m.file_size for m in members.values())
            if "experts" not in members or "rec_layer" in members:
                return 2 * inflated  # a recorded trace is its arrays, read once and checked once
            with archive.open(members["experts"]) as f:
                shape = npy_header(f, members["experts"])[0]
    except NPZ_ERRORS as err:
        raise WorkloadError(f"not a readable NPZ trace: {one_line(err)}") from None
    return inflated + int(np.prod(shape, dtype=object)) * WORKLOAD_BYTES_PER_LOOKUP


def open_trace(source: str | Path | bytes, name: str = "") -> TokenTrace | StreamedTokens | Workload | WorkloadStream:
    """load_any, except that a trace is streamed where it can be, read forward and never held whole (an NPZ may
    expand to MAX_STREAMED_NPZ_BYTES instead of MAX_NPZ_BYTES): a recorded trace whose records are in stream
    order (stream_recorded), a token trace whose `experts` are in C order (stream_token_trace), a CSV whose rows
    are in (seq, token, layer) order (stream_csv_trace)."""
    name = name or str(source if isinstance(source, (str, Path)) else "")
    if name.lower().endswith(".csv"):
        tokens = stream_csv_trace(source, Path(name).name)
        return tokens if tokens is not None else load_any(source, name)
    stream = stream_recorded(source)
    if stream is not None:
        return stream
    tokens = stream_token_trace(source, Path(name).name)
    if tokens is not None:
        return tokens
    return load_any(source, name)
