"""What the server feeds the cache: per (ubatch, layer) records of routed experts.

A `TokenTrace` holds per-token routing (which k experts each layer picked). `build_workload`
turns it into the ubatches llama-server would run — c sequences decoding in lockstep,
speculative verification batches, prompt ubatches and the start-up warm-up — as a `Workload`:
one record per (ubatch, layer) with that layer's own token count, in execution order. Traces
recorded inside llama.cpp (../shared/groundtruth format) are already workloads.
"""

from __future__ import annotations

import io
import lzma
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import BinaryIO

import numpy as np

from moe_model.errors import WorkloadError, one_line
from moe_model.limits import (
    MAX_CONCURRENCY,
    MAX_DRAFT_TOKENS,
    MAX_EXPERTS,
    MAX_EXPERTS_USED,
    MAX_LAYERS,
    MAX_NPZ_BYTES,
    MAX_NPZ_MEMBERS,
    MAX_PROMPT_TOKENS,
    MAX_ROUTING_DRAWS,
    MAX_STREAMED_NPZ_BYTES,
    MAX_TRACE_IDS,
    MAX_TRACE_RECORDS,
    MAX_TRACE_TOKENS,
    MAX_UBATCH,
    SIM_CHUNK_RECORDS,
    SIM_MEMORY_SHARE,
    WORKLOAD_BYTES_PER_LOOKUP,
    available_memory_bytes,
    check_at_most,
)

PHASE_WARMUP, PHASE_PROMPT, PHASE_DECODE = 0, 1, 2
RECORDED_LABEL = "recorded llama.cpp trace"
_NPY_HEADERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


@dataclass(frozen=True, eq=False)
class Workload:
    """Records in execution order; record r is ids[off[r] : off[r] + k * ntok[r]], token-major."""

    n_layer: int
    n_expert: int
    k: int
    rec_ubatch: np.ndarray
    rec_layer: np.ndarray
    rec_ntok: np.ndarray
    rec_off: np.ndarray
    rec_phase: np.ndarray
    ids: np.ndarray
    decode_tokens: int = 0
    label: str = ""

    @property
    def n_records(self) -> int:
        return len(self.rec_layer)

    @property
    def n_ubatches(self) -> int:
        return int(self.rec_ubatch.max()) + 1 if self.n_records else 0

    def prefix(self, n_records: int) -> Workload:
        """The first n_records records (to compare a step-by-step view with the simulator)."""
        n = min(n_records, self.n_records)
        end = int(self.rec_off[n - 1] + self.k * self.rec_ntok[n - 1]) if n else 0
        return replace(
            self,
            rec_ubatch=self.rec_ubatch[:n],
            rec_layer=self.rec_layer[:n],
            rec_ntok=self.rec_ntok[:n],
            rec_off=self.rec_off[:n],
            rec_phase=self.rec_phase[:n],
            ids=self.ids[:end],
        )

    def for_model(self, n_expert: int) -> Workload:
        """The same records over the model's expert count (a trace may never pick the last experts)."""
        return replace(self, n_expert=n_expert)

    def check_fits(self, n_layer: int, n_expert: int, n_expert_used: int) -> None:
        """Refuse a workload whose shape does not match the model, saying which part differs."""
        if self.n_layer != n_layer:
            raise WorkloadError(f"the trace has {self.n_layer} layers, the model {n_layer}")
        if self.n_expert > n_expert or (len(self.ids) and int(self.ids.max()) >= n_expert):
            raise WorkloadError(f"the trace selects experts up to {int(self.ids.max())}, the model has {n_expert}")
        if self.k != n_expert_used:
            raise WorkloadError(f"the trace routes {self.k} experts per token, the model {n_expert_used}")


@dataclass(frozen=True, eq=False)
class WorkloadStream:
    """A workload handed out in chunks of whole ubatches (each a Workload), so that none is held whole.

    `ntok_values` are the token counts its records take (they decide which budgets share a kernel pass);
    `chunks()` may be called more than once and yields the same records each time.
    """

    n_layer: int
    n_expert: int  # every id is below this
    k: int
    ntok_values: np.ndarray
    n_records: int
    n_lookups: int
    decode_tokens: int
    n_ubatches: int
    make_chunks: Callable[[], Iterator[Workload]]
    label: str = ""

    def chunks(self) -> Iterator[Workload]:
        return self.make_chunks()

    def check_fits(self, n_layer: int, n_expert: int, n_expert_used: int) -> None:
        if self.n_layer != n_layer:
            raise WorkloadError(f"the trace has {self.n_layer} layers, the model {n_layer}")
        if self.n_expert > n_expert:
            raise WorkloadError(f"the trace selects experts up to {self.n_expert - 1}, the model has {n_expert}")
        if self.k != n_expert_used:
            raise WorkloadError(f"the trace routes {self.k} experts per token, the model {n_expert_used}")


