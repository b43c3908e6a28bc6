"""Token traces read forward, never held whole: a CSV in blocks of lines, an NPZ's `experts` member in place
(stored) or inflated by cloned inflaters (deflated), each after one checking pass; cursors serve token rows."""

from __future__ import annotations

import io
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from moe_model.errors import StopCheck, WorkloadError, one_line, stop_if
from moe_model.limits import CSV_BLOCK_BYTES, MAX_CSV_LINE_BYTES, MAX_EXPERTS, MAX_LAYERS, MAX_STREAMED_NPZ_BYTES
from moe_model.readers.csv_lines import check_fields, csv_header
from moe_model.readers.files import open_regular
from moe_model.readers.trace_checks import check_ids, check_sequences, check_token_shape, within
from moe_model.readers.trace_formats import CSV_ERRORS, expert_columns
from moe_model.readers.trace_npz import (
    ID_BLOCK,
    NPZ_ERRORS,
    check_npz_total,
    npy_header,
    npz_member,
    npz_members,
    open_zip,
    read_values,
)
from moe_model.workload import StreamedTokens


def stream_csv_trace(
    source: str | Path | bytes, label: str = "", should_stop: StopCheck = None
) -> StreamedTokens | None:
    """A CSV token trace read forward in blocks of CSV_BLOCK_BYTES after one checking pass (its shape, sequences,
    per-layer expert counts, and where each block starts, so a cursor starts near its row); None for a CSV that
    token_trace_from_csv would have to sort or refuse (rows not in (seq, token, layer) order with every layer of a
    token in turn, a line of other than the header's fields, a value that is not an integer or out of range): that
    one loads whole, with its messages. A header too long or too wide is refused here; `should_stop` is asked
    between blocks, of the checking pass and of every later read of its rows."""
    try:
        with _csv_raw(source) as raw:
            header = _CsvHeader.read(raw)
            if header is None:
                return None
            scan = _CsvScan(header)
            for at, block in _line_blocks(raw, header.data_at):
                stop_if(should_stop)
                if not scan.add(at, _csv_block(block, header)):
                    return None
            shape = scan.shape()
    except CSV_ERRORS:
        return None
    if shape is None:
        return None
    n = check_token_shape(shape, np.dtype(np.int64))
    offsets, ubatch = check_sequences(n, scan.seq_offsets(), None)
    rows, counts = _CsvRows(source, header, shape[1], scan.starts, should_stop), scan.expert_counts(shape[1])
    return StreamedTokens(n, shape[1], shape[2], counts.shape[1], offsets, ubatch, counts, rows.reader, label)


@contextmanager
def _csv_raw(source: str | Path | bytes) -> Iterator[BinaryIO]:
    if isinstance(source, (str, Path)):
        with open_regular(source, "trace file", WorkloadError) as raw:
            yield raw
    else:
        yield io.BytesIO(source)


def _line_blocks(raw: BinaryIO, at: int) -> Iterator[tuple[int, bytes]]:
    """Whole lines from byte `at` on, about CSV_BLOCK_BYTES at a time: (where the block starts, its bytes). The
    file handle may be shared: every read seeks first."""
    carry, pos = b"", at
    while True:
        raw.seek(pos)
        data = raw.read(CSV_BLOCK_BYTES)
        pos += len(data)
        if not data:
            if carry:
                yield pos - len(carry), carry + b"\n"
            return
        data = carry + data
        cut = data.rfind(b"\n") + 1
        if not cut and len(data) > MAX_CSV_LINE_BYTES:
            raise ValueError("a CSV line longer than this tool reads in one piece")
        if cut:
            yield pos - len(data), data[:cut]
        carry = data[cut:]


@dataclass(frozen=True)
class _CsvHeader:
    """A CSV trace's column names (as pandas names them) and where its data lines begin."""

    names: tuple[str, ...]
    experts: tuple[str, ...]
    data_at: int

    @staticmethod
    def read(raw: BinaryIO) -> _CsvHeader | None:
        import pandas as pd

        line = csv_header(raw)
        names = tuple(pd.read_csv(io.BytesIO(line), nrows=0).columns)
        experts = tuple(expert_columns(names))
        if not {"seq", "token", "layer"} <= set(names) or not experts:
            return None
        return _CsvHeader(names, experts, len(line))


def _csv_block(block: bytes, header: _CsvHeader) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """A block's seq, token and layer columns and its ids [rows, k] (int64); None where a line has other than the
    header's fields (pandas would make the extra ones an index) or a value is not an integer."""
    import pandas as pd

    try:
        check_fields(block, len(header.names), 2)
    except WorkloadError:
        return None
    used = ["seq", "token", "layer", *header.experts]
    try:
        frame = pd.read_csv(io.BytesIO(block), header=None, names=list(header.names), usecols=used)
    except pd.errors.EmptyDataError:  # blank lines only
        frame = pd.DataFrame({c: np.zeros(0, np.int64) for c in used})
    if not all(pd.api.types.is_integer_dtype(frame[c]) for c in used):
        return None
    columns = (frame[c].to_numpy(np.int64) for c in ("seq", "token", "layer"))
    return *columns, frame[list(header.experts)].to_numpy(np.int64)


