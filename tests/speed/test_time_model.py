"""The time model: physical terms, ranges and verdicts; no speed where a setting does not start or fit."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from conftest import GT_HEADER, MODELS

from moe_model.fits.calibration import default_time_model
from moe_model.llama.slot_plan import Placement
from moe_model.readers.model_spec import load_model
from moe_model.resources import data_path
from moe_model.routing.synthetic import prompt_knobs, window_distinct
from moe_model.speed.cpu_quant import expert_quant_factor
from moe_model.speed.hardware import preset
from moe_model.speed.range_inputs import RangeInputs
from moe_model.speed.rates import TimeParams, cpu_expert_gbs, host_copy_gbs, upload_gbs
from moe_model.speed.scenario import Scenario, resolve
from moe_model.speed.time_model import cold_fills, decode_terms, predict, prefill_terms, verdict
from moe_model.speed.traffic import from_hit_rate, independent_distinct

CPU_MOE = Placement.parse("cpu-moe")


def test_49_mib_refuses_to_start_and_50_starts(qwen30b):
    params = default_time_model().params
    assert not predict(qwen30b, preset("t4"), params, Scenario(CPU_MOE, 49)).starts
    assert predict(qwen30b, preset("t4"), params, Scenario(CPU_MOE, 50)).starts


def test_at_budget_0_and_100_percent_it_is_bytes_over_bandwidth(qwen30b):
    """The CPU rate is in q4_K-equivalent bytes: the model's expert types move it by their measured factor."""
    hw = preset("t4").with_changes(cpu_expert_gbs=20.0)
    cpu_gbs = 20.0 * expert_quant_factor(qwen30b, hw.host.threads)
    bare = TimeParams(
        gpu_eff=1.0, token_ms=0, sample_ns=0, layer_us=0, pageable_copy_us=0, sync_us_cuda=0, split_us_cuda=0
    )
    experts = sum(layer.slot_bytes * qwen30b.n_expert_used for layer in qwen30b.layers)
    dense = sum(layer.dense_bytes for layer in qwen30b.layers) + qwen30b.other_bytes - qwen30b.input_bytes
    off = Scenario(CPU_MOE, 0, depth=0)  # no context: no attention term
    layout = resolve(qwen30b, hw, off)
    terms = decode_terms(qwen30b, hw, bare, off, layout, from_hit_rate(qwen30b, layout, off, 0.0))
    assert sum(terms.values()) == pytest.approx((dense / hw.gpu_bw_gbs + experts / cpu_gbs) / 1e6)
    full = Scenario(CPU_MOE, 16746, depth=0)
    layout = resolve(qwen30b, hw, full)
    terms = decode_terms(qwen30b, hw, bare, full, layout, from_hit_rate(qwen30b, layout, full, 1.0))
    assert sum(terms.values()) == pytest.approx((dense + experts) / hw.gpu_bw_gbs / 1e6)


def test_pinned_uploads_run_at_the_link_rate_and_pageable_ones_at_the_hosts_copy_rate_capped_by_the_link():
    hw, params = preset("rtx 4090"), TimeParams()
    assert upload_gbs(hw, params, pinned=True) == pytest.approx(hw.line_gbs * 0.85)
    assert upload_gbs(hw, params, pinned=True) <= hw.line_gbs
    desktop = min(params.copy_gbs_client, hw.host.bandwidth_gbs * params.copy_bw_share)
    assert upload_gbs(hw, params, pinned=False) == pytest.approx(desktop) and desktop < hw.line_gbs * 0.85
    egpu = preset("eGPU RTX 4090, PCIe 3.0 x4")  # the host copies faster than the x4 link carries
    assert upload_gbs(egpu, params, pinned=False) == pytest.approx(egpu.line_gbs * 0.85) and egpu.line_gbs < desktop
    assert upload_gbs(hw.with_changes(pageable_gbs=6.7), params, pinned=False) == 6.7  # measured replaces derived
    in_vm = hw.with_changes(vm=True)
    assert host_copy_gbs(in_vm, params) == pytest.approx(host_copy_gbs(hw, params) * params.vm_copy_factor)


