"""`record --measure-drive` (record/drive.py): a read timed after the file's pages were dropped from the page cache
gives the drive's rate; pages that stay cached (a mapping holds them) or a file too small to time give none."""

from __future__ import annotations

import mmap
import os

import pytest

from moe_model.limits import DRIVE_MIN_BYTES
from moe_model.record.drive import DriveRead, measure_drive, resident_share
from moe_model.record.host import drive_of
from moe_model.record.tiny_models import write_tiny_model


@pytest.fixture
def big_file(tmp_path):
    """A file just above the size a rate needs, written back to the drive (dirty pages cannot be dropped)."""
    path = tmp_path / "model.bin"
    with open(path, "wb") as f:
        for _ in range(DRIVE_MIN_BYTES // (1 << 20) + 1):
            f.write(os.urandom(1 << 20))
        f.flush()
        os.fsync(f.fileno())
    return path


def test_a_dropped_file_is_read_cold_and_gives_the_drives_rate(big_file):
    if drive_of(big_file) is None:
        pytest.skip("the temporary folder is on no block device (tmpfs): its pages are its storage")
    read = measure_drive(big_file)
    assert read.bytes_read == big_file.stat().st_size and read.cold
    assert read.read_gbs == pytest.approx(read.bytes_read / read.seconds / 1e9)
    assert "cold sequential read" in read.describe() and "measured" in read.describe()


def test_pages_a_mapping_holds_stay_cached_and_give_no_rate(big_file):
    with open(big_file, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as held:
        touched = sum(held[i] for i in range(0, len(held), mmap.PAGESIZE))  # every page faulted in and mapped
        read = measure_drive(big_file)
    assert touched >= 0 and not read.cold and read.read_gbs is None
    assert "stayed in the page cache" in read.describe()


def test_the_resident_share_sees_a_read_file_in_the_page_cache(big_file):
    fd = os.open(big_file, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        os.posix_fadvise(fd, 0, size, os.POSIX_FADV_DONTNEED)
        before = resident_share(fd, size)
        while os.read(fd, 8 << 20):
            pass
        assert before <= 0.01 and resident_share(fd, size) > 0.9
    finally:
        os.close(fd)


def test_a_tiny_model_is_too_small_to_time_a_drive(tmp_path):
    read = measure_drive(write_tiny_model(tmp_path / "m.gguf", "qwen3moe"))
    assert read.read_gbs is None and "too small" in read.describe()
    assert DriveRead(DRIVE_MIN_BYTES, 0.5, 0.5).read_gbs is None  # half cached: memory was timed
