"""Machines: GPU memory and bandwidth, the host link, the CPU. Presets cite where figures come from.

Link rates are *effective* host-to-device copy rates, not the PCIe line rate: pinned copies
reach ~80-85 % of it; pageable (mmap'd, llama.cpp's default `-lm auto`) copies are much slower,
as measured on the H200 host in sample_data/groundtruth/bw.json (8-13 GB/s pageable against
36-55 GB/s pinned on PCIe 5.0 x16).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from moe_model.errors import MoeModelError

# PCIe line rate per lane in GB/s after encoding (PCI-SIG: 8, 16, 32 GT/s with 128b/130b)
PCIE_LANE_GBS = {3: 0.985, 4: 1.969, 5: 3.938}
PINNED_EFFICIENCY = 0.85  # pinned cudaMemcpy reaches ~85 % of line rate (bw.json: 55 of 63 GB/s)
PAGEABLE_FRACTION = 0.2  # pageable copies: bw.json measured 8-13 of 55 GB/s pinned on the H200 host


@dataclass(frozen=True)
class Hardware:
    """One machine. Every field can be edited; `source` says where the preset's figures come from."""

    name: str
    vram_gib: float
    gpu_bw_gbs: float  # GPU memory bandwidth
    pcie_gen: int
    pcie_lanes: int
    cpu_bw_gbs: float  # host memory bandwidth available to expert matmuls
    cpu_threads: int = 8
    pinned: bool = False  # host experts in pinned memory (-lm none/mlock/dio); mmap'd (default) is pageable
    link_gbs: float | None = None  # measured pinned host-to-device rate; None: from PCIe gen x lanes
    pageable_gbs: float | None = None  # measured pageable rate; None: a fraction of the pinned rate
    source: str = "user"

    def __post_init__(self) -> None:
        checks = {
            "vram_gib": 0 < self.vram_gib <= 1024,
            "gpu_bw_gbs": 0 < self.gpu_bw_gbs <= 20000,
            "pcie_gen": self.pcie_gen in PCIE_LANE_GBS,
            "pcie_lanes": self.pcie_lanes in (1, 2, 4, 8, 16),
            "cpu_bw_gbs": 0 < self.cpu_bw_gbs <= 2000,
            "cpu_threads": 1 <= self.cpu_threads <= 1024,
            "link_gbs": self.link_gbs is None or 0 < self.link_gbs <= 1000,
            "pageable_gbs": self.pageable_gbs is None or 0 < self.pageable_gbs <= 1000,
        }
        bad = [k for k, ok in checks.items() if not ok]
        if bad:
            raise MoeModelError(f"hardware {self.name!r}: implausible {', '.join(bad)}")

    @property
    def pcie_label(self) -> str:
        return f"PCIe {self.pcie_gen}.0 x{self.pcie_lanes}"

    @property
    def pinned_gbs(self) -> float:
        return self.link_gbs or PCIE_LANE_GBS[self.pcie_gen] * self.pcie_lanes * PINNED_EFFICIENCY

    @property
    def upload_gbs(self) -> float:
        """The rate misses are uploaded at, given where the host experts live."""
        if self.pinned:
            return self.pinned_gbs
        return self.pageable_gbs or self.pinned_gbs * PAGEABLE_FRACTION

    @property
    def vram_mib(self) -> float:
        return self.vram_gib * 1024

    def with_changes(self, **changes) -> Hardware:
        return replace(self, **changes)


_NV = "NVIDIA product page / datasheet (memory size, bandwidth, PCIe generation)"
_HOST = "host: dual-channel DDR4-3200 (~40 GB/s usable), an assumption to edit"
_HOST5 = "host: dual-channel DDR5-6000 (~70 GB/s usable), an assumption to edit"

PRESETS: dict[str, Hardware] = {
    h.name: h
    for h in (
        Hardware(
            "Tesla T4",
            15.0,
            320,
            3,
            16,
            20,
            4,
            source=f"{_NV} (16 GB, 15,360 MiB usable); host: 4-vCPU cloud VM (~20 GB/s), an assumption",
        ),
        Hardware("RTX 3060 12GB", 12, 360, 4, 16, 40, 8, source=f"{_NV}; {_HOST}"),
        Hardware("RTX 4060 Ti 16GB", 16, 288, 4, 8, 40, 8, source=f"{_NV} (x8 card); {_HOST}"),
        Hardware("RTX 4070 12GB", 12, 504, 4, 16, 70, 12, source=f"{_NV}; {_HOST5}"),
        Hardware("RTX 4080 16GB", 16, 717, 4, 16, 70, 16, source=f"{_NV}; {_HOST5}"),
        Hardware("RTX 4090", 24, 1008, 4, 16, 70, 16, source=f"{_NV}; {_HOST5}"),
        Hardware("RTX 5070 Ti", 16, 896, 5, 16, 70, 16, source=f"{_NV}; {_HOST5}"),
        Hardware("RTX 5090", 32, 1792, 5, 16, 70, 16, source=f"{_NV}; {_HOST5}"),
        Hardware("RTX A6000", 48, 768, 4, 16, 70, 16, source=f"{_NV}; {_HOST5}"),
        Hardware("RTX PRO 6000", 96, 1792, 5, 16, 70, 16, source=f"{_NV}; {_HOST5}"),
        Hardware("H100 PCIe", 80, 2000, 5, 16, 200, 32, source=f"{_NV}; host: server DDR5, ~200 GB/s, an assumption"),
        Hardware(
            "H200",
            141,
            4800,
            5,
            16,
            200,
            16,
            link_gbs=55.0,
            pageable_gbs=10.6,
            source=f"{_NV}; link: measured pinned/pageable rates of sample_data/groundtruth/bw.json "
            "(~1 MiB copies); host: 16-core Xeon, DDR5 (~200 GB/s), an assumption",
        ),
        Hardware(
            "eGPU RTX 4090, PCIe 3.0 x4", 24, 1008, 3, 4, 70, 16, source=f"{_NV}; Thunderbolt 3 class link; {_HOST5}"
        ),
        Hardware("eGPU RTX 4090, PCIe 4.0 x4", 24, 1008, 4, 4, 70, 16, source=f"{_NV}; OCuLink class link; {_HOST5}"),
    )
}


def preset(name: str) -> Hardware:
    """A preset by name (case-insensitive)."""
    for key, hw in PRESETS.items():
        if key.lower() == name.lower():
            return hw
    raise MoeModelError(f"unknown hardware preset {name!r}; known: {', '.join(PRESETS)}")
