"""VRAM accounting: exact KV sizes, the largest budget that fits, and --fit's trade of layers for cache."""

from __future__ import annotations

from moe_model.hardware import preset
from moe_model.slot_plan import Placement
from moe_model.vram import breakdown, fit_host_layers, kv_cache_mib, max_budget_mib


def test_kv_cache_matches_the_logged_sizes(qwen30b, gt_model):
    assert kv_cache_mib(qwen30b, 4096) == 384.0  # 48 layers x 4 KV heads x 128 x 2 (K, V) x f16
    assert kv_cache_mib(gt_model, 4096) == 56.0  # groundtruth logs: "KV buffer size = 56.00 MiB"


def test_the_largest_budget_fits_and_one_more_gib_does_not(qwen30b):
    hw = preset("Tesla T4")
    budget = max_budget_mib(qwen30b, hw, Placement())
    assert breakdown(qwen30b, hw, Placement(), budget).fits
    assert not breakdown(qwen30b, hw, Placement(), budget + 4096).fits


def test_fit_moves_more_layers_to_ram_to_make_room_for_a_cache(qwen30b):
    hw = preset("Tesla T4")
    without, with_cache = fit_host_layers(qwen30b, hw, 0), fit_host_layers(qwen30b, hw, 1671)
    assert 0 < without < with_cache < 48
    moved_mib = (with_cache - without) * qwen30b.layers[0].expert_bytes_total / 2**20
    assert 1671 <= moved_mib < 1671 + 2 * 348.75  # whole layers: at least the cache, at most a layer more
