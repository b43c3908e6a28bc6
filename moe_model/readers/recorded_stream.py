"""Recorded llama.cpp traces read from their NPZ in chunks of whole ubatches, never held whole, after one
checking pass with the checks and messages of a trace loaded whole (trace_formats.load_recorded)."""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from moe_model.errors import StopCheck, WorkloadError, one_line, stop_if
from moe_model.limits import MAX_STREAMED_NPZ_BYTES, SIM_CHUNK_LOOKUPS, SIM_CHUNK_RECORDS, shown
from moe_model.readers.trace_checks import (
    NOT_RECORDS,
    OUTSIDE_IDS,
    RECORD_ARRAYS,
    check_record_spans,
    check_recorded_arrays,
    decode_tokens,
    decode_tokens_by_layer,
    one_k,
    within,
)
from moe_model.readers.trace_npz import (
    ID_BLOCK,
    NPZ_ERRORS,
    check_npz_total,
    npy_header,
    npz_members,
    open_zip,
    read_values,
)
from moe_model.workload import PHASE_DECODE, RECORDED_LABEL, Workload, WorkloadStream, chunk_cuts


@dataclass(frozen=True)
class _Scan:
    """What one checking pass over a recorded trace's records and ids found."""

    k: int
    n_layer: int
    n_expert: int
    n_ubatches: int
    ntok_values: np.ndarray
    n_lookups: int
    decode_tokens: int
    in_order: bool  # a forward-only read serves it in chunks of whole ubatches


def stream_recorded(
    source: str | Path | bytes,
    max_records: int = SIM_CHUNK_RECORDS,
    max_lookups: int = SIM_CHUNK_LOOKUPS,
    should_stop: StopCheck = None,
) -> WorkloadStream | None:
    """A recorded trace read from its NPZ in chunks of whole ubatches, each of at most max_records records and
    max_lookups ids (or one ubatch, when a single one has more ids), after one checking pass (the same checks and
    messages as load_recorded); None for an NPZ that is not a recorded trace, or whose records a forward-only
    read cannot serve (ubatches out of order, a record's ids before the previous record's, a ubatch of more
    than max_records records): load those whole. `should_stop` is asked between blocks, of the checking pass and of
    every later read of the chunks (ReadStoppedError once it returns True)."""
    try:
        with open_zip(source) as archive:
            members = {m.filename.removesuffix(".npy"): m for m in npz_members(archive)}
            if "rec_layer" not in members:
                return None
            check_npz_total(list(members.values()), MAX_STREAMED_NPZ_BYTES)
            check_recorded_arrays(set(members))
            shapes = {}
            for name, member in members.items():  # every header checked, as when loading it whole
                with archive.open(member) as f:
                    shapes[name] = npy_header(f, member)[0]
            columns = {c: members[c] for c in (*RECORD_ARRAYS, "rec_phase") if c in members}
            n_rec = shapes["rec_layer"][0] if shapes["rec_layer"] else 0
            if not n_rec or any(shapes[c] != (n_rec,) for c in columns) or len(shapes["ids"]) != 1:
                raise WorkloadError(NOT_RECORDS)
            n_ids = shapes["ids"][0]
            scan = _scan_recorded(archive, columns, members["ids"], n_rec, n_ids, max_records, should_stop)
    except NPZ_ERRORS as err:
        raise WorkloadError(f"not a readable NPZ trace: {shown(one_line(err))}") from None
    if not scan.in_order:
        return None

    def chunks() -> Iterator[Workload]:
        try:
            with open_zip(source) as archive, archive.open(members["ids"]) as f:
                ids = _ForwardIds(f, members["ids"], should_stop)
                carry: dict[str, np.ndarray] = {}
                for block in _record_blocks(archive, columns, n_rec, max_records, should_stop):
                    block = {c: np.concatenate([carry[c], a]) for c, a in block.items()} if carry else block
                    cut = int(np.searchsorted(block["rec_ubatch"], block["rec_ubatch"][-1]))  # its last ubatch goes on
                    if cut:
                        yield from _recorded_chunks({c: a[:cut] for c, a in block.items()}, ids, scan, max_lookups)
                    carry = {c: a[cut:] for c, a in block.items()}
                yield from _recorded_chunks(carry, ids, scan, max_lookups)
        except NPZ_ERRORS as err:
            raise WorkloadError(f"not a readable NPZ trace: {shown(one_line(err))}") from None

    return WorkloadStream(
        scan.n_layer,
        scan.n_expert,
        scan.k,
        scan.ntok_values,
        n_rec,
        scan.n_lookups,
        scan.decode_tokens,
        scan.n_ubatches,
        chunks,
        RECORDED_LABEL,
    )


