"""Machines: GPU memory, bandwidth and compute, its link, and the host around it. Presets cite their sources.

Only physical, published or measured figures live here. Rates the time model derives from them
(effective upload rates, the CPU expert rate) are computed in `moe_model.speed.time_model` with the
machine-independent parameters fitted across every measured machine, unless the machine itself
carries a measured value (`pinned_gbs`, `pageable_gbs`, or the terms `calibrate` fits from its logs).
The host (RAM, memory, CPU, slot, VM) is one `Host` object: changing the GPU keeps it.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields, replace

from moe_model.errors import MoeModelError
from moe_model.limits import MAX_RATE_GBS
from moe_model.settings import Setting, Widget, setting, settings_of
from moe_model.speed.host import DESKTOP_DDR4, DESKTOP_DDR5, MIN_RATE, PCIE_LANES, Host

# PCIe line rate per lane in GB/s after encoding (PCI-SIG: 8, 16, 32 GT/s with 128b/130b)
PCIE_LANE_GBS = {3: 0.985, 4: 1.969, 5: 3.938}
PINNED_EFFICIENCY = 0.85  # pinned cudaMemcpy reaches ~85 % of the line rate (groundtruth bw.json: 55 of 63 GB/s)
BACKENDS = ("cuda", "hip", "vulkan")
# the names the host's figures had when they were fields of Hardware: kept for machine files, pages and scripts
HOST_ALIASES = {"cpu_bw_gbs": "mem_bw_gbs", "cpu_threads": "threads", "cpu_ghz": "ghz", "cpu_vnni": "vnni"}


def within(value, s: Setting) -> bool:
    """A machine or host field inside its setting's range or choices (None: not measured, derived)."""
    if value is None:
        return True
    if s.choices:
        return value in s.choices
    return s.lo <= value <= s.hi


@dataclass(frozen=True)
class Hardware:
    """One GPU in one host. Every field can be edited; `source` says where the preset's figures come from.

    `pcie_gen` / `pcie_lanes` are the card's interface; the link is the slower of it and the host's slot.
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
    host: Host = field(default_factory=Host)
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
    source: str = "user"

    def __post_init__(self) -> None:
        if not isinstance(self.host, Host):
            raise MoeModelError(f"hardware {self.name!r}: its host must be a Host, got {type(self.host).__name__}")
        checks = {s.name: within(getattr(self, s.name), s) for s in settings_of(Hardware).values()} | {
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
    def link_gen(self) -> int:
        return min(self.pcie_gen, self.host.slot_gen or self.pcie_gen)

    @property
    def link_lanes(self) -> int:
        return min(self.pcie_lanes, self.host.slot_lanes or self.pcie_lanes)

    @property
    def pcie_label(self) -> str:
        return f"PCIe {self.link_gen}.0 x{self.link_lanes}"

    @property
    def line_gbs(self) -> float:
        return PCIE_LANE_GBS.get(self.link_gen, 0.0) * self.link_lanes

    @property
    def pinned_rate_gbs(self) -> float:
        """Pinned host-to-device rate: measured, else the line rate times pinned copies' efficiency."""
        return self.pinned_gbs or self.line_gbs * PINNED_EFFICIENCY

    @property
    def vram_mib(self) -> float:
        return self.vram_gib * 1024

    @property
    def cpu_bw_gbs(self) -> float:
        return self.host.bandwidth_gbs

    @property
    def cpu_threads(self) -> int:
        return self.host.threads

    @property
    def cpu_ghz(self) -> float:
        return self.host.ghz

    @property
    def cpu_vnni(self) -> bool:
        return self.host.vnni

    @property
    def ram_gib(self) -> float:
        return self.host.ram_gib

    def with_changes(self, **changes) -> Hardware:
        """Edited figures; the host's (RAM, memory, threads, ... also by their old names) go to the host."""
        own = {f.name for f in fields(Hardware)}
        host_names = {f.name for f in fields(Host)} - own
        to_host = {HOST_ALIASES.get(k, k): v for k, v in changes.items() if k in HOST_ALIASES or k in host_names}
        mine = {k: v for k, v in changes.items() if k in own}
        unknown = set(changes) - set(mine) - {k for k in changes if k in HOST_ALIASES or k in host_names}
        if unknown:
            raise MoeModelError(f"unknown machine field(s): {', '.join(sorted(unknown))}")
        host = mine.pop("host", self.host)
        return replace(self, **mine, host=host.with_changes(**to_host) if to_host else host)

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, record: dict) -> Hardware:
        """A machine from JSON: the host nested, or flat under its old field names (older machine files)."""
        record = dict(record)
        host = record.pop("host", None)
        flat = {HOST_ALIASES.get(k, k): record.pop(k) for k in [*HOST_ALIASES, "ram_gib"] if k in record}
        host = Host(**host) if isinstance(host, dict) else Host(source="machine file (older format)")
        return cls(**record, host=replace(host, **flat))


# every machine figure a user can set, the GPU's and the host's, by field name (Hardware.with_changes takes them)
MACHINE_SETTINGS = settings_of(Hardware) | settings_of(Host)

_NV = "NVIDIA datasheet (memory size, bandwidth, PCIe generation, FP16 tensor TFLOPS)"
_AMD = "AMD datasheet (memory size, bandwidth, PCIe generation, FP16 matrix TFLOPS)"


