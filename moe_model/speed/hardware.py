"""Machines: GPU memory, bandwidth and compute, the host link, the host CPU. Presets cite their sources.

Only physical, published or measured figures live here. Rates the time model derives from them
(effective upload rates, the CPU expert rate) are computed in `moe_model.time_model` with the
machine-independent parameters fitted across every measured machine, unless the machine itself
carries a measured value (`pinned_gbs`, `pageable_gbs`, or the terms `calibrate` fits from its logs).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace

from moe_model.errors import MoeModelError
from moe_model.limits import MAX_RATE_GBS
from moe_model.settings import Setting, Widget, setting, settings_of

# PCIe line rate per lane in GB/s after encoding (PCI-SIG: 8, 16, 32 GT/s with 128b/130b)
PCIE_LANE_GBS = {3: 0.985, 4: 1.969, 5: 3.938}
PINNED_EFFICIENCY = 0.85  # pinned cudaMemcpy reaches ~85 % of the line rate (groundtruth bw.json: 55 of 63 GB/s)
BACKENDS = ("cuda", "hip", "vulkan")
PCIE_LANES = (1, 2, 4, 8, 16)
MIN_RATE = 0.001  # the least GiB or GB/s a machine field takes (a zero rate would divide by zero)


def _within(value, s: Setting) -> bool:
    """A machine field inside its setting's range or choices (None: not measured, derived)."""
    if value is None:
        return True
    if s.choices:
        return value in s.choices
    return s.lo <= value <= s.hi