def _chunk(work: Workload, a: int, b: int) -> Workload:
    """Records a..b-1 with their ids, offsets rebased onto the slice."""
    off, ntok = work.rec_off[a:b], work.rec_ntok[a:b]
    lo, hi = int(off.min()), int((off + work.k * ntok.astype(np.int64)).max())
    return replace(
        work,
        rec_ubatch=work.rec_ubatch[a:b],
        rec_layer=work.rec_layer[a:b],
        rec_ntok=ntok,
        rec_off=off - lo,
        rec_phase=work.rec_phase[a:b],
        ids=work.ids[lo:hi],
    )


def stream_of(work: Workload, max_records: int = SIM_CHUNK_RECORDS) -> WorkloadStream:
    """An in-memory workload as a stream of slices, cut only between ubatches."""
    starts = np.flatnonzero(np.diff(work.rec_ubatch)) + 1  # where a new ubatch begins
    if np.any(np.diff(work.rec_ubatch) < 0):
        starts = starts[:0]  # ubatch ids out of order: one chunk keeps per-ubatch counts exact
    first_after = np.searchsorted(starts, np.arange(max_records, work.n_records, max_records))
    cuts = np.unique(starts[first_after[first_after < len(starts)]])
    n_expert = max(work.n_expert, int(work.ids.max()) + 1 if len(work.ids) else 0)

    def chunks() -> Iterator[Workload]:
        bounds = [0, *cuts.tolist(), work.n_records]
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            if b > a:
                yield _chunk(work, a, b)

    return WorkloadStream(
        work.n_layer,
        n_expert,
        work.k,
        np.unique(work.rec_ntok),
        work.n_records,
        len(work.ids),
        work.decode_tokens,
        work.n_ubatches,
        chunks,
        work.label,
    )


@dataclass(frozen=True, eq=False)
class TokenTrace:
    """Per-token routing: experts[t, layer, rank]; sequences are rows seq_offsets[s]:seq_offsets[s+1]."""

    experts: np.ndarray
    seq_offsets: np.ndarray
    ubatch: np.ndarray | None = None
    label: str = ""

    @property
    def n_tokens(self) -> int:
        return self.experts.shape[0]

    @property
    def n_layer(self) -> int:
        return self.experts.shape[1]

    @property
    def k(self) -> int:
        return self.experts.shape[2]

    @property
    def n_expert(self) -> int:
        return int(self.experts.max()) + 1 if self.experts.size else 0

    @property
    def n_seq(self) -> int:
        return len(self.seq_offsets) - 1


@dataclass(frozen=True)
class Batching:
    """How llama-server batches the trace (settings of a run, not of the cache).

    concurrency: sequences decoding at once (-np with that many users); a decode ubatch has one
    token of each. draft_tokens/accept_rate: speculative decoding, each verification ubatch has
    draft_tokens+1 tokens per sequence and consumes 1 + accepted drafts. prompt_tokens: prompt
    length per sequence (0: none), processed in ubatches of ubatch_size. warmup: llama-server's
    2-token warm-up decode at start-up.
    """

    concurrency: int = 1
    draft_tokens: int = 0
    accept_rate: float = 0.7
    prompt_tokens: int = 0
    ubatch_size: int = 512
    warmup: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.concurrency <= MAX_CONCURRENCY:
            raise WorkloadError(f"concurrency must be 1..{MAX_CONCURRENCY}, got {self.concurrency}")
        if not 0 <= self.draft_tokens <= MAX_DRAFT_TOKENS:
            raise WorkloadError(f"draft tokens must be 0..{MAX_DRAFT_TOKENS}, got {self.draft_tokens}")
        if not 0.0 <= self.accept_rate <= 1.0:
            raise WorkloadError(f"acceptance rate must be in [0, 1], got {self.accept_rate}")
        if not 0 <= self.prompt_tokens <= MAX_PROMPT_TOKENS or not 1 <= self.ubatch_size <= MAX_UBATCH:
            raise WorkloadError(f"prompt tokens must be 0..{MAX_PROMPT_TOKENS:,} and the ubatch size 1..{MAX_UBATCH:,}")


