"""The host a GPU sits in: RAM, memory system, CPU, its slot's link, VM or not. One object; pages edit it.

Only the host's own figures live here (stated by a source, measured, or assumed: `stated` names the
fields a source states, every other field is an assumption). The rates the time model derives from
them (the pageable copy rate, the CPU expert rate) are in `moe_model.speed.time_model`, with the shares
of a bandwidth each path reaches fitted across every measured machine. A measured figure
(`mem_bw_gbs`, `copy_gbs`) replaces the derived one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from functools import cache

from moe_model.errors import MoeModelError
from moe_model.settings import Widget, setting, settings_of

# CPU families the time model tells apart (a fitted copy rate and CPU-path efficiency each)
CPU_FAMILIES = {
    "client": "desktop and laptop cores (Intel Core, AMD Ryzen): few memory channels, high bandwidth per core",
    "server": "server cores (Xeon, EPYC, cloud vCPUs): many channels, lower bandwidth per core (longer latency)",
}
FAMILIES = tuple(CPU_FAMILIES)
PCIE_GENS = (3, 4, 5)
PCIE_LANES = (1, 2, 4, 8, 16)
DRIVES = ("hdd", "sata", "nvme3", "nvme4", "nvme5")  # drive classes of moe_model/data/host_parts.json
MIN_RATE = 0.001  # the least GiB or GB/s a machine field takes (a zero rate would divide by zero)


@cache
def _declared() -> dict:
    """Host's declared settings, read once (every Host checks its fields against them)."""
    return settings_of(Host)


@dataclass(frozen=True)
class Host:
    """The machine around the GPU. `mem_channels x mem_mts x 8 bytes` is the memory bandwidth unless
    `mem_bw_gbs` is measured; `copy_gbs` is one core's measured copy rate of the mmap'd model (`record`
    measures it: record/copy_rate.py), the host half of a pageable upload, which runs in series with the link's
    DMA (a measured pageable upload rate, e.g. CUDA's bandwidthTest --memory=pageable, is `pageable_gbs`);
    `slot_gen` / `slot_lanes` the slot or enclosure link (None: as the card).
    The settings (moe_model.settings) declare the command-line flags and the app's URL keys and widgets."""

    name: str = "assumed desktop"
    ram_gib: float = setting(
        64.0,
        help="host RAM (GiB): host experts must fit in it (pinned) or page from disk (mmap)",
        flags=("--ram-gib",),
        lo=1.0,
        hi=16384.0,
        url_key="ram",
        widget=Widget("host RAM GiB", "number", lo=1.0, hi=16384.0, step=8.0),
    )
    mem_channels: int = setting(2, help="host memory channels", flags=("--mem-channels",), lo=1, hi=64)
    mem_mts: int = setting(6000, help="host memory transfer rate (MT/s)", flags=("--mem-mts",), lo=400, hi=20000)
    threads: int = setting(
        8,
        help="threads llama.cpp computes host experts with (-t)",
        flags=("--threads",),
        lo=1,
        hi=1024,
        url_key="threads",
        widget=Widget("CPU threads (-t)", "number", lo=1, hi=1024),
    )
    ghz: float = setting(4.5, help="all-core clock of those threads (GHz)", flags=("--cpu-ghz",), lo=0.5, hi=7.0)
    vnni: bool = True  # int8 dot-product instructions (AVX-VNNI / AVX-512 VNNI) for ggml's quantized kernels
    cpu_family: str = setting(
        "client", help="CPU family: client (desktop, laptop) or server", flags=("--cpu-family",), choices=FAMILIES
    )
    vm: bool = setting(False, help="the host is a virtual machine", flags=("--vm",))
    slot_gen: int | None = None
    slot_lanes: int | None = None
    mem_bw_gbs: float | None = setting(
        None,
        help="host memory bandwidth (GB/s; default: channels x transfer rate x 8 bytes)",
        parse=float,
        flags=("--cpu-bw-gbs",),
        lo=MIN_RATE,
        hi=2000.0,
        url_key="cpu",
        widget=Widget("host memory GB/s", "number", lo=1.0, hi=2000.0),
    )
    copy_gbs: float | None = setting(
        None,
        help="one core's measured copy rate of the mmap'd model (GB/s; record measures it): a pageable upload copies "
        "at it, then crosses the link",
        parse=float,
        flags=("--host-copy-gbs",),
        lo=MIN_RATE,
        hi=2000.0,
    )
    cpu: str | None = None  # the CPU model of the parts table the figures came from (host_parts.describe)
    drive: str | None = None  # the drive class mmap'd experts page from (None: host_parts.DEFAULT_DRIVE)
    disk_gbs: float | None = setting(
        None,
        help="measured read rate of the drive the model file is on (GB/s; a cold sequential read: drop the page cache, "
        "then dd if=MODEL.gguf of=/dev/null bs=16M): mmap'd experts beyond RAM stream at a share of it",
        parse=float,
        flags=("--disk-gbs",),
        lo=MIN_RATE,
        hi=200.0,
    )
    stated: tuple[str, ...] = ()
    source: str = "an assumption to edit"

    def __post_init__(self) -> None:
        object.__setattr__(self, "stated", tuple(self.stated))  # JSON gives a list
        checks = {  # each declared field's bounds and choices, as its flag refuses them
            name: getattr(self, name) is None or not spec.refusal(getattr(self, name))
            for name, spec in _declared().items()
        }
        checks |= {  # the fields no flag declares
            "slot_gen": self.slot_gen is None or self.slot_gen in PCIE_GENS,
            "slot_lanes": self.slot_lanes is None or self.slot_lanes in PCIE_LANES,
            "drive": self.drive is None or self.drive in DRIVES,
            "stated": set(self.stated) <= {f.name for f in fields(Host)},
        }
        bad = [k for k, ok in checks.items() if not ok]
        if bad:
            raise MoeModelError(f"host {self.name!r}: implausible {', '.join(bad)}")

    @property
    def bandwidth_gbs(self) -> float:
        """Host memory bandwidth: measured, else channels x transfer rate x 8 bytes."""
        return self.mem_bw_gbs or self.mem_channels * self.mem_mts * 8 / 1000

    @property
    def ram_stated(self) -> bool:
        """The RAM size is known: the user gave it (--ram-gib, a RAM kit, a host record) or the preset's source
        states it. Otherwise `ram_gib` is only a figure to edit, and nothing is priced from it (host_memory)."""
        return "ram_gib" in self.stated

    @property
    def assumed(self) -> tuple[str, ...]:
        """The figures no source states: a page shows them as assumptions to edit."""
        own = ("ram_gib", "mem_channels", "mem_mts", "threads", "ghz", "vnni", "cpu_family", "vm")
        return tuple(name for name in own if name not in self.stated)

    def with_changes(self, **changes) -> Host:
        """Edited figures; an edited figure counts as stated (the user states it)."""
        edited = tuple(name for name in changes if name not in ("name", "source", "stated"))
        stated = tuple(dict.fromkeys(tuple(changes.pop("stated", self.stated)) + edited))
        return replace(self, **changes, stated=stated)

    def as_dict(self) -> dict:
        return asdict(self)


def _desktop(name: str, ram: float, channels: int, mts: int, threads: int = 8, ghz: float = 4.5) -> Host:
    return Host(name, ram, channels, mts, threads, ghz, source="an assumption to edit")


DESKTOP_DDR4 = _desktop("desktop: 32 GiB dual-channel DDR4-3200, 8 threads", 32.0, 2, 3200)
DESKTOP_DDR5 = _desktop("desktop: 64 GiB dual-channel DDR5-6000, 8 threads", 64.0, 2, 6000)
