"""One machine on every page: the user's host (RAM, memory bandwidth, CPU threads, link) stays when the GPU
changes, and Shopping puts every other card in that host. Without Streamlit, so tests call it directly."""

from __future__ import annotations

from moe_model.speed.hardware import MACHINE_SETTINGS, Hardware, line_gbs

# the host's measured (calibrated) terms kept on Hardware: a card moved into this host takes them with its Host
# (a CPU run's rate, the threads it was measured at and what measured it: fits.host_fit)
HOST_FIELDS = ("cpu_expert_gbs", "token_ms", "cpu_expert_threads", "host_record")
# the sidebar's edits (URL key: field) that belong to the host (kept when the GPU changes) and to the card
_KEYS = {name: s.url_key for name, s in MACHINE_SETTINGS.items() if s.url_key}
_OWN = {"mem_bw_gbs": "cpu_bw_gbs", "threads": "cpu_threads"}  # the machine's effective figure of a host setting
HOST_EDITS = {_KEYS[name]: name for name in ("ram_gib", "mem_bw_gbs", "threads", "pcie_gen")} | {"link": None}
CARD_EDITS = {_KEYS[name]: name for name in ("vram_gib", "gpu_bw_gbs", "pcie_lanes")}


def in_host(card: Hardware, host: Hardware) -> Hardware:
    """`card` in the host of `host`: the host's RAM, memory, CPU and their measured terms; the card's own link
    (an eGPU preset's is its enclosure's, e.g. PCIe 3.0 x4) at the lower PCIe generation of it and the host's slot;
    measured link rates kept where that line carries them (a slower line gets them derived)."""
    gen, lanes = min(card.link_gen, host.pcie_gen), card.link_lanes  # the enclosure goes with its card
    rates = link_rates(host, line_gbs(gen, lanes, host.host))
    own = {name: getattr(host, name) for name in HOST_FIELDS}
    return card.with_changes(pcie_gen=gen, pcie_lanes=lanes, host=host.host, **rates, **own)


def link_rates(hw: Hardware, line_gbs: float) -> dict[str, float | None]:
    """The machine's own measured copy rates over a link of `line_gbs`, where the line carries them (a slower
    edited link drops them: issue 22's "implausible pinned_gbs" after a calibration)."""
    own = {"pinned_gbs": hw.pinned_gbs, "pageable_gbs": hw.pageable_gbs}
    return {name: rate if rate is not None and rate <= line_gbs else None for name, rate in own.items()}


def with_edits(hw: Hardware, link_gbs: float, **changes) -> Hardware:
    """`hw` with the sidebar's edits (Hardware.with_changes' names) and its measured link rate (0: none) on the
    line of the edited card in this host's slot: a rate above that line is refused as the CLI refuses it
    (Hardware.with_link_gbs raises LinkRateError; the sidebar says it and prices the rates derived from the link)."""
    gen, lanes = changes.get("pcie_gen", hw.pcie_gen), changes.get("pcie_lanes", hw.pcie_lanes)
    edited = hw.with_changes(**changes, **link_rates(hw, line_gbs(gen, lanes, hw.host)))
    return edited.with_link_gbs(link_gbs) if link_gbs else edited


def host_edited(kept: dict, base: Hardware) -> bool:
    """Whether the kept host edits differ from `base`'s own figures (the user made the host theirs)."""
    for key, name in HOST_EDITS.items():
        if key not in kept:
            continue
        own = 0.0 if name is None else getattr(base, _OWN.get(name, name))
        if kept[key] != own:
            return True
    return False


def edits_to_forget(kept: dict, old_base: Hardware | None, new_is_calibrated: bool) -> tuple[str, ...]:
    """The kept machine edits a change of base machine drops: all of them for a calibrated machine (its fitted
    figures, link included, replace the sidebar's), else the card's, and the host's unless the user edited it."""
    if new_is_calibrated or old_base is None:
        return (*HOST_EDITS, *CARD_EDITS)
    if host_edited(kept, old_base):
        return tuple(CARD_EDITS)
    return (*HOST_EDITS, *CARD_EDITS)
