"""Read and write routing traces: token traces (NPZ `experts [n, n_layer, k]` or CSV) and traces recorded
inside llama.cpp (the format of sample_data/groundtruth/traces, already workloads), whole or streamed chunk by chunk.

Every NPZ member's declared size, shape and dtype are checked before anything is decompressed.
"""

from __future__ import annotations

import io
import lzma
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from moe_model.errors import WorkloadError, one_line
from moe_model.limits import (
    CSV_BLOCK_BYTES,
    MAX_CSV_LINE_BYTES,
    MAX_EXPERTS,
    MAX_EXPERTS_USED,
    MAX_LAYERS,
    MAX_NPZ_BYTES,
    MAX_NPZ_MEMBERS,
    MAX_STREAMED_NPZ_BYTES,
    MAX_TRACE_IDS,
    MAX_TRACE_RECORDS,
    MAX_TRACE_TOKENS,
    SIM_CHUNK_LOOKUPS,
    SIM_CHUNK_RECORDS,
    WORKLOAD_BYTES_PER_LOOKUP,
    check_at_most,
    shown,
)
from moe_model.readers.files import open_regular
from moe_model.workload import (
    PHASE_DECODE,
    RECORDED_LABEL,
    StreamedTokens,
    TokenTrace,
    Workload,
    WorkloadStream,
    chunk_cuts,
)

_NPY_HEADERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


# what a damaged NPZ raises; zipfile raises NotImplementedError for a compression method it does not support
_NPZ_ERRORS = (OSError, ValueError, EOFError, zipfile.BadZipFile, NotImplementedError, zlib.error, lzma.LZMAError)


def _npz(source: str | Path | bytes | BinaryIO) -> dict[str, np.ndarray]:
    """The integer arrays of an NPZ; every member's declared size, shape and dtype are checked before
    anything is decompressed (a small zip can expand to many GiB)."""
    try:
        with _zip(source) as archive:
            members = _npz_members(archive)
            _check_npz_total(members, MAX_NPZ_BYTES)
            return {m.filename.removesuffix(".npy"): _npz_member(archive, m) for m in members}
    except _NPZ_ERRORS as err:
        raise WorkloadError(f"not a readable NPZ trace: {shown(one_line(err))}") from None


@contextmanager
def _zip(source: str | Path | bytes | BinaryIO) -> Iterator[zipfile.ZipFile]:
    """The archive of bytes, a file object, or a path (a regular file only: /dev/zero never ends)."""
    with ExitStack() as stack:
        if isinstance(source, (str, Path)):
            source = stack.enter_context(open_regular(source, "trace file", WorkloadError))
        elif isinstance(source, (bytes, bytearray)):
            source = io.BytesIO(source)
        yield stack.enter_context(zipfile.ZipFile(source))


def _npz_members(archive: zipfile.ZipFile) -> list[zipfile.ZipInfo]:
    members = [m for m in archive.infolist() if not m.filename.endswith("/")]  # is_dir() fails on ""
    for m in members:  # np.savez writes stored or deflated members, never encrypted ones
        if m.flag_bits & 0x1:
            raise WorkloadError("the NPZ has an encrypted member: not a trace this tool wrote or reads")
        if m.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise WorkloadError(
                f"an NPZ member is compressed with zip method {m.compress_type}; stored or deflate only"
            )
    if len(members) > MAX_NPZ_MEMBERS:
        raise WorkloadError(f"the NPZ holds {len(members)} arrays, above this tool's limit of {MAX_NPZ_MEMBERS}")
    return members


def _check_npz_total(members: list[zipfile.ZipInfo], limit: int) -> None:
    total = sum(m.file_size for m in members)
    if total > limit:
        raise WorkloadError(f"the NPZ expands to {total:,} bytes, above this tool's limit of {limit // 1024**3} GiB")


def _npy_header(f: BinaryIO, member: zipfile.ZipInfo) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """A member's .npy header (shape, Fortran order, dtype, data bytes): integers only, no more than it holds."""
    version = np.lib.format.read_magic(f)
    if version not in _NPY_HEADERS:
        raise WorkloadError(f"`{shown(member.filename)}` is .npy version {version}; versions 1.0 and 2.0 are read")
    shape, fortran, dtype = _NPY_HEADERS[version](f)
    if not np.issubdtype(dtype, np.integer):
        raise WorkloadError(f"`{shown(member.filename)}` holds {dtype}, not integers")
    n_bytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if n_bytes > member.file_size:
        raise WorkloadError(f"`{shown(member.filename)}` declares {n_bytes:,} bytes of data in {member.file_size:,}")
    return shape, fortran, dtype, n_bytes


