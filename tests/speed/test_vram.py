"""VRAM accounting: exact KV sizes, the largest budget that fits, and --fit's trade of layers for cache."""

from __future__ import annotations

import re

import pytest
from conftest import ROOT

from moe_model.llama.slot_plan import Placement
from moe_model.readers.model_spec import load_model
from moe_model.speed.hardware import preset
from moe_model.speed.scenario import Scenario, fit_layers, resolve
from moe_model.speed.vram import (
    CUDA_RESERVE_MIB,
    FIT_MARGIN_MIB,
    breakdown,
    fit_host_layers,
    kv_cache_mib,
    max_budget_mib,
)


def _flags(**scenario):
    """The memory flags of a scenario with these fields, the rest at their defaults."""
    return Scenario(**scenario).memory_flags


DEFAULTS = _flags()


def test_kv_cache_matches_the_logged_sizes(qwen30b, gt_model):
    assert kv_cache_mib(qwen30b, 4096) == 384.0  # 48 layers x 4 KV heads x 128 x 2 (K, V) x f16
    assert kv_cache_mib(gt_model, 4096) == 56.0  # groundtruth logs: "KV buffer size = 56.00 MiB"


def test_the_largest_budget_fits_and_one_more_gib_does_not(qwen30b):
    hw = preset("Tesla T4")
    budget = max_budget_mib(qwen30b, hw, Placement(), DEFAULTS)
    assert breakdown(qwen30b, hw, Placement(), budget, DEFAULTS).fits
    assert not breakdown(qwen30b, hw, Placement(), budget + 4096, DEFAULTS).fits


def test_fit_moves_more_layers_to_ram_to_make_room_for_a_cache(qwen30b):
    hw = preset("Tesla T4")
    without, with_cache = fit_host_layers(qwen30b, hw, DEFAULTS), fit_host_layers(qwen30b, hw, DEFAULTS, 1671)
    assert 0 < without < with_cache < 48
    moved_mib = (with_cache - without) * qwen30b.layers[0].expert_bytes_total / 2**20
    assert 1671 <= moved_mib < 1671 + 2 * 348.75  # whole layers: at least the cache, at most a layer more


FIT_TRIALS = ROOT / "sample_data" / "groundtruth" / "fit-trials"


def _llama_fit_trials(log: str) -> dict[int, tuple[int, bool, float]]:
    """Per emulated free MiB: host expert layers llama.cpp's --fit chose, whether one is split, MiB used."""
    trials = {}
    for section in (FIT_TRIALS / log).read_text().split("== F=")[1:]:
        free = int(section.split("\n", 1)[0])
        pattern = r"set ngl_per_device\[0\]\.\(n_layer, n_part(?:, overflow_type)?\)=\(\d+, (\d+)(?:, (\w+))?\)"
        n_part, kind = re.findall(pattern, section)[-1]
        used = float(re.findall(r"overflowing\),\s+(\d+) MiB used", section)[-1])
        split = kind in ("UP", "GATE")  # the first overflowing layer keeps some of its experts on the GPU
        trials[free] = (int(n_part) - 1 - split, split, used)  # n_part - 1: the range ends at the output layer
    return trials


@pytest.mark.parametrize(
    ("log", "header", "sizes"),
    [
        ("fit-params-run3.log", "groundtruth/run3/model-header.gguf", [2500, 3500, 4500, 6000, 8000, 9500]),
        ("fit-params-qwen3-30b.log", "models/Qwen3-30B-A3B-Q4_K_M.gguf", [14400, 14992, 15060]),
    ],
)
def test_fit_host_layers_agrees_with_llama_cpps_own_fit(log, header, sizes):
    model = load_model(ROOT / "sample_data" / header)
    trials = _llama_fit_trials(log)
    assert sorted(trials) == sizes
    for free_mib, (full, split, used_mib) in trials.items():
        hw = preset("h200").with_changes(vram_gib=(free_mib + CUDA_RESERVE_MIB) / 1024)
        k = fit_host_layers(model, hw, _flags(n_ctx=4096))
        assert full <= k <= full + 1, (free_mib, k, full, split)  # whole layers: a split one counts as host or not
        if not split and k == full:  # the same placement: our estimate of its memory against llama.cpp's
            ours = breakdown(model, hw, Placement(cpu_moe=False, n_cpu_moe=k), 0, _flags(n_ctx=4096))
            assert ours.used_mib - ours.reserve_mib == pytest.approx(used_mib, abs=40), free_mib


