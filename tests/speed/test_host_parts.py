"""The host as people know it: CPU models, RAM kits, slots and drives become Host figures; undescribed parts span."""

from __future__ import annotations

import json

import pytest

from moe_model.errors import MoeModelError, app_words
from moe_model.resources import data_path
from moe_model.speed.hardware import preset
from moe_model.speed.host import DRIVES, Host
from moe_model.speed.host_parts import (
    HOST_BOX,
    PART_INPUTS,
    cpu_named,
    cpus,
    described,
    drive_named,
    drives,
    form_statements,
    parse_ram_kit,
    parse_slot,
    stated_fields,
    unknown_parts,
)


def test_every_table_row_cites_its_source_and_the_drive_classes_are_the_hosts():
    table = json.loads(data_path("host_parts.json").read_text())
    assert all(row["source"] for row in table["cpus"]) and all(d.source for d in drives().values())
    assert set(drives()) == set(DRIVES)


@pytest.mark.parametrize(
    ("typed", "name"),
    [("7950x", "AMD Ryzen 9 7950X"), ("Ryzen 7 5800X3D", "AMD Ryzen 7 5800X3D"), ("i7-13700K", "Intel Core i7-13700K")],
)
def test_a_cpu_is_found_by_its_model_number(typed, name):
    assert cpu_named(typed).name == name


def test_an_unknown_cpu_is_one_line_with_the_nearest_and_how_to_give_figures():
    with pytest.raises(MoeModelError, match="nearest.*--threads") as err:
        cpu_named("Ryzen 7 7700XT")
    app = app_words(err.value)  # the app's words name its box, not a flag
    assert "'CPU threads (-t)' under 'edit this machine'" in app and "--" not in app and "\n" not in app


def test_a_ram_kit_gives_ram_channels_and_speed():
    kit = parse_ram_kit("2x32 GB DDR5-6000")
    assert (kit.ram_gib, kit.modules, kit.ddr, kit.mts) == (64, 2, "ddr5", 6000)
    assert parse_ram_kit("4 x 16GB DDR4 3200").ram_gib == 64
    with pytest.raises(MoeModelError, match="as on the box"):
        parse_ram_kit("lots of fast RAM")


def test_slots_and_drives_as_typed():
    assert parse_slot("PCIe 4.0 x4") == (4, 4) and parse_slot("gen3 x16") == (3, 16)
    assert parse_slot("Thunderbolt 4") == (3, 4) and parse_slot("OCuLink") == (4, 4)
    assert drive_named("NVMe Gen4") == "nvme4" and drive_named("Samsung SATA SSD") == "sata"
    with pytest.raises(MoeModelError, match="NVMe Gen3"):
        drive_named("a big disk")


def test_described_parts_set_the_figures_and_count_as_stated():
    hw = described(preset("3060"), "Ryzen 7 7700X", "2x32 GB DDR5-6000", "PCIe 4.0 x4", "gen5")
    host = hw.host
    assert (host.threads, host.vnni, host.ram_gib, host.mem_mts, host.slot_gen, host.slot_lanes) == (
        8, True, 64, 6000, 4, 4,
    )  # fmt: skip
    assert host.drive == "nvme5" and hw.pcie_label == "PCIe 4.0 x4"
    assert unknown_parts(hw) == ()


def test_every_undescribed_part_spans_the_tables_slowest_and_fastest_choice():
    parts = {p.part: p for p in unknown_parts(preset("3060").with_changes(host=Host()))}
    assert set(parts) == {"host: RAM kit", "host: CPU", "host: slot", "host: drive"}
    cpu = parts["host: CPU"]
    rate = [h.threads * h.ghz * (1 if h.vnni else 0.5) for h in (cpu.slow, cpu.fast)]
    table = [c.p_cores * c.all_core_ghz * (1 if c.vnni else 0.5) for c in cpus()]
    assert rate == [min(table), max(table)]
    assert parts["host: RAM kit"].slow.bandwidth_gbs < parts["host: RAM kit"].fast.bandwidth_gbs