def _npz_member(archive: zipfile.ZipFile, member: zipfile.ZipInfo) -> np.ndarray:
    """One member: its .npy header first (an integer dtype, a shape matching the declared size), then the data."""
    with archive.open(member) as f:
        shape, fortran, dtype, n_bytes = _npy_header(f, member)
        data = np.frombuffer(f.read(n_bytes), dtype=dtype)
    if data.nbytes != n_bytes:
        raise WorkloadError(f"`{shown(member.filename)}` is cut off")
    return data.reshape(shape, order="F" if fortran else "C")


def load_recorded(source: str | Path | bytes | BinaryIO) -> Workload:
    """A trace recorded inside llama.cpp (one record per (ubatch, layer)), replayed exactly."""
    return _recorded_from(_npz(source))


def _check_ids(values: np.ndarray, hi: int, what: str) -> None:
    """Refuse integers outside [0, hi) before any cast could wrap them (a cast int16 id of 40000 is negative)."""
    if values.size:
        _check_span(int(values.min()), int(values.max()), hi, what)


def _check_span(lowest: int, highest: int, hi: int, what: str) -> None:
    if lowest < 0 or highest >= hi:
        raise WorkloadError(f"{what} must be in 0..{hi - 1:,}, got {lowest:,}..{highest:,}")


def _within(values: np.ndarray, hi: int) -> bool:
    return not values.size or (int(values.min()) >= 0 and int(values.max()) < hi)


_RECORD_ARRAYS = ("rec_ubatch", "rec_layer", "rec_ntok", "rec_off", "rec_k")
_NOT_RECORDS = "recorded trace: record arrays of different lengths, or not one-dimensional"
_OUTSIDE_IDS = "recorded trace: records outside `ids`"


def _check_recorded_arrays(names: set[str]) -> None:
    need = {*_RECORD_ARRAYS, "ids"}
    if not need <= names:
        raise WorkloadError(f"a recorded trace needs arrays {sorted(need)}; missing {sorted(need - names)}")


def _one_k(k_values: np.ndarray) -> int:
    """The experts per token of every record (a recorded trace has one value)."""
    if len(k_values) != 1:
        raise WorkloadError(f"recorded trace mixes experts-per-token values {k_values.tolist()}")
    _check_ids(k_values, MAX_EXPERTS_USED + 1, "experts per token")
    return int(k_values[0])


def _check_record_spans(spans: dict[str, tuple[int, int]], n_rec: int) -> None:
    """Each array's (lowest, highest) value in range; an array left out is empty."""
    limits = {"ids": (MAX_EXPERTS, "expert ids"), "rec_layer": (MAX_LAYERS, "layer indices")}
    limits |= {"rec_ubatch": (n_rec, "ubatch indices"), "rec_phase": (PHASE_DECODE + 1, "record phases")}
    for name, (hi, what) in limits.items():
        if name in spans:
            _check_span(*spans[name], hi, what)


def _recorded_from(data: dict[str, np.ndarray]) -> Workload:
    _check_recorded_arrays(set(data))
    n_rec = len(data["rec_layer"])
    check_at_most(n_rec, MAX_TRACE_RECORDS, "records in the trace", WorkloadError)
    check_at_most(data["ids"].size, MAX_TRACE_IDS, "expert ids in the trace", WorkloadError)
    phase = data.get("rec_phase", np.full(n_rec, PHASE_DECODE))
    arrays = [data[key] for key in _RECORD_ARRAYS] + [phase]
    if not n_rec or any(a.shape != (n_rec,) for a in arrays) or data["ids"].ndim != 1:
        raise WorkloadError(_NOT_RECORDS)
    k = _one_k(np.unique(data["rec_k"]))
    checked = {"ids": data["ids"], "rec_layer": data["rec_layer"], "rec_ubatch": data["rec_ubatch"], "rec_phase": phase}
    _check_record_spans({n: (int(a.min()), int(a.max())) for n, a in checked.items() if a.size}, n_rec)
    in_ids = _within(data["rec_ntok"], len(data["ids"]) + 1) and _within(data["rec_off"], len(data["ids"]) + 1)
    ids, ntok, off = data["ids"].astype(np.int32), data["rec_ntok"].astype(np.int64), data["rec_off"].astype(np.int64)
    if not in_ids or (off + k * ntok).max() > len(ids):  # bounded first: k * ntok cannot overflow
        raise WorkloadError(_OUTSIDE_IDS)
    layer = data["rec_layer"].astype(np.int32)
    return Workload(
        int(layer.max()) + 1,
        int(ids.max()) + 1 if len(ids) else 0,
        k,
        data["rec_ubatch"].astype(np.int64),
        layer,
        ntok.astype(np.int32),
        off,
        phase.astype(np.int8),
        ids,
        _decode_tokens(ntok, phase, layer),
        RECORDED_LABEL,
    )


