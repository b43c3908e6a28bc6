"""One CPU core copying the model's mmap'd bytes, slice by slice: the host half of a pageable upload.

With mmap (llama-server's default) `--cpu-moe` experts stay in the file's pages (`CPU_Mapped`), and CUDA uploads
pageable memory by one CPU core copying it into a pinned staging buffer while the DMA engine moves the chunk before.
The link (25-55 GB/s) outruns one core reading DRAM (~5-12 GB/s), so a miss uploads at about this core's rate: the
time model's `Host.copy_gbs` (speed/rates.upload_gbs). A model, checked on the lent machine: the one-core rate and
CUDA's pageable upload of the same bytes (sample_data/groundtruth/run12).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from moe_model.readers.model_spec import ModelSpec

SAMPLE_BYTES = 2 << 30  # 2 GiB: above any desktop or server CPU's last-level cache, so the timed pass reads DRAM
PAGE = 4096
SEED = 11  # the same slices on every run


def expert_slice_bytes(spec: ModelSpec) -> int:
    """The mean bytes of one expert's slice of one expert tensor (ggml nb[2]): what one upload copy moves."""
    sizes = [t.expert_bytes for layer in spec.layers for t in layer.experts]
    return int(np.mean(sizes)) if sizes else 1 << 20


def copy_gbs(path: str | Path, chunk_bytes: int, sample_bytes: int = SAMPLE_BYTES) -> float | None:
    """GB/s one core copies `chunk_bytes` slices of the file at page-aligned random offsets into one reused buffer,
    timed on the second pass (the first maps the pages, as a server's earlier tokens did); None for a file smaller
    than a page or one that cannot be mapped."""
    try:
        data = np.memmap(path, dtype=np.uint8, mode="r")
    except (OSError, ValueError):  # gone, unreadable or empty: the record keeps the rest
        return None
    chunk = max(PAGE, min(int(chunk_bytes), data.size))
    if data.size < chunk:
        return None
    count = max(1, min(sample_bytes, data.size) // chunk)
    starts = np.random.default_rng(SEED).integers(0, (data.size - chunk) // PAGE + 1, size=count) * PAGE
    buffer = np.empty(chunk, dtype=np.uint8)
    seconds = 0.0
    for timed in (False, True):
        begin = time.perf_counter()
        for start in starts:
            np.copyto(buffer, data[start : start + chunk])
        seconds = time.perf_counter() - begin if timed else 0.0
    return count * chunk / seconds / 1e9 if seconds > 0 else None