def test_a_measured_one_core_copy_and_the_links_dma_run_in_series():
    hw, params = preset("h200"), TimeParams()
    measured = hw.with_changes(copy_gbs=9.5)
    link = upload_gbs(hw, params, pinned=True)
    assert 1 / upload_gbs(measured, params, pinned=False) == pytest.approx(1 / 9.5 + 1 / link)
    assert upload_gbs(measured.with_changes(pageable_gbs=6.7), params, pinned=False) == 6.7


@pytest.mark.parametrize("run", ["run12", "run12/run12b"])
def test_run12s_pageable_slice_uploads_take_the_memcpy_and_the_pinned_dma_in_series(run):
    """run12's two hosts (sample_data/groundtruth/run12, upload12.txt): CUDA's pageable upload of a 953,600-byte
    mmap'd slice took one core's memcpy of it plus its pinned DMA (not the slower of the two), and 4-40 us more."""
    us = {}
    for line in data_path("groundtruth", run, "upload12.txt").read_text().splitlines():
        name, *pairs = line.split()
        fields = dict(p.split("=") for p in pairs)
        if fields.get("rep", "1") == "1" and fields.get("per_sync", "15") == "15" and "us_per_copy" in fields:
            us[name] = float(fields["us_per_copy"])
    extra = us["upload_mmap"] - (us["memcpy_mmap"] + us["upload_pinned"])
    assert 4 < extra < 40


def test_a_host_with_twice_the_copy_bandwidth_uploads_mmapd_experts_faster_and_nothing_else_changes(qwen30b):
    params = TimeParams()
    slow = preset("rtx 4090").with_changes(copy_gbs=5.0)
    fast = slow.with_changes(copy_gbs=10.0)
    for load_mode in ("mmap", "none"):
        sc = Scenario(CPU_MOE, 8000, prompt_tokens=2048, load_mode=load_mode)
        terms = {}
        for name, hw in (("slow", slow), ("fast", fast)):
            layout = resolve(qwen30b, hw, sc)
            traffic = from_hit_rate(qwen30b, layout, sc, 0.8)
            terms[name] = (
                decode_terms(qwen30b, hw, params, sc, layout, traffic),
                prefill_terms(qwen30b, hw, params, sc, layout),
            )
        for slow_terms, fast_terms in zip(terms["slow"], terms["fast"], strict=True):
            changed = {k for k in slow_terms if slow_terms[k] != pytest.approx(fast_terms[k])}
            assert changed == ({"upload"} if load_mode == "mmap" else set()), (load_mode, changed)
            if load_mode == "mmap":
                assert fast_terms["upload"] < slow_terms["upload"]
    assert cpu_expert_gbs(slow, params, pinned=False) == cpu_expert_gbs(fast, params, pinned=False)


def test_the_cpu_path_reads_at_its_familys_share_of_the_bandwidth_or_what_its_threads_multiply():
    params = TimeParams()
    desktop = preset("rtx 4090")  # 96 GB/s, 8 threads at 4.5 GHz
    threads = desktop.cpu_threads * desktop.cpu_ghz * params.thread_gbs_per_ghz
    expected = min(desktop.cpu_bw_gbs * params.cpu_bw_eff_client, threads)
    assert cpu_expert_gbs(desktop, params, pinned=False) == pytest.approx(expected)
    server = desktop.with_changes(cpu_family="server", cpu_threads=64)  # bandwidth-bound with many threads
    assert cpu_expert_gbs(server, params, pinned=False) == pytest.approx(desktop.cpu_bw_gbs * params.cpu_bw_eff_server)
    assert cpu_expert_gbs(desktop, params, pinned=True) == pytest.approx(expected * params.pinned_cpu_factor)


