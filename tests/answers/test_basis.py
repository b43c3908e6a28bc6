"""Every number says how it is known: measured, replayed, calibrated or modelled, from where its inputs came."""

from __future__ import annotations

import pytest

from moe_model.answers.basis import (
    CALIBRATED,
    GIVEN,
    LOGS,
    MEASURED,
    MODELLED,
    REPLAYED,
    SYNTHETIC,
    TRACE,
    hit_rate_basis,
    prediction_basis,
)
from moe_model.speed.hardware import preset
from moe_model.speed.scenario import Scenario

LRU, CLASS_LRU = Scenario(build=11549), Scenario(build=12569)


@pytest.mark.parametrize(
    ("routing", "sc", "word"),
    [
        (TRACE, LRU, REPLAYED),
        (TRACE, CLASS_LRU, MODELLED),  # your routing, but a modelled policy: not exact
        (GIVEN, CLASS_LRU, MEASURED),
        (LOGS, LRU, CALIBRATED),
        (SYNTHETIC, LRU, MODELLED),
    ],
)
def test_the_hit_rate_is_replayed_only_for_a_trace_through_an_exact_policy(routing, sc, word):
    assert hit_rate_basis(routing, sc)[0] == word


def test_a_preset_machine_is_modelled_with_its_left_out_error_and_a_calibrated_one_says_so():
    hw = preset("RTX 3060 12GB")
    plain = prediction_basis(SYNTHETIC, LRU, hw, rel_error=0.22, prefill_rel_error=0.19)
    assert (plain.decode, plain.prompt) == (MODELLED, MODELLED)
    assert "±22 %" in plain.said("decode_tps") and "±19 %" in plain.said("prefill_tps")
    logs = prediction_basis(SYNTHETIC, LRU, hw, machine_calibrated=True, rel_error=0.08)
    assert logs.decode == CALIBRATED and "your machine's logs" in logs.said("decode_tps")
    out = logs.as_dict()
    assert set(out) == {"hit_rate", "decode_tps", "prefill_tps", "why"} and set(out["why"]) == set(out) - {"why"}
    assert all(w in logs.line for w in ("hit rate modelled", "decode calibrated", "prompt modelled"))


def test_an_unknown_routing_is_refused():
    with pytest.raises(ValueError):
        hit_rate_basis("guessed", LRU)


def test_the_line_draws_each_word_as_the_page_asks_and_the_command_line_keeps_plain_words():
    basis = prediction_basis(SYNTHETIC, LRU, preset("RTX 3060 12GB"), rel_error=0.21)
    badged = basis.tagged_line(lambda word: f":orange-badge[{word}]")
    assert badged.count(":orange-badge[modelled] (") == 3 and badged.startswith("How each number is known: hit rate ")
    assert basis.line == basis.tagged_line() and "decode modelled (the time model, ±21 %" in basis.line