class _CsvScan:
    """The checking pass over a CSV trace's blocks: rows in order, every token's layers 0..n_layer-1 in turn,
    values in range; what the stream needs: tokens per sequence, expert counts per layer, where blocks start."""

    def __init__(self, header: _CsvHeader) -> None:
        self.k = len(header.experts)
        self.rows = 0
        self.last: tuple[int, int, int] | None = None  # the previous row's seq, token and layer
        self.ends: set[int] = set()  # layers that ended a token
        self.seqs: list[list[int]] = []  # [seq, tokens] per sequence, in file order
        self.counts = np.zeros(0, dtype=np.int64)  # [layer * MAX_EXPERTS + id]
        self.starts: list[tuple[int, int]] = []  # (row, byte) where each block starts

    def add(self, at: int, block) -> bool:
        """One block of rows; False when the trace cannot be streamed as it is."""
        if block is None:
            return False
        seq, tok, layer, ids = block
        if not len(seq):
            return True
        if not (within(layer, MAX_LAYERS) and within(ids, MAX_EXPERTS)):
            return False
        first = self.last is None
        prev = [np.concatenate([[v], a[:-1]]) for v, a in zip(self.last or (0, 0, 0), (seq, tok, layer), strict=True)]
        new = layer == 0
        later = (seq > prev[0]) | ((seq == prev[0]) & (tok > prev[1]))
        same = (seq == prev[0]) & (tok == prev[1]) & (layer == prev[2] + 1)
        if first:
            later[0], same[0] = True, False
        if not np.all(np.where(new, later, same)):
            return False
        self.ends.update(np.unique(prev[2][new][1 if first else 0 :]).tolist())
        self._count_sequences(seq[new])
        keys = (layer[:, None] * MAX_EXPERTS + ids).ravel()
        size = max(len(self.counts), (int(layer.max()) + 1) * MAX_EXPERTS)
        self.counts = np.pad(self.counts, (0, size - len(self.counts))) + np.bincount(keys, minlength=size)
        self.starts.append((self.rows, at))
        self.rows += len(seq)
        self.last = (int(seq[-1]), int(tok[-1]), int(layer[-1]))
        return True

    def _count_sequences(self, token_seqs: np.ndarray) -> None:
        """Tokens per sequence: runs of one seq value (seq values rise, so a run is a whole sequence)."""
        if not len(token_seqs):
            return
        bounds = np.concatenate([[0], np.flatnonzero(np.diff(token_seqs)) + 1, [len(token_seqs)]])
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            if self.seqs and self.seqs[-1][0] == token_seqs[a]:
                self.seqs[-1][1] += int(b - a)
            else:
                self.seqs.append([int(token_seqs[a]), int(b - a)])

    def shape(self) -> tuple[int, int, int] | None:
        """(tokens, layers, k), or None where a token does not end at the last layer."""
        if self.last is None:
            return None
        n_layer = len(self.counts) // MAX_EXPERTS
        if self.ends | {self.last[2]} != {n_layer - 1}:
            return None
        return self.rows // n_layer, n_layer, self.k

    def seq_offsets(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum([n for _, n in self.seqs])]).astype(np.int64)

    def expert_counts(self, n_layer: int) -> np.ndarray:
        counts = self.counts.reshape(n_layer, MAX_EXPERTS)
        return counts[:, : int(np.flatnonzero(counts.any(axis=0))[-1]) + 1]


class _CsvRows:
    """Token rows of a checked CSV trace, read forward by any number of cursors over one file handle, each from
    the block start nearest before its row."""

    def __init__(
        self,
        source: str | Path | bytes,
        header: _CsvHeader,
        n_layer: int,
        starts: list[tuple[int, int]],
        should_stop: StopCheck,
    ):
        self.source, self.header, self.n_layer, self.should_stop = source, header, n_layer, should_stop
        self.start_rows = np.array([r for r, _ in starts], dtype=np.int64)
        self.start_bytes = np.array([b for _, b in starts], dtype=np.int64)

    @contextmanager
    def reader(self) -> Iterator[_CsvReader]:
        with _csv_raw(self.source) as raw:
            yield _CsvReader(self, raw)


class _CsvReader:
    def __init__(self, rows: _CsvRows, raw: BinaryIO) -> None:
        self.rows, self.raw = rows, raw

    def cursor(self, row: int) -> _CsvCursor:
        rows = self.rows
        line = row * rows.n_layer
        i = int(np.searchsorted(rows.start_rows, line, side="right")) - 1
        cursor = _CsvCursor(_line_blocks(self.raw, int(rows.start_bytes[i])), rows)
        cursor.skip(line - int(rows.start_rows[i]))
        return cursor