@dataclass(frozen=True)
class Hardware:
    """One machine. Every field can be edited; `source` says where the preset's figures come from.

    Measured fields (None: derived from the specs): `pinned_gbs` / `pageable_gbs`, host-to-device copy
    rates from pinned and from mmap'd (pageable) memory; `cpu_expert_gbs`, the rate the CPU path reads
    expert weights at; `sync_us`, the cost per cached layer and ubatch; `token_ms`, the fixed cost per
    decode ubatch on this host (graph build and launches). `calibrate` fits the last four.
    """

    name: str
    vram_gib: float = setting(
        help="GPU memory (GiB)",
        parse=float,
        flags=("--vram-gib",),
        lo=MIN_RATE,
        hi=1024.0,
        url_key="vram",
        widget=Widget("VRAM GiB", "number", lo=1.0, hi=1024.0),
    )
    gpu_bw_gbs: float = setting(
        help="GPU memory bandwidth (datasheet, GB/s)",
        parse=float,
        flags=("--gpu-bw-gbs",),
        lo=MIN_RATE,
        hi=20000.0,
        url_key="bw",
        widget=Widget("GPU memory GB/s", "number", lo=10.0, hi=20000.0),
    )
    pcie_gen: int = setting(
        help="PCIe generation of the GPU's link",
        parse=int,
        flags=("--pcie-gen",),
        choices=tuple(PCIE_LANE_GBS),
        url_key="gen",
        widget=Widget("PCIe generation", "selectbox", options=tuple(PCIE_LANE_GBS)),
    )
    pcie_lanes: int = setting(
        help="PCIe lanes of the GPU's link",
        parse=int,
        flags=("--pcie-lanes",),
        choices=PCIE_LANES,
        url_key="lanes",
        widget=Widget("PCIe lanes", "selectbox", options=PCIE_LANES),
    )
    cpu_bw_gbs: float = setting(
        help="host memory bandwidth (channels x transfer rate x 8 bytes, GB/s)",
        parse=float,
        flags=("--cpu-bw-gbs",),
        lo=MIN_RATE,
        hi=2000.0,
        url_key="cpu",
        widget=Widget("host memory GB/s", "number", lo=1.0, hi=2000.0),
    )
    cpu_threads: int = setting(
        8,
        help="threads llama.cpp computes host experts with (-t)",
        flags=("--threads",),
        lo=1,
        hi=1024,
        url_key="threads",
        widget=Widget("CPU threads (-t)", "number", lo=1, hi=1024),
    )
    cpu_ghz: float = 4.5  # all-core clock of those threads (the CPU path is partly compute-bound per thread)
    backend: str = "cuda"
    gpu_tflops: float = 50.0  # dense FP16 tensor throughput (datasheet), for prompt processing
    pinned_gbs: float | None = setting(
        None,
        help="measured host-to-device rate from pinned memory (GB/s)",
        parse=float,
        flags=("--pinned-gbs",),
        lo=MIN_RATE,
        hi=MAX_RATE_GBS,
    )
    pageable_gbs: float | None = setting(
        None,
        help="measured host-to-device rate from mmap'd memory (GB/s)",
        parse=float,
        flags=("--pageable-gbs",),
        lo=MIN_RATE,
        hi=MAX_RATE_GBS,
    )
    cpu_expert_gbs: float | None = None
    sync_us: float | None = None
    token_ms: float | None = None
    cpu_vnni: bool = True  # int8 dot-product instructions (AVX-VNNI / AVX-512 VNNI) for ggml's quantized kernels
    source: str = "user"
    ram_gib: float = setting(
        64.0,
        help="host RAM (GiB): host experts must fit in it (pinned) or page from disk (mmap)",
        flags=("--ram-gib",),
        lo=1.0,
        hi=16384.0,
        url_key="ram",
        widget=Widget("host RAM GiB", "number", lo=1.0, hi=16384.0, step=8.0),
    )

    def __post_init__(self) -> None:
        checks = {s.name: _within(getattr(self, s.name), s) for s in settings_of(Hardware).values()} | {
            "cpu_ghz": 0.5 <= self.cpu_ghz <= 7.0,
            "backend": self.backend in BACKENDS,
            "gpu_tflops": 0 < self.gpu_tflops <= 10000,
            "pinned_gbs": self.pinned_gbs is None or self.pinned_gbs <= self.line_gbs,
            "pageable_gbs": self.pageable_gbs is None or self.pageable_gbs <= self.line_gbs,
            "cpu_expert_gbs": self.cpu_expert_gbs is None or 0 < self.cpu_expert_gbs <= 2000,
            "sync_us": self.sync_us is None or 0 <= self.sync_us <= 100_000,
            "token_ms": self.token_ms is None or 0 <= self.token_ms <= 1000,
        }
        bad = [k for k, ok in checks.items() if not ok]
        if bad:
            raise MoeModelError(
                f"hardware {self.name!r}: implausible {', '.join(bad)} (link rates cannot exceed the "
                f"{self.pcie_label} line rate of {self.line_gbs:.1f} GB/s)"
            )

    @property
    def pcie_label(self) -> str:
        return f"PCIe {self.pcie_gen}.0 x{self.pcie_lanes}"

    @property
    def line_gbs(self) -> float:
        return PCIE_LANE_GBS[self.pcie_gen] * self.pcie_lanes

    @property
    def pinned_rate_gbs(self) -> float:
        """Pinned host-to-device rate: measured, else the line rate times pinned copies' efficiency."""
        return self.pinned_gbs or self.line_gbs * PINNED_EFFICIENCY

    @property
    def vram_mib(self) -> float:
        return self.vram_gib * 1024

    def with_changes(self, **changes) -> Hardware:
        return replace(self, **changes)

    def as_dict(self) -> dict:
        return asdict(self)


_NV = "NVIDIA datasheet (memory size, bandwidth, PCIe generation, FP16 tensor TFLOPS)"
_AMD = "AMD datasheet (memory size, bandwidth, PCIe generation, FP16 matrix TFLOPS)"
_HOST4 = "host: 32 GiB dual-channel DDR4-3200 (51 GB/s), 8 threads at 4.5 GHz, an assumption to edit"
_HOST5 = "host: 64 GiB dual-channel DDR5-6000 (96 GB/s), 8 threads at 4.5 GHz, an assumption to edit"


