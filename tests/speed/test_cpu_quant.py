"""The CPU expert path by quantization: a factor per ggml type, a model's from its expert bytes."""

from __future__ import annotations

import json

import pytest

from moe_model.fits.calibration import default_time_model
from moe_model.readers.model_spec import load_model
from moe_model.resources import data_path
from moe_model.speed.cpu_quant import (
    BYTES_ONLY,
    RATES_JSON,
    cpu_layer_ms,
    expert_quant_factor,
    quant_factor,
    reference_type,
)
from moe_model.speed.hardware import preset
from moe_model.speed.rates import cpu_expert_gbs

PARAMS = default_time_model().params


def test_the_reference_type_has_factor_one_and_an_unlisted_type_is_bytes_only():
    assert quant_factor(reference_type()).factor == 1.0
    assert quant_factor("no_such_type").factor == 1.0 and quant_factor("no_such_type").source == BYTES_ONLY


def _measured_gbs(qtype: str, threads: int) -> float:
    rates = json.loads(data_path(RATES_JSON).read_text())
    (row,) = [r for r in rates["rows"] if r["type"] == qtype and r["threads"] == threads]
    return row["expert_only_gbs"]


@pytest.mark.parametrize("threads", [2, 4, 8, 16])
def test_iq3_xxs_prices_slower_than_q4_k_per_byte_as_measured(threads):
    """run11's llama-bench on one shape: a byte of IQ3_XXS experts takes longer than one of Q4_K, by the measured
    ratio, and the CPU rate of an IQ3_XXS model follows it."""
    measured = _measured_gbs("IQ3_XXS", threads) / _measured_gbs("Q4_K", threads)
    factor = quant_factor("iq3_xxs", threads)
    assert factor.factor == pytest.approx(measured) and factor.factor < 1.0 and "run11" in factor.source


def test_between_measured_thread_counts_the_factor_lies_between_theirs():
    at4, at8 = quant_factor("q8_0", 4).factor, quant_factor("q8_0", 8).factor
    assert min(at4, at8) <= quant_factor("q8_0", 6).factor <= max(at4, at8)
    assert quant_factor("q8_0", 64).factor == quant_factor("q8_0", 16).factor  # the nearest outside them


def test_every_measured_type_cites_the_run():
    for name in ("q4_K", "q6_K", "q8_0", "mxfp4", "iq2_xxs", "iq3_xxs", "iq4_xs"):
        assert "run11" in quant_factor(name).source


def test_a_models_factor_is_the_byte_weighted_harmonic_mean_and_the_cpu_rate_follows_it():
    mixed = load_model(data_path("models", "Qwen3.8-Flash-Next-R9700.gguf"))  # q3_K, q4_K and q6_K experts
    hw = preset("rtx 3090")
    threads = hw.host.threads
    by_type: dict[str, int] = {}
    for layer in mixed.layers:
        for t in layer.experts:
            by_type[t.type_name] = by_type.get(t.type_name, 0) + t.expert_bytes
    assert len(by_type) == 3
    seconds = sum(b / quant_factor(name, threads).factor for name, b in by_type.items())
    factor = expert_quant_factor(mixed, threads)
    assert factor == pytest.approx(sum(by_type.values()) / seconds)
    assert cpu_expert_gbs(hw, PARAMS, False, mixed) == pytest.approx(factor * cpu_expert_gbs(hw, PARAMS, False))


def test_a_layers_cpu_only_fixed_cost_is_the_measured_anchor_over_its_layers():
    rates = json.loads(data_path(RATES_JSON).read_text())
    for threads, ms in rates["fixed_ms"].items():
        assert cpu_layer_ms(int(threads)) == pytest.approx(ms / rates["model"]["n_layer"])
