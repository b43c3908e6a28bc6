"""Hardware presets: names as users type them, link rates never above the line rate, every preset cited."""

from __future__ import annotations

import pytest

from moe_model.errors import LinkRateError, MoeModelError, UnknownGpuError
from moe_model.speed.hardware import (
    ALIASES,
    GPU_TABLE,
    MACHINE_SETTINGS,
    PRESETS,
    Hardware,
    _normal,
    nearest_presets,
    preset,
    preset_match,
    unknown_gpu,
)


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


def test_an_ambiguous_name_lists_the_candidates():
    with pytest.raises(MoeModelError, match="ambiguous: .*RTX 5070 Ti.*RTX 5090|ambiguous: .*RTX 5090.*RTX 5070"):
        preset("rtx 50")


def test_an_unknown_name_suggests_the_nearest_presets_and_how_to_describe_the_card():
    with pytest.raises(UnknownGpuError) as miss:
        preset("rtx 4075")
    assert str(miss.value).startswith("unknown GPU 'rtx 4075'; nearest: RTX 4070 12GB, ")
    assert str(miss.value).endswith(
        "For another card, start from the nearest preset and give your card's datasheet figures: "
        "--hardware 'RTX 4070 12GB' --vram-gib N --gpu-bw-gbs N --pcie-gen N --pcie-lanes N"
    )
    assert nearest_presets("rx 7950 xtx")[0] == "Radeon RX 7900 XTX"


def test_the_app_words_the_same_advice_with_its_own_boxes():
    labels = [MACHINE_SETTINGS[k].widget.label for k in ("vram_gib", "gpu_bw_gbs", "pcie_gen", "pcie_lanes")]
    text = unknown_gpu("rtx 4075", app=True)
    assert "pick RTX 4070 12GB under GPU and set 'VRAM GiB', 'GPU memory GB/s'" in text
    assert all(repr(label) in text for label in labels) and text.endswith("under 'edit this machine'")


@pytest.mark.parametrize(
    ("typed", "desktop"),
    [("4090 laptop", "RTX 4090"), ("rtx 4060 mobile", "RTX 4060"), ("3080 laptop gpu", "RTX 3080")],
)
def test_a_laptop_part_is_said_to_be_no_preset_and_starts_from_the_desktop_card_of_its_name(typed, desktop):
    """Issue 32: gpus.csv leaves laptop parts out (no memory speed on NVIDIA's laptop pages); a laptop name is told
    so in one line, with the desktop card of that name and the flags for its own figures, not unrelated cards."""
    with pytest.raises(UnknownGpuError) as miss:
        preset(typed)
    line = str(miss.value)
    assert line.startswith(f"{typed!r} is a laptop part, and laptop GPUs are not presets") and "\n" not in line
    assert f"the desktop card of that name, the {desktop}," in line and "nearest:" not in line
    assert line.endswith(f"--hardware {desktop!r} --vram-gib N --gpu-bw-gbs N")
    labels = [MACHINE_SETTINGS[k].widget.label for k in ("vram_gib", "gpu_bw_gbs")]
    app = unknown_gpu(typed, app=True)
    assert app.endswith(f"pick {desktop} under GPU and set {labels[0]!r} and {labels[1]!r} under 'edit this machine'")


def test_a_laptop_part_without_a_desktop_card_of_its_name_starts_from_the_card_without_its_variant():
    line = unknown_gpu("rtx 3050 ti laptop")  # no desktop RTX 3050 Ti is listed
    assert "start from the nearest desktop card, the RTX 3050," in line
    assert line.endswith("--hardware 'RTX 3050' --vram-gib N --gpu-bw-gbs N")
    assert unknown_gpu("laptop").startswith("unknown GPU 'laptop'; nearest: ")  # no card named: the usual advice


@pytest.mark.parametrize(
    ("typed", "name", "vram_gib", "gpu_bw_gbs"),
    [
        ("4070 ti super", "RTX 4070 Ti SUPER", 16, 672),
        ("4070 super", "RTX 4070 SUPER", 12, 504),
        ("4080 super", "RTX 4080 SUPER", 16, 736),
        ("rx 7900 xtx", "Radeon RX 7900 XTX", 24, 960),
        ("5060 ti 16gb", "RTX 5060 Ti 16GB", 16, 448),
        ("3080", "RTX 3080", 10, 760),
        ("3090 ti", "RTX 3090 Ti", 24, 1008),
        ("a100", "A100 40GB", 40, 1555),
        ("l4", "L4", 24, 300),
        ("rx 9070 xt", "Radeon RX 9070 XT", 16, 640),
        ("arc a770", "Intel Arc A770 16GB", 16, 560),
    ],
)
def test_the_cards_people_own_resolve_to_a_preset_citing_its_spec_page(typed, name, vram_gib, gpu_bw_gbs):
    hw = preset(typed)
    assert (hw.name, hw.vram_gib, hw.gpu_bw_gbs) == (name, vram_gib, gpu_bw_gbs)
    assert "specifications" in hw.source or "datasheet" in hw.source