def _card(name, vram, bw, gen, lanes, tflops, host=DESKTOP_DDR5, backend="cuda", source=None, **kw):
    return Hardware(name, vram, bw, gen, lanes, host, backend, tflops, source=source or _NV, **kw)


_T4_HOST = Host(
    "cloud VM: 4 vCPUs at 2.0 GHz (Xeon), ~20 GB/s, 32 GiB",
    32.0,
    threads=4,
    ghz=2.0,
    cpu_family="server",
    vm=True,
    mem_bw_gbs=20.0,
    source="the seed article states a free 16 GB Tesla T4 only: a typical free cloud VM, every figure assumed",
)
_H200_HOST = Host(
    "ground-truth VM: 16-core Xeon, 125 GiB",
    125.0,
    8,
    4000,
    16,
    3.0,
    cpu_family="server",
    vm=True,
    stated=("ram_gib", "threads", "vnni", "cpu_family", "vm"),
    source="sample_data/groundtruth/run5/README.md (an H200 VM, 16-core Xeon, 125 GiB RAM) and its logs "
    "(n_threads = 16, AVX512_VNNI); 8-channel DDR5-4000 and 3.0 GHz are assumptions",
)
_V620_HOST = Host(
    "EPYC 7532 host: 8-channel DDR4-3200, 16 threads",
    256.0,
    8,
    3200,
    16,
    3.3,
    vnni=False,
    cpu_family="server",
    stated=("mem_channels", "mem_mts", "threads", "vnni", "cpu_family", "vm"),
    source="as in the field measurements (EPYC 7532, 8 x DDR4-3200, -t 16, an LXC container); Zen 2 has no "
    "VNNI; RAM size assumed",
)
_R9700_HOST = Host(
    "i7-12700KF-like: 8 P-cores at 4.7 GHz, dual-channel DDR5-4800, 64 GiB",
    64.0,
    2,
    4800,
    8,
    4.7,
    source="as in the field measurements (i7-12700KF stated; memory and threads assumed)",
)

PRESETS: dict[str, Hardware] = {
    h.name: h
    for h in (
        _card("Tesla T4", 15.0, 320, 3, 16, 65, _T4_HOST, source=f"{_NV} (16 GB, 15,360 MiB usable)"),
        _card("RTX 3060 12GB", 12, 360, 4, 16, 51, DESKTOP_DDR4),
        _card("RTX 3060 Ti", 8, 448, 4, 16, 65, DESKTOP_DDR4),
        _card("RTX 3090", 24, 936, 4, 16, 142, DESKTOP_DDR4),
        _card("RTX 4060", 8, 272, 4, 8, 60.5, source=f"{_NV} (x8 card; 242 AI TOPS FP8 sparse = 60.5 FP16)"),
        _card("RTX 4060 Ti 16GB", 16, 288, 4, 8, 88, source=f"{_NV} (x8 card)"),
        _card(
            "RTX 4070 12GB",
            12,
            504,
            4,
            16,
            117,
            Host("desktop: 64 GiB dual-channel DDR5-5600, -t 10", 64.0, 2, 5600, 10),
        ),
        _card("RTX 4080 16GB", 16, 717, 4, 16, 195),
        _card("RTX 4090", 24, 1008, 4, 16, 330),
        _card("RTX 5070", 12, 672, 5, 16, 123.5, source=f"{_NV} (988 AI TOPS FP4 sparse = 123.5 FP16)"),
        _card("RTX 5070 Ti", 16, 896, 5, 16, 176),
        _card("RTX 5090", 32, 1792, 5, 16, 419),
        _card("RTX A6000", 48, 768, 4, 16, 155, Host("workstation: 128 GiB dual-channel DDR5-6000", 128.0)),
        _card("RTX PRO 6000", 96, 1792, 5, 16, 500, Host("workstation: 256 GiB dual-channel DDR5-6000", 256.0)),
        _card(
            "H100 PCIe",
            80,
            2000,
            5,
            16,
            756,
            Host("server: 512 GiB 8-channel DDR5-3200, 32 threads", 512.0, 8, 3200, 32, 3.0, cpu_family="server"),
        ),
        _card(
            "H200",
            141,
            4800,
            5,
            16,
            989,
            _H200_HOST,
            pinned_gbs=55.0,
            source=f"{_NV}; link: pinned rate measured on the ground-truth host (sample_data/groundtruth/bw.json; "
            "its pageable figure is for anonymous memory, mmap'd experts upload slower: run3 README)",
        ),
        _card("Radeon AI PRO R9700", 32, 640, 5, 16, 191, _R9700_HOST, "hip", _AMD),
        _card("Radeon Pro V620", 32, 512, 4, 16, 81, _V620_HOST, "vulkan", _AMD),
        _card(
            "eGPU RTX 4090, PCIe 3.0 x4",
            24,
            1008,
            4,
            16,
            330,
            replace(DESKTOP_DDR5, name="desktop with a Thunderbolt 3 class enclosure", slot_gen=3, slot_lanes=4),
        ),
        _card(
            "eGPU RTX 4090, PCIe 4.0 x4",
            24,
            1008,
            4,
            16,
            330,
            replace(DESKTOP_DDR5, name="desktop with an OCuLink class enclosure", slot_gen=4, slot_lanes=4),
        ),
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
