"""The host around the GPU: its figures, which are stated and which assumed, and how a machine carries it."""

from __future__ import annotations

import pytest

from moe_model.errors import MoeModelError
from moe_model.speed.hardware import PRESETS, Hardware, preset
from moe_model.speed.host import Host


def test_bandwidth_is_channels_times_transfer_rate_unless_measured():
    assert Host(mem_channels=2, mem_mts=6000).bandwidth_gbs == pytest.approx(96.0)
    assert Host(mem_channels=8, mem_mts=3200).bandwidth_gbs == pytest.approx(204.8)
    assert Host(mem_channels=2, mem_mts=6000, mem_bw_gbs=71.5).bandwidth_gbs == 71.5


def test_every_figure_not_stated_is_an_assumption_and_an_edit_states_it():
    h200 = preset("h200").host
    assert {"ram_gib", "threads", "vm"} <= set(h200.stated) and "mem_channels" in h200.assumed
    edited = h200.with_changes(mem_channels=12)
    assert "mem_channels" in edited.stated and "mem_channels" not in edited.assumed
    for hw in PRESETS.values():
        assert hw.host.source and set(hw.host.assumed) | set(hw.host.stated) >= {"ram_gib", "threads"}


def test_a_machine_edits_its_host_by_the_old_field_names_and_keeps_it_when_the_card_changes():
    hw = preset("rtx 4090").with_changes(ram_gib=128.0, cpu_threads=12, cpu_bw_gbs=80.0, vram_gib=20)
    assert (hw.host.ram_gib, hw.host.threads, hw.host.bandwidth_gbs, hw.vram_gib) == (128.0, 12, 80.0, 20)
    assert (hw.ram_gib, hw.cpu_threads, hw.cpu_bw_gbs) == (128.0, 12, 80.0)
    other_card = preset("rtx 5090").with_changes(host=hw.host)
    assert other_card.host == hw.host and other_card.gpu_bw_gbs == preset("rtx 5090").gpu_bw_gbs
    with pytest.raises(MoeModelError, match="unknown machine field"):
        hw.with_changes(turbo=True)


def test_the_link_is_the_slower_of_the_card_and_the_hosts_slot():
    egpu = preset("eGPU RTX 4090, PCIe 3.0 x4")
    assert (egpu.pcie_gen, egpu.pcie_lanes, egpu.pcie_label) == (4, 16, "PCIe 3.0 x4")
    assert egpu.line_gbs == pytest.approx(0.985 * 4)
    x8_card = preset("rtx 4060 ti").with_changes(host=Host(slot_gen=5, slot_lanes=16))
    assert x8_card.pcie_label == "PCIe 4.0 x8"  # a faster slot does not widen the card


def test_a_machine_round_trips_through_json_and_older_flat_files_still_load():
    hw = preset("t4").with_changes(copy_gbs=3.1)
    assert Hardware.from_dict(hw.as_dict()) == hw
    flat = {k: v for k, v in hw.as_dict().items() if k != "host"} | {"cpu_bw_gbs": 40.0, "ram_gib": 16.0}
    old = Hardware.from_dict(flat)
    assert old.cpu_bw_gbs == 40.0 and old.ram_gib == 16.0


@pytest.mark.parametrize(
    ("field", "value"), [("mem_channels", 0), ("ghz", 9.0), ("cpu_family", "mainframe"), ("slot_lanes", 3)]
)
def test_an_implausible_host_is_refused_naming_the_field(field, value):
    with pytest.raises(MoeModelError, match=f"implausible {field}"):
        Host(**{field: value})
