"""The slot plan must equal what llama.cpp b11549 computes and prints."""

from __future__ import annotations

import pytest
from conftest import GPT_OSS, GT_BUDGETS, MIXTRAL, SAMPLE, gt_log_lines

from moe_model.errors import MoeModelError
from moe_model.llama.slot_plan import (
    CPU,
    MIB,
    Placement,
    full_budget_mib,
    min_budget_mib,
    plan_cache,
    useful_budget_mib,
)
from moe_model.readers.model_spec import load_model


@pytest.mark.parametrize("case", sorted(GT_BUDGETS))
def test_plan_log_lines_equal_every_groundtruth_log(gt_model, case):
    logged = gt_log_lines(case, r"^[IWE] (impl: |llama_init_from_model: failed)")
    predicted = plan_cache(gt_model, GT_BUDGETS[case]).log_lines()
    assert predicted == logged


def test_groundtruth_14_mib_refuses_and_15_mib_drops_the_q6_group(gt_model):
    refused = plan_cache(gt_model, 14)
    assert not refused.starts and refused.error == "MoE cache is too small to hold the experts of one token"
    assert [g.n_slots for g in refused.groups] == [0, 0]
    partial = plan_cache(gt_model, 15)
    assert partial.starts and [(g.type_name, g.n_slots) for g in partial.groups] == [("q6_K", 0), ("q4_K", 8)]
    assert partial.warnings == ("MoE cache budget is too small for 6 layers, they are not cached",)


def test_groundtruth_min_and_full_budgets(gt_model):
    assert min_budget_mib(gt_model) == 15
    assert full_budget_mib(gt_model) == 1614
    below = plan_cache(gt_model, 1613)
    assert any(g.n_slots < g.max_slots for g in below.groups)


def test_qwen30b_has_two_24_layer_groups_of_16_35_gib(qwen30b):
    plan = plan_cache(qwen30b, 10000)
    assert [(g.type_name, g.n_layers) for g in plan.groups] == [("q6_K", 24), ("q4_K", 24)]
    assert round(qwen30b.expert_bytes_total / 2**30, 2) == 16.35
    assert plan.host_experts_mib == 16740.0
    assert [g.slot_bytes for g in plan.groups] == [3_059_712, 2_654_208]
    assert round(qwen30b.total_bytes / 1e9, 2) == 18.55  # the article's "18.6 GB" file


def test_qwen30b_10000_mib_gives_1834_slots_and_prints_9999_32(qwen30b):
    plan = plan_cache(qwen30b, 10000)
    assert [g.n_slots for g in plan.groups] == [1834, 1834]
    assert [f"{g.percent:.1f}" for g in plan.groups] == ["59.7", "59.7"]
    assert f"{plan.device_cache_mib:.2f}" == "9999.32"
    # the real CUDA buffer is 512 B larger than alloc(): row padding of the 768-wide down banks
    assert plan.device_cache_bytes - sum(g.alloc_bytes(g.n_slots) for g in plan.groups) == 512


def test_qwen30b_floor_50_starts_49_refuses_and_16746_caches_all(qwen30b):
    assert [g.n_slots for g in plan_cache(qwen30b, 50).groups] == [8, 8]
    refused = plan_cache(qwen30b, 49)
    assert not refused.starts and len(refused.warnings) == 2
    assert min_budget_mib(qwen30b) == 50
    assert full_budget_mib(qwen30b) == 16746
    assert [g.n_slots for g in plan_cache(qwen30b, 16746).groups] == [3072, 3072]
    assert [g.n_slots for g in plan_cache(qwen30b, 16745).groups] == [3071, 3071]


def test_a_budget_above_the_one_that_caches_every_expert_changes_nothing_and_is_capped_there(qwen30b):
    full, larger = plan_cache(qwen30b, 16746), plan_cache(qwen30b, 81920)
    assert [g.n_slots for g in larger.groups] == [g.n_slots for g in full.groups] == [3072, 3072]
    assert larger.device_cache_bytes == full.device_cache_bytes and larger.starts and not larger.warnings
    assert [useful_budget_mib(qwen30b, b) for b in (50, 16745, 16746, 81920)] == [50, 16745, 16746, 16746]
    one_layer = Placement(cpu_moe=False, n_cpu_moe=1)  # the cap is the placement's own: one layer's experts
    assert useful_budget_mib(qwen30b, 81920, one_layer) == full_budget_mib(qwen30b, one_layer) < 16746
    assert useful_budget_mib(qwen30b, 81920, Placement(cpu_moe=False)) == 81920  # nothing cacheable: nothing capped


def test_two_gpu_doc_example_gives_four_groups_of_916_slots(qwen30b):
    halves = tuple(0 if il < 24 else 1 for il in range(48))  # the doc's layer split 0-23 / 24-47
    plan = plan_cache(qwen30b, 10000, Placement(n_gpus=2, tensor_split=(1.0, 1.0), layer_devices=halves))
    assert [(g.device, g.n_layers, g.n_slots) for g in plan.groups] == [
        (0, 12, 916),
        (0, 12, 916),
        (1, 12, 916),
        (1, 12, 916),
    ]
    assert [d.host_bytes / MIB for d in plan.devices] == [8370.0, 8370.0]


