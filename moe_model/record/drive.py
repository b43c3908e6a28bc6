"""The drive's read rate (`record --measure-drive`): a timed sequential read of the model file, its pages first
dropped from the page cache for that file alone (os.posix_fadvise POSIX_FADV_DONTNEED), and whether that worked.

The kernel drops only clean pages no process maps: a model file mapped by a running llama-server (or held on tmpfs)
stays cached, and a read of it times memory, not the drive. mincore(2) says how much of the range was resident
when the read began: at most DRIVE_COLD_SHARE is a cold read, whose rate is the drive's; otherwise no rate is given.
A sequential read of large chunks is the drive's best case: llama.cpp reading mmap'd experts back faults pages in
smaller, scattered reads (the time model's disk term, speed/host_memory.py, starts from this rate).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import time
from dataclasses import dataclass
from pathlib import Path

from moe_model.limits import DRIVE_COLD_SHARE, DRIVE_MIN_BYTES, DRIVE_READ_BYTES, DRIVE_READ_CHUNK
from moe_model.record.runtime import RecordError


@dataclass(frozen=True)
class DriveRead:
    """One timed read: bytes, seconds, the share of its pages resident before it, and the rate where cold."""

    bytes_read: int
    seconds: float
    resident_share: float

    @property
    def cold(self) -> bool:
        return self.resident_share <= DRIVE_COLD_SHARE

    @property
    def read_gbs(self) -> float | None:
        """GB/s of the drive, or None where the pages were cached (the read timed memory) or the file is too small
        to time a drive (DRIVE_MIN_BYTES)."""
        timed = self.cold and self.seconds > 0 and self.bytes_read >= DRIVE_MIN_BYTES
        return self.bytes_read / self.seconds / 1e9 if timed else None

    def describe(self) -> str:
        read = f"{self.bytes_read / 2**20:,.0f} MiB in {self.seconds:.2f} s"
        if self.read_gbs is not None:
            return f"drive: {self.read_gbs:,.2f} GB/s, a cold sequential read ({read}; measured)"
        if self.cold:
            least = f"{DRIVE_MIN_BYTES >> 20} MiB at least"
            return f"drive: not measured: the file is too small to time a drive ({read}; {least})"
        return (
            f"drive: not measured: {100 * self.resident_share:.0f} % of the file's pages stayed in the page cache "
            f"(mapped by another process, or a memory file system), so the read ({read}) timed memory"
        )


def measure_drive(path: str | Path, limit_bytes: int = DRIVE_READ_BYTES) -> DriveRead:
    """The first `limit_bytes` of `path` dropped from the page cache, then read and timed; RecordError where this
    system cannot drop a file's pages (no posix_fadvise)."""
    if not hasattr(os, "posix_fadvise"):
        raise RecordError("--measure-drive needs os.posix_fadvise (Linux): this system cannot drop a file's pages")
    size = min(os.path.getsize(path), limit_bytes)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, size, os.POSIX_FADV_DONTNEED)
        resident = resident_share(fd, size)
        buffer = memoryview(bytearray(DRIVE_READ_CHUNK))
        done, start = 0, time.perf_counter()
        while done < size:
            got = os.preadv(fd, [buffer[: min(DRIVE_READ_CHUNK, size - done)]], done)
            if not got:
                break
            done += got
        seconds = time.perf_counter() - start
    finally:
        os.close(fd)
    return DriveRead(done, seconds, resident)


def resident_share(fd: int, size: int) -> float:
    """The share of the file's first `size` bytes in the page cache (mincore(2) on a read-only mapping, which
    reads nothing); 1.0 where it cannot be told, so that no rate is claimed."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if size == 0 or not hasattr(libc, "mincore"):
        return 1.0
    libc.mmap.restype, libc.mmap.argtypes = (
        ctypes.c_void_p,
        [ctypes.c_void_p, ctypes.c_size_t] + [ctypes.c_int] * 3 + [ctypes.c_long],
    )
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if address in (None, ctypes.c_void_p(-1).value):
        return 1.0
    try:
        pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
        vector = (ctypes.c_ubyte * pages)()
        if libc.mincore(ctypes.c_void_p(address), ctypes.c_size_t(size), vector) != 0:
            return 1.0
        return sum(v & 1 for v in vector) / pages
    finally:
        libc.munmap(address, size)
