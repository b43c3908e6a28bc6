"""Machines: GPU memory, bandwidth and compute, its link, and the host around it. Presets cite their sources.

Only physical, published or measured figures live here. Rates the time model derives from them
(effective upload rates, the CPU expert rate) are computed in `moe_model.speed.time_model` with the
machine-independent parameters fitted across every measured machine, unless the machine itself
carries a measured value (`pinned_gbs`, `pageable_gbs`, or the terms `calibrate` fits from its logs).
The host (RAM, memory, CPU, slot, VM) is one `Host` object: changing the GPU keeps it.
"""

from __future__ import annotations

import csv
import difflib
import re
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from moe_model.errors import LinkRateError, MoeModelError, UnknownGpuError
from moe_model.limits import MAX_RATE_GBS
from moe_model.resources import data_path
from moe_model.settings import Setting, Widget, setting, settings_of
from moe_model.speed.host import DESKTOP_DDR4, DESKTOP_DDR5, MIN_RATE, PCIE_LANES, Host

# PCIe line rate per lane in GB/s after encoding (PCI-SIG: 8, 16, 32 GT/s with 128b/130b)
PCIE_LANE_GBS = {3: 0.985, 4: 1.969, 5: 3.938}
PINNED_EFFICIENCY = 0.85  # pinned cudaMemcpy reaches ~85 % of the line rate (groundtruth bw.json: 55 of 63 GB/s)
BACKENDS = ("cuda", "hip", "vulkan")
# the names the host's figures had when they were fields of Hardware: kept for machine files, pages and scripts
HOST_ALIASES = {"cpu_bw_gbs": "mem_bw_gbs", "cpu_threads": "threads", "cpu_ghz": "ghz", "cpu_vnni": "vnni"}


def link_of(pcie_gen: int, pcie_lanes: int, host: Host) -> tuple[int, int]:
    """The generation and lanes a card of `pcie_gen` x `pcie_lanes` runs at in `host`: the slower of the card and
    the host's slot or enclosure, each."""
    return min(pcie_gen, host.slot_gen or pcie_gen), min(pcie_lanes, host.slot_lanes or pcie_lanes)


