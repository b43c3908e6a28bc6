"""The checks every trace reader shares (ids and indices in range before any cast, shapes and sequences within
this tool's limits, a recorded trace's arrays), and make_token_trace, which applies them to arrays in memory."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moe_model.errors import WorkloadError
from moe_model.limits import (
    MAX_EXPERTS,
    MAX_EXPERTS_USED,
    MAX_LAYERS,
    MAX_TRACE_IDS,
    MAX_TRACE_TOKENS,
    check_at_most,
)
from moe_model.workload import PHASE_DECODE, TokenTrace, first_layer


def check_ids(values: np.ndarray, hi: int, what: str) -> None:
    """Refuse integers outside [0, hi) before any cast could wrap them (a cast int16 id of 40000 is negative)."""
    if values.size:
        check_span(int(values.min()), int(values.max()), hi, what)


def check_span(lowest: int, highest: int, hi: int, what: str) -> None:
    if lowest < 0 or highest >= hi:
        raise WorkloadError(f"{what} must be in 0..{hi - 1:,}, got {lowest:,}..{highest:,}")


def within(values: np.ndarray, hi: int) -> bool:
    return not values.size or (int(values.min()) >= 0 and int(values.max()) < hi)


RECORD_ARRAYS = ("rec_ubatch", "rec_layer", "rec_ntok", "rec_off", "rec_k")
NOT_RECORDS = "recorded trace: record arrays of different lengths, or not one-dimensional"
OUTSIDE_IDS = "recorded trace: records outside `ids`"


def check_recorded_arrays(names: set[str]) -> None:
    need = {*RECORD_ARRAYS, "ids"}
    if not need <= names:
        raise WorkloadError(f"a recorded trace needs arrays {sorted(need)}; missing {sorted(need - names)}")


def one_k(k_values: np.ndarray) -> int:
    """The experts per token of every record (a recorded trace has one value)."""
    if len(k_values) != 1:
        raise WorkloadError(f"recorded trace mixes experts-per-token values {k_values.tolist()}")
    check_ids(k_values, MAX_EXPERTS_USED + 1, "experts per token")
    return int(k_values[0])


def check_record_spans(spans: dict[str, tuple[int, int]], n_rec: int) -> None:
    """Each array's (lowest, highest) value in range; an array left out is empty."""
    limits = {"ids": (MAX_EXPERTS, "expert ids"), "rec_layer": (MAX_LAYERS, "layer indices")}
    limits |= {"rec_ubatch": (n_rec, "ubatch indices"), "rec_phase": (PHASE_DECODE + 1, "record phases")}
    for name, (hi, what) in limits.items():
        if name in spans:
            check_span(*spans[name], hi, what)


def decode_tokens(ntok: np.ndarray, phase: np.ndarray, layer: np.ndarray) -> int:
    """Generation tokens of records holding whole ubatches, counted at each ubatch's first MoE layer."""
    return int(ntok[(phase == PHASE_DECODE) & first_layer(layer)].sum())


def decode_tokens_by_layer(ntok: np.ndarray, phase: np.ndarray, layer: np.ndarray) -> np.ndarray:
    """Generation tokens per layer (MAX_LAYERS of them; records outside are refused by the range checks), for a
    pass over records in blocks that need not hold whole ubatches: the total is the lowest layer's."""
    keep = (phase == PHASE_DECODE) & (layer >= 0) & (layer < MAX_LAYERS)
    return np.bincount(layer[keep], weights=ntok[keep], minlength=MAX_LAYERS).astype(np.int64)


def make_token_trace(experts: np.ndarray, seq_offsets=None, ubatch=None, label: str = "") -> TokenTrace:
    """Validate the arrays of a token trace and wrap them; ids are range-checked before the int16 cast."""
    experts = np.asarray(experts)
    n = check_token_shape(experts.shape, experts.dtype)
    check_at_most(experts.size, MAX_TRACE_IDS, "expert ids in the trace", WorkloadError)
    check_ids(experts, MAX_EXPERTS, "expert ids")
    offsets, ubatch = check_sequences(n, seq_offsets, ubatch)
    return TokenTrace(experts.astype(np.int16), offsets, ubatch, label)


def check_token_shape(shape: tuple[int, ...], dtype: np.dtype) -> int:
    """The checks on an `experts` array's shape and type, before any of it is read; returns n_tokens."""
    if len(shape) != 3 or 0 in shape or not np.issubdtype(dtype, np.integer):
        raise WorkloadError(f"`experts` must be a non-empty integer array [n_tokens, n_layers, k], got {shape}")
    n, n_layer, k = shape
    check_at_most(n, MAX_TRACE_TOKENS, "tokens in the trace", WorkloadError)
    check_at_most(n_layer, MAX_LAYERS, "layers in the trace", WorkloadError)
    check_at_most(k, MAX_EXPERTS_USED, "experts per token in the trace", WorkloadError)
    return n


def check_sequences(n: int, seq_offsets, ubatch) -> tuple[np.ndarray, np.ndarray | None]:
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
        check_ids(ubatch, n, "`ubatch` indices")
        ubatch = ubatch.astype(np.int64)
        if np.any(np.diff(ubatch) < 0):
            raise WorkloadError("`ubatch` must be a non-decreasing index per token")
    return offsets, ubatch


@dataclass(frozen=True)
class ReplayCap:
    """The most expert ids one caller replays from a trace (work, not memory: streaming bounds only memory), who
    that caller is and what a user does for more, as the refusal says them."""

    max_lookups: int
    replayer: str  # "the app", "the CLI"
    more: str  # what to do for a longer trace

    def check(self, n_lookups: int) -> None:
        if n_lookups > self.max_lookups:
            raise WorkloadError(
                f"this trace holds {n_lookups:,} expert ids; {self.replayer} replays at most {self.max_lookups:,}; "
                f"{self.more}"
            )
