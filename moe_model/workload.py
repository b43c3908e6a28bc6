"""What the server feeds the cache: per (ubatch, layer) records of routed experts, and the types around it.

A `TokenTrace` holds per-token routing (which k experts each layer picked); a `StreamedTokens` is one read
forward from its file instead; a `Workload` holds one record per (ubatch, layer) with that layer's own token
count, in execution order; a `WorkloadStream` hands a workload out in chunks; `Batching` holds the server
settings that turn one into the other (`llama.batching`). Readers live in `readers.traces` (the entry to
`readers.trace_formats`, `token_stream`, `recorded_stream`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from moe_model.errors import WorkloadError
from moe_model.limits import (
    DEFAULT_ACCEPT_RATE,
    DEFAULT_UBATCH,
    MAX_CONCURRENCY,
    MAX_DRAFT_TOKENS,
    MAX_PROMPT_TOKENS,
    MAX_UBATCH,
    SIM_CHUNK_LOOKUPS,
    SIM_CHUNK_RECORDS,
)
from moe_model.settings import setting

PHASE_WARMUP, PHASE_PROMPT, PHASE_DECODE = 0, 1, 2


def first_layer(rec_layer: np.ndarray) -> np.ndarray:
    """The records of each ubatch's first MoE layer, where its tokens are counted: the lowest layer recorded (a
    model's leading dense layers, as deepseek2's layer 0, have no record). `rec_layer` holds whole ubatches."""
    return rec_layer == rec_layer.min() if rec_layer.size else np.zeros(0, dtype=bool)


RECORDED_LABEL = "recorded llama.cpp trace"


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
    # replays count the start-up warm-up's lookups with the decode's, as the stored calibration was fitted; False:
    # left out (it still fills the pool), as a log's decode timing and hit rate leave it out
    warm_up_in_decode: bool = True

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

    def warm_up(self) -> Workload | None:
        """llama-server's start-up warm-up (its records come first), or None when the workload has none."""
        n = int(np.count_nonzero(self.rec_phase == PHASE_WARMUP))
        return self.prefix(n) if n else None

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


def stream_of(
    work: Workload, max_records: int = SIM_CHUNK_RECORDS, max_lookups: int = SIM_CHUNK_LOOKUPS
) -> WorkloadStream:
    """An in-memory workload as a stream of slices, cut only between ubatches, each of at most max_records
    records and max_lookups ids (or one ubatch, when a single one is larger)."""
    starts = np.flatnonzero(np.diff(work.rec_ubatch)) + 1  # where a new ubatch begins
    if np.any(np.diff(work.rec_ubatch) < 0):
        starts = starts[:0]  # ubatch ids out of order: one chunk keeps per-ubatch counts exact
    lookups = np.concatenate([[0], np.cumsum(work.rec_ntok.astype(np.int64) * work.k)])  # ids before each record
    cuts = chunk_cuts(starts, lookups, max_records, max_lookups)
    n_expert = max(work.n_expert, int(work.ids.max()) + 1 if len(work.ids) else 0)

    def chunks() -> Iterator[Workload]:
        bounds = [0, *cuts, work.n_records]
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            if b > a:
                yield _chunk(work, a, b)

    return WorkloadStream(
        work.n_layer,
        n_expert,
        work.k,
        token_counts(work.rec_ntok),
        work.n_records,
        len(work.ids),
        work.decode_tokens,
        work.n_ubatches,
        chunks,
        work.label,
    )


def token_counts(rec_ntok: np.ndarray) -> np.ndarray:
    """The distinct token counts of records, ascending: np.unique's answer, by counting where the counts are small
    (one ubatch's tokens at most) rather than sorting every record."""
    if len(rec_ntok) and int(rec_ntok.min()) >= 0 and int(rec_ntok.max()) < 1 << 20:
        return np.flatnonzero(np.bincount(rec_ntok)).astype(rec_ntok.dtype)
    return np.unique(rec_ntok)