def test_decode_reads_the_kv_cache_to_the_depth_on_the_gpu_or_the_host(qwen30b):
    hw, params = preset("rtx 4090"), TimeParams()

    def attention(**kw) -> float:
        sc = Scenario(CPU_MOE, 0, n_ctx=131072, **kw)
        layout = resolve(qwen30b, hw, sc)
        return decode_terms(qwen30b, hw, params, sc, layout, from_hit_rate(qwen30b, layout, sc, 0.0))["attention"]

    at_8k, at_64k = attention(depth=8192), attention(depth=65536)
    assert at_64k == pytest.approx(8 * at_8k) and attention(depth=0) == 0
    kv = qwen30b.kv_layers * qwen30b.n_head_kv * (qwen30b.head_dim_k + qwen30b.head_dim_v) * 2 * 8192  # f16 K and V
    assert at_8k == pytest.approx(kv / (hw.gpu_bw_gbs * 1e9 * params.gpu_eff) * 1e3)
    assert attention(depth=8192, flash_attn="off") > at_8k  # the scores are written and read too
    assert attention(depth=8192, cache_type_k="q8_0", cache_type_v="q8_0") == pytest.approx(at_8k * 34 / 64)
    assert attention(depth=8192, no_kv_offload=True) > 3 * at_8k  # attended from host memory at the CPU rate


def test_a_depth_beyond_the_context_and_an_unknown_flash_attention_mode_are_refused():
    from moe_model.errors import MoeModelError

    with pytest.raises(MoeModelError, match="does not fit the context"):
        Scenario(CPU_MOE, 0, n_ctx=4096, depth=5000)
    with pytest.raises(MoeModelError, match="-fa must be one of"):
        Scenario(CPU_MOE, 0, flash_attn="maybe")
    assert Scenario(prompt_tokens=1000).context_depth == 1000 and Scenario(depth=7).context_depth == 7


def test_prompt_speed_follows_the_ubatch_the_budget_and_the_load_mode(qwen30b):
    hw, params = preset("rtx 4090"), TimeParams()

    def prefill(budget: int = 0, **kw) -> float:
        return predict(qwen30b, hw, params, Scenario(CPU_MOE, budget, n_ctx=16384, **kw), hit_rate=0.9).prefill_tps

    base = prefill(prompt_tokens=6000)
    assert prefill(prompt_tokens=6000, n_ubatch=2048) > 2 * base  # each ubatch uploads every used expert once
    assert prefill(10000, prompt_tokens=6000) > base  # cached experts are copied on the GPU, not uploaded
    assert prefill(prompt_tokens=6000, load_mode="none") > base  # pinned uploads run at the link's rate
    short = Scenario(CPU_MOE, 0, prompt_tokens=20)  # under GGML_OP_OFFLOAD_MIN_BATCH: host experts on the CPU
    terms = prefill_terms(qwen30b, hw, params, short, resolve(qwen30b, hw, short))
    assert terms["experts_cpu"] > 0 and terms["upload"] == 0


