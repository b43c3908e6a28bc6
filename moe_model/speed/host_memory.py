"""Host memory: what llama.cpp keeps in RAM against the machine's RAM.

In RAM: the experts of host layers (--cpu-moe, --n-cpu-moe K, --fit), the input embedding (token_embd
stays on the host) and the dense weights of layers -ngl leaves on the CPU. Pinned host experts
(--load-mode none, mlock, dio: CUDA_Host buffers) must fit in RAM; mmap'd ones can page from disk,
which is very slow and not modelled, so neither gets a predicted speed when it does not fit.
"""

from __future__ import annotations

from dataclasses import dataclass

from moe_model.llama.slot_plan import CPU, MIB, Placement
from moe_model.readers.model_spec import ModelSpec
from moe_model.speed.hardware import Hardware

HOST_RESERVE_MIB = 2048  # the OS and llama-server's own host buffers: an assumption


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
    def verdict(self) -> str:
        """One line a page leads with: fits or not, and what would free the memory."""
        need, ram = self.used_mib / 1024, self.ram_mib / 1024
        if self.fits:
            return f"fits in RAM: {need:,.1f} of {ram:,.0f} GiB ({self.experts_mib / 1024:,.1f} GiB of host experts)"
        why = (
            "pinned memory (--load-mode none) cannot page out, so llama-server would fail to allocate it"
            if self.pinned
            else "mmap'd experts would page from disk: very slow (not modelled)"
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