def _decode_tokens(ntok: np.ndarray, phase: np.ndarray, layer: np.ndarray) -> int:
    return int(ntok[(phase == PHASE_DECODE) & (layer == 0)].sum())


def load_token_trace(source: str | Path | bytes | BinaryIO, label: str = "") -> TokenTrace:
    """An NPZ with `experts` [n_tokens, n_layers, k], optional `seq_offsets` and `ubatch`."""
    data = _npz(source)
    if "experts" not in data:
        raise WorkloadError("a token trace needs an `experts` array [n_tokens, n_layers, k]")
    return make_token_trace(data["experts"], data.get("seq_offsets"), data.get("ubatch"), label)


def make_token_trace(experts: np.ndarray, seq_offsets=None, ubatch=None, label: str = "") -> TokenTrace:
    """Validate the arrays of a token trace and wrap them; ids are range-checked before the int16 cast."""
    experts = np.asarray(experts)
    n = _check_token_shape(experts.shape, experts.dtype)
    check_at_most(experts.size, MAX_TRACE_IDS, "expert ids in the trace", WorkloadError)
    _check_ids(experts, MAX_EXPERTS, "expert ids")
    offsets, ubatch = _check_sequences(n, seq_offsets, ubatch)
    return TokenTrace(experts.astype(np.int16), offsets, ubatch, label)


def _check_token_shape(shape: tuple[int, ...], dtype: np.dtype) -> int:
    """The checks on an `experts` array's shape and type, before any of it is read; returns n_tokens."""
    if len(shape) != 3 or 0 in shape or not np.issubdtype(dtype, np.integer):
        raise WorkloadError(f"`experts` must be a non-empty integer array [n_tokens, n_layers, k], got {shape}")
    n, n_layer, k = shape
    check_at_most(n, MAX_TRACE_TOKENS, "tokens in the trace", WorkloadError)
    check_at_most(n_layer, MAX_LAYERS, "layers in the trace", WorkloadError)
    check_at_most(k, MAX_EXPERTS_USED, "experts per token in the trace", WorkloadError)
    return n


def _check_sequences(n: int, seq_offsets, ubatch) -> tuple[np.ndarray, np.ndarray | None]:
    """`seq_offsets` (default: one sequence) and the optional per-token `ubatch`, checked against n tokens."""
    offsets = np.array([0, n]) if seq_offsets is None else np.asarray(seq_offsets)
    if offsets.ndim != 1 or not 2 <= len(offsets) <= n + 1 or not np.issubdtype(offsets.dtype, np.integer):
        raise WorkloadError(f"`seq_offsets` must be 2..{n + 1} integers rising from 0 to n_tokens ({n})")
    offsets = offsets.astype(np.int64)
    if offsets[0] != 0 or offsets[-1] != n or np.any(np.diff(offsets) < 0):
        raise WorkloadError(f"`seq_offsets` must rise from 0 to n_tokens ({n})")
    if ubatch is not None:
        ubatch = np.asarray(ubatch)
        if ubatch.shape != (n,) or not np.issubdtype(ubatch.dtype, np.integer):
            raise WorkloadError("`ubatch` must be a non-decreasing index per token")
        _check_ids(ubatch, n, "`ubatch` indices")
        ubatch = ubatch.astype(np.int64)
        if np.any(np.diff(ubatch) < 0):
            raise WorkloadError("`ubatch` must be a non-decreasing index per token")
    return offsets, ubatch


_CSV_ERRORS = (ValueError, OSError, UnicodeDecodeError)  # what pandas raises on text it cannot read