def test_fit_on_a_t4_moves_the_experts_of_12_layers_as_llama_cpp_does(qwen30b):
    full, split, _ = _llama_fit_trials("fit-params-qwen3-30b.log")[14992]  # a T4's free memory, as logged
    assert (full, split) == (12, False)
    t4 = preset("t4").with_changes(vram_gib=(14992 + CUDA_RESERVE_MIB) / 1024)
    assert fit_host_layers(qwen30b, t4, _flags(n_ctx=4096)) == 12


def test_without_flash_attention_the_compute_buffer_holds_the_scores_and_no_kv_offload_moves_the_kv(gt_model):
    run3 = load_model(ROOT / "sample_data" / "groundtruth" / "run3" / "model-header.gguf")
    hw, placement = preset("h200"), Placement()
    fa_off = breakdown(run3, hw, placement, 8376, _flags(n_ctx=16384, flash_attn="off"))
    # groundtruth run5 (-fa off, -c 16384, -ub 512): "CUDA0 compute buffer size = 1090.01 MiB"
    assert fa_off.compute_mib == pytest.approx(1090.01, rel=0.05)
    assert breakdown(run3, hw, placement, 8376, _flags(n_ctx=16384)).compute_mib < fa_off.compute_mib / 2
    host_kv = breakdown(run3, hw, placement, 8376, _flags(n_ctx=16384, no_kv_offload=True))
    assert host_kv.kv_mib == 0 and fa_off.kv_mib == 768.0  # run5: "CUDA0 KV buffer size = 768.00 MiB"


def _fit_target_logged() -> int:
    """The free-memory target llama.cpp's --fit keeps, as its own log prints it (fit-trials, no -fitt given)."""
    text = (FIT_TRIALS / "fit-params-qwen3-30b.log").read_text()
    return int(re.search(r"will leave \d+ >= (\d+) MiB of free device memory", text).group(1))


def test_the_margin_is_what_llama_cpp_keeps_free_and_less_is_too_close_to_call(qwen30b):
    assert FIT_MARGIN_MIB == _fit_target_logged() == 1024
    hw = preset("Tesla T4")
    budget = max_budget_mib(qwen30b, hw, Placement(), DEFAULTS)
    at_margin = breakdown(qwen30b, hw, Placement(), budget, DEFAULTS)
    assert at_margin.fits and at_margin.free_mib >= 1024 > at_margin.free_mib - 8  # whole MiB of budget
    tight = breakdown(qwen30b, hw, Placement(), budget + 512, DEFAULTS)
    assert tight.tight and not tight.fits and 0 <= tight.free_mib < 1024
    assert tight.verdict.startswith("too close to call") and "1,024 MiB" in tight.verdict
    over = breakdown(qwen30b, hw, Placement(), budget + 4096, DEFAULTS)
    assert not over.fits and not over.tight and over.verdict.startswith("does not fit")


def test_a_configuration_that_ran_out_of_memory_in_the_field_is_not_predicted_to_fit():
    # RTX 3060 Ti 8 GB, Qwen3.6-35B-A3B UD-Q4_K_M, -ngl 99 --n-cpu-moe 33 --moe-cache-mib 2000: "OOM at load"
    # (moe_model/data/field-measurements.csv, minipc-egpu-llm); its context is not stated
    model, hw = load_model(ROOT / "sample_data" / "models" / "Qwen3.6-35B-A3B-UD-Q4_K_M.gguf"), preset("3060 ti")
    for n_ctx in (4096, 40960):  # llama-server's default, and the model's own (-c 0)
        vram = breakdown(model, hw, Placement(cpu_moe=False, n_cpu_moe=33), 2000, _flags(n_ctx=n_ctx))
        assert 0 < vram.free_mib < FIT_MARGIN_MIB and not vram.fits and vram.tight, (n_ctx, vram.free_mib)