def _card(name, vram, bw, gen, lanes, tflops, host_bw=96.0, threads=8, ghz=4.5, backend="cuda", source=None, **kw):
    return Hardware(
        name, vram, bw, gen, lanes, host_bw, threads, ghz, backend, tflops, source=source or f"{_NV}; {_HOST5}", **kw
    )


PRESETS: dict[str, Hardware] = {
    h.name: h
    for h in (
        _card(
            "Tesla T4",
            15.0,
            320,
            3,
            16,
            65,
            host_bw=20.0,
            threads=4,
            ghz=2.0,
            ram_gib=32.0,
            source=f"{_NV} (16 GB, 15,360 MiB usable); host: 4-vCPU 2.0 GHz Xeon cloud VM (~20 GB/s, 32 GiB RAM), "
            "an assumption",
        ),
        _card("RTX 3060 12GB", 12, 360, 4, 16, 51, 51.2, source=f"{_NV}; {_HOST4}", ram_gib=32.0),
        _card("RTX 3060 Ti", 8, 448, 4, 16, 65, 51.2, source=f"{_NV}; {_HOST4}", ram_gib=32.0),
        _card("RTX 3090", 24, 936, 4, 16, 142, 51.2, source=f"{_NV}; {_HOST4}", ram_gib=32.0),
        _card("RTX 4060", 8, 272, 4, 8, 60.5, source=f"{_NV} (x8 card; 242 AI TOPS FP8 sparse = 60.5 FP16); {_HOST5}"),
        _card("RTX 4060 Ti 16GB", 16, 288, 4, 8, 88, source=f"{_NV} (x8 card); {_HOST5}"),
        _card(
            "RTX 4070 12GB", 12, 504, 4, 16, 117, 89.6, 10, source=f"{_NV}; host: 64 GiB dual-channel DDR5-5600, -t 10"
        ),
        _card("RTX 4080 16GB", 16, 717, 4, 16, 195),
        _card("RTX 4090", 24, 1008, 4, 16, 330),
        _card("RTX 5070", 12, 672, 5, 16, 123.5, source=f"{_NV} (988 AI TOPS FP4 sparse = 123.5 FP16); {_HOST5}"),
        _card("RTX 5070 Ti", 16, 896, 5, 16, 176),
        _card("RTX 5090", 32, 1792, 5, 16, 419),
        _card(
            "RTX A6000",
            48,
            768,
            4,
            16,
            155,
            source=f"{_NV}; host: 128 GiB DDR5 workstation, 96 GB/s, an assumption",
            ram_gib=128.0,
        ),
        _card(
            "RTX PRO 6000",
            96,
            1792,
            5,
            16,
            500,
            source=f"{_NV}; host: 256 GiB DDR5 workstation, 96 GB/s, an assumption",
            ram_gib=256.0,
        ),
        _card(
            "H100 PCIe",
            80,
            2000,
            5,
            16,
            756,
            200,
            32,
            source=f"{_NV}; host: 512 GiB server DDR5, ~200 GB/s, an assumption",
            ram_gib=512.0,
        ),
        _card(
            "H200",
            141,
            4800,
            5,
            16,
            989,
            250,
            16,
            3.0,
            pinned_gbs=55.0,
            ram_gib=512.0,
            source=f"{_NV}; link: pinned rate measured on the ground-truth host (moe_model/data/groundtruth/bw.json; "
            "its pageable figure is for anonymous memory, mmap'd experts upload slower: run3 README); "
            "host: 16-core Xeon, "
            "8-channel DDR5-4000 (~250 GB/s, 512 GiB), 16 threads at ~3 GHz, an assumption",
        ),
        _card(
            "Radeon AI PRO R9700",
            32,
            640,
            5,
            16,
            191,
            76.8,
            8,
            4.7,
            backend="hip",
            source=f"{_AMD}; host: i7-12700KF-like (8 P-cores at 4.7 GHz), dual-channel DDR5-4800, 64 GiB, "
            "an assumption",
        ),
        _card(
            "Radeon Pro V620",
            32,
            512,
            4,
            16,
            81,
            204.8,
            16,
            3.3,
            backend="vulkan",
            ram_gib=256.0,
            source=f"{_AMD}; host: 8-channel DDR4-3200 EPYC (205 GB/s, 256 GiB assumed), as in the field measurements",
        ),
        _card("eGPU RTX 4090, PCIe 3.0 x4", 24, 1008, 3, 4, 330, source=f"{_NV}; Thunderbolt 3 class link; {_HOST5}"),
        _card("eGPU RTX 4090, PCIe 4.0 x4", 24, 1008, 4, 4, 330, source=f"{_NV}; OCuLink class link; {_HOST5}"),
    )
}

