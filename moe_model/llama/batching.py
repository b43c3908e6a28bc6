"""How llama-server batches a token trace into the (ubatch, layer) records the cache sees.

`build_workload` turns a `TokenTrace` into the ubatches llama-server would run: c sequences decoding in
lockstep, speculative verification batches, prompt ubatches (the last layer keeps only the output rows)
and the start-up warm-up, in execution order; `stream_build` hands the same records out in chunks.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from moe_model.errors import WorkloadError
from moe_model.limits import (
    MAX_ROUTING_DRAWS,
    SIM_CHUNK_RECORDS,
    SIM_MEMORY_SHARE,
    WORKLOAD_BYTES_PER_LOOKUP,
    available_memory_bytes,
)
from moe_model.workload import (
    PHASE_DECODE,
    PHASE_PROMPT,
    PHASE_WARMUP,
    Batching,
    TokenTrace,
    Workload,
    WorkloadStream,
    stream_of,
)


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


def workload_from(item: TokenTrace | Workload, batching: Batching, n_expert: int) -> Workload:
    """Recorded workloads replay as recorded; token traces are batched."""
    return item if isinstance(item, Workload) else build_workload(item, batching, n_expert)


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
