"""NPZ archives read within bounds: members listed and checked from the zip directory, each member's .npy header
(an integer dtype, a shape no larger than the member) read before any of its data is inflated."""

from __future__ import annotations

import io
import lzma
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import BinaryIO

import numpy as np

from moe_model.errors import StopCheck, WorkloadError, one_line, stop_if
from moe_model.limits import MAX_NPZ_BYTES, MAX_NPZ_INFLATION, MAX_NPZ_MEMBERS, NPZ_INFLATION_FREE_BYTES, shown
from moe_model.readers.files import open_regular

_NPY_HEADERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


# what a damaged NPZ raises; zipfile raises NotImplementedError for a compression method it does not support
NPZ_ERRORS = (OSError, ValueError, EOFError, zipfile.BadZipFile, NotImplementedError, zlib.error, lzma.LZMAError)


def npz_arrays(source: str | Path | bytes | BinaryIO, should_stop: StopCheck = None) -> dict[str, np.ndarray]:
    """The integer arrays of an NPZ; every member's declared size, shape and dtype are checked before
    anything is decompressed (a small zip can expand to many GiB); `should_stop` asked between blocks."""
    try:
        with open_zip(source) as archive:
            members = npz_members(archive)
            check_npz_total(members, MAX_NPZ_BYTES)
            return {m.filename.removesuffix(".npy"): npz_member(archive, m, should_stop) for m in members}
    except NPZ_ERRORS as err:
        raise WorkloadError(f"not a readable NPZ trace: {shown(one_line(err))}") from None


@contextmanager
def open_zip(source: str | Path | bytes | BinaryIO) -> Iterator[zipfile.ZipFile]:
    """The archive of bytes, a file object, or a path (a regular file only: /dev/zero never ends)."""
    with ExitStack() as stack:
        if isinstance(source, (str, Path)):
            source = stack.enter_context(open_regular(source, "trace file", WorkloadError))
        elif isinstance(source, (bytes, bytearray)):
            source = io.BytesIO(source)
        yield stack.enter_context(zipfile.ZipFile(source))


def npz_members(archive: zipfile.ZipFile) -> list[zipfile.ZipInfo]:
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
    _check_inflation(members)
    return members


def _check_inflation(members: list[zipfile.ZipInfo]) -> None:
    """Refuse an archive whose members inflate more than MAX_NPZ_INFLATION times their zipped bytes, from the zip
    directory alone: reading it would cost that much work per uploaded byte (a zip of zeros deflates ~1,000:1)."""
    inflated, zipped = sum(m.file_size for m in members), sum(m.compress_size for m in members)
    if inflated > NPZ_INFLATION_FREE_BYTES and inflated > MAX_NPZ_INFLATION * zipped:
        raise WorkloadError(
            f"the NPZ would inflate {inflated / max(zipped, 1):,.0f}x ({inflated:,} bytes from {zipped:,}), above "
            f"this tool's limit of {MAX_NPZ_INFLATION}x its zipped size"
        )


def check_npz_total(members: list[zipfile.ZipInfo], limit: int) -> None:
    total = sum(m.file_size for m in members)
    if total > limit:
        raise WorkloadError(f"the NPZ expands to {total:,} bytes, above this tool's limit of {limit // 1024**3} GiB")


def npy_header(f: BinaryIO, member: zipfile.ZipInfo) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """A member's .npy header (shape, Fortran order, dtype, data bytes): integers only, no more than it holds."""
    version = np.lib.format.read_magic(f)
    if version not in _NPY_HEADERS:
        raise WorkloadError(f"`{shown(member.filename)}` is .npy version {version}; versions 1.0 and 2.0 are read")
    shape, fortran, dtype = _NPY_HEADERS[version](f)
    if not np.issubdtype(dtype, np.integer):
        raise WorkloadError(f"`{shown(member.filename)}` holds {dtype}, not integers")
    n_bytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if n_bytes > member.file_size:
        raise WorkloadError(f"`{shown(member.filename)}` declares {n_bytes:,} bytes of data in {member.file_size:,}")
    return shape, fortran, dtype, n_bytes


def npz_member(archive: zipfile.ZipFile, member: zipfile.ZipInfo, should_stop: StopCheck = None) -> np.ndarray:
    """One member: its .npy header first (an integer dtype, a shape matching the declared size), then the data,
    inflated ID_BLOCK_BYTES at a time with `should_stop` asked before each."""
    with archive.open(member) as f:
        shape, fortran, dtype, n_bytes = npy_header(f, member)
        data = np.empty(n_bytes, dtype=np.uint8)
        got = 0
        while got < n_bytes:
            stop_if(should_stop)
            n = f.readinto(memoryview(data)[got : got + ID_BLOCK_BYTES])
            if not n:
                raise WorkloadError(f"`{shown(member.filename)}` is cut off")
            got += n
    return data.view(dtype).reshape(shape, order="F" if fortran else "C")


def read_values(f: BinaryIO, member: zipfile.ZipInfo, dtype: np.dtype, n: int) -> np.ndarray:
    data = np.frombuffer(f.read(n * dtype.itemsize), dtype=dtype)
    if len(data) != n:
        raise WorkloadError(f"`{shown(member.filename)}` is cut off")
    return data


ID_BLOCK = 1 << 20  # ids read at a time while scanning or skipping: 4 MiB of int32
ID_BLOCK_BYTES = 4 * ID_BLOCK  # bytes a member read whole inflates between two asks of should_stop
