"""Read the metadata and tensor infos of a GGUF file without touching tensor data.

`gguf.GGUFReader` memory-maps the whole file and fails on prefixes, so this module walks the
header itself (offset-returning helpers, as in gguf-py) and skips array payloads it does not need.
Enums, key names and block sizes come from the `gguf` package.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from gguf import GGML_QUANT_SIZES, GGUF_DEFAULT_ALIGNMENT, GGMLQuantizationType, GGUFValueType, Keys

from moe_model.errors import GGUFError, TruncatedHeaderError
from moe_model.limits import (
    MAX_ARRAY_DEPTH,
    MAX_KV,
    MAX_SHARDS,
    MAX_TENSORS,
    MODEL_DEADLINE_S,
    check_at_most,
    shown,
)
from moe_model.readers.files import open_regular
from moe_model.readers.http import URL_TIMEOUTS, CheckUrl, Deadline, is_url, only_http, read_url_prefix

GGUF_MAGIC = b"GGUF"
MAX_STRING_BYTES = 256 * 1024 * 1024
MAX_ARRAY_ITEMS = 1 << 32
MAX_DIMS = 4  # GGML_MAX_DIMS
KEEP_ARRAY_ITEMS = 4096  # numeric arrays up to this size are kept (per-layer hparams)
FIRST_CHUNK_BYTES = 2 * 1024 * 1024
MAX_HEADER_BYTES = 64 * 1024 * 1024  # the byte cap of every read, local or remote


_SCALARS: dict[int, struct.Struct] = {
    GGUFValueType.UINT8: struct.Struct("<B"),
    GGUFValueType.INT8: struct.Struct("<b"),
    GGUFValueType.UINT16: struct.Struct("<H"),
    GGUFValueType.INT16: struct.Struct("<h"),
    GGUFValueType.UINT32: struct.Struct("<I"),
    GGUFValueType.INT32: struct.Struct("<i"),
    GGUFValueType.FLOAT32: struct.Struct("<f"),
    GGUFValueType.BOOL: struct.Struct("<?"),
    GGUFValueType.UINT64: struct.Struct("<Q"),
    GGUFValueType.INT64: struct.Struct("<q"),
    GGUFValueType.FLOAT64: struct.Struct("<d"),
}


_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_SHARD_RE = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$")
CheckPath = Callable[[str], str]  # vets a local path: raises, or returns the path to read


@dataclass(frozen=True)
class SkippedArray:
    """A metadata array whose items were skipped: its item type and length."""

    item_type: str
    count: int


@dataclass(frozen=True)
class TensorInfo:
    """One tensor as the header describes it; `shape` is in ggml order (ne0 first)."""

    name: str
    ggml_type: int
    shape: tuple[int, ...]
    offset: int

    @property
    def type_name(self) -> str:
        return GGMLQuantizationType(self.ggml_type).name

    @property
    def row_bytes(self) -> int:
        """nb[1]: bytes of one row of ne0 elements (ggml_row_size)."""
        block, type_bytes = GGML_QUANT_SIZES[GGMLQuantizationType(self.ggml_type)]
        return self.shape[0] // block * type_bytes

    @property
    def nbytes(self) -> int:
        n_rows = 1
        for ne in self.shape[1:]:
            n_rows *= ne
        return self.row_bytes * n_rows

    def stride_bytes(self, dim: int) -> int:
        """nb[dim] for a contiguous tensor: nb[2] of an expert tensor is the bytes of one expert."""
        size = self.row_bytes
        for ne in self.shape[1:dim]:
            size *= ne
        return size


@dataclass(frozen=True)
class GGUFHeader:
    """Metadata and tensor infos of one GGUF file (one shard of a split model)."""

    version: int
    metadata: Mapping[str, Any]
    tensors: tuple[TensorInfo, ...]
    header_bytes: int

    @property
    def alignment(self) -> int:
        return int(self.metadata.get(Keys.General.ALIGNMENT, GGUF_DEFAULT_ALIGNMENT))

    @property
    def data_offset(self) -> int:
        align = self.alignment
        return (self.header_bytes + align - 1) // align * align


def _need(buf: memoryview, off: int, n: int) -> None:
    if off + n > len(buf):
        raise TruncatedHeaderError(len(buf), off + n)


def _get_u32(buf: memoryview, off: int) -> tuple[int, int]:
    _need(buf, off, 4)
    return _U32.unpack_from(buf, off)[0], off + 4


def _get_u64(buf: memoryview, off: int) -> tuple[int, int]:
    _need(buf, off, 8)
    return _U64.unpack_from(buf, off)[0], off + 8


def _get_str(buf: memoryview, off: int) -> tuple[str, int]:
    n, off = _get_u64(buf, off)
    if n > MAX_STRING_BYTES:
        raise GGUFError(f"corrupt GGUF header: a string of {n:,} bytes at offset {off - 8:,}")
    _need(buf, off, n)
    return bytes(buf[off : off + n]).decode("utf-8", errors="replace"), off + n


def _skip_str_array(buf: memoryview, off: int, count: int) -> int:
    """Walk `count` strings without decoding them: only their lengths are read."""
    size = len(buf)
    unpack = _U64.unpack_from
    for _ in range(count):
        if off + 8 > size:
            raise TruncatedHeaderError(size, off + 8)
        n = unpack(buf, off)[0]
        if n > MAX_STRING_BYTES:
            raise GGUFError(f"corrupt GGUF header: a string of {n:,} bytes at offset {off:,}")
        off += 8 + n
    if off > size:
        raise TruncatedHeaderError(size, off)
    return off


def _value_type(raw: int, off: int) -> GGUFValueType:
    try:
        return GGUFValueType(raw)
    except ValueError:
        raise GGUFError(f"corrupt GGUF header: unknown value type {raw} at offset {off:,}") from None


def _array_head(buf: memoryview, off: int) -> tuple[GGUFValueType, int, int]:
    """(item type, item count, offset of the first item) of one array, its count checked before any read."""
    raw, off = _get_u32(buf, off)
    item_type = _value_type(raw, off - 4)
    count, off = _get_u64(buf, off)
    if count > MAX_ARRAY_ITEMS:
        raise GGUFError(f"corrupt GGUF header: an array of {count:,} items at offset {off - 8:,}")
    return item_type, count, off


def _get_flat_array(buf: memoryview, off: int, item_type: GGUFValueType, count: int) -> tuple[Any, int]:
    """The items of an array of strings or scalars: small numeric arrays are kept, the rest skipped."""
    if item_type == GGUFValueType.STRING:
        return SkippedArray("STRING", count), _skip_str_array(buf, off, count)
    scalar = _SCALARS[item_type]
    end = off + scalar.size * count
    _need(buf, off, end - off)
    if count <= KEEP_ARRAY_ITEMS:
        items = struct.unpack_from(f"<{count}{scalar.format[1:]}", buf, off)
        return tuple(items), end
    return SkippedArray(item_type.name, count), end


def _get_array(buf: memoryview, off: int) -> tuple[Any, int]:
    item_type, count, off = _array_head(buf, off)
    if item_type != GGUFValueType.ARRAY:
        return _get_flat_array(buf, off, item_type, count)
    remaining = [count]  # items left at each open nesting level: a loop, never recursion on untrusted input
    while remaining:
        if remaining[-1] == 0:
            remaining.pop()
            continue
        remaining[-1] -= 1
        inner_type, inner_count, off = _array_head(buf, off)
        if inner_type != GGUFValueType.ARRAY:
            _, off = _get_flat_array(buf, off, inner_type, inner_count)
        elif len(remaining) >= MAX_ARRAY_DEPTH:
            raise GGUFError(f"corrupt GGUF header: arrays nested deeper than {MAX_ARRAY_DEPTH} at offset {off:,}")
        else:
            remaining.append(inner_count)
    return SkippedArray("ARRAY", count), off


def _get_value(buf: memoryview, off: int, value_type: GGUFValueType) -> tuple[Any, int]:
    if value_type == GGUFValueType.STRING:
        return _get_str(buf, off)
    if value_type == GGUFValueType.ARRAY:
        return _get_array(buf, off)
    scalar = _SCALARS[value_type]
    _need(buf, off, scalar.size)
    return scalar.unpack_from(buf, off)[0], off + scalar.size


def _get_tensor_info(buf: memoryview, off: int) -> tuple[TensorInfo, int]:
    start = off
    name, off = _get_str(buf, off)
    n_dims, off = _get_u32(buf, off)
    if not 1 <= n_dims <= MAX_DIMS:
        raise GGUFError(f"corrupt GGUF header: tensor {shown(name)!r} has {n_dims} dimensions")
    _need(buf, off, 8 * n_dims)
    shape = struct.unpack_from(f"<{n_dims}Q", buf, off)
    off += 8 * n_dims
    raw_type, off = _get_u32(buf, off)
    offset, off = _get_u64(buf, off)
    try:
        ggml_type = GGMLQuantizationType(raw_type)
        block, _ = GGML_QUANT_SIZES[ggml_type]
    except (ValueError, KeyError):
        raise GGUFError(f"unsupported GGUF tensor type {raw_type} for {shown(name)!r} at offset {start:,}") from None
    n_elements = 1
    for ne in shape:
        n_elements *= ne
    if n_elements >= 1 << 62 or shape[0] % block:
        raise GGUFError(f"corrupt GGUF header: tensor {shown(name)!r} has shape {list(shape)}")
    return TensorInfo(name, int(ggml_type), tuple(int(x) for x in shape), offset), off


def parse_header(data: bytes | bytearray | memoryview) -> GGUFHeader:
    """Parse a GGUF header from bytes that start at the file's first byte (a prefix is enough).

    Raises TruncatedHeaderError when the bytes end inside the header, GGUFError when they are not GGUF.
    """
    buf = memoryview(data)
    _need(buf, 0, 4)
    if bytes(buf[:4]) != GGUF_MAGIC:
        raise GGUFError("not a GGUF file: its first 4 bytes are not the GGUF magic")  # never echo the bytes
    version, off = _get_u32(buf, 4)
    if version not in (2, 3):
        hint = " (a big-endian file?)" if version > 0xFFFF else ""
        raise GGUFError(f"unsupported GGUF version {version}{hint}; versions 2 and 3 are read")
    n_tensors, off = _get_u64(buf, off)
    n_kv, off = _get_u64(buf, off)
    check_at_most(n_tensors, MAX_TENSORS, "the GGUF header's tensor count", GGUFError)
    check_at_most(n_kv, MAX_KV, "the GGUF header's metadata entry count", GGUFError)
    metadata: dict[str, Any] = {}
    for _ in range(n_kv):
        key, off = _get_str(buf, off)
        raw, off = _get_u32(buf, off)
        metadata[key], off = _get_value(buf, off, _value_type(raw, off - 4))
    tensors = []
    for _ in range(n_tensors):
        info, off = _get_tensor_info(buf, off)
        tensors.append(info)
    return GGUFHeader(version, metadata, tuple(tensors), off)


def _parse_growing(read_prefix: Callable[[int], bytes], first_bytes: int = FIRST_CHUNK_BYTES) -> GGUFHeader:
    """Parse, re-reading a longer prefix (at least doubling) while the header is cut off."""
    want = first_bytes
    while True:
        data = read_prefix(want)
        try:
            return parse_header(data)
        except TruncatedHeaderError as err:
            if len(data) < want:  # the source itself ends inside the header: a short prefix
                raise
            if want >= MAX_HEADER_BYTES:
                raise GGUFError(f"the GGUF header is larger than {MAX_HEADER_BYTES // 2**20} MiB") from None
            want = min(MAX_HEADER_BYTES, max(2 * want, err.needed_bytes + first_bytes))


def _read_path_prefix(path: str) -> Callable[[int], bytes]:
    def read(n: int) -> bytes:
        with open_regular(path, "file", GGUFError) as f:
            return f.read(n)

    return read


def read_header(
    source: str | Path | bytes | bytearray | BinaryIO,
    timeouts: tuple[float, float] = URL_TIMEOUTS,
    check_url: CheckUrl = only_http,
    check_path: CheckPath = str,
    deadline: Deadline | None = None,
) -> GGUFHeader:
    """Read one GGUF header from a path, an http(s) URL, bytes, or a binary file object.

    Paths and URLs are read in growing chunks (2 MiB first, 64 MiB at most); bytes and file
    objects are taken as a prefix, and a prefix that ends inside the header raises
    TruncatedHeaderError saying how many more bytes are needed. `check_url` vets the URL and every
    redirect target (sources.check_url refuses private hosts); it raises to refuse, or returns the only
    addresses the connection may use. `check_path` vets a path the same way (sources.check_path keeps it
    inside the allowed folders); only regular files are read. `timeouts` are (connect, each read) in
    seconds; every URL read also ends by its own deadline, or by `deadline` if that comes sooner.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        return parse_header(source)
    if hasattr(source, "read"):
        return parse_header(source.read(MAX_HEADER_BYTES))  # type: ignore[union-attr]
    if is_url(source):
        return _parse_growing(read_url_prefix(str(source), timeouts, check_url, deadline))
    return _parse_growing(_read_path_prefix(check_path(str(source))))