# --- loading and saving ---


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
        raise WorkloadError(f"not a readable NPZ trace: {one_line(err)}") from None


def _zip(source: str | Path | bytes | BinaryIO) -> zipfile.ZipFile:
    return zipfile.ZipFile(io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else source)


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
        raise WorkloadError(f"`{member.filename}` is .npy version {version}; versions 1.0 and 2.0 are read")
    shape, fortran, dtype = _NPY_HEADERS[version](f)
    if not np.issubdtype(dtype, np.integer):
        raise WorkloadError(f"`{member.filename}` holds {dtype}, not integers")
    n_bytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if n_bytes > member.file_size:
        raise WorkloadError(f"`{member.filename}` declares {n_bytes:,} bytes of data in {member.file_size:,}")
    return shape, fortran, dtype, n_bytes


def _npz_member(archive: zipfile.ZipFile, member: zipfile.ZipInfo) -> np.ndarray:
    """One member: its .npy header first (an integer dtype, a shape matching the declared size), then the data."""
    with archive.open(member) as f:
        shape, fortran, dtype, n_bytes = _npy_header(f, member)
        data = np.frombuffer(f.read(n_bytes), dtype=dtype)
    if data.nbytes != n_bytes:
        raise WorkloadError(f"`{member.filename}` is cut off")
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
    if experts.ndim != 3 or 0 in experts.shape or not np.issubdtype(experts.dtype, np.integer):
        raise WorkloadError(f"`experts` must be a non-empty integer array [n_tokens, n_layers, k], got {experts.shape}")
    n, n_layer, k = experts.shape
    check_at_most(n, MAX_TRACE_TOKENS, "tokens in the trace", WorkloadError)
    check_at_most(n_layer, MAX_LAYERS, "layers in the trace", WorkloadError)
    check_at_most(k, MAX_EXPERTS_USED, "experts per token in the trace", WorkloadError)
    check_at_most(experts.size, MAX_TRACE_IDS, "expert ids in the trace", WorkloadError)
    _check_ids(experts, MAX_EXPERTS, "expert ids")
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
    return TokenTrace(experts.astype(np.int16), offsets, ubatch, label)


def token_trace_from_csv(source: str | Path | BinaryIO, label: str = "") -> TokenTrace:
    """CSV with columns seq, token, layer, and expert ids e0..e{k-1} (one row per token and layer)."""
    import pandas as pd  # ~0.7 s to import: only CSV traces need it

    try:
        frame = pd.read_csv(source)
    except (ValueError, OSError, UnicodeDecodeError) as err:
        raise WorkloadError(f"not a readable CSV trace: {one_line(err)}") from None
    expert_cols = sorted(
        (c for c in frame.columns if str(c).startswith("e") and str(c)[1:].isdigit()), key=lambda c: int(c[1:])
    )
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


# --- batching: tokens -> ubatches -> records ---


@dataclass
class _Ubatches:
    """Ubatches under construction: token rows (into an experts array) and per-ubatch facts."""

    tokens: list[np.ndarray] = field(default_factory=list)
    phase: list[int] = field(default_factory=list)
    last_layer_ntok: list[int] = field(default_factory=list)  # -1: all layers see every token


def _accepted_drafts(rng: np.random.Generator, draft_tokens: int, accept_rate: float) -> int:
    """Drafts accepted in one verification: the leading run of successes."""
    if draft_tokens == 0:
        return 0
    ok = rng.random(draft_tokens) < accept_rate
    return draft_tokens if ok.all() else int(np.argmin(ok))


