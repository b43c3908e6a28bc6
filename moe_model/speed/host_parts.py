"""The host as people know it: a CPU model, a RAM kit ("2x32 GB DDR5-6000"), a board slot ("PCIe 4.0 x4") and a
drive ("NVMe Gen4"), turned into the Host figures the time model reads, from a bundled table of desktop parts
(`moe_model/data/host_parts.json`, each row citing its maker's page).

A part the user has not described keeps today's default figure, and `unknown_parts` gives the slowest and fastest
host that part allows (the table's extremes), so a prediction's range widens by exactly that spread.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from functools import cache

from moe_model.errors import ControlError, MoeModelError
from moe_model.resources import data_path
from moe_model.settings import settings_of
from moe_model.speed.hardware import Hardware
from moe_model.speed.host import Host

# llama.cpp's default -t: one thread per physical performance core (common/common.cpp, cpu_get_num_math)
DEFAULT_DRIVE = "nvme4"  # an assumption: a current desktop's system drive
DESKTOP_CHANNELS = 2  # desktop boards run two memory channels, whatever the number of DIMMs
# what an unknown RAM kit's speed allows: JEDEC DDR4-2666 to DDR5-6400 EXPO/XMP (its size stays unknown: host_memory)
MEMORY_MTS = {"ddr4": (2666, 3600), "ddr5": (4800, 6400)}
SLOWEST_DRIVE, FASTEST_DRIVE = "sata", "nvme5"  # an unknown drive: a SATA SSD to a PCIe 5.0 NVMe drive


@dataclass(frozen=True)
class Cpu:
    """One desktop CPU of the table: cores, threads, clocks, memory channels and rated speeds, VNNI, source."""

    name: str
    p_cores: int
    cores: int
    threads: int
    base_ghz: float
    boost_ghz: float
    channels: int
    ddr4_mts: int | None
    ddr5_mts: int | None
    vnni: bool
    source: str

    @property
    def all_core_ghz(self) -> float:
        """Makers state base and boost clocks only: the all-core clock under load taken as their mean."""
        return round((self.base_ghz + self.boost_ghz) / 2, 2)

    @property
    def memory_mts(self) -> tuple[int, int]:
        """The memory speeds a kit on this CPU plausibly runs: the range of each DDR generation it takes."""
        gens = [g for g, rated in (("ddr4", self.ddr4_mts), ("ddr5", self.ddr5_mts)) if rated]
        return min(MEMORY_MTS[g][0] for g in gens), max(MEMORY_MTS[g][1] for g in gens)


@dataclass(frozen=True)
class Drive:
    key: str
    label: str
    read_gbs: float
    source: str


@cache
def _table() -> dict:
    return json.loads(data_path("host_parts.json").read_text())


@cache
def cpus() -> tuple[Cpu, ...]:
    return tuple(Cpu(**row) for row in _table()["cpus"])


@cache
def drives() -> dict[str, Drive]:
    return {key: Drive(key, **row) for key, row in _table()["drives"].items()}


def _words(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9]+", " ", text.lower()).split()


def cpu_named(text: str) -> Cpu:
    """The table's CPU a typed name means: its model number ("7950x", "i7-13700k", "285k") must be one of the words."""
    words = set(_words(text.replace("-", " ")))
    found = [c for c in cpus() if _words(c.name.replace("-", " "))[-1] in words]
    if len(found) == 1:
        return found[0]
    names = [c.name for c in cpus()]
    near = difflib.get_close_matches(text, names, n=1, cutoff=0.3)
    hint = f" (nearest: {near[0]})" if near else ""
    unknown = f"unknown CPU {text[:60]!r}{hint}"
    threads = settings_of(Host)["threads"].widget.label  # the app has a box for the threads, none for the clock
    raise ControlError(
        f"{unknown}: give its figures instead (--threads N --cpu-ghz G, and the RAM kit)",
        f"{unknown}: leave it out and give its thread count instead ({threads!r} under 'edit this machine'), and "
        "the RAM kit",
    )


@dataclass(frozen=True)
class RamKit:
    modules: int
    gib_each: float
    ddr: str
    mts: int

    @property
    def ram_gib(self) -> float:
        return self.modules * self.gib_each


_KIT = re.compile(r"^\s*(?:(\d+)\s*[x×*]\s*)?(\d+(?:\.\d+)?)\s*gi?b?\s*(ddr[45])[\s-]*(\d{4,5})\s*$", re.IGNORECASE)


def parse_ram_kit(text: str) -> RamKit:
    """'2x32 GB DDR5-6000' (or '64 GB DDR5-6000': two modules taken) as modules, size, generation and speed."""
    m = _KIT.match(text)
    if not m:
        raise MoeModelError(f"RAM kit {text[:60]!r} not understood: write it as on the box, e.g. '2x32 GB DDR5-6000'")
    modules, size, ddr, mts = int(m[1] or 0), float(m[2]), m[3].lower(), int(m[4])
    total = size if not modules else modules * size
    modules = modules or 2
    if not (1 <= modules <= 16 and 1 <= total <= 16384 and 1600 <= mts <= 12000):
        raise MoeModelError(f"RAM kit {text[:60]!r}: implausible module count, size or speed")
    return RamKit(modules, total / modules, ddr, mts)


