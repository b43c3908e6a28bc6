"""Host memory: what llama.cpp keeps in RAM against the machine's RAM, and what mmap'd experts read from disk.

In RAM: what the layer map (slot_plan.layer_map) puts in host memory, layer by layer: the experts of host layers
(--cpu-moe, --n-cpu-moe K, --fit) and of layers -ngl leaves on the CPU, those layers' dense weights and the output
layer where -ngl leaves it there, the KV cache of CPU layers (every layer's with --no-kv-offload); and the input
embedding (token_embd stays on the host). Pinned host experts
(--load-mode none, mlock, dio: CUDA_Host buffers) must fit in RAM, else llama-server fails to allocate them.
mmap'd ones (the default) live in the page cache: what does not fit is read from the drive again whenever a
token needs it. The page cache is taken to hold its share of the host experts the GPU pool does not (uniform
access: which pages stay depends on popularity, on each prompt reading most experts again and on the kernel's
lists; sample_data/groundtruth/run8, a 6 GiB memory cgroup holding 0.69 of the experts, missed 0.28 of the host
reads, uniform access gives 0.31).

A RAM size nobody stated (Host.ram_stated) is never assumed: the setting is priced in RAM (no disk term), and the
verdict says how much RAM it needs and what happens below it (the drive's fault read rate, or no start when pinned).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from moe_model.llama.slot_plan import CPU, MIB, Placement, layer_map
from moe_model.readers.model_spec import ModelSpec
from moe_model.speed.hardware import Hardware
from moe_model.speed.host_parts import disk_read_gbs
from moe_model.speed.vram import MemoryFlags, weights_on

HOST_RESERVE_MIB = 2048  # the OS and llama-server's own host buffers: an assumption
# page faults read mmap'd experts in readahead windows, not in one stream: a share of the drive's sequential rate
# (an assumption made before run8, which measured 0.44 of a cold sequential read at a 128 KiB read-ahead)
FAULT_READ_SHARE = 0.5
FITS, STREAMS, REFUSED = "fits", "streams", "refused"  # HostMemory.state: in RAM, mmap'd experts paging, no start


def whole_gib(mib: float) -> int:
    """A RAM figure as every page and command shows it: whole GiB rounded up (rounded down, it would not hold it)."""
    return math.ceil(mib / 1024)


def fault_read_gbs(hw: Hardware) -> float:
    """Rate mmap'd experts that left the page cache are read back at: page faults, a share of the drive's rate."""
    return disk_read_gbs(hw.host) * FAULT_READ_SHARE


@dataclass(frozen=True)
class HostMemory:
    """MiB of host RAM one configuration needs, and the machine's RAM."""

    experts_mib: float
    other_mib: float  # input embedding and dense weights of layers on the CPU (the output layer's where there)
    reserve_mib: float
    ram_mib: float
    pinned: bool
    ram_stated: bool = True  # False: the machine's RAM is not known, and the setting is priced as if it fits
    fault_gbs: float = 0.0  # the rate mmap'd experts beyond the page cache would be read from the drive at
    kv_mib: float = 0.0  # K and V cells kept in host memory (CPU layers, or every layer with --no-kv-offload)

    @property
    def used_mib(self) -> float:
        return self.experts_mib + self.other_mib + self.kv_mib + self.reserve_mib

    @property
    def needed_gib(self) -> int:
        """The RAM the setting needs, as shown everywhere (whole_gib)."""
        return whole_gib(self.used_mib)

    @property
    def free_mib(self) -> float:
        return self.ram_mib - self.used_mib

    @property
    def state(self) -> str:
        """The one RAM predicate every page and command reads: FITS (in RAM; with the RAM not stated it is taken to,
        and the verdict says what it needs), STREAMS (mmap'd experts beyond the page cache are read from the drive,
        priced by the disk term) or REFUSED (pinned memory that does not fit, or no RAM left for the page cache)."""
        if not self.ram_stated or self.free_mib >= 0:
            return FITS
        return STREAMS if not self.pinned and self.page_cache_mib > 0 else REFUSED

    @property
    def fits(self) -> bool:
        return self.state == FITS

    @property
    def page_cache_mib(self) -> float:
        """RAM left for the page cache that holds mmap'd experts."""
        return max(0.0, self.ram_mib - self.other_mib - self.kv_mib - self.reserve_mib)

    @property
    def streams(self) -> bool:
        """mmap'd host experts that exceed the page cache: part of them is read from disk on every pass."""
        return self.state == STREAMS

    @property
    def runs(self) -> bool:
        """It starts and a speed is shown: it fits, or its mmap'd experts stream from disk."""
        return self.state != REFUSED

    def as_dict(self) -> dict:
        return {
            "experts": self.experts_mib,
            "other": self.other_mib,
            "kv_cache": self.kv_mib,
            "reserve_assumed": self.reserve_mib,
            "used": self.used_mib,
            "total": self.ram_mib,
            "ram_stated": self.ram_stated,
            "pinned": self.pinned,
            "state": self.state,
        }

    @property
    def verdict(self) -> str:
        """One line a page leads with: fits or not, and what would free the memory."""
        need, ram = self.needed_gib, self.ram_mib / 1024
        if not self.ram_stated:
            return self.needs
        if self.fits:
            return f"fits in RAM: {need:,} of {ram:,.0f} GiB ({self.experts_mib / 1024:,.1f} GiB of host experts)"
        why = (
            f"mmap'd experts page from disk: {self.page_cache_mib / 1024:,.1f} GiB of them stay in the page "
            "cache, the rest is read from the drive whenever a token needs it (modelled: see the disk term)"
            if self.streams
            else "pinned memory (--load-mode none) cannot page out, so llama-server would fail to allocate it"
            if self.pinned
            else "the other host weights, the KV cache and the reserve leave no RAM for the page cache"
        )
        return (
            f"does not fit in RAM: needs {need:,} GiB, the machine has {ram:,.0f} GiB; {why}. Free it with more "
            "RAM, a smaller quantization, or fewer layers in host memory (a smaller --n-cpu-moe K) where VRAM allows"
        )

    @property
    def needs(self) -> str:
        """With the RAM not stated: the RAM the setting needs, and what happens with less."""
        below = (
            "pinned experts (--load-mode none) would fail to allocate"
            if self.pinned
            else "the mmap'd experts beyond the page cache are read from the drive again whenever a token needs "
            f"them, at about {self.fault_gbs:,.1f} GB/s (the disk term)"
        )
        return (
            f"RAM not stated: this setting needs {self.needed_gib:,} GiB of host RAM "
            f"({self.experts_mib / 1024:,.1f} GiB of host experts) and is priced as if the machine has it; with less, "
            f"{below}. Give the RAM (--ram-gib, a RAM kit or a host record) to price it"
        )


def host_memory(
    model: ModelSpec, hw: Hardware, placement: Placement, flags: MemoryFlags, load_mode: str = "mmap"
) -> HostMemory:
    """Host RAM of a resolved placement (--fit already turned into its layer count), its memory flags (the KV cache
    of the layers it keeps on the host) and a load mode (-lm): the layer map's host side and the input embedding."""
    host = weights_on(model, layer_map(model, placement, flags.kv_offload), flags.n_ctx, flags.kv_types, CPU)
    return HostMemory(
        host.experts_mib,
        model.input_bytes / MIB + host.dense_mib,
        HOST_RESERVE_MIB,
        hw.ram_gib * 1024,
        load_mode != "mmap",
        hw.host.ram_stated,
        fault_read_gbs(hw),
        host.kv_mib,
    )


def page_miss_share(n_expert: int, pool_items: float, cache_items: float) -> float:
    """Share of a layer's host reads (the GPU pool's misses, or every read without a pool) the page cache misses:
    the pool holds `pool_items` of its experts, the page cache `cache_items` of the others (uniform access)."""
    rest = n_expert - pool_items
    return 0.0 if rest <= 0 else max(0.0, 1.0 - cache_items / rest)