def line_gbs(pcie_gen: int, pcie_lanes: int, host: Host) -> float:
    """The PCIe line rate (GB/s) of a card of `pcie_gen` x `pcie_lanes` in `host`'s slot: what no copy exceeds."""
    gen, lanes = link_of(pcie_gen, pcie_lanes, host)
    return PCIE_LANE_GBS.get(gen, 0.0) * lanes


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
    expert weights at (q4_K-equivalent bytes, at `cpu_expert_threads` where given: other thread counts scale it
    as the thread term does); `sync_us`, the cost per cached layer and ubatch; `token_ms`, the fixed cost per
    decode ubatch on this host (graph build and launches). `calibrate` fits the last four. `host_record` says a
    host record measured the CPU path (fits.host_fit): the host's CPU and RAM kit are then no source of a range.
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
    cpu_expert_threads: int | None = None  # the threads cpu_expert_gbs was measured at (None: the host's)
    host_record: str | None = None  # what measured the host's CPU path (fits.host_fit): the CPU and RAM are known
    sync_us: float | None = None
    token_ms: float | None = None
    source: str = "user"

    def __post_init__(self) -> None:
        if not isinstance(self.host, Host):
            raise MoeModelError(f"hardware {self.name!r}: its host must be a Host, got {type(self.host).__name__}")
        bad = [f"backend {self.backend!r:.40} (one of {', '.join(BACKENDS)})"] if self.backend not in BACKENDS else []
        for name, (lo, hi) in self._bounds().items():
            value = getattr(self, name)
            if isinstance(lo, tuple):
                bad += [] if value in lo else [f"{name} {value!r:.40} (one of {', '.join(map(str, lo))})"]
            elif value is not None and not lo <= value <= hi:
                bad.append(f"{name} {value:.4g} (it must be in {lo:g}..{hi:g})")
        if bad:
            above = [n for n in ("pinned_gbs", "pageable_gbs") if (getattr(self, n) or 0) > self.line_gbs > 0]
            link = f": link rates cannot exceed the {self.pcie_label} line rate of {self.line_gbs:.1f} GB/s"
            raise MoeModelError(f"hardware {self.name!r}: implausible {'; '.join(bad)}{link if above else ''}")

    def _bounds(self) -> dict[str, tuple]:
        """Each checked field's (lo, hi), or (choices, None); measured rates at least MIN_RATE (a rate of 1e-300
        overflowed the time model), the link's at most its line rate."""
        line = self.line_gbs or MAX_RATE_GBS  # a PCIe generation of none of the choices is refused on its own
        return {s.name: (s.choices, None) if s.choices else (s.lo, s.hi) for s in settings_of(Hardware).values()} | {
            "gpu_tflops": (MIN_RATE, 10000),
            "pinned_gbs": (MIN_RATE, min(line, MAX_RATE_GBS)),
            "pageable_gbs": (MIN_RATE, min(line, MAX_RATE_GBS)),
            "cpu_expert_gbs": (MIN_RATE, 2000),
            "cpu_expert_threads": (1, 1024),
            "sync_us": (0, 100_000),
            "token_ms": (0, 1000),
        }

    @property
    def link_gen(self) -> int:
        return link_of(self.pcie_gen, self.pcie_lanes, self.host)[0]

    @property
    def link_lanes(self) -> int:
        return link_of(self.pcie_gen, self.pcie_lanes, self.host)[1]

    @property
    def pcie_label(self) -> str:
        return f"PCIe {self.link_gen}.0 x{self.link_lanes}"

    @property
    def line_gbs(self) -> float:
        return line_gbs(self.pcie_gen, self.pcie_lanes, self.host)

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

    @property
    def calibrated(self) -> bool:
        """Fitted to its own logs (`calibrate`, the Logs page): the only step that sets sync_us (fits.machine_fit)."""
        return self.sync_us is not None

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

    def with_link_gbs(self, measured_gbs: float) -> Hardware:
        """Both copy rates at one measured host-to-device rate: the CLI's --link-gbs and the app's measured box,
        one rule. Above the link's line rate it is refused in one line (no copy exceeds the line: it was measured on
        another link, or mistyped); the CLI exits 1 with it, the app says it and derives the rates from the link."""
        if measured_gbs > self.line_gbs > 0:
            raise LinkRateError(
                f"a measured host-to-device rate of {measured_gbs:g} GB/s is above the {self.pcie_label} line rate of "
                f"{self.line_gbs:.1f} GB/s: no copy exceeds it (measured on another link?)"
            )
        return self.with_changes(pinned_gbs=measured_gbs, pageable_gbs=measured_gbs)

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

GPU_TABLE = data_path("gpus.csv")  # one card a row, each citing its datasheet

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

# the hosts the table's rows name: an assumption to edit unless the row's measurements stated it
HOSTS = {
    "desktop-ddr4": DESKTOP_DDR4,
    "desktop-ddr5": DESKTOP_DDR5,
    "desktop-ddr5-5600": Host("desktop: 64 GiB dual-channel DDR5-5600, -t 10", 64.0, 2, 5600, 10),
    "workstation-128": Host("workstation: 128 GiB dual-channel DDR5-6000", 128.0),
    "workstation-256": Host("workstation: 256 GiB dual-channel DDR5-6000", 256.0),
    "server": Host("server: 512 GiB 8-channel DDR5-3200, 32 threads", 512.0, 8, 3200, 32, 3.0, cpu_family="server"),
    "cloud-vm-t4": _T4_HOST,
    "cloud-vm-h200": _H200_HOST,
    "epyc-7532": _V620_HOST,
    "r9700-desktop": _R9700_HOST,
    "egpu-thunderbolt3": replace(
        DESKTOP_DDR5, name="desktop with a Thunderbolt 3 class enclosure", slot_gen=3, slot_lanes=4
    ),
    "egpu-oculink": replace(DESKTOP_DDR5, name="desktop with an OCuLink class enclosure", slot_gen=4, slot_lanes=4),
}


