"""The headline's four figures: each value, its range from the source every page uses, and its basis word."""

from dataclasses import replace

import pytest

from moe_model.answers.basis import LOGS, MODELLED, SYNTHETIC, TRACE, prediction_basis
from moe_model.answers.headline import headline_figures, prompt_tps_text
from moe_model.fits.calibration import default_time_model, prompt_speed
from moe_model.pricing.curve import curve
from moe_model.readers.model_spec import load_model
from moe_model.speed.hardware import PRESETS
from moe_model.speed.scenario import Scenario

T4 = PRESETS["Tesla T4"]


@pytest.fixture(scope="module")
def t4():
    """Qwen3-30B on a T4 at 10,000 MiB with a given hit rate (no replay: quick)."""
    model = load_model("sample_data/models/Qwen3-30B-A3B-Q4_K_M.gguf")
    tm = default_time_model()
    sc = Scenario(budget_mib=10_000)
    return curve(model, T4, tm.params, sc, [10_000], hit_rate=0.9, ranges=tm.ranges()).at(10_000).prediction


def test_four_figures_with_the_predictions_values_and_ranges(t4):
    tm = default_time_model()
    basis = prediction_basis(SYNTHETIC, t4.scenario, T4, rel_error=tm.rel_error, prefill_rel_error=0.2)
    decode, prompt, ttft, hit = headline_figures(t4, basis, 0.2, spread_points=5.3)
    lo, hi = t4.decode_tps_range
    ps = prompt_speed(t4, 0.2)
    assert (decode.value, decode.range) == (f"{t4.decode_tps:.1f}", f"range {lo:.1f}–{hi:.1f}")
    assert prompt.value == f"{ps.prefill_tps:,.0f}" and prompt.range.startswith(f"range {ps.prefill_tps_range[0]:,.0f}")
    assert ttft.value == f"{ps.ttft_s:,.2f}" and ttft.range == (
        f"range {ps.ttft_s_range[0]:,.2f}–{ps.ttft_s_range[1]:,.2f}"
    )
    assert (hit.value, hit.range) == ("90.0 %", "±5.3 points (routing)")  # no policy band: the routing's spread
    assert {f.basis for f in (decode, prompt, ttft, hit)} == {MODELLED} and all(f.why for f in (decode, hit))
    assert prompt.why.startswith(f"A prompt of {t4.scenario.prompt_tokens:,} tokens")


def test_no_prompt_range_without_a_left_out_error_and_no_hit_rate_range_for_a_replayed_trace(t4):
    basis = prediction_basis(TRACE, t4.scenario, T4)
    _, prompt, ttft, hit = headline_figures(t4, basis, 0.0, spread_points=0.0)
    assert prompt.range == ttft.range == hit.range == ""
    assert hit.basis == basis.hit_rate


def test_a_policy_band_is_the_hit_rates_range(t4):
    from moe_model.llama.simulate import PolicyBand

    band = PolicyBand(0.88, 0.93, "default", "other", 0.0, 0.0, 0.9)
    hit = headline_figures(replace(t4, policy_band=band), prediction_basis(LOGS, t4.scenario, T4), 0.0, 5.0)[3]
    assert hit.range == "readings 88.0–93.0 %"


def test_no_cache_shows_no_hit_rate_and_no_badge(t4):
    hit = headline_figures(replace(t4, hit_rate=None), prediction_basis(SYNTHETIC, t4.scenario, T4), 0.0)[3]
    assert (hit.value, hit.basis) == ("—", "")


def test_the_decode_card_names_a_total_over_streams_and_its_share(t4):
    four = replace(t4, scenario=replace(t4.scenario, concurrency=4))
    decode = headline_figures(four, prediction_basis(SYNTHETIC, four.scenario, T4), 0.0)[0]
    assert decode.label == "total decode t/s" and decode.why.startswith("Total over 4 streams (per stream ")


def test_a_slow_prompt_keeps_a_decimal():
    assert (prompt_tps_text(0.84), prompt_tps_text(1234.4)) == ("0.8", "1,234")
