"""Traffic: what each decode ubatch asks of each layer, the same from a stream as from a whole workload."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from conftest import GROUNDTRUTH, GT_BUDGETS

from moe_model.errors import WorkloadError
from moe_model.llama.builds import EXACT_BUILD
from moe_model.pricing.workloads import synthetic_workload
from moe_model.readers.traces import load_recorded
from moe_model.speed.hardware import preset
from moe_model.speed.scenario import Scenario, resolve
from moe_model.speed.traffic import decode_counts, decode_distinct, decode_ubatches, from_workload, replay_counts
from moe_model.workload import stream_of


def test_a_streamed_workload_gives_the_traffic_of_the_whole_one(gt_model):
    work = load_recorded(GROUNDTRUTH / "traces" / "b25.npz")
    stream = stream_of(work, 1000)  # many chunks of whole ubatches
    assert sum(1 for _ in stream.chunks()) > 3
    sc = Scenario(budget_mib=GT_BUDGETS["b25"])
    layout = resolve(gt_model, preset("h200"), sc)
    whole, streamed = from_workload(gt_model, layout, sc, work), from_workload(gt_model, layout, sc, stream)
    assert decode_ubatches(stream) == decode_ubatches(work)
    np.testing.assert_allclose(decode_distinct(stream), decode_distinct(work))
    np.testing.assert_allclose(streamed.hits, whole.hits)
    np.testing.assert_allclose(streamed.distinct, whole.distinct)


def test_a_policy_other_than_the_exact_lru_refuses_a_stream_in_one_line(gt_model):
    stream = stream_of(load_recorded(GROUNDTRUTH / "traces" / "b25.npz"), 1000)
    sc = Scenario(budget_mib=GT_BUDGETS["b25"], policy="belady")
    with pytest.raises(WorkloadError, match="replays a whole workload"):
        from_workload(gt_model, resolve(gt_model, preset("h200"), sc), sc, stream)


@pytest.mark.parametrize("policy", ["", "belady"])
def test_a_run_like_a_logged_one_leaves_the_warm_up_out_of_its_decode_counts(gt_model, policy):
    counted = synthetic_workload(gt_model, Scenario())  # llama-server's 2-token warm-up, then decode
    assert counted.warm_up() is not None and counted.warm_up_in_decode  # the stored calibration's convention
    like_a_log = replace(counted, warm_up_in_decode=False)  # as LogRouting.workload builds it
    sc = Scenario(budget_mib=GT_BUDGETS["b25"], build=EXACT_BUILD, policy=policy)
    layout = resolve(gt_model, preset("h200"), sc)
    n_ub, distinct = decode_counts(counted)
    cached = layout.cached_mask(gt_model, 1)
    looked_up = {}
    for work in (counted, like_a_log):
        (counts,), _ = replay_counts(gt_model, work, sc, [layout.plan], layout.placement)
        looked_up[work.warm_up_in_decode] = (counts.hits + counts.uploads + counts.cpu)[cached]
    np.testing.assert_allclose(looked_up[False], distinct[cached] * n_ub)  # the decode ubatches' lookups only
    assert (looked_up[True] > looked_up[False]).all()  # with the warm-up's, as llama.cpp's counters have them


def test_a_warm_pool_drops_the_uploads_into_never_used_slots_and_keeps_each_groups_rate_over_the_rest():
    """A replay's first uploads into slots the warm-up left free are a cold start's (first_request prices them):
    at a budget that holds every expert the steady pool hits everything; the counts themselves are not changed."""
    from moe_model.llama.slot_plan import Placement
    from moe_model.policies import PolicyResult
    from moe_model.readers.model_spec import load_model
    from moe_model.resources import data_path
    from moe_model.speed.hardware import preset
    from moe_model.speed.scenario import Scenario, resolve
    from moe_model.speed.traffic import steady_hits

    model = load_model(data_path("groundtruth", "run3", "model-header.gguf"))
    layout = resolve(model, preset("h200"), Scenario(Placement(cpu_moe=True), 8376))  # every expert has a slot
    n = model.n_layer
    hits, uploads = np.full(n, 900.0), np.full(n, 64.0)  # 64 cold fills a layer, no other miss
    counts = PolicyResult(8376, True, hits, uploads, np.zeros(n))
    assert steady_hits(model, layout, counts, 11549) == pytest.approx(hits + uploads)
    assert counts.hits[0] == 900.0
    small = resolve(model, preset("h200"), Scenario(Placement(cpu_moe=True), 837))  # 152 slots a group
    many = PolicyResult(837, True, hits, np.full(n, 5000.0), np.zeros(n))
    assert steady_hits(model, small, many, 11549) == pytest.approx(hits)  # the start-up filled every slot


@pytest.mark.parametrize("seed", range(4))
def test_decode_distinct_is_each_decode_records_distinct_experts_averaged_per_layer(seed):
    from workload_cases import make_workload

    from moe_model.workload import PHASE_DECODE, PHASE_PROMPT

    rng, n_layer, n_expert, k = np.random.default_rng(seed), 3, 16, 2
    records = [
        (u, il, int(n), rng.integers(0, 6 if seed % 2 else n_expert, int(n) * k).tolist())
        for u, n in enumerate(rng.integers(0, 5, 12))
        for il in range(n_layer)
    ]
    phases = np.where(rng.random(len(records)) < 0.3, PHASE_PROMPT, PHASE_DECODE).astype(np.int8)
    work = replace(make_workload(records, n_layer, n_expert, k), rec_phase=phases)
    sums, counts = np.zeros(n_layer), np.zeros(n_layer)
    for (_, layer, ntok, ids), phase in zip(records, phases, strict=True):
        if phase == PHASE_DECODE and ntok > 0:
            sums[layer], counts[layer] = sums[layer] + len(set(ids)), counts[layer] + 1
    np.testing.assert_array_equal(decode_distinct(work), sums / np.maximum(counts, 1))


@pytest.mark.parametrize(
    ("ids", "layer"),
    [([0, 3, -1, 99], [0, 1]), ([0, 3, 1, 2], [0, 7])],  # an id no expert of 4, a layer no layer of 2
)
def test_the_distinct_count_refuses_a_workload_it_cannot_index_before_its_compiled_pass(ids, layer):
    from workload_cases import make_workload

    work = make_workload([(0, layer[0], 2, ids[:2]), (1, layer[1], 2, ids[2:])], 2, 4, 1)
    with pytest.raises(WorkloadError, match="outside"):
        decode_distinct(work)