def test_the_nearest_name_wins_among_cards_and_the_first_memory_size_among_one_cards():
    assert preset_match("rx 7900 xt").hardware.name == "Radeon RX 7900 XT"  # "xt" only starts XTX
    three = preset_match("3080")
    assert (three.hardware.name, three.passed_over) == ("RTX 3080", ("RTX 3080 12GB", "RTX 3080 Ti"))
    assert preset_match("5060 ti").passed_over == ("RTX 5060 Ti 8GB",)
    assert preset("rtx 4060 ti").name == "RTX 4060 Ti 16GB" and preset("h100").name == "H100 PCIe"
    with pytest.raises(MoeModelError, match="'rx 7900' is ambiguous: Radeon RX 7900 GRE, Radeon RX 7900 XT, "):
        preset("rx 7900")


def test_the_gpu_table_has_one_row_a_name_and_every_row_cites_its_source():
    rows = [line for line in GPU_TABLE.read_text().splitlines() if not line.startswith("#")][1:]  # less the header
    spellings = [_normal(k) for k in PRESETS] + list(ALIASES)
    assert len(PRESETS) == len(rows) > 80 and len(set(spellings)) == len(spellings)
    assert all(ALIASES[a] in PRESETS for a in ALIASES)
    stated = [hw for hw in PRESETS.values() if "not stated" not in hw.source]
    assert all(hw.gpu_tflops != Hardware("x", 1, 1, 4, 16).gpu_tflops for hw in stated)


def test_every_preset_cites_a_source_and_a_backend():
    for hw in PRESETS.values():
        assert hw.source and hw.source != "user" and hw.backend in ("cuda", "hip", "vulkan")


def test_one_measured_link_rate_sets_both_copies_and_above_the_line_rate_is_refused_in_one_line():
    t4 = preset("t4")
    assert (t4.with_link_gbs(12.0).pinned_gbs, t4.with_link_gbs(12.0).pageable_gbs) == (12.0, 12.0)
    with pytest.raises(LinkRateError, match="20 GB/s is above the PCIe 3.0 x16 line rate of 15.8 GB/s"):
        t4.with_link_gbs(20.0)


def test_a_measured_link_rate_above_the_pcie_line_rate_is_refused():
    t4 = preset("t4")
    assert t4.pinned_rate_gbs == pytest.approx(0.985 * 16 * 0.85) and t4.pinned_rate_gbs < t4.line_gbs
    with pytest.raises(MoeModelError, match="line rate of 15.8 GB/s"):
        t4.with_changes(pinned_gbs=20.0)
    assert Hardware("x", 16, 500, 4, 4, pageable_gbs=6.7).pageable_gbs == 6.7


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"pageable_gbs": -7.0}, r"implausible pageable_gbs -7 \(it must be in 0\.001\.\.15\.76\)$"),
        ({"pinned_gbs": 0.0}, r"implausible pinned_gbs 0 \(it must be in 0\.001\.\.15\.76\)$"),
        ({"cpu_expert_gbs": 1e-300}, r"implausible cpu_expert_gbs 1e-300 \(it must be in 0\.001\.\.2000\)$"),
        ({"sync_us": -5.0}, r"implausible sync_us -5 \(it must be in 0\.\.100000\)$"),
        ({"token_ms": 1e300}, r"implausible token_ms 1e\+300 \(it must be in 0\.\.1000\)$"),
        ({"gpu_bw_gbs": 0.0}, r"implausible gpu_bw_gbs 0 \(it must be in 0\.001\.\.20000\)$"),
    ],
)
def test_a_value_out_of_range_is_refused_naming_its_bound_and_the_link_only_where_it_applies(changes, message):
    """Issue 39: a negative pageable rate was taken (its range check was overwritten by the line-rate one), a rate
    of 1e-300 overflowed, and every refusal ended with "link rates cannot exceed...", whatever the field."""
    with pytest.raises(MoeModelError, match=message):
        preset("t4").with_changes(**changes)
    with pytest.raises(MoeModelError, match=r"implausible pageable_gbs 20 .*: link rates cannot exceed the PCIe 3\.0"):
        preset("t4").with_changes(pageable_gbs=20.0)  # positive control: the link's note where a link rate is above