_SLOT = re.compile(r"(?:pcie|gen)\s*([345])(?:\.0)?\s*x\s*(1|2|4|8|16)\b", re.IGNORECASE)
# enclosure links as PCIe (Thunderbolt 3/4 and USB4 tunnel PCIe 3.0 x4; OCuLink carries 4 lanes of the host's gen)
_NAMED_SLOTS = {"thunderbolt": (3, 4), "usb4": (3, 4), "oculink": (4, 4)}


def parse_slot(text: str) -> tuple[int, int]:
    """'PCIe 4.0 x4', 'gen3 x16', 'Thunderbolt 4' or 'OCuLink' as (generation, lanes)."""
    m = _SLOT.search(text)
    if m:
        return int(m[1]), int(m[2])
    for name, link in _NAMED_SLOTS.items():
        if name in text.lower():
            return link
    raise MoeModelError(f"slot {text[:60]!r} not understood: write it as 'PCIe 4.0 x16', 'PCIe 3.0 x4' or 'OCuLink'")


def drive_named(text: str) -> str:
    """'NVMe Gen4', 'PCIe 5.0 NVMe', 'SATA SSD' or 'HDD' as a drive class of the table."""
    low = text.lower()
    if "sata" in low:
        return "sata"
    if "hdd" in low or "hard" in low:
        return "hdd"
    gen = re.search(r"(?:gen|pcie|nvme)\s*([345])", low)
    if gen:
        return f"nvme{gen[1]}"
    if low.strip() in drives():
        return low.strip()
    raise MoeModelError(f"drive {text[:60]!r} not understood: 'SATA SSD', 'NVMe Gen3', 'NVMe Gen4', 'NVMe Gen5', 'HDD'")


def describe(host: Host, cpu: str | None = None, ram_kit: str | None = None, slot: str | None = None) -> Host:
    """The host with the figures a CPU model, a RAM kit and a slot give (each given part counts as stated)."""
    changes: dict = {}
    if cpu:
        part = cpu_named(cpu)
        changes |= {"cpu": part.name, "threads": part.p_cores, "ghz": part.all_core_ghz, "vnni": part.vnni}
        changes |= {"cpu_family": "client"}
    if ram_kit:
        kit = parse_ram_kit(ram_kit)
        channels = min(kit.modules, part.channels if cpu else DESKTOP_CHANNELS)
        changes |= {"ram_gib": kit.ram_gib, "mem_channels": channels, "mem_mts": kit.mts, "mem_bw_gbs": None}
    if slot:
        changes |= dict(zip(("slot_gen", "slot_lanes"), parse_slot(slot), strict=True))
    return host.with_changes(**changes) if changes else host


def described(
    hw: Hardware,
    cpu_model: str | None = None,
    ram_kit: str | None = None,
    slot: str | None = None,
    drive: str | None = None,
) -> Hardware:
    """The machine with its host described by the parts typed as people know them; a part not understood is a
    one-line MoeModelError naming it."""
    host = describe(hw.host, cpu=cpu_model, ram_kit=ram_kit, slot=slot)
    if drive:
        host = host.with_changes(drive=drive_named(drive))
    return hw if host is hw.host else hw.with_changes(host=host)


def disk_read_gbs(host: Host) -> float:
    """The drive's sequential read rate: measured (--disk-gbs), else its class's datasheet figure."""
    return host.disk_gbs or drives()[host.drive or DEFAULT_DRIVE].read_gbs


@dataclass(frozen=True)
class PartInput:
    """How the user describes one host part, declared once: `described`'s keyword, the command line's flag and
    help, the app's box (the sidebar's HOST_BOX) and examples; what describing it narrows is said from these."""

    key: str
    flag: str
    help: str
    label: str  # the app's box, without its examples
    examples: tuple[str, ...]
    what: str  # "your RAM kit": the part in a sentence
    cli_also: str = ""  # another way the command line takes it, said instead of the flag ("a measured --disk-gbs")

    @property
    def box(self) -> str:
        """The app's box label: 'RAM kit (e.g. 2x32 GB DDR5-6000)'."""
        return f"{self.label} (e.g. {', '.join(self.examples)})"

    @property
    def narrowed_by(self) -> str:
        """What narrows the part's range source on the command line: 'your RAM kit, e.g. ... (--ram-kit)'."""
        said = f"{self.what}, e.g. '{self.examples[0]}'"
        return f"{said}, or {self.cli_also}" if self.cli_also else f"{said} ({self.flag})"

    @property
    def app_narrowed_by(self) -> str:
        """The same in the app's words: its box in the sidebar."""
        return f"{self.what}, e.g. '{self.examples[0]}': the '{self.label}' box under '{HOST_BOX}' in the sidebar"