ALIASES = {"t4": "Tesla T4", "3060": "RTX 3060 12GB", "4060 ti": "RTX 4060 Ti 16GB", "r9700": "Radeon AI PRO R9700"}


def _normal(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", text.lower()).strip()


VARIANT_WORDS = frozenset({"ti", "super", "xt", "xtx", "max", "laptop", "mobile"})  # name another card of a number


@dataclass(frozen=True)
class PresetMatch:
    """The preset a typed name resolved to, how, and the variants it was preferred over."""

    typed: str
    hardware: Hardware
    how: str  # "exact", "alias", "prefix" or "base card"
    passed_over: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line saying what the name became (for a CLI's stderr or a caption)."""
        hw = self.hardware
        line = f"{self.typed!r} is the {hw.name} preset ({hw.vram_gib:g} GB, {hw.gpu_bw_gbs:g} GB/s, {hw.pcie_label})"
        return line + (f", not {', '.join(self.passed_over)}" if self.passed_over else "")


def _variants_not_typed(words: list[str], key: str) -> set[str]:
    """Variant words of a preset's name that none of the typed words starts: "rtx 3060" leaves "Ti" over."""
    return {w for w in key.split() if w in VARIANT_WORDS and not any(w.startswith(x) for x in words)}


def preset_match(name: str) -> PresetMatch:
    """A preset as users type it: exact or alias (case-insensitive), else a unique word-prefix match, where a card
    beats its variants ("rtx 3060" is the RTX 3060 12GB, not the 3060 Ti) and a card its eGPU setups."""
    wanted = _normal(name)
    if not wanted:
        raise MoeModelError("name a GPU preset, e.g. 't4', '4090', 'h200'")
    by_name = {_normal(k): hw for k, hw in PRESETS.items()}
    if wanted in by_name:
        return PresetMatch(name, by_name[wanted], "exact")
    if wanted in ALIASES:
        return PresetMatch(name, PRESETS[ALIASES[wanted]], "alias")
    words = wanted.split()
    found = {key: hw for key, hw in by_name.items() if all(any(w.startswith(x) for w in key.split()) for x in words)}
    internal = {key: hw for key, hw in found.items() if not hw.name.startswith("eGPU")}  # "4090": the card itself
    found = internal or found
    base = {key: hw for key, hw in found.items() if not _variants_not_typed(words, key)}
    if len(found) > 1 and len(base) == 1:
        (hw,) = base.values()
        return PresetMatch(name, hw, "base card", tuple(h.name for h in found.values() if h is not hw))
    if len(found) == 1:
        return PresetMatch(name, next(iter(found.values())), "prefix")
    if found:
        raise MoeModelError(f"GPU {name!r} is ambiguous: {', '.join(hw.name for hw in found.values())}")
    raise MoeModelError(f"unknown GPU {name!r}; known: {', '.join(PRESETS)}")


def preset(name: str) -> Hardware:
    """A preset as users type it (preset_match says how the name resolved)."""
    return preset_match(name).hardware
