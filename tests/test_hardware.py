"""Hardware presets: names as users type them, link rates never above the line rate, every preset cited."""

from __future__ import annotations

import pytest

from moe_model.errors import MoeModelError
from moe_model.speed.hardware import PRESETS, Hardware, preset, preset_match


@pytest.mark.parametrize(
    ("typed", "name"),
    [
        ("t4", "Tesla T4"),
        ("Tesla T4", "Tesla T4"),
        ("4080", "RTX 4080 16GB"),
        ("rtx 4090", "RTX 4090"),
        ("H200", "H200"),
        ("r9700", "Radeon AI PRO R9700"),
        ("v620", "Radeon Pro V620"),
        ("3060 ti", "RTX 3060 Ti"),
        ("3090", "RTX 3090"),
        ("rtx 5070", "RTX 5070"),
        ("5070 ti", "RTX 5070 Ti"),
        ("rtx 3060", "RTX 3060 12GB"),
        ("rtx 4060", "RTX 4060"),
    ],
)
def test_names_resolve_as_users_type_them(typed, name):
    assert preset(typed).name == name


def test_the_base_card_wins_over_its_variants_and_says_so():
    match = preset_match("rtx 3060")
    assert (match.hardware.name, match.how, match.passed_over) == ("RTX 3060 12GB", "base card", ("RTX 3060 Ti",))
    assert match.describe() == "'rtx 3060' is the RTX 3060 12GB preset (12 GB, 360 GB/s, PCIe 4.0 x16), not RTX 3060 Ti"
    assert preset_match("rtx 3060 t").hardware.name == "RTX 3060 Ti"  # a typed variant still picks the variant


def test_the_rtx_5070_is_its_own_card_not_the_ti():
    base, ti = preset("rtx 5070"), preset("rtx 5070 ti")
    assert (base.vram_gib, base.gpu_bw_gbs) == (12, 672) and (ti.vram_gib, ti.gpu_bw_gbs) == (16, 896)
    assert preset_match("RTX 5070").how == "exact"


def test_an_ambiguous_name_lists_the_candidates_and_an_unknown_one_the_presets():
    with pytest.raises(MoeModelError, match="ambiguous: .*RTX 5070 Ti.*RTX 5090|ambiguous: .*RTX 5090.*RTX 5070"):
        preset("rtx 50")
    with pytest.raises(MoeModelError, match="unknown GPU 'Voodoo 2'; known: Tesla T4"):
        preset("Voodoo 2")


def test_every_preset_cites_a_source_and_a_backend():
    for hw in PRESETS.values():
        assert hw.source and hw.source != "user" and hw.backend in ("cuda", "hip", "vulkan")


def test_a_measured_link_rate_above_the_pcie_line_rate_is_refused():
    t4 = preset("t4")
    assert t4.pinned_rate_gbs == pytest.approx(0.985 * 16 * 0.85) and t4.pinned_rate_gbs < t4.line_gbs
    with pytest.raises(MoeModelError, match="line rate of 15.8 GB/s"):
        t4.with_changes(pinned_gbs=20.0)
    assert Hardware("x", 16, 500, 4, 4, pageable_gbs=6.7).pageable_gbs == 6.7