def test_a_known_cpu_bounds_an_unknown_kit_by_the_memory_it_takes():
    ddr4_only = described(preset("3060").with_changes(host=Host()), cpu_model="Ryzen 9 5950X")
    kit = next(p for p in unknown_parts(ddr4_only) if p.part == "host: RAM kit")
    assert kit.fast.mem_mts == 3600  # no DDR5 kit on an AM4 CPU


def test_a_measured_link_leaves_the_slot_out_of_the_range():
    assert "host: slot" not in {p.part for p in unknown_parts(preset("H200"))}


def test_a_ram_size_states_the_size_but_no_kit_so_the_ram_kit_stays_a_source():
    """Issue 37: `--ram-gib 32` (the 3060 preset's own figure) removed the RAM kit's source and narrowed the range
    (29.4-105.7 to 30.9-96.4); a size says nothing of the kit's speed."""
    plain = preset("3060")
    sized = plain.with_changes(ram_gib=plain.ram_gib)
    assert "ram_gib" in stated_fields(sized) and "ram_gib" not in stated_fields(plain)
    assert [p.part for p in unknown_parts(sized)] == [p.part for p in unknown_parts(plain)]
    assert "host: RAM kit" in {p.part for p in unknown_parts(sized)}
    kit = described(plain, ram_kit="2x16 GB DDR5-6000")  # a kit states its speed: then it is no source
    assert "host: RAM kit" not in {p.part for p in unknown_parts(kit)}


def test_the_apps_boxes_state_what_the_cli_flags_state():
    """The app's RAM box states its figure as `--ram-gib` does (it sits beside the RAM verdict it prices); another
    box states a figure only where the user changed it, as a flag given."""
    plain = preset("3060")
    shown = {"ram_gib": plain.ram_gib, "threads": plain.cpu_threads, "vram_gib": plain.vram_gib}
    untouched = form_statements(shown, dict(shown))
    assert untouched == {"ram_gib": plain.ram_gib}
    app, cli = plain.with_changes(**untouched), plain.with_changes(ram_gib=plain.ram_gib)  # --ram-gib 32
    assert app == cli and stated_fields(app) == stated_fields(cli)
    edited = form_statements(shown, shown | {"threads": 12})
    assert edited == {"ram_gib": plain.ram_gib, "threads": 12}
    assert stated_fields(plain.with_changes(**edited)) == stated_fields(plain.with_changes(ram_gib=32.0, threads=12))


def test_each_part_is_declared_once_for_the_cli_flag_the_apps_box_and_the_ranges_words():
    """The flag and the box come from PART_INPUTS: the range says the flag on the command line, the box in the app."""
    from moe_model.cli.main import build_parser

    typed = [arg for part in PART_INPUTS.values() for arg in (part.flag, part.examples[0])]
    args = build_parser().parse_args(["predict", "--model", "m.gguf", "--hardware", "t4", *typed])
    assert [getattr(args, key) for key in ("cpu", "ram_kit", "slot", "drive")] == typed[1::2]
    said = {u.part: u for u in unknown_parts(preset("RTX 3060 12GB"))}
    ram = said["host: RAM kit"]
    assert ram.narrowed_by == "your RAM kit, e.g. '2x32 GB DDR5-6000' (--ram-kit)"
    assert (
        ram.app_narrowed_by
        == f"your RAM kit, e.g. '2x32 GB DDR5-6000': the 'RAM kit' box under '{HOST_BOX}' in the sidebar"
    )
    assert PART_INPUTS["ram_kit"].box == "RAM kit (e.g. 2x32 GB DDR5-6000)"  # the sidebar's box
    assert said["host: drive"].narrowed_by == "your drive, e.g. 'NVMe Gen4', or a measured --disk-gbs"
