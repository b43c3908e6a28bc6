"""The CPU expert path by quantization: a factor per ggml type, a model's from its expert bytes."""

from __future__ import annotations

import pytest

from moe_model.fits.calibration import default_time_model
from moe_model.readers.model_spec import load_model
from moe_model.resources import data_path
from moe_model.speed.cpu_quant import BYTES_ONLY, expert_quant_factor, quant_factor, reference_type
from moe_model.speed.hardware import preset
from moe_model.speed.rates import cpu_expert_gbs

PARAMS = default_time_model().params


def test_the_reference_type_has_factor_one_and_an_unlisted_type_is_bytes_only():
    assert quant_factor(reference_type()).factor == 1.0
    assert quant_factor("no_such_type").factor == 1.0 and quant_factor("no_such_type").source == BYTES_ONLY


def test_iq3_xxs_prices_slower_than_q4_k_per_byte():
    assert quant_factor("iq3_xxs").factor < quant_factor("q4_K").factor


def test_every_factor_cites_a_source():
    for name in ("q4_K", "iq3_xxs", "iq2_xxs"):
        assert quant_factor(name).source and quant_factor(name).source != BYTES_ONLY


def test_a_models_factor_weighs_its_types_by_bytes_and_the_cpu_rate_follows_it():
    iq3 = load_model(data_path("models", "Qwen3.8-Flash-Next-IQ3_XXS.gguf"))
    factor = expert_quant_factor(iq3)
    types = {t.type_name for layer in iq3.layers for t in layer.experts}
    lo = min(quant_factor(t).factor for t in types)
    hi = max(quant_factor(t).factor for t in types)
    assert lo <= factor <= hi and factor < 1.0
    hw = preset("rtx 3090")
    assert cpu_expert_gbs(hw, PARAMS, False, iq3) == pytest.approx(factor * cpu_expert_gbs(hw, PARAMS, False))