def shard_sources(source: str | Path, n_shards: int) -> list[str]:
    """The names of every shard of a split model, given the name of one (`-00001-of-00003.gguf`)."""
    text = str(source)
    match = _SHARD_RE.search(text)
    if match is None:
        raise GGUFError(f"{shown(text)} is a split model but its name has no -NNNNN-of-NNNNN.gguf suffix")
    stem = text[: match.start()]
    return [f"{stem}-{i:05d}-of-{n_shards:05d}.gguf" for i in range(1, n_shards + 1)]


def read_model_headers(
    source: str | Path | bytes | bytearray | BinaryIO,
    timeouts: tuple[float, float] = URL_TIMEOUTS,
    check_url: CheckUrl = only_http,
    check_path: CheckPath = str,
) -> list[GGUFHeader]:
    """All headers of a model: one, or every shard's when the first shard names a split model. Every shard passes
    `check_url` or `check_path` like the first, and all of them are read within MODEL_DEADLINE_S together."""
    deadline = Deadline.after(MODEL_DEADLINE_S, f"{MODEL_DEADLINE_S:.0f} s for all shards of one model")
    first = read_header(source, timeouts, check_url, check_path, deadline)
    n_shards = _meta_count(first.metadata, Keys.Split.LLM_KV_SPLIT_COUNT, 1)
    check_at_most(n_shards, MAX_SHARDS, f"{Keys.Split.LLM_KV_SPLIT_COUNT} (shards)", GGUFError)
    _check_named_count(source, n_shards)
    if n_shards <= 1:
        return [first]
    if not isinstance(source, (str, Path)):
        raise GGUFError(
            f"this is shard 1 of a {n_shards}-shard model; give its path or URL so the other shards can be read"
        )
    if _meta_count(first.metadata, Keys.Split.LLM_KV_SPLIT_NO, 0) != 0:
        raise GGUFError("this is not the first shard of a split model: give the -00001-of-NNNNN.gguf file")
    headers = [first]
    for name in shard_sources(source, n_shards)[1:]:
        if deadline.left_s() <= 0:
            raise GGUFError(f"read {len(headers)} of {n_shards} shards before the deadline ({deadline.what}): too slow")
        headers.append(read_header(name, timeouts, check_url, check_path, deadline))
        _check_shard(headers[-1], len(headers) - 1, n_shards, name)
    check_at_most(sum(len(h.tensors) for h in headers), MAX_TENSORS, "tensors in all shards", GGUFError)
    _check_tensor_count(headers)
    return headers