def token_trace_from_csv(source: str | Path | BinaryIO, label: str = "") -> TokenTrace:
    """CSV with columns seq, token, layer, and expert ids e0..e{k-1} (one row per token and layer)."""
    import pandas as pd  # ~0.7 s to import: only CSV traces need it

    if isinstance(source, (str, Path)):
        with open_regular(source, "trace file", WorkloadError) as f:
            return token_trace_from_csv(f, label)
    try:
        frame = pd.read_csv(source)
    except _CSV_ERRORS as err:
        raise WorkloadError(f"not a readable CSV trace: {shown(one_line(err))}") from None
    expert_cols = _expert_columns(frame.columns)
    if not {"seq", "token", "layer"} <= set(frame.columns) or not expert_cols:
        raise WorkloadError("a CSV trace needs columns seq, token, layer, e0, e1, ...")
    if not pd.api.types.is_integer_dtype(frame["layer"]) or not len(frame):
        raise WorkloadError("the `layer` column of a CSV trace must hold integers")
    _check_ids(frame["layer"].to_numpy(), MAX_LAYERS, "CSV layer indices")
    frame = frame.sort_values(["seq", "token", "layer"])
    n_layer = int(frame["layer"].max()) + 1
    if len(frame) % n_layer:
        raise WorkloadError("every token of a CSV trace needs one row per layer")
    experts = frame[expert_cols].to_numpy().reshape(-1, n_layer, len(expert_cols))
    per_seq = frame[frame["layer"] == 0].groupby("seq", sort=True).size().to_numpy()
    return make_token_trace(experts, np.concatenate([[0], np.cumsum(per_seq)]), label=label)


def _expert_columns(columns) -> list[str]:
    """The expert id columns e0, e1, ... in rank order."""
    return sorted((c for c in columns if str(c).startswith("e") and str(c)[1:].isdigit()), key=lambda c: int(c[1:]))


def stream_csv_trace(source: str | Path | bytes, label: str = "") -> StreamedTokens | None:
    """A CSV token trace read forward in blocks of CSV_BLOCK_BYTES after one checking pass (its shape, sequences,
    per-layer expert counts, and where each block starts, so a cursor starts near its row); None for a CSV that
    token_trace_from_csv would have to sort or refuse (rows not in (seq, token, layer) order with every layer of a
    token in turn, a value that is not an integer or out of range): that one loads whole, with its messages."""
    try:
        with _csv_raw(source) as raw:
            header = _CsvHeader.read(raw)
            if header is None:
                return None
            scan = _CsvScan(header)
            for at, block in _line_blocks(raw, header.data_at):
                if not scan.add(at, _csv_block(block, header)):
                    return None
            shape = scan.shape()
    except _CSV_ERRORS:
        return None
    if shape is None:
        return None
    n = _check_token_shape(shape, np.dtype(np.int64))
    offsets, ubatch = _check_sequences(n, scan.seq_offsets(), None)
    rows, counts = _CsvRows(source, header, shape[1], scan.starts), scan.expert_counts(shape[1])
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

        raw.seek(0)
        line = raw.readline(MAX_CSV_LINE_BYTES)
        names = tuple(pd.read_csv(io.BytesIO(line), nrows=0).columns)
        experts = tuple(_expert_columns(names))
        if not {"seq", "token", "layer"} <= set(names) or not experts:
            return None
        return _CsvHeader(names, experts, len(line))


def _csv_block(block: bytes, header: _CsvHeader) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """A block's seq, token and layer columns and its ids [rows, k] (int64); None where a value is not an integer."""
    import pandas as pd

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
        if not (_within(layer, MAX_LAYERS) and _within(ids, MAX_EXPERTS)):
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

    def __init__(self, source: str | Path | bytes, header: _CsvHeader, n_layer: int, starts: list[tuple[int, int]]):
        self.source, self.header, self.n_layer = source, header, n_layer
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


def save_npz(target: str | Path | BinaryIO, item: TokenTrace | Workload) -> None:
    """Export a token trace or a workload in the format its loader reads."""
    if isinstance(item, TokenTrace):
        arrays = {"experts": item.experts, "seq_offsets": item.seq_offsets}
        if item.ubatch is not None:
            arrays["ubatch"] = item.ubatch
    else:
        arrays = {
            "rec_ubatch": item.rec_ubatch,
            "rec_layer": item.rec_layer,
            "rec_ntok": item.rec_ntok,
            "rec_off": item.rec_off,
            "rec_k": np.full(item.n_records, item.k, np.int32),
            "rec_phase": item.rec_phase,
            "ids": item.ids,
        }
    np.savez_compressed(target, **arrays)


