"""The eval-callback reader of llama.cpp's routing: `ffn_moe_topk-<il>`, every MoE layer's selected experts, copied
out of the graph as it is computed (and `ffn_moe_probs-<il>`, the router's probabilities, when asked: tests check
the ids against them).

llama.cpp calls the callback twice per graph node: once to ask whether we want it (we say yes for the names we
read), then with its data computed. The top-k tensor is a strided view of the full argsort (ggml_argsort_top_k:
ne = [k, n_tokens], row stride nb[1] = n_expert ids), read through nb. An exception raised inside a ctypes
callback would end the graph silently while llama_decode still returns 0, so the callback never raises: it keeps
the first error (a KeyboardInterrupt included) and stops the graph; the session checks after each decode.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from moe_model.record.runtime import RecordError, Runtime

GGML_MAX_DIMS = 4
GGML_MAX_OP_PARAMS = 64
GGML_MAX_SRC = 10
GGML_MAX_NAME = 64
GGML_TYPE_F32 = 0
GGML_TYPE_I32 = 26


class GgmlTensor(ctypes.Structure):
    """struct ggml_tensor of the vendored ggml/include/ggml.h (llama-cpp-python 0.3.36); its name field is checked
    against ggml_get_name on the first tensor read, so another layout is refused, not misread."""

    _fields_ = [
        ("type", ctypes.c_int),
        ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * GGML_MAX_DIMS),
        ("nb", ctypes.c_size_t * GGML_MAX_DIMS),
        ("op", ctypes.c_int),
        ("op_params", ctypes.c_int32 * (GGML_MAX_OP_PARAMS // 4)),
        ("flags", ctypes.c_int32),
        ("src", ctypes.c_void_p * GGML_MAX_SRC),
        ("view_src", ctypes.c_void_p),
        ("view_offs", ctypes.c_size_t),
        ("data", ctypes.c_void_p),
        ("name", ctypes.c_char * GGML_MAX_NAME),
        ("extra", ctypes.c_void_p),
        ("padding", ctypes.c_char * 8),
    ]


@dataclass(frozen=True)
class LayerRecord:
    """One MoE layer of one ubatch: its token count and each token's experts in top-k order ([n_tokens, k])."""

    layer: int
    ids: np.ndarray
    probs: np.ndarray | None = None  # [n_tokens, n_expert], only when the reader was asked for probabilities

    @property
    def n_tokens(self) -> int:
        return int(self.ids.shape[0])


TOPK = "ffn_moe_topk-"
PROBS = "ffn_moe_probs-"


class RoutingReader:
    """The cb_eval of a llama_context: collects LayerRecords in the order llama.cpp computes them; `drain()` hands
    them over. Keep the reader referenced as long as the context lives (ctypes frees an unreferenced callback)."""

    def __init__(self, runtime: Runtime, with_probs: bool = False) -> None:
        self.ggml = runtime.ggml
        self.with_probs = with_probs
        self.records: list[LayerRecord] = []
        self.error: BaseException | None = None
        self._probs: dict[int, np.ndarray] = {}
        self._layout_checked = False
        self.callback = runtime.llama.ggml_backend_sched_eval_callback(self._eval)

    def drain(self) -> list[LayerRecord]:
        """The records read since the last drain (a graph the callback stopped leaves only those before)."""
        records, self.records = self.records, []
        self._probs.clear()
        return records

    def raise_pending(self) -> None:
        """Re-raise a KeyboardInterrupt the callback caught; any other error it caught is a RecordError."""
        error, self.error = self.error, None
        if isinstance(error, KeyboardInterrupt):
            raise KeyboardInterrupt
        if error is not None:
            raise RecordError(f"reading the routing failed inside llama.cpp's graph: {error}")

    def _eval(self, tensor: int, ask: bool, _user_data: int) -> bool:
        if self.error is not None:
            return False  # a failed graph stops here; take() reports why
        try:
            name = self.ggml.ggml_get_name(tensor).decode("utf-8", "replace")
            if ask:
                return self._wanted(name)
            self._read(tensor, name)
            return True
        except BaseException as err:  # noqa: BLE001 (never raise into C: keep it for take())
            self.error = err
            return False

    def _wanted(self, name: str) -> bool:
        return _layer_of(name, TOPK) is not None or (self.with_probs and _layer_of(name, PROBS) is not None)

    def _read(self, tensor: int, name: str) -> None:
        t = GgmlTensor.from_address(tensor)
        self._check_layout(t, name)
        layer = _layer_of(name, TOPK)
        if layer is not None:
            self.records.append(
                LayerRecord(layer, read_matrix(self.ggml, tensor, t, np.int32), self._probs.pop(layer, None))
            )
            return
        layer = _layer_of(name, PROBS)
        if layer is not None:
            self._probs[layer] = read_matrix(self.ggml, tensor, t, np.float32)

    def _check_layout(self, t: GgmlTensor, name: str) -> None:
        if self._layout_checked:
            return
        if t.name.decode("utf-8", "replace") != name:
            raise RecordError("this llama-cpp-python's ggml_tensor layout is not the one record reads (0.3.36's)")
        self._layout_checked = True


def _layer_of(name: str, prefix: str) -> int | None:
    """The layer of an exact `<prefix><il>` name; None for any other (ggml's derived names add suffixes)."""
    if not name.startswith(prefix):
        return None
    tail = name[len(prefix) :]
    return int(tail) if tail.isdigit() else None


_DTYPES = {np.int32: GGML_TYPE_I32, np.float32: GGML_TYPE_F32}


def read_matrix(ggml: ctypes.CDLL, tensor: int, t: GgmlTensor, dtype: type) -> np.ndarray:
    """A 2-D tensor ([ne0, ne1] in ggml order, rows nb[1] bytes apart) as a numpy [ne1, ne0] array."""
    if t.type != _DTYPES[dtype] or t.ne[2] != 1 or t.ne[3] != 1 or t.nb[0] != 4:
        raise RecordError(f"{t.name.decode()} is not a 2-D {np.dtype(dtype).name} tensor")
    cols, rows = int(t.ne[0]), int(t.ne[1])
    if rows == 0:
        return np.zeros((0, cols), dtype)
    row_bytes = int(t.nb[1])
    span = (rows - 1) * row_bytes + cols * 4  # ggml_nbytes of the view: the last row ends here
    if span > ggml.ggml_nbytes(tensor):
        raise RecordError(f"{t.name.decode()}: strides reach past the tensor")
    raw = ctypes.create_string_buffer(span)
    ggml.ggml_backend_tensor_get(tensor, raw, 0, span)
    flat = np.frombuffer(raw, dtype=np.uint8)
    rows_bytes = np.lib.stride_tricks.as_strided(flat, shape=(rows, cols * 4), strides=(row_bytes, 1))
    return np.ascontiguousarray(rows_bytes).view(dtype).reshape(rows, cols)