@pytest.mark.parametrize("n_ubatch", [512, 4096, 8192])
def test_fit_moves_as_many_layers_as_the_ubatchs_compute_buffer_needs_and_then_fits(qwen30b, n_ubatch):
    """RTX 3060, -c 32768: a larger -ub's compute buffer (logits of the ubatch, the copies of host experts past
    GGML_OP_OFFLOAD_MIN_BATCH) makes --fit move more layers, never a layout it then calls too big."""
    hw, sc = preset("3060"), Scenario(placement=Placement.parse("fit"), n_ctx=32768, n_ubatch=n_ubatch)
    layout = resolve(qwen30b, hw, sc)
    k = layout.placement.n_cpu_moe
    assert k == fit_layers(qwen30b, hw, sc, sc.placement) and layout.fits, (n_ubatch, k, layout.vram.free_mib)
    assert layout.vram.compute_mib == breakdown(qwen30b, hw, layout.placement, 0, sc.memory_flags).compute_mib
    one_fewer = Placement(cpu_moe=False, n_cpu_moe=k - 1)
    assert not breakdown(qwen30b, hw, one_fewer, 0, sc.memory_flags).fits  # the fewest layers that fit


def test_fit_moves_more_layers_at_a_larger_ubatch_and_past_the_offload_minimum_batch(qwen30b):
    hw = preset("3060")
    k = {ub: fit_host_layers(qwen30b, hw, _flags(n_ctx=32768, n_ubatch=ub)) for ub in (512, 4096, 8192)}
    assert k[512] < k[4096] < k[8192] < qwen30b.n_layer
    copies = _flags(n_ctx=32768, n_ubatch=128)  # past the default minimum: the host experts' copies in the buffer
    on_cpu = _flags(n_ctx=32768, n_ubatch=128, offload_min_batch=129)  # below it: no copies, a smaller buffer
    assert fit_host_layers(qwen30b, hw, copies) == fit_host_layers(qwen30b, hw, on_cpu) + 1


def test_each_gpu_must_hold_the_layers_the_tensor_split_gives_it(qwen30b):
    """Two 12 GB cards hold Qwen3-30B on the GPUs split evenly; -ts 9,1 gives the first one ~90 % of the layers,
    more than it holds, though the two together would."""
    hw = preset("3060")
    even = breakdown(qwen30b, hw, Placement(cpu_moe=False, n_gpus=2, tensor_split=(1.0, 1.0)), 0, DEFAULTS)
    lopsided = breakdown(qwen30b, hw, Placement(cpu_moe=False, n_gpus=2, tensor_split=(9.0, 1.0)), 0, DEFAULTS)
    assert even.fits and len(even.gpu_used_mib) == 2 and sum(even.gpu_used_mib) == pytest.approx(even.used_mib)
    assert lopsided.used_mib == pytest.approx(even.used_mib) and lopsided.free_mib >= lopsided.margin_mib
    assert not lopsided.fits and not lopsided.tight and lopsided.over_mib > 0
    assert "over the fullest GPU's 12,288 MiB" in lopsided.verdict
    one = breakdown(qwen30b, hw, Placement(cpu_moe=True), 0, DEFAULTS)
    assert one.gpu_free_mib == (one.free_mib,) and one.over_mib == -one.free_mib  # one card: the totals


@pytest.mark.parametrize("gpu", ["Tesla T4", "RTX 3060", "RTX 4090"])
def test_fit_moves_the_fewest_layers_that_fit_as_a_scan_from_none_finds(qwen30b, gpu):
    mixtral = load_model(ROOT / "sample_data" / "models" / "Mixtral-8x7B-Q4_K_M.gguf")
    for model, n_ctx, budget in ((qwen30b, 4096, 0), (qwen30b, 65536, 2000), (mixtral, 32768, 0)):
        flags, hw = _flags(n_ctx=n_ctx), preset(gpu)
        fits = [
            breakdown(model, hw, Placement(cpu_moe=False, n_cpu_moe=k), budget, flags).fits
            for k in range(model.n_layer + 1)
        ]
        scanned = fits.index(True) if True in fits else model.n_layer
        assert fit_host_layers(model, hw, flags, budget) == scanned