def _scan_recorded(
    archive: zipfile.ZipFile,
    columns: dict[str, zipfile.ZipInfo],
    ids_member: zipfile.ZipInfo,
    n_rec: int,
    n_ids: int,
    max_records: int,
    should_stop: StopCheck,
) -> _Scan:
    spans: dict[str, tuple[int, int]] = {}
    k = None
    ntok_values = np.zeros(0, dtype=np.int64)
    in_ids, in_order = True, True
    max_end = lookups = 0
    decode = np.zeros(0, dtype=np.int64)
    prev_ub, prev_end, run = -1, 0, 0  # the previous record's ubatch and end of ids, its ubatch's records so far
    for block in _record_blocks(archive, columns, n_rec, max_records, should_stop):
        for name in ("rec_layer", "rec_ubatch", "rec_phase"):
            if name in block:
                _widen(spans, name, block[name])
        k_values = np.unique(block["rec_k"] if k is None else np.append(block["rec_k"], k))
        k = one_k(k_values)  # checked at once: k * ntok below must not overflow
        ntok, off, ub = block["rec_ntok"], block["rec_off"], block["rec_ubatch"]
        in_ids = in_ids and within(ntok, n_ids + 1) and within(off, n_ids + 1)
        if not in_ids:  # refused after the pass, once every other check has had its say
            continue
        end = off + k * ntok
        max_end = max(max_end, int(end.max()))
        lookups += int((k * ntok).sum())
        ntok_values = np.union1d(ntok_values, ntok)
        phase = block.get("rec_phase", np.full(len(ntok), PHASE_DECODE))
        by_layer = decode_tokens_by_layer(ntok, phase, block["rec_layer"])
        decode = by_layer if not decode.size else decode + by_layer
        runs = np.diff(np.concatenate([[0], np.flatnonzero(np.diff(ub)) + 1, [len(ub)]]))
        runs[0] += run if ub[0] == prev_ub else 0
        in_order = in_order and bool(
            ub[0] >= prev_ub and off[0] >= prev_end and np.all(np.diff(ub) >= 0) and np.all(off[1:] >= end[:-1])
        )
        in_order = in_order and int(runs.max()) <= max_records
        prev_ub, prev_end, run = int(ub[-1]), int(end[-1]), int(runs[-1])
    with archive.open(ids_member) as f:
        ids = _ForwardIds(f, ids_member, should_stop)
        for start in range(0, n_ids, ID_BLOCK):
            _widen(spans, "ids", ids.span(start, min(n_ids, start + ID_BLOCK)))
    check_record_spans(spans, n_rec)
    if not in_ids or max_end > n_ids:
        raise WorkloadError(OUTSIDE_IDS)
    return _Scan(
        k,
        spans["rec_layer"][1] + 1,
        spans["ids"][1] + 1 if "ids" in spans else 0,
        spans["rec_ubatch"][1] + 1,
        ntok_values,
        lookups,
        int(decode[spans["rec_layer"][0]]) if decode.size else 0,
        in_order,
    )


def _widen(spans: dict[str, tuple[int, int]], name: str, values: np.ndarray) -> None:
    if values.size:
        lo, hi = spans.get(name, (int(values.min()), int(values.max())))
        spans[name] = (min(lo, int(values.min())), max(hi, int(values.max())))


def _record_blocks(
    archive: zipfile.ZipFile, columns: dict[str, zipfile.ZipInfo], n_rec: int, size: int, should_stop: StopCheck
) -> Iterator[dict[str, np.ndarray]]:
    """The record arrays `size` records at a time, every member read forward in step (as int64), `should_stop`
    asked before each block."""
    with ExitStack() as stack:
        readers = {}
        for name, member in columns.items():
            f = stack.enter_context(archive.open(member))
            readers[name] = (f, member, npy_header(f, member)[2])
        for start in range(0, n_rec, size):
            stop_if(should_stop)
            n = min(size, n_rec - start)
            yield {
                name: read_values(f, member, dtype, n).astype(np.int64) for name, (f, member, dtype) in readers.items()
            }


class _ForwardIds:
    """The `ids` member read forward only, span after span (skipping any gap between records), `should_stop` asked
    before each span and each block skipped."""

    def __init__(self, f: BinaryIO, member: zipfile.ZipInfo, should_stop: StopCheck) -> None:
        self.f, self.member, self.dtype, self.pos = f, member, npy_header(f, member)[2], 0
        self.should_stop = should_stop

    def span(self, lo: int, hi: int) -> np.ndarray:
        stop_if(self.should_stop)
        while self.pos < lo:
            stop_if(self.should_stop)
            n = min(ID_BLOCK, lo - self.pos)
            read_values(self.f, self.member, self.dtype, n)
            self.pos += n
        self.pos = hi
        return read_values(self.f, self.member, self.dtype, hi - lo)


def _recorded_chunks(
    block: dict[str, np.ndarray], ids: _ForwardIds, scan: _Scan, max_lookups: int
) -> Iterator[Workload]:
    """Whole ubatches of a block as chunks of at most max_lookups ids each (or one ubatch, when it has more)."""
    ub = block["rec_ubatch"]
    starts = np.flatnonzero(np.diff(ub)) + 1
    lookups = np.concatenate([[0], np.cumsum(block["rec_ntok"] * scan.k)])
    bounds = [0, *chunk_cuts(starts, lookups, len(ub), max_lookups), len(ub)]
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        if b > a:
            yield _recorded_chunk({c: x[a:b] for c, x in block.items()}, ids, scan)


def _recorded_chunk(block: dict[str, np.ndarray], ids: _ForwardIds, scan: _Scan) -> Workload:
    """Whole ubatches of a recorded trace, offsets rebased onto their own span of ids."""
    ntok, off = block["rec_ntok"], block["rec_off"]
    lo, hi = int(off[0]), int(off[-1] + scan.k * ntok[-1])  # records in order: the last one ends last
    phase = block.get("rec_phase", np.full(len(ntok), PHASE_DECODE))
    return Workload(
        scan.n_layer,
        scan.n_expert,
        scan.k,
        block["rec_ubatch"],
        block["rec_layer"].astype(np.int32),
        ntok.astype(np.int32),
        off - lo,
        phase.astype(np.int8),
        ids.span(lo, hi).astype(np.int32),
        decode_tokens(ntok, phase, block["rec_layer"]),
        RECORDED_LABEL,
    )