def load_any(source: str | Path | bytes | BinaryIO, name: str = "") -> TokenTrace | Workload:
    """A trace file of any supported kind: recorded llama.cpp NPZ, token-trace NPZ, or CSV."""
    name = name or str(source if isinstance(source, (str, Path)) else "")
    if name.lower().endswith(".csv"):
        return token_trace_from_csv(io.BytesIO(source) if isinstance(source, bytes) else source, label=Path(name).name)
    data = _npz(source)
    if "rec_layer" in data:
        return _recorded_from(data)
    return make_token_trace(
        data.get("experts", np.zeros(0)), data.get("seq_offsets"), data.get("ubatch"), Path(name).name
    )


def read_peak_bytes(source: bytes, name: str = "") -> int:
    """The estimated peak memory of load_any and batching this trace, from declared sizes only (the NPZ's
    directory and each member's .npy header; a CSV's length): a server checks it before any array is built."""
    if name.lower().endswith(".csv"):
        return len(source) // 2 * WORKLOAD_BYTES_PER_LOOKUP  # an id takes at least a digit and a comma
    try:
        with _zip(source) as archive:
            members = {m.filename.removesuffix(".npy"): m for m in _npz_members(archive)}
            inflated = sum(m.file_size for m in members.values())
            if "experts" not in members or "rec_layer" in members:
                return 2 * inflated  # a recorded trace is its arrays, read once and checked once
            with archive.open(members["experts"]) as f:
                shape = _npy_header(f, members["experts"])[0]
    except _NPZ_ERRORS as err:
        raise WorkloadError(f"not a readable NPZ trace: {one_line(err)}") from None
    return inflated + int(np.prod(shape, dtype=object)) * WORKLOAD_BYTES_PER_LOOKUP


_ID_BLOCK = 1 << 20  # ids read at a time while scanning or skipping: 4 MiB of int32


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


def stream_token_trace(source: str | Path | bytes, label: str = "") -> StreamedTokens | None:
    """A token-trace NPZ read forward after one checking pass over its `experts` (the checks and messages of
    make_token_trace, and each layer's expert counts for the drawn prompt rows); None for an NPZ that is not a
    token trace, or whose `experts` are in Fortran order (a forward read of rows cannot serve it)."""
    try:
        with _zip(source) as archive:
            members = {m.filename.removesuffix(".npy"): m for m in _npz_members(archive)}
            if "experts" not in members or "rec_layer" in members:
                return None
            _check_npz_total(list(members.values()), MAX_STREAMED_NPZ_BYTES)
            member = members["experts"]
            with archive.open(member) as f:
                shape, fortran, dtype, _ = _npy_header(f, member)
                data_at = f.tell()
            n = _check_token_shape(shape, dtype)
            if fortran:
                return None
            small = {c: _small_member(archive, members[c], n) for c in ("seq_offsets", "ubatch") if c in members}
            offsets, ubatch = _check_sequences(n, small.get("seq_offsets"), small.get("ubatch"))
            counts = _expert_counts(archive, member, shape, dtype)
    except _NPZ_ERRORS as err:
        raise WorkloadError(f"not a readable NPZ trace: {one_line(err)}") from None
    rows = _MemberRows(source, member, data_at, shape[1:], dtype)
    return StreamedTokens(n, shape[1], shape[2], counts.shape[1], offsets, ubatch, counts, rows.reader, label)


def _small_member(archive: zipfile.ZipFile, member: zipfile.ZipInfo, n_tokens: int) -> np.ndarray:
    """`seq_offsets` or `ubatch`: at most one value per token (plus one), read whole once its size is checked."""
    if member.file_size > 8 * (n_tokens + 1) + 65_536:  # int64 values and a .npy header
        raise WorkloadError(f"`{member.filename}` holds more than one value per token of the trace")
    return _npz_member(archive, member)


