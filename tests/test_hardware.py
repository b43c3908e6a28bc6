"""Hardware presets: names as users type them, link rates never above the line rate, every preset cited."""

from __future__ import annotations

import pytest

from moe_model.errors import MoeModelError
from moe_model.speed.hardware import PRESETS, Hardware, preset


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
    ],
)
def test_names_resolve_as_users_type_them(typed, name):
    assert preset(typed).name == name


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