def test_the_first_request_pays_for_filling_the_empty_pool_and_its_prompt_finds_nothing_cached(qwen30b):
    hw, params = preset("rtx 4090"), TimeParams()
    sc = Scenario(CPU_MOE, 16746, prompt_tokens=2048, n_predict=256)
    cached = predict(qwen30b, hw, params, sc, hit_rate=1.0)
    first = cached.first_request
    # 256 tokens touch every expert of every layer: all 6,144 slots fill, but those the start-up filled: BOS, EOS and
    # the seq_rm probe's row (the default build makes it), the last layer only the outputs (EOS, the probe's)
    n, k = qwen30b.n_expert, qwen30b.n_expert_used
    start_up = (qwen30b.n_layer - 1) * independent_distinct(n, k, 3) + independent_distinct(n, k, 2)
    assert cached.layout.plan.n_slots_total == 6144 and first.cold_fills == pytest.approx(6144 - start_up)
    per_fill = np.mean([layer.slot_bytes for layer in qwen30b.layers]) / (upload_gbs(hw, params, False) * 1e9)
    per_fill += 3 * params.pageable_copy_us / 1e6  # gate, up and down: a copy each
    extra_s = 256 / first.decode_tps - 256 / cached.decode_tps
    assert extra_s == pytest.approx(first.cold_fills * per_fill * params.fill_factor)
    assert first.prefill_tps < cached.prefill_tps / 2  # a warm pool copies every expert on the GPU
    none = predict(qwen30b, hw, params, Scenario(CPU_MOE, 0, prompt_tokens=2048))
    assert none.first_request.cold_fills == 0 and none.first_request.decode_tps == pytest.approx(none.decode_tps)
    assert none.first_request.ttft_s == pytest.approx(none.ttft_s + params.first_prompt_ms / 1e3)


def test_the_first_requests_range_holds_it_and_a_shorter_first_request_is_slower(qwen30b):
    hw, params = preset("rtx 4090"), TimeParams(fill_factor=0.9)
    first = {
        n: predict(qwen30b, hw, params, Scenario(CPU_MOE, 16746, n_predict=n), hit_rate=1.0).first_request
        for n in (64, 256)
    }
    assert first[64].n_predict == 64 and first[64].decode_tps < first[256].decode_tps  # the same fills, fewer tokens
    for one in first.values():
        low, high = one.decode_tps_range
        assert low < one.decode_tps < high and "64" in first[64].decode_words()
    # locality's fewer fills (window_distinct) bound the fast end; independent tokens' the slow one
    sc = Scenario(CPU_MOE, 16746, n_predict=64)
    layout = predict(qwen30b, hw, params, sc, hit_rate=1.0).layout
    assert cold_fills(qwen30b, sc, layout, locality=True) < cold_fills(qwen30b, sc, layout)


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
    cached = predict(qwen30b, hw, params, Scenario(CPU_MOE, 10000), hit_rate=0.95, ranges=RangeInputs(0.2, 5))
    lo, hi = cached.decode_tps_range
    assert lo < cached.decode_tps * 0.8 and hi > cached.decode_tps * 1.2
    without = predict(qwen30b, hw, params, Scenario(CPU_MOE, 0), ranges=RangeInputs(0.2))
    thrash = predict(qwen30b, hw, params, Scenario(CPU_MOE, 50), hit_rate=0.0, ranges=RangeInputs(0.2))
    assert verdict(cached, without) == "helps" and verdict(thrash, without) in ("hurts", "too close to call")
    wide = predict(qwen30b, hw, params, Scenario(CPU_MOE, 10000), hit_rate=0.95, ranges=RangeInputs(5.0))
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
        "attention",
        "experts_gpu",
        "upload",
        "sync",
        "experts_cpu",
        "split",
        "draft",
        "disk",
    }
    assert pred.vram.kv_mib == 56.0 and pred.as_dict()["vram"]["moe_cache"] == pytest.approx(402.75)
    assert pred.as_dict()["decode_tps_range"][0] <= pred.decode_tps


def test_a_prompt_ubatch_uploads_the_distinct_experts_its_routing_uses_not_every_expert(qwen30b):
    hw, params = preset("rtx 4090"), TimeParams(pageable_copy_us=0.0)
    sc = Scenario(CPU_MOE, 0, prompt_tokens=512, n_ctx=4096)
    terms = prefill_terms(qwen30b, hw, params, sc, resolve(qwen30b, hw, sc))
    used = window_distinct(qwen30b.n_expert, qwen30b.n_expert_used, prompt_knobs(qwen30b), 512)
    assert used < 0.8 * qwen30b.n_expert  # Qwen3-30B's preset: ~91 of 128 experts per 512-token ubatch
    uploaded = sum(used * layer.slot_bytes for layer in qwen30b.layers if layer.has_experts)
    assert terms["upload"] == pytest.approx(uploaded / (upload_gbs(hw, params, pinned=False) * 1e9) * 1e3)


