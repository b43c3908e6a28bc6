"""Usable, slow or unusable: the lines, the words, and the remedy named from the slowest part."""

from dataclasses import replace

import pytest

from moe_model.answers.usability import SLOW, UNUSABLE, USABLE, usability
from moe_model.fits.calibration import default_time_model
from moe_model.limits import SLOW_DECODE_TPS, UNUSABLE_DECODE_TPS, UNUSABLE_FIRST_TOKEN_S
from moe_model.pricing.curve import curve
from moe_model.readers.model_spec import load_model
from moe_model.speed.hardware import PRESETS
from moe_model.speed.scenario import Scenario

T4_30B = ("sample_data/models/Qwen3-30B-A3B-Q4_K_M.gguf", "Tesla T4", 10_000, None)
HDD_235B = ("sample_data/models/Qwen3-235B-A22B-Q4_K_M-00001-of-00003.gguf", "RTX 4090", 16_000, 64)


def _prediction(case):
    path, card, budget, ram_gib = case
    hw = PRESETS[card] if ram_gib is None else PRESETS[card].with_changes(ram_gib=ram_gib, drive="hdd")
    model = load_model(path)
    return (
        curve(model, hw, default_time_model().params, Scenario(budget_mib=budget), [budget], hit_rate=0.9)
        .at(budget)
        .prediction
    )


@pytest.fixture(scope="module")
def t4():
    return _prediction(T4_30B)


def test_t4_at_10000_mib_is_usable(t4):
    said = usability(t4)
    assert said.word == USABLE and said.remedy == "" and "usable" in said.sentence


def test_decode_below_the_line_is_unusable_and_names_the_largest_term(t4):
    slowed = replace(t4, decode_tps=UNUSABLE_DECODE_TPS / 2)
    said = usability(slowed)
    assert said.word == UNUSABLE
    assert f"{UNUSABLE_DECODE_TPS / 2:.1f} t/s decode is below" in said.sentence
    largest = max(t4.breakdown_ms, key=t4.breakdown_ms.get)
    assert largest == "upload" and "faster link" in said.remedy


def test_decode_between_the_lines_is_slow(t4):
    said = usability(replace(t4, decode_tps=(UNUSABLE_DECODE_TPS + SLOW_DECODE_TPS) / 2))
    assert said.word == SLOW and "What would help" in said.sentence


def test_a_long_first_token_alone_is_unusable_with_the_prompt_remedy(t4):
    compute_bound = {"gpu_compute": 10.0, "upload": 1.0}
    said = usability(replace(t4, ttft_s=2 * UNUSABLE_FIRST_TOKEN_S, prefill_breakdown_ms=compute_bound))
    assert said.word == UNUSABLE and "first token comes after 120 s" in said.sentence
    assert said.remedy == "a GPU with more compute, or shorter prompts"  # the prompt's largest term, not decode's


def test_experts_streaming_from_disk_name_the_ram_that_ends_it():
    p = _prediction(HDD_235B)
    said = usability(p)
    assert said.word == UNUSABLE
    assert f"{p.layout.ram.needed_gib} GiB of RAM" in said.remedy


def test_a_tag_closes_each_part_of_the_sentence_that_quotes_a_figure(t4):
    said = usability(replace(t4, decode_tps=UNUSABLE_DECODE_TPS / 2))
    tagged = said.tagged("[modelled]")
    assert tagged.count("[modelled].") == 2 and tagged.replace(" [modelled]", "") == said.sentence
    assert usability(t4).tagged("[modelled]") == usability(t4).sentence  # usable: no figure quoted


def test_decode_is_judged_per_stream_and_says_the_total(t4):
    four = replace(t4, scenario=replace(t4.scenario, concurrency=4), decode_tps=4 * UNUSABLE_DECODE_TPS * 0.9)
    said = usability(four)
    assert said.word == UNUSABLE  # 7.2 t/s in all is 1.8 t/s for each of the 4 people waiting
    assert "1.8 t/s decode per stream (7.2 t/s total over 4 streams) is below 2 t/s" in said.sentence