class _CsvCursor:
    """Token rows from one place on: a block of lines parsed at a time, served n rows at a time."""

    def __init__(self, blocks: Iterator[tuple[int, bytes]], rows: _CsvRows) -> None:
        self.blocks, self.rows = blocks, rows
        self.ids = np.zeros((0, len(rows.header.experts)), dtype=np.int16)

    def _fill(self, n_lines: int) -> None:
        while len(self.ids) < n_lines:
            stop_if(self.rows.should_stop)
            block = next(self.blocks, None)
            block = None if block is None else _csv_block(block[1], self.rows.header)
            if block is None:
                raise WorkloadError("the CSV trace changed while it was read")
            self.ids = np.concatenate([self.ids, block[3].astype(np.int16)])  # checked below MAX_EXPERTS

    def skip(self, n_lines: int) -> None:
        self._fill(n_lines)
        self.ids = self.ids[n_lines:]

    def take(self, n: int) -> np.ndarray:
        lines = n * self.rows.n_layer
        self._fill(lines)
        out, self.ids = self.ids[:lines], self.ids[lines:]
        return out.reshape(n, self.rows.n_layer, -1)


def stream_token_trace(
    source: str | Path | bytes, label: str = "", should_stop: StopCheck = None
) -> StreamedTokens | None:
    """A token-trace NPZ read forward after one checking pass over its `experts` (the checks and messages of
    make_token_trace, and each layer's expert counts for the drawn prompt rows); None for an NPZ that is not a
    token trace, or whose `experts` are in Fortran order (a forward read of rows cannot serve it). `should_stop`
    is asked between blocks, of the checking pass and of every later read of its rows."""
    try:
        with open_zip(source) as archive:
            members = {m.filename.removesuffix(".npy"): m for m in npz_members(archive)}
            if "experts" not in members or "rec_layer" in members:
                return None
            check_npz_total(list(members.values()), MAX_STREAMED_NPZ_BYTES)
            member = members["experts"]
            with archive.open(member) as f:
                shape, fortran, dtype, _ = npy_header(f, member)
                data_at = f.tell()
            n = check_token_shape(shape, dtype)
            if fortran:
                return None
            small = {c: _small_member(archive, members[c], n) for c in ("seq_offsets", "ubatch") if c in members}
            offsets, ubatch = check_sequences(n, small.get("seq_offsets"), small.get("ubatch"))
            counts = _expert_counts(archive, member, shape, dtype, should_stop)
    except NPZ_ERRORS as err:
        raise WorkloadError(f"not a readable NPZ trace: {one_line(err)}") from None
    rows = _MemberRows(source, member, data_at, shape[1:], dtype, should_stop)
    return StreamedTokens(n, shape[1], shape[2], counts.shape[1], offsets, ubatch, counts, rows.reader, label)


def _small_member(archive: zipfile.ZipFile, member: zipfile.ZipInfo, n_tokens: int) -> np.ndarray:
    """`seq_offsets` or `ubatch`: at most one value per token (plus one), read whole once its size is checked."""
    if member.file_size > 8 * (n_tokens + 1) + 65_536:  # int64 values and a .npy header
        raise WorkloadError(f"`{member.filename}` holds more than one value per token of the trace")
    return npz_member(archive, member)


