"""Host memory: what llama.cpp keeps in RAM against the machine's RAM, and what mmap'd experts read from disk.

In RAM: the experts of host layers (--cpu-moe, --n-cpu-moe K, --fit), the input embedding (token_embd
stays on the host) and the dense weights of layers -ngl leaves on the CPU. Pinned host experts
(--load-mode none, mlock, dio: CUDA_Host buffers) must fit in RAM, else llama-server fails to allocate them.
mmap'd ones (the default) live in the page cache: what does not fit is read from the drive again whenever a
token needs it. The page cache is taken as an LRU over (layer, expert) pages serving the experts the GPU pool
misses; its hit rate comes from Che's approximation under the model's routing popularity (a model: locality
beyond popularity only raises it, so this errs towards reading more).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

import numpy as np

from moe_model.llama.slot_plan import CPU, MIB, Placement
from moe_model.readers.model_spec import ModelSpec
from moe_model.routing.synthetic import prompt_knobs
from moe_model.speed.hardware import Hardware

HOST_RESERVE_MIB = 2048  # the OS and llama-server's own host buffers: an assumption
# page faults read mmap'd experts in readahead windows, not in one stream: a share of the drive's sequential rate
FAULT_READ_SHARE = 0.5  # an assumption until measured (sample_data/groundtruth/run8 when it lands)


@dataclass(frozen=True)
class HostMemory:
    """MiB of host RAM one configuration needs, and the machine's RAM."""

    experts_mib: float
    other_mib: float  # input embedding and dense weights of layers on the CPU
    reserve_mib: float
    ram_mib: float
    pinned: bool

    @property
    def used_mib(self) -> float:
        return self.experts_mib + self.other_mib + self.reserve_mib

    @property
    def free_mib(self) -> float:
        return self.ram_mib - self.used_mib

    @property
    def fits(self) -> bool:
        return self.free_mib >= 0

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
        """It starts: it fits, or its experts are mmap'd and page from disk (pinned memory cannot)."""
        return self.fits or not self.pinned

    @property
    def verdict(self) -> str:
        """One line a page leads with: fits or not, and what would free the memory."""
        need, ram = self.used_mib / 1024, self.ram_mib / 1024
        if self.fits:
            return f"fits in RAM: {need:,.1f} of {ram:,.0f} GiB ({self.experts_mib / 1024:,.1f} GiB of host experts)"
        why = (
            "pinned memory (--load-mode none) cannot page out, so llama-server would fail to allocate it"
            if self.pinned
            else f"mmap'd experts page from disk: {self.page_cache_mib / 1024:,.1f} GiB of them stay in the page "
            "cache, the rest is read from the drive whenever a token needs it (modelled: see the disk term)"
        )
        return (
            f"does not fit in RAM: needs {need:,.1f} GiB, the machine has {ram:,.0f} GiB; {why}. Free it with more "
            "RAM, a smaller quantization, or fewer layers in host memory (a smaller --n-cpu-moe K) where VRAM allows"
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
    return HostMemory(
        experts / MIB, (model.input_bytes + cpu_dense) / MIB, HOST_RESERVE_MIB, hw.ram_gib * 1024, load_mode != "mmap"
    )


def _lru_hit(rates: np.ndarray, capacity: float) -> float:
    """Hit rate of an LRU holding `capacity` of these equal items under independent requests at these rates
    (Che's approximation: an item is in the cache if requested within the characteristic time T)."""
    if capacity <= 0:
        return 0.0
    if capacity >= len(rates):
        return 1.0
    lo, hi = 0.0, 1.0
    while np.sum(1 - np.exp(-rates * hi)) < capacity:
        hi *= 2
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if np.sum(1 - np.exp(-rates * mid)) < capacity else (lo, mid)
    return float(np.sum(rates * (1 - np.exp(-rates * hi))) / rates.sum())


@lru_cache(maxsize=64)
def _popularity(n_expert: int, k: int, skew: float) -> np.ndarray:
    """Per-token request rates of a layer's experts under a log-normal popularity of spread `skew` (the routing
    model's), at evenly spaced quantiles."""
    z = np.array([NormalDist().inv_cdf((i + 0.5) / n_expert) for i in range(n_expert)])
    weights = np.exp(skew * z)
    return k * weights / weights.sum()


def page_miss_share(model: ModelSpec, pool_items: float, cache_items: float) -> float:
    """Share of the host reads (the pool's misses, or every read without a pool) the page cache misses, per layer:
    the pool holds `pool_items` experts of the layer, the page cache `cache_items` more."""
    shape = (model.n_expert, model.n_expert_used, prompt_knobs(model).skew)
    pool, both = _popular_hit(*shape, pool_items), _popular_hit(*shape, pool_items + cache_items)
    return 0.0 if pool >= 1 else (1 - both) / (1 - pool)


@lru_cache(maxsize=4096)  # every layer of every candidate asks the same few capacities: Shopping's 235B view
def _popular_hit(n_expert: int, k: int, skew: float, capacity: float) -> float:
    return _lru_hit(_popularity(n_expert, k, skew), capacity)
