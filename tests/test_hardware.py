"""Hardware presets: every one cites a source and gives sane link rates; bad values are refused."""

from __future__ import annotations

import pytest

from moe_model.errors import MoeModelError
from moe_model.hardware import PRESETS, Hardware, preset


def test_every_preset_cites_a_source_and_the_required_ones_exist():
    for name in (
        "Tesla T4",
        "RTX 3060 12GB",
        "RTX 4060 Ti 16GB",
        "RTX 4070 12GB",
        "RTX 4080 16GB",
        "RTX 4090",
        "RTX 5070 Ti",
        "RTX 5090",
        "RTX PRO 6000",
        "RTX A6000",
        "H100 PCIe",
        "H200",
        "eGPU RTX 4090, PCIe 3.0 x4",
        "eGPU RTX 4090, PCIe 4.0 x4",
    ):
        assert preset(name).source
    assert all(hw.source for hw in PRESETS.values())


def test_link_rates_follow_pcie_generation_lanes_and_pinning():
    t4 = preset("Tesla T4")
    assert t4.pinned_gbs == pytest.approx(0.985 * 16 * 0.85)
    assert t4.upload_gbs < t4.pinned_gbs and t4.with_changes(pinned=True).upload_gbs == t4.pinned_gbs
    assert preset("eGPU RTX 4090, PCIe 3.0 x4").pinned_gbs < preset("RTX 4090").pinned_gbs / 3
    h200 = preset("H200")
    assert (h200.pinned_gbs, h200.upload_gbs) == (55.0, 10.6)  # measured, bw.json


def test_unknown_preset_and_implausible_values_are_refused():
    with pytest.raises(MoeModelError, match="unknown hardware preset"):
        preset("Voodoo 2")
    with pytest.raises(MoeModelError, match="implausible vram_gib"):
        Hardware("x", -1, 300, 4, 16, 40)
    with pytest.raises(MoeModelError, match="pcie_gen"):
        Hardware("x", 8, 300, 7, 16, 40)