def _number(text: str) -> int | float:
    """A table figure as written: "12" stays an int, "15.0" a float (machine files and JSON keep their look)."""
    return int(text) if text.isdigit() else float(text)


def _preset_row(row: dict[str, str]) -> Hardware:
    """One row of the GPU table; an empty optional figure keeps the code's default."""
    optional = {k: _number(row[k]) for k in ("gpu_tflops", "pinned_gbs") if row[k]}
    figures = [_number(row[k]) for k in ("vram_gib", "gpu_bw_gbs", "pcie_gen", "pcie_lanes")]
    host = HOSTS[row["host"]]
    return Hardware(row["name"], *figures, host, row["backend"], source=row["source"], **optional)


def _table(path: Path = GPU_TABLE) -> list[dict[str, str]]:
    return list(csv.DictReader(line for line in path.read_text().splitlines() if not line.startswith("#")))


_ROWS = _table()
PRESETS: dict[str, Hardware] = {row["name"]: _preset_row(row) for row in _ROWS}
ALIASES = {alias: row["name"] for row in _ROWS for alias in row["aliases"].split("|") if alias}


def _normal(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", text.lower()).strip()


VARIANT_WORDS = frozenset({"ti", "super", "xt", "xtx", "gre", "max", "laptop", "mobile"})  # another card's name
MEMORY_WORD = re.compile(r"\d+gb")  # "12gb": one card's memory size, the first listed the card itself


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


def _closeness(words: list[str], key: str) -> tuple[int, int]:
    """How far a name is from what was typed: typed words only starting one of its words ("xt" of "xtx"),
    then its words nobody typed ("rtx 3080" is nearer "3080" than "rtx 3080 12gb" is)."""
    own = key.split()
    partial = sum(x not in own for x in words)
    untyped = sum(not any(w.startswith(x) for x in words) for w in own)
    return partial, untyped


def _nearest_card(words: list[str], base: dict[str, Hardware]) -> Hardware | None:
    """The one nearest base card, or the first listed of one card's memory sizes; None when several are as near."""
    nearest = min(_closeness(words, key) for key in base)
    tied = [key for key in base if _closeness(words, key) == nearest]
    if len({" ".join(MEMORY_WORD.sub("", key).split()) for key in tied}) == 1:
        return base[tied[0]]
    return None


def preset_match(name: str) -> PresetMatch:
    """A preset as users type it: exact or alias (case-insensitive), else a unique word-prefix match, where a card
    beats its variants ("rtx 3060" is the RTX 3060 12GB, not the 3060 Ti) and a card its eGPU setups; of several
    cards the nearest name wins ("rx 7900 xt" is not the XTX, "3080" not the 3080 12GB), and of one card's memory
    sizes the first in the table."""
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
    if len(found) == 1:
        return PresetMatch(name, next(iter(found.values())), "prefix")
    base = {key: hw for key, hw in found.items() if not _variants_not_typed(words, key)}
    hw = _nearest_card(words, base) if base else None
    if hw is not None:
        return PresetMatch(name, hw, "base card", tuple(h.name for h in found.values() if h is not hw))
    if found:
        raise MoeModelError(f"GPU {name!r} is ambiguous: {', '.join(hw.name for hw in found.values())}")
    raise UnknownGpuError(name, unknown_gpu(name))


def _spellings() -> dict[str, str]:
    """Each preset's normalised name, that name without its memory size ("rtx 4070"), and its aliases."""
    names = {_normal(k): k for k in PRESETS}
    bare = {" ".join(MEMORY_WORD.sub("", key).split()): k for key, k in names.items()}
    return bare | names | ALIASES


def nearest_presets(name: str, n: int = 3) -> list[str]:
    """The presets whose names or aliases read most like `name` (difflib on the normalised spellings)."""
    spellings = _spellings()
    close = difflib.get_close_matches(_normal(name), spellings, n=3 * n, cutoff=0.0)
    return list(dict.fromkeys(spellings[c] for c in close))[:n]


def other_card(start: str, app: bool = False) -> str:
    """How to describe a card no preset has: start from `start` and give the figures of the card's datasheet, as
    the CLI's flags or (app) the sidebar's boxes, both read from the settings that declare them."""
    figures = [MACHINE_SETTINGS[k] for k in ("vram_gib", "gpu_bw_gbs", "pcie_gen", "pcie_lanes")]
    if app:
        boxes = ", ".join(repr(s.widget.label) for s in figures)
        return f"pick {start} under GPU and set {boxes} from your card's datasheet under 'edit this machine'"
    flags = " ".join(f"{s.flags[0]} N" for s in figures)
    return f"start from the nearest preset and give your card's datasheet figures: --hardware {start!r} {flags}"


LAPTOP_WORDS = frozenset({"laptop", "mobile", "notebook"})  # a laptop part's name: "rtx 4060 mobile"
NAME_FILLER = frozenset({"gpu", "max", "q"})  # "3080 laptop gpu", "max-q": not part of the desktop card's name


def _desktop_name(name: str) -> str | None:
    """A laptop part's name without its laptop words ("4090 laptop": "4090"); None for another card's name."""
    words = _normal(name).split()
    if not LAPTOP_WORDS & set(words):
        return None
    return " ".join(w for w in words if w not in LAPTOP_WORDS | NAME_FILLER) or None


def _desktop_start(desktop: str) -> tuple[Hardware, bool]:
    """The preset to start a laptop part from, and whether it is the desktop card of the same name: that card,
    else the one its name without a variant word names ("3050 ti": the RTX 3050), else the nearest name."""
    try:
        return preset_match(desktop).hardware, True
    except MoeModelError:
        pass
    plain = " ".join(w for w in desktop.split() if w not in VARIANT_WORDS)
    try:
        return preset_match(plain).hardware, False
    except MoeModelError:
        return PRESETS[nearest_presets(desktop)[0]], False


def laptop_gpu(name: str, app: bool = False) -> str | None:
    """The line for a laptop part (gpus.csv leaves them out: no memory speed on NVIDIA's laptop pages, the maker
    sets the power): start from the desktop card of its name with the laptop's own memory size and bandwidth, as
    the CLI's flags or (app) the sidebar's boxes. None for a name that is not a laptop part's."""
    desktop = _desktop_name(name)
    if desktop is None:
        return None
    start, same = _desktop_start(desktop)
    figures = [MACHINE_SETTINGS[k] for k in ("vram_gib", "gpu_bw_gbs")]
    if app:
        boxes = " and ".join(repr(s.widget.label) for s in figures)
        how = f"pick {start.name} under GPU and set {boxes} under 'edit this machine'"
    else:
        how = f"--hardware {start.name!r} " + " ".join(f"{s.flags[0]} N" for s in figures)
    which = "the desktop card of that name" if same else "the nearest desktop card"
    return (
        f"{name!r} is a laptop part, and laptop GPUs are not presets (NVIDIA's laptop pages give no memory speed; "
        f"the laptop's maker sets the power): start from {which}, the {start.name}, with your laptop's memory size "
        f"and bandwidth (bus bits x data rate in Gbps / 8): {how}"
    )


def unknown_gpu(name: str, app: bool = False) -> str:
    """The line for a GPU name no preset has: a laptop part's desktop card and how to describe it, else the nearest
    presets and how to describe any other card."""
    laptop = laptop_gpu(name, app)
    if laptop:
        return laptop
    nearest = nearest_presets(name)
    return f"unknown GPU {name!r}; nearest: {', '.join(nearest)}. For another card, {other_card(nearest[0], app)}"


def preset(name: str) -> Hardware:
    """A preset as users type it (preset_match says how the name resolved)."""
    return preset_match(name).hardware