def test_prompt_matmuls_take_the_slower_of_the_cards_tensor_rate_and_reading_its_weights_once(gt_model):
    params = TimeParams()
    gpu = Placement.parse("gpu")
    sc = Scenario(gpu, 0, prompt_tokens=512, n_ctx=4096)

    def compute(hw) -> float:
        return prefill_terms(gt_model, hw, params, sc, resolve(gt_model, hw, sc))["gpu_compute"]

    slow = preset("rtx 4090").with_changes(gpu_tflops=10.0)
    flops = 512 * gt_model.active_params * 2 / (10e12 * params.mm_eff) * 1e3
    assert compute(slow) == pytest.approx(flops)  # compute-bound: twice the TFLOPS, half the time
    assert compute(slow.with_changes(gpu_tflops=20.0)) == pytest.approx(flops / 2)
    fast = slow.with_changes(gpu_tflops=10000.0)  # so fast that reading the weights once is the bound
    used = window_distinct(gt_model.n_expert, gt_model.n_expert_used, prompt_knobs(gt_model), 512)
    weights = gt_model.dense_bytes_total - gt_model.input_bytes
    weights += sum(used * layer.slot_bytes for layer in gt_model.layers if layer.has_experts)
    assert compute(fast) == pytest.approx(weights / (fast.gpu_bw_gbs * 1e9 * params.gpu_eff) * 1e3)


def test_a_prompt_ubatch_pays_the_per_expert_matmul_cost_for_every_used_expert_multiplied_on_the_gpu(gt_model):
    hw, params = preset("H200"), TimeParams(batch_expert_us=2.0)
    gpu = Scenario(Placement.parse("gpu"), 0, prompt_tokens=512, n_ctx=4096)
    terms = prefill_terms(gt_model, hw, params, gpu, resolve(gt_model, hw, gpu))
    used = window_distinct(gt_model.n_expert, gt_model.n_expert_used, prompt_knobs(gt_model), 512)
    tensors = sum(len(layer.experts) for layer in gt_model.layers if layer.has_experts)
    assert terms["expert_matmuls"] == pytest.approx(used * tensors * 2.0 / 1e3)
    short = Scenario(CPU_MOE, 0, prompt_tokens=20, n_ctx=4096)  # host layers stay on the CPU: no GPU expert matmuls
    assert prefill_terms(gt_model, hw, params, short, resolve(gt_model, hw, short))["expert_matmuls"] == 0


def test_the_cpu_share_prices_its_part_on_the_cpu_and_never_uploads_an_expert_only_the_cpu_computed(qwen30b):
    hw, params = preset("t4").with_changes(cpu_expert_gbs=0.5), TimeParams()  # a slow CPU: its work shows
    sc = Scenario(CPU_MOE, 10000, depth=0)
    layout = resolve(qwen30b, hw, sc)
    plain = from_hit_rate(qwen30b, layout, sc, 0.5)
    misses = np.where(plain.cached, plain.distinct - plain.hits, 0.0)
    none, cpu_only, cut = (
        decode_terms(qwen30b, hw, params, sc, layout, t)
        for t in (plain, replace(plain, cpu=misses), replace(plain, cpu=0 * misses, cpu_cut=misses))
    )
    assert none["upload"] > 0 and cpu_only["upload"] == 0  # the CPU's experts are never uploaded
    assert cpu_only["experts_cpu"] > none["experts_cpu"] and cpu_only["experts_gpu"] < none["experts_gpu"]
    assert cut["upload"] == none["upload"] and cut["experts_gpu"] == none["experts_gpu"]  # uploaded and on the GPU
    assert cut["experts_cpu"] > none["experts_cpu"]  # and read by the CPU path for its selections too
