"""One machine everywhere (ui/machine.py): a card moved into the user's host, and which edits a new base drops."""

from __future__ import annotations

import pytest

from moe_model.errors import LinkRateError
from moe_model.speed.hardware import MACHINE_SETTINGS, PRESETS, line_gbs, preset
from ui.machine import CARD_EDITS, HOST_EDITS, edits_to_forget, in_host, link_rates, with_edits


def _host_figures(hw):
    return hw.cpu_bw_gbs, hw.cpu_threads, hw.cpu_ghz


def test_a_card_in_another_host_takes_the_hosts_ram_memory_cpu_and_measured_terms():
    host = preset("H200").with_changes(ram_gib=192.0, cpu_expert_gbs=40.0, token_ms=1.5)
    card = in_host(preset("RTX 4090"), host)
    assert (card.vram_gib, card.gpu_bw_gbs, card.gpu_tflops) == (24, 1008, 330)  # the card's own
    assert (card.ram_gib, card.cpu_bw_gbs, card.cpu_threads, card.cpu_ghz) == (192.0, *_host_figures(host))
    assert (card.cpu_expert_gbs, card.token_ms) == (40.0, 1.5)
    assert card.pcie_gen == 4  # a PCIe 4.0 card in a 5.0 slot runs at 4.0
    assert card.pinned_gbs is None  # the H200's measured 55 GB/s does not fit a 4.0 x16 line: derived again


def test_a_card_in_an_older_slot_runs_at_the_slots_generation_and_keeps_a_rate_it_carries():
    host = preset("Tesla T4").with_changes(pinned_gbs=12.0)  # PCIe 3.0 x16: 15.8 GB/s line
    card = in_host(preset("RTX 5090"), host)
    assert card.pcie_label == "PCIe 3.0 x16" and card.pinned_gbs == 12.0


def test_a_calibrated_link_rate_is_dropped_where_an_edited_link_cannot_carry_it():
    calibrated = preset("H200")  # pinned 55 GB/s measured on PCIe 5.0 x16
    assert link_rates(calibrated, 15.76) == {"pinned_gbs": None, "pageable_gbs": None}
    assert link_rates(calibrated, 63.0)["pinned_gbs"] == 55.0


def test_a_new_gpu_drops_the_cards_edits_and_keeps_a_host_the_user_edited():
    t4 = preset("Tesla T4")
    untouched = {"ram": t4.ram_gib, "cpu": t4.cpu_bw_gbs, "threads": t4.cpu_threads, "gen": 3, "link": 0.0}
    assert set(edits_to_forget(untouched, t4, False)) == set(HOST_EDITS) | set(CARD_EDITS)
    edited = untouched | {"ram": 128.0}
    assert set(edits_to_forget(edited, t4, False)) == set(CARD_EDITS)
    assert set(edits_to_forget(edited, t4, True)) == set(HOST_EDITS) | set(CARD_EDITS)  # a calibrated machine's own


EGPUS = [name for name in PRESETS if PRESETS[name].host.slot_gen]  # presets whose enclosure limits the link


@pytest.mark.parametrize("name", EGPUS)
def test_an_egpu_takes_any_slot_edit_after_a_typed_link_and_its_rate_stays_within_the_enclosures_line(name):
    """Issue 31: on the eGPU preset, editing the PCIe generation after typing a link raised "implausible
    pinned_gbs" (the line was the card's edit alone, not the edit in the enclosure's slot). Issue 37: a typed rate
    the edited line cannot carry is refused as the CLI refuses it (LinkRateError), not cut to the line."""
    hw = preset(name)
    assert EGPUS and hw.line_gbs < line_gbs(hw.pcie_gen, hw.pcie_lanes, preset("RTX 4090").host)  # a slower slot
    for link in (0.0, hw.line_gbs / 2, hw.line_gbs):  # none typed, one the line carries, the line itself
        for gen in MACHINE_SETTINGS["pcie_gen"].choices:
            for lanes in MACHINE_SETTINGS["pcie_lanes"].choices:
                if link > line_gbs(gen, lanes, hw.host):
                    with pytest.raises(LinkRateError, match="above the PCIe"):
                        with_edits(hw, link, pcie_gen=gen, pcie_lanes=lanes)
                    continue
                edited = with_edits(hw, link, pcie_gen=gen, pcie_lanes=lanes)
                assert edited.line_gbs == line_gbs(gen, lanes, hw.host)
                assert edited.pinned_gbs == (link or None), (gen, lanes, link)


def test_the_line_rate_is_the_slower_of_the_card_and_the_hosts_slot():
    egpu = preset("eGPU RTX 4090, PCIe 3.0 x4")
    assert line_gbs(5, 16, egpu.host) == line_gbs(3, 4, egpu.host) == egpu.line_gbs  # the enclosure's 3.0 x4
    assert line_gbs(3, 1, egpu.host) == egpu.line_gbs / 4  # fewer lanes than the slot: the card's
    assert line_gbs(4, 16, preset("RTX 4090").host) == preset("RTX 4090").line_gbs  # no slot limit: the card's


EGPU = "eGPU RTX 4090, PCIe 3.0 x4"


def test_an_egpu_in_the_users_host_keeps_its_enclosures_link_and_is_priced_as_that_card_on_that_link(qwen30b):
    """Issue 38: Shopping's eGPU row showed the host's PCIe 4.0 x16 and exactly the desktop 4090's numbers. In the
    user's host it keeps its enclosure's 3.0 x4 and is priced as the eGPU preset itself in a host of that RAM."""
    from moe_model.answers.recommend import recommend
    from moe_model.fits.calibration import default_time_model
    from moe_model.pricing.workloads import synthetic_workload
    from moe_model.speed.scenario import Scenario

    mine = preset("RTX 4080 16GB").with_changes(ram_gib=64.0)
    egpu, desktop = in_host(PRESETS[EGPU], mine), in_host(PRESETS["RTX 4090"], mine)
    assert (egpu.pcie_label, desktop.pcie_label) == ("PCIe 3.0 x4", "PCIe 4.0 x16")
    own = PRESETS[EGPU].with_changes(ram_gib=64.0)  # the eGPU as the sidebar's machine
    assert egpu.line_gbs == own.line_gbs == line_gbs(3, 4, own.host)
    work = synthetic_workload(qwen30b, Scenario(), n_tokens=400)
    params = default_time_model().params

    def decode(hw) -> list[tuple[str, float]]:
        options = recommend(qwen30b, hw, params, Scenario(), lambda sc: work, "m.gguf")
        return [(o.label, o.prediction.decode_tps) for o in options if o.usable]

    on_x4, on_x16 = decode(egpu), dict(decode(desktop))
    assert on_x4 == decode(own)  # the same card on the same link: the same prices, setting by setting
    slower = [label for label, tps in on_x4 if tps < on_x16[label]]
    assert slower and all(tps <= on_x16[label] for label, tps in on_x4)  # the x4 link uploads slower, never faster
