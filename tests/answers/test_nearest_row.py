"""The measured row beside a prediction: same family, same kind of placement, the nearest card, cited."""

from dataclasses import replace

from moe_model.answers.nearest_row import (
    CACHE,
    CPU_MOE,
    family_of,
    measured_rows,
    nearest_row,
    scenario_kind,
    size_b,
)
from moe_model.llama.slot_plan import Placement
from moe_model.speed.hardware import PRESETS
from moe_model.speed.scenario import Scenario


def test_families_are_the_names_first_word_and_a_word_after_it():
    assert family_of("Qwen3-235B-A22B") == family_of("Qwen3-30B-A3B") == "qwen3"
    assert family_of("Qwen3.6-35B-A3B-UD-Q4_K_M.gguf") == "qwen3.6"
    assert family_of("gpt-oss-20b") == "gpt-oss"
    assert family_of("Qwen3.8-Flash-Next-IQ3_XXS.gguf") == "qwen3.8-flash"


def test_every_row_is_cited_measured_and_of_a_known_card():
    rows = measured_rows()
    assert len(rows) > 40
    assert all(r.decode_tps > 0 and r.source and r.where and r.gpu_bw_gbs > 0 for r in rows)
    assert not any(r.engine.startswith("other") for r in rows)


def test_the_t4_cache_row_is_nearest_the_t4_at_its_budget():
    row = nearest_row("Qwen3-30B-A3B", Scenario(budget_mib=10_000), PRESETS["Tesla T4"])
    assert (row.where, row.decode_tps, row.kind) == ("reference table row t4-cpumoe-10000", 43.2, CACHE)
    assert "measured 43.2 t/s" in row.sentence("Qwen3-30B-A3B")


def test_the_kind_of_placement_must_match():
    no_cache = Scenario(budget_mib=0, placement=Placement(cpu_moe=True))
    assert scenario_kind(no_cache) == CPU_MOE
    row = nearest_row("Qwen3-30B-A3B", no_cache, PRESETS["Tesla T4"])
    assert row.kind == CPU_MOE and row.decode_tps == 9.6


def test_the_nearest_card_wins_within_a_family():
    sc = Scenario(budget_mib=8_000)
    fast, slow = PRESETS["RTX 5070 Ti"], PRESETS["RTX 4060 Ti 16GB"]
    assert "5070 Ti" in nearest_row("Qwen3.6-35B-A3B", sc, fast).card
    assert "4060 Ti" in nearest_row("Qwen3.6-35B-A3B", sc, slow).card


def test_sizes_are_read_from_names_and_a_far_larger_model_gets_no_row():
    assert (size_b("Qwen3-235B-A22B"), size_b("Qwen3.6-35B-A3B-Q8_0.gguf"), size_b("gpt-oss-20b")) == (235, 35, 20)
    assert size_b("Qwen3.8-Flash-Next-IQ3_XXS.gguf") is None
    assert nearest_row("Qwen3-235B-A22B", Scenario(budget_mib=16_000), PRESETS["RTX 4090"]) is None


def test_another_model_of_the_family_is_said_and_no_family_gives_none():
    row = nearest_row("Qwen3-32B-A3B", Scenario(budget_mib=16_000), PRESETS["RTX 4090"])
    assert row.model == "Qwen3-30B-A3B" and "another model of its family" in row.sentence("Qwen3-32B-A3B")
    assert row.as_dict("Qwen3-32B-A3B")["same_model"] is False
    assert nearest_row("gpt-oss-20b", replace(Scenario(), budget_mib=4_000), PRESETS["RTX 4090"]) is None