@pytest.mark.parametrize("split", [(float("nan"), 1.0), (1.0, float("inf")), (-1.0, 1.0)])
def test_a_tensor_split_share_that_is_not_finite_and_non_negative_is_refused(split):
    assert set(Placement(n_gpus=2, tensor_split=(3.0, 1.0)).layer_device(48)) == {0, 1}  # positive control
    with pytest.raises(MoeModelError, match="tensor split needs 2 finite non-negative values"):
        Placement(n_gpus=2, tensor_split=split)


def test_tensor_split_assigns_layers_like_llama_cpp_upper_bound():
    devices = Placement(n_gpus=2, tensor_split=(1.0, 1.0)).layer_device(48)
    assert devices[:25] == [0] * 25 and devices[25:] == [1] * 23  # act_gpu_layers = 49 includes the output layer


def test_ngl_leaves_the_first_layers_on_cpu_and_uncached(qwen30b):
    devices = Placement(n_gpu_layers=40).layer_device(48)
    assert devices[:9] == [CPU] * 9 and devices[9:] == [0] * 39
    plan = plan_cache(qwen30b, 10000, Placement(n_gpu_layers=40))
    assert sorted(il for g in plan.groups for il in g.layers) == list(range(9, 48))


def test_n_cpu_moe_caches_only_the_first_k_layers(qwen30b):
    plan = plan_cache(qwen30b, 4000, Placement(cpu_moe=False, n_cpu_moe=10))
    assert sorted(il for g in plan.groups for il in g.layers) == list(range(10))
    assert all(g.n_slots == g.max_slots for g in plan.groups)  # 10 layers fit in 4000 MiB


def test_no_host_experts_disables_the_cache_with_a_warning_only(qwen30b):
    plan = plan_cache(qwen30b, 1000, Placement(cpu_moe=False, n_cpu_moe=0))
    assert plan.starts and not plan.enabled
    assert plan.warnings == ("no layer has all of its experts in host memory, MoE cache is disabled",)
    assert min_budget_mib(qwen30b, Placement(cpu_moe=False)) is None


def test_budget_zero_is_disabled_and_negative_is_rejected(qwen30b):
    assert plan_cache(qwen30b, 0).starts and not plan_cache(qwen30b, 0).enabled
    with pytest.raises(MoeModelError, match="must be >= 0"):
        plan_cache(qwen30b, -1)


def test_free_memory_split_weights_the_budget_by_free_mib(qwen30b):
    halves = tuple(0 if il < 24 else 1 for il in range(48))
    plan = plan_cache(qwen30b, 9000, Placement(n_gpus=2, free_mib=(2000.0, 1000.0), layer_devices=halves))
    cache = {d.device: d.buffer_bytes for d in plan.devices}
    assert cache[0] / cache[1] == pytest.approx(2.0, rel=0.01)


def test_gpt_oss_single_mxfp4_group_and_mixtral_two_groups():
    gpt = plan_cache(load_model(GPT_OSS), 2000)
    assert [(g.type_name, g.n_layers, g.slot_bytes) for g in gpt.groups] == [("mxfp4", 24, 3 * 4_406_400)]
    mixtral = plan_cache(load_model(MIXTRAL), 10000)
    assert [(g.type_name, g.n_layers) for g in mixtral.groups] == [("q6_K", 16), ("q4_K", 16)]


# Field rows (moe_model/data/field-measurements.csv notes): logged host-expert MiB per --n-cpu-moe K. The
# headers are made from the architecture to match these (their quants' per-tensor types are not published).
FIELD_HOST_EXPERTS = [
    ("Qwen3.8-Flash-Next-UD-Q4_K_XL.gguf", 34, 51950),
    ("Qwen3.8-Flash-Next-UD-Q4_K_XL.gguf", 40, 60950),
    ("Qwen3.8-Flash-Next-UD-Q4_K_XL.gguf", 48, 73450),
    ("Qwen3.8-Flash-Next-R9700.gguf", 41, 48000),
]


@pytest.mark.parametrize(("file", "n_cpu_moe", "logged_mib"), FIELD_HOST_EXPERTS)
def test_field_model_headers_match_the_logged_host_expert_mib(file, n_cpu_moe, logged_mib):
    model = load_model(SAMPLE / "models" / file)
    assert (model.n_layer, model.n_expert, model.n_expert_used) == (48, 512, 10)
    plan = plan_cache(model, 2048, Placement(cpu_moe=False, n_cpu_moe=n_cpu_moe))
    assert plan.host_experts_mib == pytest.approx(logged_mib, rel=0.01)


def test_field_model_headers_have_the_stated_shapes():
    iq3 = load_model(SAMPLE / "models" / "Qwen3.8-Flash-Next-IQ3_XXS.gguf")
    assert iq3.total_bytes / 1e9 == pytest.approx(47, rel=0.03)  # "47 GB weights" (RTX 4070 rows)
    qwen36 = load_model(SAMPLE / "models" / "Qwen3.6-35B-A3B-UD-Q4_K_M.gguf")
    assert (qwen36.n_layer, qwen36.n_expert, qwen36.n_expert_used, qwen36.n_embd) == (40, 256, 8, 2048)


@pytest.mark.parametrize("text", ["cpu-moe", "fit", "gpu", "n-cpu-moe:12"])
def test_a_placement_prints_the_cli_form_it_was_parsed_from(text):
    assert Placement.parse(text).text == text