def _check_named_count(source, n_shards: int) -> None:
    """A file named as one of N shards (N > 1) whose header is not one of N: planned whole, it would be a part."""
    if n_shards < 1:
        raise GGUFError(f"corrupt GGUF header: {Keys.Split.LLM_KV_SPLIT_COUNT} is {n_shards}: a model has a shard")
    named = _SHARD_RE.search(str(source)) if isinstance(source, (str, Path)) else None
    if named and int(named[2]) > 1 and int(named[2]) != n_shards:
        raise GGUFError(
            f"{shown(Path(str(source)).name)} is named one of {int(named[2])} shards but its header says "
            f"{Keys.Split.LLM_KV_SPLIT_COUNT} = {n_shards}: a damaged shard, or one of another split"
        )


def _check_shard(header: GGUFHeader, index: int, n_shards: int, name: str) -> None:
    """Shard `index` (from 0) of an n-shard model says so: its split.no and split.count."""
    number = _meta_count(header.metadata, Keys.Split.LLM_KV_SPLIT_NO, -1)
    count = _meta_count(header.metadata, Keys.Split.LLM_KV_SPLIT_COUNT, 0)
    if (number, count) != (index, n_shards):
        raise GGUFError(
            f"shard {index + 1} of {n_shards} ({shown(Path(name).name)}) says it is {Keys.Split.LLM_KV_SPLIT_NO} = "
            f"{number} of {Keys.Split.LLM_KV_SPLIT_COUNT} = {count}, not {index} of {n_shards}: a shard of another "
            "split, or a damaged one"
        )


def _check_tensor_count(headers: list[GGUFHeader]) -> None:
    """The tensors of all shards together, as many as each shard's split.tensors.count says (where it is given)."""
    held = sum(len(h.tensors) for h in headers)
    key = Keys.Split.LLM_KV_SPLIT_TENSORS_COUNT
    said = {_meta_count(h.metadata, key, held) for h in headers}
    if said != {held}:
        raise GGUFError(
            f"the {len(headers)} shards hold {held:,} tensors but their headers say {key} = "
            f"{', '.join(f'{n:,}' for n in sorted(said))}: a shard is damaged or of another model"
        )


def _meta_count(meta: Mapping[str, Any], key: str, default: int) -> int:
    """An integer metadata value; anything else (a string, an array) is a corrupt header, not a crash."""
    value = meta.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise GGUFError(f"corrupt GGUF header: {key} is {shown(repr(value))}, not an integer")
    return value
