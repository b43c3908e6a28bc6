"""The recorded routing written as the trace llama.cpp's own tracing program writes (sample_data/groundtruth/traces):
one record per (ubatch, MoE layer) in execution order, `rec_*` arrays and the `ids` they point into, which
readers.traces.load_recorded reads and `simulate --trace` replays exactly."""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from moe_model.atomic import write_atomic
from moe_model.record.callback import LayerRecord
from moe_model.record.runtime import RecordError
from moe_model.workload import PHASE_DECODE, PHASE_PROMPT, PHASE_WARMUP

WARM_UP_CALL = -1  # rec_call of the warm-up: it is no request's llama_decode


@dataclass(frozen=True)
class Ubatch:
    """One ubatch as llama.cpp computed it: its phase, the llama_decode call it belongs to, each MoE layer's ids."""

    phase: int
    call: int
    layers: tuple[LayerRecord, ...]


def trace_arrays(ubatches: Sequence[Ubatch]) -> dict[str, np.ndarray]:
    """The recorded-trace arrays of the ubatches, in order (ids token-major, each token's in top-k order)."""
    records = [(i, ub, layer) for i, ub in enumerate(ubatches) for layer in ub.layers]
    ks = {layer.ids.shape[1] for _, _, layer in records}
    if len(ks) != 1:
        raise RecordError(f"the model selects {sorted(ks)} experts per token in different layers: a trace holds one")
    ntok = np.array([layer.n_tokens for _, _, layer in records], dtype=np.int64)
    k = ks.pop()
    return {
        "rec_phase": np.array([ub.phase for _, ub, _ in records], dtype=np.int32),
        "rec_call": np.array([ub.call for _, ub, _ in records], dtype=np.int32),
        "rec_ubatch": np.array([i for i, _, _ in records], dtype=np.int32),
        "rec_layer": np.array([layer.layer for _, _, layer in records], dtype=np.int32),
        "rec_k": np.full(len(records), k, dtype=np.int32),
        "rec_ntok": ntok.astype(np.int32),
        "rec_off": np.concatenate(([0], np.cumsum(ntok * k)[:-1])).astype(np.int64),
        "ids": np.concatenate([layer.ids.reshape(-1) for _, _, layer in records]).astype(np.int32),
    }


def write_trace(path: str | Path, ubatches: Sequence[Ubatch]) -> None:
    """The trace of the ubatches, written whole or not at all (an NPZ of stored members: streamable, no inflation)."""
    if not ubatches:
        raise RecordError("no ubatch was recorded: no trace written")
    arrays = trace_arrays(ubatches)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    write_atomic(path, lambda f: f.write(buffer.getbuffer()))


__all__ = ["PHASE_DECODE", "PHASE_PROMPT", "PHASE_WARMUP", "WARM_UP_CALL", "Ubatch", "trace_arrays", "write_trace"]