def chunk_cuts(starts: np.ndarray, lookups: np.ndarray, max_records: int, max_lookups: int) -> list[int]:
    """Chunk ends among the ubatch starts: each chunk takes the most whole ubatches within both limits, at least one."""
    n, cuts, a = len(lookups) - 1, [], 0
    while True:
        end = min(a + max_records, int(np.searchsorted(lookups, lookups[a] + max_lookups, side="right")) - 1)
        if end >= n:
            return cuts
        i = int(np.searchsorted(starts, end, side="right"))  # starts[:i] <= end
        later = int(np.searchsorted(starts, a, side="right"))  # starts[later:] > a
        if later >= len(starts):
            return cuts
        a = int(starts[i - 1]) if i > later else int(starts[later])
        cuts.append(a)


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


class RowCursor(Protocol):
    def take(self, n: int) -> np.ndarray:
        """The next n token rows [n, n_layer, k] (int16)."""


class RowReader(Protocol):
    def cursor(self, row: int) -> RowCursor:
        """A cursor at token row `row`; rows are asked for in rising order of their first row."""


@dataclass(frozen=True, eq=False)
class StreamedTokens:
    """A token trace read forward from its file, never held whole (readers.token_stream): its
    shape, sequences and per-layer expert counts come from one checking pass; `open_reader()` gives a fresh
    reader (one per pass over the trace) whose cursors read token rows forward."""

    n_tokens: int
    n_layer: int
    k: int
    n_expert: int  # every id is below this
    seq_offsets: np.ndarray
    ubatch: np.ndarray | None
    expert_counts: np.ndarray  # [n_layer, n_expert]: how often each layer picked each expert
    open_reader: Callable[[], AbstractContextManager[RowReader]]
    label: str = ""

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
    warm-up decode at start-up (llama/server_warm_up.py). last_layer_prunes: the last layer's MoE computes only the
    output rows of a prompt or warm-up ubatch, not every token (the model's architecture and the build decide it:
    llama/output_rows.last_layer_prunes). start_up_probe: the server's seq_rm probe decode of {0, 0} after the
    warm-up (with or without it; llama/server_warm_up.start_up_probe of the build); off unless asked for.
    """

    concurrency: int = 1
    draft_tokens: int = 0
    accept_rate: float = DEFAULT_ACCEPT_RATE
    # simulate's flag: the prompt it replays through the pool. --prompt-tokens means a request's prompt priced
    # (Scenario.prompt_tokens) everywhere else; simulate keeps it as this flag's old spelling (issue 37)
    prompt_tokens: int = setting(
        0,
        flags=("--replay-prompt-tokens", "--prompt-tokens"),
        lo=0,
        hi=MAX_PROMPT_TOKENS,
        help="prompt tokens each sequence replays through the cache before decoding (0: none)",
    )
    ubatch_size: int = DEFAULT_UBATCH
    warmup: bool = True
    seed: int = setting(
        0, flags=("--seed",), lo=0, hi=2**32 - 1, help="seed of the synthetic routing and the drafts accepted"
    )
    last_layer_prunes: bool = True
    start_up_probe: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.concurrency <= MAX_CONCURRENCY:
            raise WorkloadError(f"concurrency must be 1..{MAX_CONCURRENCY}, got {self.concurrency}")
        if not 0 <= self.draft_tokens <= MAX_DRAFT_TOKENS:
            raise WorkloadError(f"draft tokens must be 0..{MAX_DRAFT_TOKENS}, got {self.draft_tokens}")
        if not 0.0 <= self.accept_rate <= 1.0:
            raise WorkloadError(f"acceptance rate must be in [0, 1], got {self.accept_rate}")
        if not 0 <= self.prompt_tokens <= MAX_PROMPT_TOKENS or not 1 <= self.ubatch_size <= MAX_UBATCH:
            raise WorkloadError(f"prompt tokens must be 0..{MAX_PROMPT_TOKENS:,} and the ubatch size 1..{MAX_UBATCH:,}")
