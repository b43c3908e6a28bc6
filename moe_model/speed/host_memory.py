"""Host memory: what llama.cpp keeps in RAM against the machine's RAM, and what mmap'd experts read from disk.

In RAM: the experts of host layers (--cpu-moe, --n-cpu-moe K, --fit), the input embedding (token_embd
stays on the host) and the dense weights of layers -ngl leaves on the CPU. Pinned host experts
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

from moe_model.llama.slot_plan import CPU, MIB, Placement
from moe_model.readers.model_spec import ModelSpec
from moe_model.speed.hardware import Hardware
from moe_model.speed.host_parts import disk_read_gbs

HOST_RESERVE_MIB = 2048  # the OS and llama-server's own host buffers: an assumption
# page faults read mmap'd experts in readahead windows, not in one stream: a share of the drive's sequential rate
# (an assumption made before run8, which measured 0.44 of a cold sequential read at a 128 KiB read-ahead)
FAULT_READ_SHARE = 0.5


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
    other_mib: float  # input embedding and dense weights of layers on the CPU
    reserve_mib: float
    ram_mib: float
    pinned: bool
    ram_stated: bool = True  # False: the machine's RAM is not known, and the setting is priced as if it fits
    fault_gbs: float = 0.0  # the rate mmap'd experts beyond the page cache would be read from the drive at

    @property
    def used_mib(self) -> float:
        return self.experts_mib + self.other_mib + self.reserve_mib

    @property
    def needed_gib(self) -> int:
        """The RAM the setting needs, as shown everywhere (whole_gib)."""
        return whole_gib(self.used_mib)

    @property
    def free_mib(self) -> float:
        return self.ram_mib - self.used_mib

    @property
    def fits(self) -> bool:
        """It fits the RAM; with the RAM not stated it is taken to (the verdict says what it needs)."""
        return not self.ram_stated or self.free_mib >= 0

    @property
    def page_cache_mib(self) -> float:
        """RAM left for the page cache that holds mmap'd experts."""
        return max(0.0, self.ram_mib - self.other_mib - self.reserve_mib)

    @property
    def streams(self) -> bool:
        """mmap'd host experts that exceed the page cache: part of them is read from disk on every pass."""
        return not self.pinned and not self.fits

    @property
    def runs(self) -> bool:
        """It starts: it fits, or its experts are mmap'd and page from disk (pinned memory cannot), with some RAM
        left for the page cache beside the reserve and the other host weights."""
        return self.fits or (not self.pinned and self.page_cache_mib > 0)

    @property
    def verdict(self) -> str:
        """One line a page leads with: fits or not, and what would free the memory."""
        need, ram = self.needed_gib, self.ram_mib / 1024
        if not self.ram_stated:
            return self.needs
        if self.fits:
            return f"fits in RAM: {need:,} of {ram:,.0f} GiB ({self.experts_mib / 1024:,.1f} GiB of host experts)"
        why = (
            "pinned memory (--load-mode none) cannot page out, so llama-server would fail to allocate it"
            if self.pinned
            else f"mmap'd experts page from disk: {self.page_cache_mib / 1024:,.1f} GiB of them stay in the page "
            "cache, the rest is read from the drive whenever a token needs it (modelled: see the disk term)"
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


def host_memory(model: ModelSpec, hw: Hardware, placement: Placement, load_mode: str = "mmap") -> HostMemory:
    """Host RAM of a resolved placement (--fit already turned into its layer count) and a load mode (-lm)."""
    devices = placement.layer_device(model.n_layer)
    experts = sum(
        layer.expert_bytes_total
        for layer in model.layers
        if layer.has_experts and placement.experts_on_host(layer.index)
    )
    cpu_dense = sum(layer.dense_bytes for layer, d in zip(model.layers, devices, strict=True) if d == CPU)
    other = (model.input_bytes + cpu_dense) / MIB
    pinned = load_mode != "mmap"
    return HostMemory(
        experts / MIB, other, HOST_RESERVE_MIB, hw.ram_gib * 1024, pinned, hw.host.ram_stated, fault_read_gbs(hw)
    )


def page_miss_share(n_expert: int, pool_items: float, cache_items: float) -> float:
    """Share of a layer's host reads (the GPU pool's misses, or every read without a pool) the page cache misses:
    the pool holds `pool_items` of its experts, the page cache `cache_items` of the others (uniform access)."""
    rest = n_expert - pool_items
    return 0.0 if rest <= 0 else max(0.0, 1.0 - cache_items / rest)