def _schedule(trace: TokenTrace, batching: Batching, rng: np.random.Generator) -> list[tuple[str, object]]:
    """Events in server order: ("prompt", seq) when a stream takes a sequence, ("decode", rows) per step.

    c streams decode in lockstep, one verification of up to d+1 tokens each; a finished stream
    takes the next sequence.
    """
    starts, ends = trace.seq_offsets[:-1], trace.seq_offsets[1:]
    queue = [s for s in range(trace.n_seq) if ends[s] > starts[s]][::-1]
    streams: list[list[int]] = []  # [next token row, end row]
    events: list[tuple[str, object]] = []
    width = batching.draft_tokens + 1
    while queue or streams:
        while queue and len(streams) < batching.concurrency:
            s = queue.pop()
            streams.append([int(starts[s]), int(ends[s])])
            events.append(("prompt", s))
        rows = []
        for stream in streams:
            pos, end = stream
            rows.append(np.arange(pos, min(pos + width, end)))
            stream[0] = pos + 1 + _accepted_drafts(rng, batching.draft_tokens, batching.accept_rate)
        events.append(("decode", np.concatenate(rows)))
        streams = [st for st in streams if st[0] < st[1]]
    return events


def layer_popularity(experts: np.ndarray, n_expert: int) -> np.ndarray:
    """Per layer selection frequency of each expert (add-one smoothed): [n_layer, n_expert]."""
    n_layer = experts.shape[1]
    flat = (np.arange(n_layer)[None, :, None] * n_expert + experts.astype(np.int64)).ravel()
    counts = np.bincount(flat, minlength=n_layer * n_expert).reshape(n_layer, n_expert) + 1.0
    return counts / counts.sum(axis=1, keepdims=True)