def _expert_counts(archive: zipfile.ZipFile, member: zipfile.ZipInfo, shape: tuple[int, ...], dtype: np.dtype):
    """Every id range-checked, and how often each layer picked each expert [n_layer, max id + 1], block by block."""
    n, n_layer, k = shape
    counts = np.zeros(n_layer * MAX_EXPERTS, dtype=np.int64)
    base = (np.arange(n_layer, dtype=np.int64) * MAX_EXPERTS)[None, :, None]
    block = max(1, _ID_BLOCK // (n_layer * k))
    with archive.open(member) as f:
        _npy_header(f, member)
        for start in range(0, n, block):
            rows = min(block, n - start)
            ids = _read_values(f, member, dtype, rows * n_layer * k).reshape(rows, n_layer, k)
            _check_ids(ids, MAX_EXPERTS, "expert ids")
            counts += np.bincount((base + ids.astype(np.int64)).ravel(), minlength=len(counts))
        f.read()  # to the end: the member's CRC is checked there
    counts = counts.reshape(n_layer, MAX_EXPERTS)
    return counts[:, : int(np.flatnonzero(counts.any(axis=0))[-1]) + 1]


_INFLATE_BLOCK = 1 << 16  # compressed bytes a cursor reads from the file at a time


class _MemberRows:
    """Token rows of an NPZ member, read forward by any number of cursors over one file handle. A stored member
    is read in place; a deflated one by inflaters cloned from one that runs ahead to each cursor's first row
    (zlib state is ~40 KiB): every byte is inflated twice, whatever the number of cursors."""

    def __init__(self, source: str | Path | bytes, member: zipfile.ZipInfo, data_at: int, row_shape, dtype) -> None:
        self.source, self.member, self.data_at = source, member, data_at
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
        self.ahead.skip((row - self.ahead_row) * rows.row_bytes)
        self.ahead_row = row
        return _RowCursor(self.ahead.copy(), rows)


class _RowCursor:
    def __init__(self, source: _Stored | _Inflater, rows: _MemberRows) -> None:
        self.source, self.rows = source, rows

    def take(self, n: int) -> np.ndarray:
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

    def skip(self, n: int) -> None:
        while n > 0:
            step = min(n, _ID_BLOCK)
            self.read(step)
            n -= step


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
    source: str | Path | bytes, max_records: int = SIM_CHUNK_RECORDS, max_lookups: int = SIM_CHUNK_LOOKUPS
) -> WorkloadStream | None:
    """A recorded trace read from its NPZ in chunks of whole ubatches, each of at most max_records records and
    max_lookups ids (or one ubatch, when a single one has more ids), after one checking pass (the same checks and
    messages as load_recorded); None for an NPZ that is not a recorded trace, or whose records a forward-only
    read cannot serve (ubatches out of order, a record's ids before the previous record's, a ubatch of more
    than max_records records): load those whole."""
    try:
        with _zip(source) as archive:
            members = {m.filename.removesuffix(".npy"): m for m in _npz_members(archive)}
            if "rec_layer" not in members:
                return None
            _check_npz_total(list(members.values()), MAX_STREAMED_NPZ_BYTES)
            _check_recorded_arrays(set(members))
            shapes = {}
            for name, member in members.items():  # every header checked, as when loading it whole
                with archive.open(member) as f:
                    shapes[name] = _npy_header(f, member)[0]
            columns = {c: members[c] for c in (*_RECORD_ARRAYS, "rec_phase") if c in members}
            n_rec = shapes["rec_layer"][0] if shapes["rec_layer"] else 0
            if not n_rec or any(shapes[c] != (n_rec,) for c in columns) or len(shapes["ids"]) != 1:
                raise WorkloadError(_NOT_RECORDS)
            n_ids = shapes["ids"][0]
            scan = _scan_recorded(archive, columns, members["ids"], n_rec, n_ids, max_records)
    except _NPZ_ERRORS as err:
        raise WorkloadError(f"not a readable NPZ trace: {shown(one_line(err))}") from None
    if not scan.in_order:
        return None

    def chunks() -> Iterator[Workload]:
        try:
            with _zip(source) as archive, archive.open(members["ids"]) as f:
                ids = _ForwardIds(f, members["ids"])
                carry: dict[str, np.ndarray] = {}
                for block in _record_blocks(archive, columns, n_rec, max_records):
                    block = {c: np.concatenate([carry[c], a]) for c, a in block.items()} if carry else block
                    cut = int(np.searchsorted(block["rec_ubatch"], block["rec_ubatch"][-1]))  # its last ubatch goes on
                    if cut:
                        yield from _recorded_chunks({c: a[:cut] for c, a in block.items()}, ids, scan, max_lookups)
                    carry = {c: a[cut:] for c, a in block.items()}
                yield from _recorded_chunks(carry, ids, scan, max_lookups)
        except _NPZ_ERRORS as err:
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
) -> _Scan:
    spans: dict[str, tuple[int, int]] = {}
    k = None
    ntok_values = np.zeros(0, dtype=np.int64)
    in_ids, in_order = True, True
    max_end = lookups = decode = 0
    prev_ub, prev_end, run = -1, 0, 0  # the previous record's ubatch and end of ids, its ubatch's records so far
    for block in _record_blocks(archive, columns, n_rec, max_records):
        for name in ("rec_layer", "rec_ubatch", "rec_phase"):
            if name in block:
                _widen(spans, name, block[name])
        k_values = np.unique(block["rec_k"] if k is None else np.append(block["rec_k"], k))
        k = _one_k(k_values)  # checked at once: k * ntok below must not overflow
        ntok, off, ub = block["rec_ntok"], block["rec_off"], block["rec_ubatch"]
        in_ids = in_ids and _within(ntok, n_ids + 1) and _within(off, n_ids + 1)
        if not in_ids:  # refused after the pass, once every other check has had its say
            continue
        end = off + k * ntok
        max_end = max(max_end, int(end.max()))
        lookups += int((k * ntok).sum())
        ntok_values = np.union1d(ntok_values, ntok)
        decode += _decode_tokens(ntok, block.get("rec_phase", PHASE_DECODE), block["rec_layer"])
        runs = np.diff(np.concatenate([[0], np.flatnonzero(np.diff(ub)) + 1, [len(ub)]]))
        runs[0] += run if ub[0] == prev_ub else 0
        in_order = in_order and bool(
            ub[0] >= prev_ub and off[0] >= prev_end and np.all(np.diff(ub) >= 0) and np.all(off[1:] >= end[:-1])
        )
        in_order = in_order and int(runs.max()) <= max_records
        prev_ub, prev_end, run = int(ub[-1]), int(end[-1]), int(runs[-1])
    with archive.open(ids_member) as f:
        ids = _ForwardIds(f, ids_member)
        for start in range(0, n_ids, _ID_BLOCK):
            _widen(spans, "ids", ids.span(start, min(n_ids, start + _ID_BLOCK)))
    _check_record_spans(spans, n_rec)
    if not in_ids or max_end > n_ids:
        raise WorkloadError(_OUTSIDE_IDS)
    return _Scan(
        k,
        spans["rec_layer"][1] + 1,
        spans["ids"][1] + 1 if "ids" in spans else 0,
        spans["rec_ubatch"][1] + 1,
        ntok_values,
        lookups,
        decode,
        in_order,
    )