def _expert_counts(
    archive: zipfile.ZipFile, member: zipfile.ZipInfo, shape: tuple[int, ...], dtype: np.dtype, should_stop: StopCheck
):
    """Every id range-checked, and how often each layer picked each expert [n_layer, max id + 1], block by block."""
    n, n_layer, k = shape
    counts = np.zeros(n_layer * MAX_EXPERTS, dtype=np.int64)
    base = (np.arange(n_layer, dtype=np.int64) * MAX_EXPERTS)[None, :, None]
    block = max(1, ID_BLOCK // (n_layer * k))
    with archive.open(member) as f:
        npy_header(f, member)
        for start in range(0, n, block):
            stop_if(should_stop)
            rows = min(block, n - start)
            ids = read_values(f, member, dtype, rows * n_layer * k).reshape(rows, n_layer, k)
            check_ids(ids, MAX_EXPERTS, "expert ids")
            counts += np.bincount((base + ids.astype(np.int64)).ravel(), minlength=len(counts))
        f.read()  # to the end: the member's CRC is checked there
    counts = counts.reshape(n_layer, MAX_EXPERTS)
    return counts[:, : int(np.flatnonzero(counts.any(axis=0))[-1]) + 1]


_INFLATE_BLOCK = 1 << 16  # compressed bytes a cursor reads from the file at a time


class _MemberRows:
    """Token rows of an NPZ member, read forward by any number of cursors over one file handle. A stored member
    is read in place; a deflated one by inflaters cloned from one that runs ahead to each cursor's first row
    (zlib state is ~40 KiB): every byte is inflated twice, whatever the number of cursors."""

    def __init__(
        self,
        source: str | Path | bytes,
        member: zipfile.ZipInfo,
        data_at: int,
        row_shape: tuple[int, ...],
        dtype: np.dtype,
        should_stop: StopCheck,
    ) -> None:
        self.source, self.member, self.data_at, self.should_stop = source, member, data_at, should_stop
        self.row_shape, self.dtype = tuple(row_shape), dtype
        self.row_bytes = int(np.prod(row_shape)) * dtype.itemsize

    @contextmanager
    def reader(self) -> Iterator[_RowReader]:
        with (
            open_regular(self.source, "trace file", WorkloadError)
            if isinstance(self.source, (str, Path))
            else io.BytesIO(self.source)
        ) as raw:
            yield _RowReader(self, raw)


class _RowReader:
    def __init__(self, rows: _MemberRows, raw: BinaryIO) -> None:
        self.rows, self.raw = rows, raw
        raw.seek(rows.member.header_offset)
        head = raw.read(30)
        if len(head) != 30 or head[:4] != b"PK\x03\x04":
            raise WorkloadError("not a readable NPZ trace: a member's local header is damaged")
        self.start = rows.member.header_offset + 30 + int.from_bytes(head[26:28], "little")
        self.start += int.from_bytes(head[28:30], "little")
        self.ahead: _Inflater | None = None
        self.ahead_row = 0

    def cursor(self, row: int) -> _RowCursor:
        rows = self.rows
        if rows.member.compress_type == zipfile.ZIP_STORED:
            at = self.start + rows.data_at + row * rows.row_bytes
            return _RowCursor(_Stored(self.raw, at, self.start + rows.member.compress_size), rows)
        if self.ahead is None or row < self.ahead_row:  # from the start (rows are asked for in rising order)
            self.ahead, self.ahead_row = _Inflater(self.raw, self.start, rows.member.compress_size), 0
            self.ahead.skip(rows.data_at)
        self.ahead.skip((row - self.ahead_row) * rows.row_bytes, rows.should_stop)
        self.ahead_row = row
        return _RowCursor(self.ahead.copy(), rows)


class _RowCursor:
    def __init__(self, source: _Stored | _Inflater, rows: _MemberRows) -> None:
        self.source, self.rows = source, rows

    def take(self, n: int) -> np.ndarray:
        stop_if(self.rows.should_stop)
        data = np.frombuffer(self.source.read(n * self.rows.row_bytes), dtype=self.rows.dtype)
        return data.reshape(n, *self.rows.row_shape).astype(np.int16)  # ids were checked below MAX_EXPERTS


class _Stored:
    """A stored member's bytes from `at` on, read in place."""

    def __init__(self, raw: BinaryIO, at: int, end: int) -> None:
        self.raw, self.at, self.end = raw, at, end

    def read(self, n: int) -> bytes:
        self.raw.seek(self.at)
        data = self.raw.read(min(n, self.end - self.at))
        if len(data) != n:
            raise WorkloadError("not a readable NPZ trace: `experts` is cut off")
        self.at += n
        return data


class _Inflater:
    """A deflated member inflated forward from its compressed bytes at `at` (`left` of them not read yet)."""

    def __init__(self, raw: BinaryIO, at: int, left: int) -> None:
        self.raw, self.at, self.left = raw, at, left
        self.z, self.pending = zlib.decompressobj(-zlib.MAX_WBITS), b""

    def copy(self) -> _Inflater:
        twin = _Inflater(self.raw, self.at, self.left)
        twin.z, twin.pending = self.z.copy(), self.pending
        return twin

    def read(self, n: int) -> bytes:
        out, have = [], 0
        while have < n:
            if not self.pending and self.left:
                self.raw.seek(self.at)
                self.pending = self.raw.read(min(_INFLATE_BLOCK, self.left))
                self.at, self.left = self.at + len(self.pending), self.left - len(self.pending)
            try:
                piece = self.z.decompress(self.pending, n - have)
            except zlib.error as err:
                raise WorkloadError(f"not a readable NPZ trace: {one_line(err)}") from None
            self.pending = self.z.unconsumed_tail
            if not piece and not self.pending and (not self.left or self.z.eof):
                raise WorkloadError("not a readable NPZ trace: `experts` is cut off")
            out.append(piece)
            have += len(piece)
        return b"".join(out)

    def skip(self, n: int, should_stop: StopCheck = None) -> None:
        while n > 0:
            stop_if(should_stop)
            step = min(n, ID_BLOCK)
            self.read(step)
            n -= step
