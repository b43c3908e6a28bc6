"""How llama-server batches a token trace into the (ubatch, layer) records the cache sees.

`build_workload` turns a token trace into the ubatches llama-server would run: c sequences decoding in
lockstep, speculative verification batches, prompt ubatches (the last layer keeps only the output rows where the
model's graph prunes it: Batching.last_layer_prunes) and the start-up warm-up and probe, in execution order;
`stream_build` hands the same records out in chunks. The ubatches come from one generator (`_ubatches`) either
way; a trace read from its file (`StreamedTokens`) is read forward, one cursor per decoding sequence, so neither the
trace nor the workload is held.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import NamedTuple

import numpy as np

from moe_model.errors import WorkloadError
from moe_model.limits import (
    MAX_ROUTING_DRAWS,
    MAX_TRACE_IDS,
    SIM_CHUNK_LOOKUPS,
    SIM_CHUNK_RECORDS,
    SIM_MEMORY_SHARE,
    TRACE_READ_AHEAD_ROWS,
    WORKLOAD_BYTES_PER_LOOKUP,
    available_memory_bytes,
    check_at_most,
)
from moe_model.llama.output_rows import last_layer_prunes
from moe_model.llama.server_warm_up import (
    PROBE_OUTPUTS,
    PROBE_TOKENS,
    WARM_UP_OUTPUTS,
    WARM_UP_TOKENS,
    start_up_probe,
)
from moe_model.stored import stored
from moe_model.threads import run_all, worker_pool
from moe_model.workload import (
    PHASE_DECODE,
    PHASE_PROMPT,
    PHASE_WARMUP,
    Batching,
    RowCursor,
    RowReader,
    StreamedTokens,
    TokenTrace,
    Workload,
    WorkloadStream,
    stream_of,
)

DRAWN = -1  # the "sequence" of rows drawn from the trace's popularity (warm-up and prompts)


def server_batching(architecture: str, build: int, **settings) -> Batching:
    """Batching as llama-server `build` runs `architecture`: the last layer's output pruning (output_rows) and the
    start-up seq_rm probe (server_warm_up) of that build, the rest as given."""
    return Batching(
        **settings, last_layer_prunes=last_layer_prunes(architecture, build), start_up_probe=start_up_probe(build)
    )


class _Ubatch(NamedTuple):
    """One ubatch: rows (sequence, first, end) of its sequences (DRAWN: rows of the drawn block), in order."""

    phase: int
    last_layer_ntok: int  # -1: all layers see every token
    parts: tuple[tuple[int, int, int], ...]
    finished: tuple[int, ...] = ()  # sequences whose last rows this ubatch read

    @property
    def n_tokens(self) -> int:
        return sum(end - first for _, first, end in self.parts)


def _accepted_drafts(rng: np.random.Generator, draft_tokens: int, accept_rate: float) -> int:
    """Drafts accepted in one verification: the leading run of successes."""
    if draft_tokens == 0:
        return 0
    ok = rng.random(draft_tokens) < accept_rate
    return draft_tokens if ok.all() else int(np.argmin(ok))


def _ubatches(trace: TokenTrace | StreamedTokens, batching: Batching, rng: np.random.Generator) -> Iterator[_Ubatch]:
    """Every ubatch in server order: the warm-up, the seq_rm probe, then c streams decoding in lockstep (one
    verification of up to d+1 tokens each; a finished stream takes the next sequence, whose prompt ubatches come
    first)."""
    drawn = 0
    if batching.warmup:  # BOS+EOS decoded at start-up; EOS is the output
        yield _Ubatch(PHASE_WARMUP, _last_layer(batching, WARM_UP_OUTPUTS), ((DRAWN, 0, WARM_UP_TOKENS),))
        drawn = WARM_UP_TOKENS
    if batching.start_up_probe:  # token 0 twice, the second the output: one drawn row routes both
        probe = tuple((DRAWN, drawn, drawn + 1) for _ in range(PROBE_TOKENS))
        yield _Ubatch(PHASE_WARMUP, _last_layer(batching, PROBE_OUTPUTS), probe)
        drawn += 1
    if trace.ubatch is not None:
        yield from _given_ubatches(trace.ubatch)
        return
    starts, ends = trace.seq_offsets[:-1], trace.seq_offsets[1:]
    waiting = (s for s in range(trace.n_seq) if ends[s] > starts[s])
    width = batching.draft_tokens + 1
    streams: list[list[int]] = []  # [sequence, next row, end row]
    following = next(waiting, None)
    while following is not None or streams:
        while following is not None and len(streams) < batching.concurrency:
            streams.append([following, int(starts[following]), int(ends[following])])
            for first in range(0, batching.prompt_tokens, batching.ubatch_size):
                end = min(first + batching.ubatch_size, batching.prompt_tokens)
                outputs = 1 if end == batching.prompt_tokens else 0  # only the last prompt ubatch has an output
                yield _Ubatch(PHASE_PROMPT, _last_layer(batching, outputs), ((DRAWN, drawn + first, drawn + end),))
            drawn += batching.prompt_tokens
            following = next(waiting, None)
        parts = []
        for stream in streams:
            seq, pos, end = stream
            parts.append((seq, pos, min(pos + width, end)))
            stream[1] = pos + 1 + _accepted_drafts(rng, batching.draft_tokens, batching.accept_rate)
        done = tuple(st[0] for st in streams if st[1] >= st[2])
        yield _Ubatch(PHASE_DECODE, -1, tuple(parts), done)
        streams = [st for st in streams if st[1] < st[2]]


def _last_layer(batching: Batching, outputs: int) -> int:
    """The last layer's tokens in a ubatch of `outputs` output rows: those where the graph prunes, else all (-1)."""
    return outputs if batching.last_layer_prunes else -1