HOST_BOX = "describe your host"  # the sidebar's expander holding the parts' boxes
PART_INPUTS = {
    p.key: p
    for p in (
        PartInput("cpu_model", "--cpu", "CPU model, e.g. 'Ryzen 7 7700X', 'i7-13700K' (threads, clock, VNNI)",
                  "CPU model", ("Ryzen 7 7700X",), "your CPU model"),
        PartInput("ram_kit", "--ram-kit", "RAM kit as on the box, e.g. '2x32 GB DDR5-6000' (RAM, channels, speed)",
                  "RAM kit", ("2x32 GB DDR5-6000",), "your RAM kit"),
        PartInput("slot", "--slot", "the GPU's slot or link, e.g. 'PCIe 4.0 x4', 'OCuLink', 'Thunderbolt 4'",
                  "GPU slot", ("PCIe 4.0 x16", "OCuLink"), "your board's slot"),
        PartInput("drive", "--drive", "the drive the model file is on: 'SATA SSD', 'NVMe Gen3/4/5', 'HDD'",
                  "drive", ("NVMe Gen4", "SATA SSD"), "your drive", f"a measured {settings_of(Host)['disk_gbs'].flag}"),
    )
}  # fmt: skip


@dataclass(frozen=True)
class UnknownPart:
    """A part the user has not described: the slowest and fastest host it allows, and how to describe it (on the
    command line and in the app)."""

    part: str
    slow: Host
    fast: Host
    narrowed_by: str
    app_narrowed_by: str


def _unknown(part: str, slow: Host, fast: Host, key: str) -> UnknownPart:
    said = PART_INPUTS[key]
    return UnknownPart(part, slow, fast, said.narrowed_by, said.app_narrowed_by)


def _cpu_rate(cpu: Cpu) -> float:
    return cpu.p_cores * cpu.all_core_ghz * (1.0 if cpu.vnni else 0.5)  # VNNI: about twice the int8 dot products


RAM_KIT_FIELDS = frozenset({"mem_mts", "mem_channels", "mem_bw_gbs"})  # a kit's speed; its size (ram_gib) is not


def stated_fields(hw: Hardware) -> frozenset[str]:
    """What is known of the host, the one rule the range's host sources follow (unknown_parts), the same for the
    CLI and the app: the figures stated (a flag, an app box, a described part, a preset's source: Host.stated), the
    slot where the link's rates are measured, the memory and threads where a host record measured the CPU path.
    A RAM size is stated like any figure, but states no kit: the kit's speed stays a source (RAM_KIT_FIELDS)."""
    stated = set(hw.host.stated) | ({"slot_gen"} if hw.pinned_gbs or hw.pageable_gbs else set())
    return frozenset(stated | ({"mem_bw_gbs", "threads"} if hw.host_record else set()))


def form_statements(shown: dict, edits: dict) -> dict:
    """The figures a form of boxes states (the app's machine boxes, each showing the preset's figure until edited):
    each box the user changed, and the RAM box whatever it holds, as `--ram-gib` at that value states it: it sits
    beside the RAM verdict, which prices the figure it shows. A stated RAM decides that verdict only; the range's
    sources do not change with it (stated_fields)."""
    changed = {name: value for name, value in edits.items() if value != shown.get(name)}
    return changed | ({"ram_gib": edits["ram_gib"]} if "ram_gib" in edits else {})


def unknown_parts(hw: Hardware) -> tuple[UnknownPart, ...]:
    """Each undescribed part of the machine's host (stated_fields) with the table's slowest and fastest choice for
    it (the others kept); the slot is no source where the link's rates are measured, the CPU and the RAM kit none
    where a host record measured the CPU path (its rate is the CPU on that memory)."""
    host, card_gen, card_lanes = hw.host, hw.pcie_gen, hw.pcie_lanes
    stated = stated_fields(hw)
    out = []
    if not stated & RAM_KIT_FIELDS:  # a RAM size is not a kit: its speed stays unknown
        lo, hi = cpu_named(host.cpu).memory_mts if host.cpu else (MEMORY_MTS["ddr4"][0], MEMORY_MTS["ddr5"][1])
        ram = {"mem_channels": DESKTOP_CHANNELS, "mem_bw_gbs": None}
        slow, fast = (host.with_changes(**ram, mem_mts=mts) for mts in (lo, hi))
        out.append(_unknown("host: RAM kit", slow, fast, "ram_kit"))
    if not host.cpu and not stated & {"threads", "ghz"}:
        slow_cpu, fast_cpu = min(cpus(), key=_cpu_rate), max(cpus(), key=_cpu_rate)
        slow, fast = (
            host.with_changes(threads=c.p_cores, ghz=c.all_core_ghz, vnni=c.vnni) for c in (slow_cpu, fast_cpu)
        )
        out.append(_unknown("host: CPU", slow, fast, "cpu_model"))
    if not stated & {"slot_gen", "slot_lanes"}:
        slow = host.with_changes(slot_gen=min(card_gen, 3), slot_lanes=card_lanes)
        fast = host.with_changes(slot_gen=card_gen, slot_lanes=card_lanes)
        out.append(_unknown("host: slot", slow, fast, "slot"))
    if not stated & {"drive", "disk_gbs"}:
        slow, fast = (host.with_changes(drive=d) for d in (SLOWEST_DRIVE, FASTEST_DRIVE))
        out.append(_unknown("host: drive", slow, fast, "drive"))
    return tuple(out)
