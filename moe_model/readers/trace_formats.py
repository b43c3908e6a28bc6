"""Trace files read whole and written: token traces (NPZ `experts [n, n_layer, k]` or CSV) and traces recorded
inside llama.cpp (already workloads, replayed exactly); load_any picks the reader a file needs."""

from __future__ import annotations

import io
from pathlib import Path
from typing import BinaryIO

import numpy as np

from moe_model.errors import StopCheck, WorkloadError, one_line, stop_if
from moe_model.limits import CSV_CHUNK_ROWS, MAX_LAYERS, MAX_TRACE_IDS, MAX_TRACE_RECORDS, check_at_most, shown
from moe_model.readers.csv_lines import scan_csv_lines
from moe_model.readers.files import open_regular
from moe_model.readers.trace_checks import (
    NOT_RECORDS,
    OUTSIDE_IDS,
    RECORD_ARRAYS,
    check_ids,
    check_record_spans,
    check_recorded_arrays,
    decode_tokens,
    make_token_trace,
    one_k,
    within,
)
from moe_model.readers.trace_npz import npz_arrays
from moe_model.workload import PHASE_DECODE, RECORDED_LABEL, TokenTrace, Workload


def load_recorded(source: str | Path | bytes | BinaryIO) -> Workload:
    """A trace recorded inside llama.cpp (one record per (ubatch, layer)), replayed exactly."""
    return recorded_from(npz_arrays(source))


def recorded_from(data: dict[str, np.ndarray]) -> Workload:
    check_recorded_arrays(set(data))
    n_rec = len(data["rec_layer"])
    check_at_most(n_rec, MAX_TRACE_RECORDS, "records in the trace", WorkloadError)
    check_at_most(data["ids"].size, MAX_TRACE_IDS, "expert ids in the trace", WorkloadError)
    phase = data.get("rec_phase", np.full(n_rec, PHASE_DECODE))
    arrays = [data[key] for key in RECORD_ARRAYS] + [phase]
    if not n_rec or any(a.shape != (n_rec,) for a in arrays) or data["ids"].ndim != 1:
        raise WorkloadError(NOT_RECORDS)
    k = one_k(np.unique(data["rec_k"]))
    checked = {"ids": data["ids"], "rec_layer": data["rec_layer"], "rec_ubatch": data["rec_ubatch"], "rec_phase": phase}
    check_record_spans({n: (int(a.min()), int(a.max())) for n, a in checked.items() if a.size}, n_rec)
    in_ids = within(data["rec_ntok"], len(data["ids"]) + 1) and within(data["rec_off"], len(data["ids"]) + 1)
    ids, ntok, off = data["ids"].astype(np.int32), data["rec_ntok"].astype(np.int64), data["rec_off"].astype(np.int64)
    if not in_ids or (off + k * ntok).max() > len(ids):  # bounded first: k * ntok cannot overflow
        raise WorkloadError(OUTSIDE_IDS)
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
        decode_tokens(ntok, phase, layer),
        RECORDED_LABEL,
    )


def load_token_trace(source: str | Path | bytes | BinaryIO, label: str = "") -> TokenTrace:
    """An NPZ with `experts` [n_tokens, n_layers, k], optional `seq_offsets` and `ubatch`."""
    data = npz_arrays(source)
    if "experts" not in data:
        raise WorkloadError("a token trace needs an `experts` array [n_tokens, n_layers, k]")
    return make_token_trace(data["experts"], data.get("seq_offsets"), data.get("ubatch"), label)


CSV_ERRORS = (ValueError, OSError, UnicodeDecodeError)  # what pandas raises on text it cannot read


def token_trace_from_csv(source: str | Path | BinaryIO, label: str = "", should_stop: StopCheck = None) -> TokenTrace:
    """CSV with columns seq, token, layer, and expert ids e0..e{k-1} (one row per token and layer); its lines
    checked first (scan_csv_lines), then parsed CSV_CHUNK_ROWS rows at a time, `should_stop` asked between them."""
    import pandas as pd  # ~0.7 s to import: only CSV traces need it

    if isinstance(source, (str, Path)):
        with open_regular(source, "trace file", WorkloadError) as f:
            return token_trace_from_csv(f, label, should_stop)
    if isinstance(source.read(0), str):  # a text stream: the checks count bytes
        source = io.BytesIO(source.read().encode("utf-8"))
    scan_csv_lines(source, should_stop)
    source.seek(0)
    frame = _csv_frame(source, should_stop)
    expert_cols = expert_columns(frame.columns)
    if not {"seq", "token", "layer"} <= set(frame.columns) or not expert_cols:
        raise WorkloadError("a CSV trace needs columns seq, token, layer, e0, e1, ...")
    if not pd.api.types.is_integer_dtype(frame["layer"]) or not len(frame):
        raise WorkloadError("the `layer` column of a CSV trace must hold integers")
    check_ids(frame["layer"].to_numpy(), MAX_LAYERS, "CSV layer indices")
    frame = frame.sort_values(["seq", "token", "layer"])
    n_layer = int(frame["layer"].max()) + 1
    if len(frame) % n_layer:
        raise WorkloadError("every token of a CSV trace needs one row per layer")
    experts = frame[expert_cols].to_numpy().reshape(-1, n_layer, len(expert_cols))
    per_seq = frame[frame["layer"] == 0].groupby("seq", sort=True).size().to_numpy()
    return make_token_trace(experts, np.concatenate([[0], np.cumsum(per_seq)]), label=label)


def _csv_frame(source: BinaryIO, should_stop: StopCheck):
    """The checked CSV parsed by pandas in chunks of CSV_CHUNK_ROWS rows, `should_stop` asked before each."""
    import pandas as pd

    try:
        with pd.read_csv(source, chunksize=CSV_CHUNK_ROWS) as reader:
            parts = []
            for part in reader:
                stop_if(should_stop)
                parts.append(part)
    except CSV_ERRORS as err:
        raise WorkloadError(f"not a readable CSV trace: {shown(one_line(err))}") from None
    return pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]


def expert_columns(columns) -> list[str]:
    """The expert id columns e0, e1, ... in rank order."""
    return sorted((c for c in columns if str(c).startswith("e") and str(c)[1:].isdigit()), key=lambda c: int(c[1:]))


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


def load_any(
    source: str | Path | bytes | BinaryIO, name: str = "", should_stop: StopCheck = None
) -> TokenTrace | Workload:
    """A trace file of any supported kind: recorded llama.cpp NPZ, token-trace NPZ, or CSV; `should_stop` is asked
    between blocks (ReadStoppedError once it returns True)."""
    name = name or str(source if isinstance(source, (str, Path)) else "")
    if name.lower().endswith(".csv"):
        source = io.BytesIO(source) if isinstance(source, bytes) else source
        return token_trace_from_csv(source, Path(name).name, should_stop)
    data = npz_arrays(source, should_stop)
    if "rec_layer" in data:
        return recorded_from(data)
    return make_token_trace(
        data.get("experts", np.zeros(0)), data.get("seq_offsets"), data.get("ubatch"), Path(name).name
    )