def _given_ubatches(ubatch: np.ndarray) -> Iterator[_Ubatch]:
    """A trace's own ubatch index: runs of equal values, rows in order (one stream)."""
    bounds = np.concatenate([[0], np.flatnonzero(np.diff(ubatch)) + 1, [len(ubatch)]])
    for first, end in zip(bounds[:-1], bounds[1:], strict=True):
        yield _Ubatch(PHASE_DECODE, -1, ((0, int(first), int(end)),))


def layer_popularity(experts: np.ndarray, n_expert: int) -> np.ndarray:
    """Per layer selection frequency of each expert (add-one smoothed): [n_layer, n_expert]."""
    n_layer = experts.shape[1]
    flat = (np.arange(n_layer)[None, :, None] * n_expert + experts.astype(np.int64)).ravel()
    return popularity_from_counts(np.bincount(flat, minlength=n_layer * n_expert).reshape(n_layer, n_expert))


def popularity_from_counts(counts: np.ndarray) -> np.ndarray:
    """Per layer selection frequency (add-one smoothed) from each layer's selection counts [n_layer, n_expert]."""
    smoothed = counts + 1.0
    return smoothed / smoothed.sum(axis=1, keepdims=True)


def sample_routing(popularity: np.ndarray, k: int, n_tokens: int, rng: np.random.Generator) -> np.ndarray:
    """n_tokens of i.i.d. routing: k distinct experts per layer, drawn by popularity (Gumbel top-k)."""
    n_layer, n_expert = popularity.shape
    out = np.empty((n_tokens, n_layer, k), dtype=np.int16)
    log_p = np.log(popularity)[None]
    chunk = max(1, 2_000_000 // (n_layer * n_expert))
    with worker_pool(2) as pool:
        for start in range(0, n_tokens, chunk):
            n = min(chunk, n_tokens - start)
            uniform, half = rng.random((n, n_layer, n_expert)), (n + 1) // 2
            jobs = [(log_p, uniform[a:b], out[start + a : start + b]) for a, b in ((0, half), (half, n))]
            run_all(pool, _top_k, jobs)  # numpy lets go of the GIL: the halves on two cores, the same values
    return out


def _top_k(log_p: np.ndarray, uniform: np.ndarray, out: np.ndarray) -> None:
    """out's k experts of each (token, layer): the largest of log p + Gumbel noise, largest first."""
    scores = log_p - np.log(-np.log(uniform))
    out[:] = np.argsort(-scores, axis=2)[:, :, : out.shape[2]]


def _synthetic_rows(trace: TokenTrace | StreamedTokens, batching: Batching, n_expert: int) -> int:
    """Tokens of warm-up and prompt routing to draw, refused beyond MAX_ROUTING_DRAWS before drawing."""
    needed = (WARM_UP_TOKENS if batching.warmup else 0) + batching.start_up_probe + batching.prompt_tokens * trace.n_seq
    if needed * trace.n_layer * n_expert > MAX_ROUTING_DRAWS:
        raise WorkloadError(
            f"{batching.prompt_tokens:,} prompt tokens x {trace.n_seq} sequences x {trace.n_layer} layers x "
            f"{n_expert} experts of drawn routing is above this tool's limit of {MAX_ROUTING_DRAWS:,}"
        )
    return needed


def _drawn_rows(
    trace: TokenTrace | StreamedTokens, batching: Batching, n_expert: int
) -> tuple[np.ndarray, np.random.Generator]:
    """The warm-up and prompt rows, drawn from the trace's per-layer popularity (they are not in per-token
    traces), and the random generator the schedule goes on with."""
    synthetic = _synthetic_rows(trace, batching, n_expert)
    if not synthetic:
        return np.zeros((0, trace.n_layer, trace.k), dtype=np.int16), np.random.default_rng(batching.seed)
    if isinstance(trace, StreamedTokens):
        counts = np.zeros((trace.n_layer, n_expert), dtype=np.int64)
        counts[:, : trace.expert_counts.shape[1]] = trace.expert_counts
        popularity = popularity_from_counts(counts)
    else:
        popularity = layer_popularity(trace.experts, n_expert)
    return kept_routing(popularity, trace.k, synthetic, batching.seed)


CODE = Path(__file__)  # sample_routing's source: a change to it draws the kept rows again


def kept_routing(popularity: np.ndarray, k: int, n_tokens: int, seed: int) -> tuple[np.ndarray, np.random.Generator]:
    """sample_routing's rows from a generator seeded with `seed`, drawn once per install and read back after
    (moe_model.stored), and that generator as the draw leaves it (one 64-bit step per uniform drawn)."""
    inputs = (hashlib.sha256(popularity.tobytes()).hexdigest(), popularity.shape, k, n_tokens, seed)
    rows = stored(
        "routing_rows", inputs, lambda: sample_routing(popularity, k, n_tokens, np.random.default_rng(seed)), CODE
    )
    rng = np.random.default_rng(seed)
    rng.bit_generator.advance(n_tokens * popularity.size)
    return rows, rng


def check_build_memory(n_lookups: int, available: int | None = None) -> None:
    """Refuse, before allocating, a workload this machine cannot build in memory."""
    available = available_memory_bytes() if available is None else available
    need = n_lookups * WORKLOAD_BYTES_PER_LOOKUP
    if available is not None and need > SIM_MEMORY_SHARE * available:
        raise WorkloadError(
            f"this workload needs about {need / 2**30:.1f} GiB to build ({n_lookups:,} expert lookups), more than "
            f"this machine has free ({available / 2**30:.1f} GiB): use fewer tokens or stream synthetic routing"
        )


class _HeldRows:
    """Token rows of a held trace: every ubatch's rows gathered at once (one fancy index per chunk)."""

    def __init__(self, experts: np.ndarray, drawn: np.ndarray) -> None:
        self.experts, self.drawn = experts, drawn

    def of(self, ubatches: list[_Ubatch]) -> np.ndarray:
        n = len(self.experts)
        rows = [np.arange(a, b) + (n if seq == DRAWN else 0) for ub in ubatches for seq, a, b in ub.parts]
        rows = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
        out = np.empty((len(rows), *self.experts.shape[1:]), dtype=np.int16)
        own = rows < n
        out[own] = self.experts[rows[own]]
        out[~own] = self.drawn[rows[~own] - n]
        return out


class _Window:
    """One decoding sequence's rows, read forward with read-ahead: a verification reads rows [pos, pos + d + 1)
    and the next one starts at most d + 1 rows later, so only rows from pos on are kept."""

    def __init__(self, cursor: RowCursor, first: int, n_tokens: int) -> None:
        self.cursor, self.first, self.read_to, self.n_tokens = cursor, first, first, n_tokens
        self.buf: np.ndarray | None = None

    def rows(self, first: int, end: int) -> np.ndarray:
        buf = self.buf[first - self.first :] if self.buf is not None else None
        if end > self.read_to:
            n = min(max(end - self.read_to, TRACE_READ_AHEAD_ROWS), self.n_tokens - self.read_to)
            more = self.cursor.take(n)
            buf = more if buf is None or not len(buf) else np.concatenate([buf, more])
            self.read_to += n
        self.buf, self.first = buf, first
        return buf[: end - first]


class _StreamedRows:
    """Token rows of a trace read forward: one window per decoding sequence, dropped when it finishes."""

    def __init__(self, reader: RowReader, drawn: np.ndarray, n_tokens: int) -> None:
        self.reader, self.drawn, self.n_tokens = reader, drawn, n_tokens
        self.windows: dict[int, _Window] = {}

    def of(self, ubatches: list[_Ubatch]) -> np.ndarray:
        pieces = []
        for ub in ubatches:
            for seq, a, b in ub.parts:
                if seq == DRAWN:
                    pieces.append(self.drawn[a:b])
                    continue
                if seq not in self.windows:
                    self.windows[seq] = _Window(self.reader.cursor(a), a, self.n_tokens)
                pieces.append(self.windows[seq].rows(a, b))
            for seq in ub.finished:
                self.windows.pop(seq, None)
        return np.concatenate(pieces) if pieces else self.drawn[:0]


def build_workload(
    trace: TokenTrace | StreamedTokens, batching: Batching | None = None, n_expert: int | None = None
) -> Workload:
    """The records llama-server would feed the cache for this trace and batching.

    Prompt and warm-up routing is not in per-token traces: it is drawn from each layer's expert
    popularity in the trace (a model, labelled as such).
    """
    batching = batching or Batching()
    n_expert = max(n_expert or 0, trace.n_expert)
    synthetic = _synthetic_rows(trace, batching, n_expert)
    n_lookups = (trace.n_tokens + synthetic) * trace.n_layer * trace.k
    if isinstance(trace, StreamedTokens):  # held whole here: the in-memory limit of a loaded trace applies
        check_at_most(n_lookups, MAX_TRACE_IDS, "expert ids in the trace and its drawn rows", WorkloadError)
    check_build_memory(n_lookups)  # before anything is drawn
    drawn, rng = _drawn_rows(trace, batching, n_expert)
    ubatches = list(_ubatches(trace, batching, rng))
    if isinstance(trace, StreamedTokens):
        with trace.open_reader() as reader:
            rows = _StreamedRows(reader, drawn, trace.n_tokens).of(ubatches)
    else:
        rows = _HeldRows(trace.experts, drawn).of(ubatches)
    return _ubatch_records(rows, ubatches, 0, trace.n_layer, trace.k, n_expert, trace.label)


def _ubatch_records(
    rows: np.ndarray, ubatches: list[_Ubatch], lo: int, n_layer: int, k: int, n_expert: int, label: str
) -> Workload:
    """The records of `ubatches` (numbered from lo; offsets into their own ids) from their token rows."""
    sizes = np.array([ub.n_tokens for ub in ubatches], dtype=np.int64)
    rec_ntok = np.repeat(sizes, n_layer).reshape(-1, n_layer)
    last = np.array([ub.last_layer_ntok for ub in ubatches], dtype=np.int64)
    rec_ntok[last >= 0, -1] = last[last >= 0]
    token_ub = np.repeat(np.arange(len(sizes)), sizes)
    # records are (ubatch, layer); inside one, the ubatch's tokens in order (a stable sort by key)
    order = np.argsort((token_ub[:, None] * n_layer + np.arange(n_layer)[None, :]).ravel(), kind="stable")
    per_layer_ids = rows.reshape(len(rows) * n_layer, k)[order]
    keep = _keep_output_rows(sizes, rec_ntok, n_layer)
    ids = per_layer_ids[keep].ravel().astype(np.int32)
    rec_ntok = rec_ntok.ravel().astype(np.int32)
    rec_off = np.concatenate([[0], np.cumsum(rec_ntok.astype(np.int64) * k)[:-1]])
    phases = np.array([ub.phase for ub in ubatches], dtype=np.int8)
    return Workload(
        n_layer,
        n_expert,
        k,
        np.repeat(np.arange(lo, lo + len(sizes)), n_layer),
        np.tile(np.arange(n_layer, dtype=np.int32), len(sizes)),
        rec_ntok,
        rec_off,
        np.repeat(phases, n_layer),
        ids,
        int(sizes[phases == PHASE_DECODE].sum()),
        label,
    )


def _keep_output_rows(sizes: np.ndarray, rec_ntok: np.ndarray, n_layer: int) -> np.ndarray:
    """Mask over the (ubatch, layer, token) rows: a layer that sees fewer tokens keeps the last ones."""
    n_rows = sizes.repeat(n_layer)
    seen = rec_ntok.ravel()
    start = np.concatenate([[0], np.cumsum(n_rows)[:-1]])
    pos = np.arange(n_rows.sum()) - np.repeat(start, n_rows)
    return pos >= np.repeat(n_rows - seen, n_rows)


def workload_from(item: TokenTrace | StreamedTokens | Workload, batching: Batching, n_expert: int) -> Workload:
    """Recorded workloads replay as recorded; token traces are batched."""
    return item if isinstance(item, Workload) else build_workload(item, batching, n_expert)


def stream_from(
    item: TokenTrace | StreamedTokens | Workload | WorkloadStream, batching: Batching, n_expert: int
) -> WorkloadStream:
    """Any trace as a stream: recorded workloads as recorded, token traces batched chunk by chunk."""
    if isinstance(item, WorkloadStream):
        return item
    if isinstance(item, Workload):
        return stream_of(item)
    return stream_build(item, batching, n_expert)


class _Totals(NamedTuple):
    n_ubatches: int
    ntok_values: np.ndarray
    n_lookups: int
    decode_tokens: int


def _totals(trace: TokenTrace | StreamedTokens, batching: Batching, rng: np.random.Generator) -> _Totals:
    """What a stream needs up front, from one pass over the schedule (no rows read)."""
    n_layer, n_ub, lookups, decode = trace.n_layer, 0, 0, 0
    values: set[int] = set()
    for ub in _ubatches(trace, batching, rng):
        size = ub.n_tokens
        last = size if ub.last_layer_ntok < 0 else ub.last_layer_ntok  # the last layer may see only the output
        values.update((size, last) if n_layer > 1 else (last,))
        lookups += ((n_layer - 1) * size + last) * trace.k
        decode += size if ub.phase == PHASE_DECODE else 0
        n_ub += 1
    return _Totals(n_ub, np.array(sorted(values), dtype=np.int64), lookups, decode)


def stream_build(
    trace: TokenTrace | StreamedTokens,
    batching: Batching | None = None,
    n_expert: int | None = None,
    max_records: int = SIM_CHUNK_RECORDS,
    max_lookups: int = SIM_CHUNK_LOOKUPS,
) -> WorkloadStream:
    """build_workload's records, built chunk by chunk of whole ubatches (at most max_records records and
    max_lookups ids each, or one ubatch): the same records, never all at once.

    Neither the workload (36 bytes per lookup) nor the schedule is held: it is generated again for each pass,
    from the same random state. A held trace is indexed; a `StreamedTokens` is read forward from its file, one
    cursor (with a few rows of read-ahead) per decoding sequence, so memory does not grow with its length.
    """
    batching = batching or Batching()
    n_expert = max(n_expert or 0, trace.n_expert)
    drawn, rng = _drawn_rows(trace, batching, n_expert)
    totals = _totals(trace, batching, copy.deepcopy(rng))
    per_chunk = max(1, max_records // trace.n_layer)

    def chunks() -> Iterator[Workload]:
        with trace.open_reader() if isinstance(trace, StreamedTokens) else nullcontext() as reader:
            source = _HeldRows(trace.experts, drawn) if reader is None else _StreamedRows(reader, drawn, trace.n_tokens)
            batch: list[_Ubatch] = []
            lo = lookups = 0
            for ub in _ubatches(trace, batching, copy.deepcopy(rng)):
                size = ub.n_tokens * trace.n_layer * trace.k  # at most: the last layer may see fewer
                if batch and (len(batch) == per_chunk or lookups + size > max_lookups):
                    yield _ubatch_records(source.of(batch), batch, lo, trace.n_layer, trace.k, n_expert, trace.label)
                    lo, batch, lookups = lo + len(batch), [], 0
                batch.append(ub)
                lookups += size
            if batch:
                yield _ubatch_records(source.of(batch), batch, lo, trace.n_layer, trace.k, n_expert, trace.label)

    return WorkloadStream(
        trace.n_layer,
        n_expert,
        trace.k,
        totals.ntok_values,
        totals.n_ubatches * trace.n_layer,
        totals.n_lookups,
        totals.decode_tokens,
        totals.n_ubatches,
        chunks,
        trace.label,
    )
