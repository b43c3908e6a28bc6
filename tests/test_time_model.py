"""The time model: physical terms, ranges and verdicts; no speed where a setting does not start or fit."""

from __future__ import annotations

import pytest
from conftest import GT_HEADER, MODELS

from moe_model.llama.slot_plan import Placement
from moe_model.readers.model_spec import load_model
from moe_model.speed.calibration import default_time_model
from moe_model.speed.hardware import preset
from moe_model.speed.scenario import Scenario, resolve
from moe_model.speed.time_model import TimeParams, decode_terms, predict, upload_gbs, verdict
from moe_model.speed.traffic import from_hit_rate

CPU_MOE = Placement.parse("cpu-moe")


def test_49_mib_refuses_to_start_and_50_starts(qwen30b):
    params = default_time_model().params
    assert not predict(qwen30b, preset("t4"), params, Scenario(CPU_MOE, 49)).starts
    assert predict(qwen30b, preset("t4"), params, Scenario(CPU_MOE, 50)).starts


def test_at_budget_0_and_100_percent_it_is_bytes_over_bandwidth(qwen30b):
    hw = preset("t4").with_changes(cpu_expert_gbs=20.0)
    bare = TimeParams(
        gpu_eff=1.0, token_ms=0, sample_ns=0, layer_us=0, pageable_copy_us=0, sync_us_cuda=0, split_us_cuda=0
    )
    experts = sum(layer.slot_bytes * qwen30b.n_expert_used for layer in qwen30b.layers)
    dense = sum(layer.dense_bytes for layer in qwen30b.layers) + qwen30b.other_bytes - qwen30b.input_bytes
    off = Scenario(CPU_MOE, 0)
    layout = resolve(qwen30b, hw, off)
    terms = decode_terms(qwen30b, hw, bare, off, layout, from_hit_rate(qwen30b, layout, off, 0.0))
    assert sum(terms.values()) == pytest.approx((dense / hw.gpu_bw_gbs + experts / 20.0) / 1e6)
    full = Scenario(CPU_MOE, 16746)
    layout = resolve(qwen30b, hw, full)
    terms = decode_terms(qwen30b, hw, bare, full, layout, from_hit_rate(qwen30b, layout, full, 1.0))
    assert sum(terms.values()) == pytest.approx((dense + experts) / hw.gpu_bw_gbs / 1e6)


def test_pinned_uploads_run_at_the_link_rate_and_pageable_ones_through_staging():
    hw, params = preset("rtx 4090"), TimeParams(staging_gbs=7.0)
    assert upload_gbs(hw, params, pinned=True) == pytest.approx(hw.line_gbs * 0.85)
    assert upload_gbs(hw, params, pinned=True) <= hw.line_gbs
    assert upload_gbs(hw, params, pinned=False) == pytest.approx(1 / (1 / (hw.line_gbs * 0.85) + 1 / 7.0))
    assert upload_gbs(hw.with_changes(pageable_gbs=6.7), params, pinned=False) == 6.7  # measured replaces derived


def test_a_fixed_cost_per_layer_does_not_cap_small_models():
    small = load_model(GT_HEADER)  # 14 layers, 1.6 GiB of experts, all cached on an H200
    pred = predict(small, preset("h200"), default_time_model().params, Scenario(CPU_MOE, 1614), hit_rate=1.0)
    assert pred.decode_tps > 300  # the old fixed 4.7 ms per token capped every model at 212 t/s


def test_concurrency_and_speculation_change_tokens_per_step():
    assert Scenario(concurrency=4).tokens_per_ubatch == 4
    spec = Scenario(draft_tokens=3, accept_rate=0.5)
    assert spec.tokens_per_ubatch == 4 and spec.decoded_per_ubatch == pytest.approx(1 + 0.5 + 0.25 + 0.125)


def test_the_range_spans_the_routing_spread_and_the_error_and_drives_the_verdict(qwen30b):
    hw, params = preset("t4"), default_time_model().params
    cached = predict(qwen30b, hw, params, Scenario(CPU_MOE, 10000), hit_rate=0.95, rel_error=0.2, spread_points=5)
    lo, hi = cached.decode_tps_range
    assert lo < cached.decode_tps * 0.8 and hi > cached.decode_tps * 1.2
    without = predict(qwen30b, hw, params, Scenario(CPU_MOE, 0), rel_error=0.2)
    thrash = predict(qwen30b, hw, params, Scenario(CPU_MOE, 50), hit_rate=0.0, rel_error=0.2)
    assert verdict(cached, without) == "helps" and verdict(thrash, without) in ("hurts", "too close to call")
    wide = predict(qwen30b, hw, params, Scenario(CPU_MOE, 10000), hit_rate=0.95, rel_error=5.0)
    assert verdict(wide, without) == "too close to call"


def test_a_setting_that_does_not_fit_vram_is_not_usable(qwen30b):
    pred = predict(qwen30b, preset("t4"), default_time_model().params, Scenario(Placement.parse("gpu"), 0))
    assert pred.starts and not pred.vram.fits and not pred.usable


def test_hybrid_attention_and_kv_types_shrink_the_kv_cache():
    from moe_model.speed.vram import kv_cache_mib

    model = load_model(MODELS / "Qwen3-30B-A3B-Q4_K_M.gguf")
    assert kv_cache_mib(model, 4096, "q8_0", "q8_0") == pytest.approx(kv_cache_mib(model, 4096) * 34 / 64)
    assert model.kv_layers == model.n_layer


def test_the_prediction_breakdown_names_every_term(gt_model):
    pred = predict(gt_model, preset("H200"), default_time_model().params, Scenario(CPU_MOE, 403), hit_rate=0.4)
    assert set(pred.breakdown_ms) == {
        "fixed",
        "sampling",
        "dense",
        "experts_gpu",
        "upload",
        "sync",
        "experts_cpu",
        "split",
        "draft",
    }
    assert pred.vram.kv_mib == 56.0 and pred.as_dict()["vram"]["moe_cache"] == pytest.approx(402.75)
    assert pred.as_dict()["decode_tps_range"][0] <= pred.decode_tps
