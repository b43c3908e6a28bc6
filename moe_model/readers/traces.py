"""Routing traces, the public entry: token traces (NPZ `experts [n, n_layer, k]` or CSV) and traces recorded inside
llama.cpp (already workloads), read whole (trace_formats) or streamed chunk by chunk (token_stream,
recorded_stream); open_trace picks the reader, read_peak_bytes sizes a file from what it declares.

Every NPZ member's declared size, shape and dtype, and the archive's inflation, are checked before anything is
decompressed (trace_npz); open_trace and load_trace hold a trace's expert ids to a ReplayCap (work, not only
memory), from what it declares before it is read and from what a replay looks up once it is open.
"""

from __future__ import annotations

import io
from contextlib import ExitStack
from pathlib import Path

import numpy as np

from moe_model.errors import ReadStoppedError, StopCheck, WorkloadError, one_line
from moe_model.limits import CLI_MAX_LOOKUPS, WORKLOAD_BYTES_PER_LOOKUP, shown
from moe_model.readers.csv_lines import scan_csv_lines
from moe_model.readers.files import open_regular
from moe_model.readers.recorded_stream import stream_recorded
from moe_model.readers.token_stream import stream_csv_trace, stream_token_trace
from moe_model.readers.trace_checks import ReplayCap, make_token_trace
from moe_model.readers.trace_formats import (
    expert_columns,
    load_any,
    load_recorded,
    load_token_trace,
    save_npz,
    token_trace_from_csv,
)
from moe_model.readers.trace_npz import NPZ_ERRORS, npy_header, npz_members, open_zip
from moe_model.workload import StreamedTokens, TokenTrace, Workload, WorkloadStream

__all__ = [
    "CLI_REPLAY",
    "ReadStoppedError",
    "ReplayCap",
    "declared_lookups",
    "load_any",
    "load_recorded",
    "load_token_trace",
    "load_trace",
    "make_token_trace",
    "open_trace",
    "read_peak_bytes",
    "replay_lookups",
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


CLI_REPLAY = ReplayCap(CLI_MAX_LOOKUPS, "the CLI", "--max-lookups raises it")


def open_trace(
    source: str | Path | bytes, name: str = "", cap: ReplayCap = CLI_REPLAY, should_stop: StopCheck = None
) -> TokenTrace | StreamedTokens | Workload | WorkloadStream:
    """load_any, except that a trace is streamed where it can be, read forward and never held whole (an NPZ may
    expand to MAX_STREAMED_NPZ_BYTES instead of MAX_NPZ_BYTES): a recorded trace whose records are in stream
    order (stream_recorded), a token trace whose `experts` are in C order (stream_token_trace), a CSV whose rows
    are in (seq, token, layer) order (stream_csv_trace). Its expert ids are held to `cap`: those it declares
    before anything is read, those a replay looks up once it is open (a recorded trace's records may share ids).
    `should_stop` is asked between blocks: of the checks, of a whole read, and of every read of a stream's chunks or
    rows (a stream read later, by the replay, stops there too)."""
    cap.check(declared_lookups(source, name, should_stop))
    opened = _opened(source, name or str(source if isinstance(source, (str, Path)) else ""), should_stop)
    cap.check(replay_lookups(opened))
    return opened


def load_trace(
    source: str | Path | bytes, name: str = "", cap: ReplayCap = CLI_REPLAY, should_stop: StopCheck = None
) -> TokenTrace | Workload:
    """load_any, its expert ids held to `cap` as open_trace holds them, after the cheap checks of declared_lookups;
    `should_stop` is asked between blocks (ReadStoppedError, a WorkloadError, once it returns True)."""
    cap.check(declared_lookups(source, name, should_stop))
    loaded = load_any(source, name, should_stop)
    cap.check(replay_lookups(loaded))
    return loaded


def _opened(
    source: str | Path | bytes, name: str, should_stop: StopCheck
) -> TokenTrace | StreamedTokens | Workload | WorkloadStream:
    if name.lower().endswith(".csv"):
        tokens = stream_csv_trace(source, Path(name).name, should_stop)
        return tokens if tokens is not None else load_any(source, name, should_stop)
    stream = stream_recorded(source, should_stop=should_stop)
    if stream is not None:
        return stream
    tokens = stream_token_trace(source, Path(name).name, should_stop)
    if tokens is not None:
        return tokens
    return load_any(source, name, should_stop)


def declared_lookups(source: str | Path | bytes, name: str = "", should_stop: StopCheck = None) -> int:
    """The expert ids a trace says it holds, read from the NPZ directory and one .npy header (nothing inflated
    beyond it) or from a CSV's header and line count, once every line's length and fields are checked
    (scan_csv_lines); 0 for a file that is no trace (its reader says why). The cheap checks every read runs first:
    a hostile CSV is refused in one line in well under a second, before pandas sees it."""
    name = name or str(source if isinstance(source, (str, Path)) else "")
    if name.lower().endswith(".csv"):
        return _csv_lookups(source, should_stop)
    try:
        with open_zip(source) as archive:
            members = {m.filename.removesuffix(".npy"): m for m in npz_members(archive)}
            key = "ids" if "rec_layer" in members else "experts"
            if key not in members:
                return 0
            with archive.open(members[key]) as f:
                return int(np.prod(npy_header(f, members[key])[0], dtype=object))
    except NPZ_ERRORS as err:
        raise WorkloadError(f"not a readable NPZ trace: {shown(one_line(err))}") from None


def _csv_lookups(source: str | Path | bytes, should_stop: StopCheck) -> int:
    """Expert id columns times data lines (a blank line counted too), each line checked, none parsed."""
    with ExitStack() as stack:
        raw = (
            stack.enter_context(open_regular(source, "trace file", WorkloadError))
            if isinstance(source, (str, Path))
            else io.BytesIO(source)
        )
        lines = scan_csv_lines(raw, should_stop)
    return len(expert_columns(lines.names)) * lines.lines


def replay_lookups(item: TokenTrace | StreamedTokens | Workload | WorkloadStream) -> int:
    """The expert ids a replay of an opened trace looks up."""
    if isinstance(item, TokenTrace):
        return int(item.experts.size)
    if isinstance(item, StreamedTokens):
        return item.n_tokens * item.n_layer * item.k
    if isinstance(item, Workload):
        return int(item.rec_ntok.astype(np.int64).sum()) * item.k
    return item.n_lookups