def sample_routing(popularity: np.ndarray, k: int, n_tokens: int, rng: np.random.Generator) -> np.ndarray:
    """n_tokens of i.i.d. routing: k distinct experts per layer, drawn by popularity (Gumbel top-k)."""
    n_layer, n_expert = popularity.shape
    out = np.empty((n_tokens, n_layer, k), dtype=np.int16)
    log_p = np.log(popularity)[None]
    chunk = max(1, 2_000_000 // (n_layer * n_expert))
    for start in range(0, n_tokens, chunk):
        n = min(chunk, n_tokens - start)
        scores = log_p - np.log(-np.log(rng.random((n, n_layer, n_expert))))
        out[start : start + n] = np.argsort(-scores, axis=2)[:, :, :k]
    return out


def _prompt_ubatches(first_row: int, n_tokens: int, ubatch_size: int) -> list[tuple[np.ndarray, int]]:
    """Rows of each prompt ubatch; only the last one has an output token (its last layer sees 1)."""
    out = []
    for start in range(0, n_tokens, ubatch_size):
        end = min(start + ubatch_size, n_tokens)
        out.append((np.arange(first_row + start, first_row + end), 1 if end == n_tokens else 0))
    return out


def _synthetic_rows(trace: TokenTrace, batching: Batching, n_expert: int) -> int:
    """Tokens of warm-up and prompt routing to draw, refused beyond MAX_ROUTING_DRAWS before drawing."""
    needed = (2 if batching.warmup else 0) + batching.prompt_tokens * trace.n_seq
    if needed * trace.n_layer * n_expert > MAX_ROUTING_DRAWS:
        raise WorkloadError(
            f"{batching.prompt_tokens:,} prompt tokens x {trace.n_seq} sequences x {trace.n_layer} layers x "
            f"{n_expert} experts of drawn routing is above this tool's limit of {MAX_ROUTING_DRAWS:,}"
        )
    return needed


def _collect_ubatches(trace: TokenTrace, batching: Batching, rng: np.random.Generator, n_expert: int, synthetic: int):
    """All ubatches in order, and the drawn routing of the rows past the trace's own (warm-up, prompts)."""
    ub = _Ubatches()
    extra = trace.experts[:0]
    if synthetic:  # warm-up and prompts are not in per-token traces: drawn from the trace's popularity
        extra = sample_routing(layer_popularity(trace.experts, n_expert), trace.k, synthetic, rng)
    next_extra = trace.n_tokens
    if batching.warmup:  # BOS+EOS decoded at start-up; the last layer computes only the output token
        ub.tokens.append(np.arange(next_extra, next_extra + 2))
        ub.phase.append(PHASE_WARMUP)
        ub.last_layer_ntok.append(1)
        next_extra += 2
    if trace.ubatch is not None:
        bounds = np.flatnonzero(np.diff(trace.ubatch)) + 1
        for rows in np.split(np.arange(trace.n_tokens), bounds):
            ub.tokens.append(rows)
            ub.phase.append(PHASE_DECODE)
            ub.last_layer_ntok.append(-1)
        return ub, extra
    for kind, value in _schedule(trace, batching, rng):
        if kind == "prompt":
            for rows, last in _prompt_ubatches(next_extra, batching.prompt_tokens, batching.ubatch_size):
                ub.tokens.append(rows)
                ub.phase.append(PHASE_PROMPT)
                ub.last_layer_ntok.append(last)
            next_extra += batching.prompt_tokens
        else:
            ub.tokens.append(value)
            ub.phase.append(PHASE_DECODE)
            ub.last_layer_ntok.append(-1)
    return ub, extra


def check_build_memory(n_lookups: int, available: int | None = None) -> None:
    """Refuse, before allocating, a workload this machine cannot build in memory."""
    available = available_memory_bytes() if available is None else available
    need = n_lookups * WORKLOAD_BYTES_PER_LOOKUP
    if available is not None and need > SIM_MEMORY_SHARE * available:
        raise WorkloadError(
            f"this workload needs about {need / 2**30:.1f} GiB to build ({n_lookups:,} expert lookups), more than "
            f"this machine has free ({available / 2**30:.1f} GiB): use fewer tokens or stream synthetic routing"
        )


def build_workload(trace: TokenTrace, batching: Batching | None = None, n_expert: int | None = None) -> Workload:
    """The records llama-server would feed the cache for this trace and batching.

    Prompt and warm-up routing is not in per-token traces: it is drawn from each layer's expert
    popularity in the trace (a model, labelled as such).
    """
    batching = batching or Batching()
    n_expert = max(n_expert or 0, trace.n_expert)
    synthetic = _synthetic_rows(trace, batching, n_expert)
    check_build_memory((trace.n_tokens + synthetic) * trace.n_layer * trace.k)  # before anything is drawn
    ub, extra = _collect_ubatches(trace, batching, np.random.default_rng(batching.seed), n_expert, synthetic)
    return _ubatch_records(trace, ub, extra, n_expert, 0, len(ub.tokens))


def _ubatch_records(trace: TokenTrace, ub: _Ubatches, extra: np.ndarray, n_expert: int, lo: int, hi: int) -> Workload:
    """The records of ubatches lo..hi-1 (ubatch indices kept, offsets into this slice's own ids)."""
    n_layer, k = trace.n_layer, trace.k
    sizes = np.array([len(t) for t in ub.tokens[lo:hi]], dtype=np.int64)
    rec_ntok = np.repeat(sizes, n_layer).reshape(-1, n_layer)
    last = np.array(ub.last_layer_ntok[lo:hi])
    rec_ntok[last >= 0, -1] = last[last >= 0]
    rows = np.concatenate(ub.tokens[lo:hi])
    token_ub = np.repeat(np.arange(len(sizes)), sizes)
    # records are (ubatch, layer); inside one, the ubatch's tokens in order (a stable sort by key)
    order = np.argsort((token_ub[:, None] * n_layer + np.arange(n_layer)[None, :]).ravel(), kind="stable")
    per_layer_ids = _rows(trace.experts, extra, rows).reshape(len(rows) * n_layer, k)[order]
    keep = _keep_output_rows(sizes, rec_ntok, n_layer)
    ids = per_layer_ids[keep].ravel().astype(np.int32)
    rec_ntok = rec_ntok.ravel().astype(np.int32)
    rec_off = np.concatenate([[0], np.cumsum(rec_ntok.astype(np.int64) * k)[:-1]])
    phases = np.array(ub.phase[lo:hi], dtype=np.int8)
    return Workload(
        n_layer,
        n_expert,
        k,
        np.repeat(np.arange(lo, hi), n_layer),
        np.tile(np.arange(n_layer, dtype=np.int32), len(sizes)),
        rec_ntok,
        rec_off,
        np.repeat(phases, n_layer),
        ids,
        int(sizes[phases == PHASE_DECODE].sum()),
        trace.label,
    )


def _rows(experts: np.ndarray, extra: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """experts[rows] of the trace followed by the drawn rows, without concatenating the two."""
    out = np.empty((len(rows), *experts.shape[1:]), dtype=experts.dtype)
    own = rows < len(experts)
    out[own] = experts[rows[own]]
    out[~own] = extra[rows[~own] - len(experts)]
    return out


def _keep_output_rows(sizes: np.ndarray, rec_ntok: np.ndarray, n_layer: int) -> np.ndarray:
    """Mask over the (ubatch, layer, token) rows: a layer that sees fewer tokens keeps the last ones."""
    n_rows = sizes.repeat(n_layer)
    seen = rec_ntok.ravel()
    start = np.concatenate([[0], np.cumsum(n_rows)[:-1]])
    pos = np.arange(n_rows.sum()) - np.repeat(start, n_rows)
    return pos >= np.repeat(n_rows - seen, n_rows)


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


def workload_from(item: TokenTrace | Workload, batching: Batching, n_expert: int) -> Workload:
    """Recorded workloads replay as recorded; token traces are batched."""
    return item if isinstance(item, Workload) else build_workload(item, batching, n_expert)


# --- streaming: traces handed to the simulator chunk by chunk, never as one workload ---

_ID_BLOCK = 1 << 20  # ids read at a time while scanning or skipping: 4 MiB of int32


def open_trace(source: str | Path | bytes, name: str = "") -> TokenTrace | Workload | WorkloadStream:
    """load_any, except that a recorded NPZ whose records are in stream order is streamed: read chunk by chunk,
    never held whole, so it may expand to MAX_STREAMED_NPZ_BYTES instead of MAX_NPZ_BYTES."""
    name = name or str(source if isinstance(source, (str, Path)) else "")
    if not name.lower().endswith(".csv"):
        stream = stream_recorded(source)
        if stream is not None:
            return stream
    return load_any(source, name)


def stream_from(item: TokenTrace | Workload | WorkloadStream, batching: Batching, n_expert: int) -> WorkloadStream:
    """Any trace as a stream: recorded workloads as recorded, token traces batched chunk by chunk."""
    if isinstance(item, WorkloadStream):
        return item
    if isinstance(item, Workload):
        return stream_of(item)
    return stream_build(item, batching, n_expert)


def stream_build(
    trace: TokenTrace,
    batching: Batching | None = None,
    n_expert: int | None = None,
    max_records: int = SIM_CHUNK_RECORDS,
) -> WorkloadStream:
    """build_workload's records, built chunk by chunk of whole ubatches: the same records, never all at once.

    Only the trace (2 bytes per lookup as int16) and its drawn warm-up and prompt rows are held, not the
    workload (36 bytes per lookup). The trace itself is held, not streamed from its file: c streams decode
    in lockstep, so one ubatch takes tokens of c sequences from far-apart places in the `experts` array,
    which a forward-only read of a deflated NPZ member cannot serve.
    """
    batching = batching or Batching()
    n_expert = max(n_expert or 0, trace.n_expert)
    synthetic = _synthetic_rows(trace, batching, n_expert)
    ub, extra = _collect_ubatches(trace, batching, np.random.default_rng(batching.seed), n_expert, synthetic)
    n_layer, n_ub = trace.n_layer, len(ub.tokens)
    sizes = np.array([len(t) for t in ub.tokens], dtype=np.int64)
    last = np.array(ub.last_layer_ntok, dtype=np.int64)
    last_layer = np.where(last >= 0, last, sizes)  # the last layer may see only the output token
    other_layers = sizes if n_layer > 1 else sizes[:0]
    per_chunk = max(1, max_records // n_layer)

    def chunks() -> Iterator[Workload]:
        for lo in range(0, n_ub, per_chunk):
            yield _ubatch_records(trace, ub, extra, n_expert, lo, min(lo + per_chunk, n_ub))

    return WorkloadStream(
        n_layer,
        n_expert,
        trace.k,
        np.unique(np.concatenate([other_layers, last_layer])),
        n_ub * n_layer,
        int(((n_layer - 1) * sizes + last_layer).sum()) * trace.k,
        int(sizes[np.array(ub.phase) == PHASE_DECODE].sum()),
        n_ub,
        chunks,
        trace.label,
    )


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


def stream_recorded(source: str | Path | bytes, max_records: int = SIM_CHUNK_RECORDS) -> WorkloadStream | None:
    """A recorded trace read from its NPZ in chunks of whole ubatches after one checking pass (the same checks and
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
        raise WorkloadError(f"not a readable NPZ trace: {one_line(err)}") from None
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
                        yield _recorded_chunk({c: a[:cut] for c, a in block.items()}, ids, scan)
                    carry = {c: a[cut:] for c, a in block.items()}
                yield _recorded_chunk(carry, ids, scan)
        except _NPZ_ERRORS as err:
            raise WorkloadError(f"not a readable NPZ trace: {one_line(err)}") from None

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
        raise WorkloadError(f"`{member.filename}` is cut off")
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
