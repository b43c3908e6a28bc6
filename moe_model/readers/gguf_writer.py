"""Write GGUF files: header-only (metadata and tensor infos, no tensor data), or whole with F32/F16 tensor data.

Header-only files make the bundled sample models and most test fixtures: a header is all the explorer reads, so
a few MB stand in for a file of hundreds of GB. Whole files (gguf_bytes) are the tiny random-weight models that
llama.cpp loads and runs in the recorder's tests.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType


@dataclass(frozen=True)
class StringArray:
    """A metadata array of strings (e.g. a vocabulary)."""

    items: Sequence[str]


@dataclass(frozen=True)
class TypedArray:
    """A metadata array of numbers of one GGUF value type."""

    item_type: GGUFValueType
    items: Sequence[int | float]


@dataclass(frozen=True)
class Scalar:
    """A metadata number with an explicit GGUF value type (plain ints are written as UINT32)."""

    item_type: GGUFValueType
    value: int | float


_FORMATS = {
    GGUFValueType.UINT8: "B",
    GGUFValueType.INT8: "b",
    GGUFValueType.UINT16: "H",
    GGUFValueType.INT16: "h",
    GGUFValueType.UINT32: "I",
    GGUFValueType.INT32: "i",
    GGUFValueType.FLOAT32: "f",
    GGUFValueType.BOOL: "?",
    GGUFValueType.UINT64: "Q",
    GGUFValueType.INT64: "q",
    GGUFValueType.FLOAT64: "d",
}


def _str(text: str) -> bytes:
    raw = text.encode("utf-8")
    return struct.pack("<Q", len(raw)) + raw


def _value(value: Any) -> tuple[GGUFValueType, bytes]:
    if isinstance(value, bool):
        return GGUFValueType.BOOL, struct.pack("<?", value)
    if isinstance(value, int):
        return GGUFValueType.UINT32, struct.pack("<I", value)
    if isinstance(value, float):
        return GGUFValueType.FLOAT32, struct.pack("<f", value)
    if isinstance(value, str):
        return GGUFValueType.STRING, _str(value)
    if isinstance(value, Scalar):
        return value.item_type, struct.pack(f"<{_FORMATS[value.item_type]}", value.value)
    if isinstance(value, StringArray):
        body = b"".join(_str(s) for s in value.items)
        return GGUFValueType.ARRAY, struct.pack("<IQ", GGUFValueType.STRING, len(value.items)) + body
    if isinstance(value, TypedArray):
        fmt = _FORMATS[value.item_type]
        body = struct.pack(f"<{len(value.items)}{fmt}", *value.items)
        return GGUFValueType.ARRAY, struct.pack("<IQ", value.item_type, len(value.items)) + body
    raise TypeError(f"cannot write metadata value {value!r}")


def tensor_nbytes(ggml_type: GGMLQuantizationType, shape: Sequence[int]) -> int:
    block, type_bytes = GGML_QUANT_SIZES[ggml_type]
    n = 1
    for ne in shape:
        n *= ne
    return n // block * type_bytes


def header_bytes(
    metadata: Mapping[str, Any],
    tensors: Iterable[tuple[str, GGMLQuantizationType, Sequence[int]]],
    alignment: int = 32,
) -> bytes:
    """A GGUF v3 header; tensors are (name, type, shape in ggml order), laid out back to back."""
    tensors = list(tensors)
    out = [b"GGUF", struct.pack("<IQQ", 3, len(tensors), len(metadata))]
    for key, value in metadata.items():
        value_type, body = _value(value)
        out += [_str(key), struct.pack("<I", value_type), body]
    offset = 0
    for name, ggml_type, shape in tensors:
        out += [_str(name), struct.pack(f"<I{len(shape)}Q", len(shape), *shape), struct.pack("<IQ", ggml_type, offset)]
        offset += (tensor_nbytes(ggml_type, shape) + alignment - 1) // alignment * alignment
    return b"".join(out)


_DATA_TYPES = {np.dtype("<f4"): GGMLQuantizationType.F32, np.dtype("<f2"): GGMLQuantizationType.F16}


def gguf_bytes(metadata: Mapping[str, Any], tensors: Mapping[str, np.ndarray], alignment: int = 32) -> bytes:
    """A whole GGUF v3 file: the header, then each tensor's data at its aligned offset (GGUF's default
    alignment, 32). Arrays are float32 or float16 in numpy order: ggml's shape is the numpy shape reversed."""
    arrays = {name: np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")) for name, a in tensors.items()}
    unknown = [name for name, a in arrays.items() if a.dtype not in _DATA_TYPES]
    if unknown:
        raise TypeError(f"tensor data must be float32 or float16: {unknown[0]}")
    infos = [(name, _DATA_TYPES[a.dtype], a.shape[::-1]) for name, a in arrays.items()]
    out = [header_bytes(metadata, infos, alignment)]
    size = len(out[0])
    for a in arrays.values():
        out += [_padding(size, alignment), a.tobytes()]
        size += len(out[-2]) + len(out[-1])
    return b"".join(out)


def _padding(n_bytes: int, alignment: int) -> bytes:
    return bytes(-n_bytes % alignment)