def _widen(spans: dict[str, tuple[int, int]], name: str, values: np.ndarray) -> None:
    if values.size:
        lo, hi = spans.get(name, (int(values.min()), int(values.max())))
        spans[name] = (min(lo, int(values.min())), max(hi, int(values.max())))


def _record_blocks(
    archive: zipfile.ZipFile, columns: dict[str, zipfile.ZipInfo], n_rec: int, size: int
) -> Iterator[dict[str, np.ndarray]]:
    """The record arrays `size` records at a time, every member read forward in step (as int64)."""
    with ExitStack() as stack:
        readers = {}
        for name, member in columns.items():
            f = stack.enter_context(archive.open(member))
            readers[name] = (f, member, _npy_header(f, member)[2])
        for start in range(0, n_rec, size):
            n = min(size, n_rec - start)
            yield {
                name: _read_values(f, member, dtype, n).astype(np.int64) for name, (f, member, dtype) in readers.items()
            }


def _read_values(f: BinaryIO, member: zipfile.ZipInfo, dtype: np.dtype, n: int) -> np.ndarray:
    data = np.frombuffer(f.read(n * dtype.itemsize), dtype=dtype)
    if len(data) != n:
        raise WorkloadError(f"`{shown(member.filename)}` is cut off")
    return data


class _ForwardIds:
    """The `ids` member read forward only, span after span (skipping any gap between records)."""

    def __init__(self, f: BinaryIO, member: zipfile.ZipInfo) -> None:
        self.f, self.member, self.dtype, self.pos = f, member, _npy_header(f, member)[2], 0

    def span(self, lo: int, hi: int) -> np.ndarray:
        while self.pos < lo:
            n = min(_ID_BLOCK, lo - self.pos)
            _read_values(self.f, self.member, self.dtype, n)
            self.pos += n
        self.pos = hi
        return _read_values(self.f, self.member, self.dtype, hi - lo)


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
        _decode_tokens(ntok, phase, block["rec_layer"]),
        RECORDED_LABEL,
    )
