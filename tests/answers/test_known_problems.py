"""Known problems of a setting, from the build and the model: each case and a setting without it."""

from __future__ import annotations

from moe_model.answers.known_problems import known_problems
from moe_model.llama.slot_plan import Placement
from moe_model.speed.hardware import preset
from moe_model.speed.scenario import Scenario, resolve

T4 = preset("t4")


def problems(model, **fields):
    sc = Scenario(**fields)
    return known_problems(model, sc, resolve(model, T4, sc))


def test_a_plain_mainline_setting_has_no_known_problem(qwen30b):
    assert problems(qwen30b, budget_mib=10000) == []
    assert problems(qwen30b, budget_mib=0, placement=Placement.parse("gpu")) == []  # no cache asked for


def test_a_cache_with_every_layer_on_the_gpu_cannot_engage(qwen30b):
    (line,) = problems(qwen30b, budget_mib=4000, placement=Placement.parse("gpu"))
    assert line.startswith("the cache cannot engage: every layer keeps its experts on the GPU")
    assert "--cpu-moe or --n-cpu-moe K" in line


def test_a_budget_below_one_tokens_experts_refuses_to_start_or_leaves_a_group_uncached(qwen30b, gt_model):
    (line,) = problems(qwen30b, budget_mib=49)
    assert line.startswith("--moe-cache-mib 49 is below one token's experts (8 slots per group)")
    assert line.endswith("50 MiB is the smallest budget that starts")
    (partial,) = problems(gt_model, budget_mib=15)  # the ground truth's minany run: the q6_K group warned
    assert partial.startswith("6 layers get no cache")
    assert problems(gt_model, budget_mib=19) == []  # minall: both groups cached


def test_before_b12569_a_quantized_kv_cache_with_the_cache_on_may_abort(qwen30b):
    (line,) = problems(qwen30b, budget_mib=10000, build=12500, cache_type_k="q8_0", cache_type_v="q8_0")
    assert "may abort at start" in line and "#32584" in line and "use b12569+ or an f16 KV cache" in line
    assert f"{qwen30b.n_tensors / qwen30b.n_layer:.1f} tensors per layer" in line
    fixed = dict(budget_mib=10000, cache_type_k="q8_0", cache_type_v="q8_0")
    assert problems(qwen30b, **fixed, build=12569) == []  # #32636 reserves the nodes
    assert problems(qwen30b, budget_mib=10000, build=12500) == []  # f16 KV
    assert problems(qwen30b, **(fixed | {"budget_mib": 0}), build=12500) == []  # no cache, no extra nodes


def test_fit_with_ngl_is_told_that_llama_cpp_aborts_the_fit_and_loads_what_ngl_says(qwen30b):
    """common/fit.cpp: -ngl given, the fit is aborted (run9 ran --fit without -ngl for this reason): the layout is
    -ngl's, every expert on the GPU, and a 12 GB card cannot hold it; without -ngl the fit moves layers to the host."""
    hw = preset("3060")
    pinned = Scenario(Placement(cpu_moe=False, fit=True, n_gpu_layers=99), 0)
    layout = resolve(qwen30b, hw, pinned)
    assert not layout.placement.fit and not layout.host_layers and not layout.vram.fits
    (line,) = known_problems(qwen30b, pinned, layout)
    assert line.startswith("--fit does nothing with -ngl 99") and "n_gpu_layers already set by user" in line
    free = Scenario(Placement(cpu_moe=False, fit=True), 0)
    assert resolve(qwen30b, hw, free).host_layers and not known_problems(qwen30b, free, resolve(qwen30b, hw, free))
