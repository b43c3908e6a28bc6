"""The simulator is llama.cpp's cache: it reproduces real logs and a plain reference, for any budgets."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import GROUNDTRUTH, GT_BUDGETS, gt_log_lines
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference_lru import reference_counts
from workload_cases import make_workload, random_runs, tiny_model

from moe_model.errors import WorkloadError
from moe_model.llama.pool_rule import pool_need
from moe_model.llama.simulate import simulate, simulate_budgets
from moe_model.llama.slot_plan import MIB, plan_cache
from moe_model.readers.traces import load_recorded

RECORDED = sorted(case for case in GT_BUDGETS if case != "minany_minus1")


@pytest.mark.parametrize("case", RECORDED)
def test_replaying_each_recorded_trace_reproduces_its_log_to_the_last_digit(gt_model, case):
    work = load_recorded(GROUNDTRUTH / "traces" / f"{case}.npz")
    result = simulate(gt_model, work, GT_BUDGETS[case])
    logged = [line.removeprefix("I ") for line in gt_log_lines(case, r"^I llama_moe_cache:")]
    assert logged and result.log_lines() == logged


def test_every_budget_at_once_equals_each_budget_alone_on_recorded_traces(gt_model):
    work = load_recorded(GROUNDTRUTH / "traces" / "np4_b25.npz")
    budgets = [15, 16, 19, 25, 40, 100, 161, 300, 403, 806, 1200, 1614]
    together = simulate_budgets(gt_model, work, budgets)
    for budget, res in zip(budgets, together, strict=True):
        alone = simulate(gt_model, work, budget)
        assert res.log_lines() == alone.log_lines()
        assert np.array_equal(res.layer_hits, alone.layer_hits)


def test_budget_that_does_not_start_counts_nothing(gt_model):
    work = load_recorded(GROUNDTRUTH / "traces" / "b25.npz")
    result = simulate(gt_model, work, 14)
    assert not result.starts and result.small.lookups == 0 and result.log_lines() == []


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(random_runs(), st.lists(st.integers(1, 400), min_size=1, max_size=12))
def test_simulator_equals_the_plain_reference_for_random_traces_and_budgets(run, budgets_kib):
    n_layer, n_expert, k, records = run
    model = tiny_model(n_layer, n_expert, k)
    slot_bytes = model.layers[0].slot_bytes
    budgets = sorted({max(1, b * slot_bytes // MIB // 8) for b in budgets_kib} | {1, 2, 3})
    work = make_workload(records, n_layer, n_expert, k)
    for res in simulate_budgets(model, work, budgets):
        plan = plan_cache(model, res.budget_mib)
        if not plan.starts:
            continue
        groups = [(g.layers, g.n_slots, len(g.tensor_bytes)) for g in plan.groups]
        ref = reference_counts([(il, ntok, ids) for _, il, ntok, ids in records], k, k, n_expert, groups)
        assert (res.small.hits, res.small.misses) == tuple(ref["small"])
        assert (res.large.hits, res.large.misses) == tuple(ref["large"])
        assert res.copied_experts == ref["copied"]
        uploaded = sum(m * g.slot_bytes for m, g in zip(ref["misses_by_group"], plan.groups, strict=True))
        assert res.uploaded_bytes == uploaded
        assert res.bypassed_ubatches == plain_bypassed(records, plan, k, n_expert)


def plain_bypassed(records, plan, k, n_expert):
    """Ubatches with a record of a cached layer that has tokens and needs more slots than its group has."""
    slots = {il: g.n_slots for g in plan.groups for il in g.layers}
    return len(
        {
            ub
            for ub, il, ntok, _ in records
            if slots.get(il, 0) > 0 and ntok > 0 and pool_need(ntok, k, n_expert) > slots[il]
        }
    )


def test_a_budget_cut_inside_a_record_uses_that_budgets_inner_order():
    # 1 layer, 4 slots. Record 2 has {0,1,2,3}: with 4 slots 3 and 0 hit; order [3,0 | 1,2].
    # Then {5} evicts the LRU; which key is LRU depends on the inner order: a stack distance gets it wrong.
    model = tiny_model(1, 16, 1, mixed=False)
    slot_bytes = model.layers[0].slot_bytes
    records = [
        (0, 0, 2, [3, 0]),
        (1, 0, 4, [0, 1, 2, 3]),
        (2, 0, 1, [5]),
        (3, 0, 1, [1]),
        (4, 0, 1, [3]),
        (5, 0, 1, [0]),
    ]
    work = make_workload(records, 1, 16, 1)
    budgets = sorted({int(np.ceil(n * slot_bytes / MIB)) + 1 for n in range(4, 9)})
    for res in simulate_budgets(model, work, budgets):
        plan = plan_cache(model, res.budget_mib)
        groups = [(g.layers, g.n_slots, 3) for g in plan.groups]
        ref = reference_counts([(il, ntok, ids) for _, il, ntok, ids in records], 1, 1, 16, groups)
        assert (res.small.hits, res.small.misses) == tuple(ref["small"])


def test_per_layer_hits_add_up_to_the_class_totals(gt_model):
    work = load_recorded(GROUNDTRUTH / "traces" / "short_b25.npz")
    res = simulate(gt_model, work, 403)
    assert res.layer_hits.sum() == res.small.hits + res.large.hits
    assert res.layer_lookups.sum() == res.small.lookups + res.large.lookups


def test_large_batches_bypass_and_are_counted_as_bypassed_ubatches(gt_model):
    res = simulate(gt_model, load_recorded(GROUNDTRUTH / "traces" / "b25.npz"), 403)
    assert res.bypassed_ubatches == 1  # the one 129-token prompt ubatch (its last layer used the pool)


def long_random_records(n_ub, n_layer, n_expert, k, seed=0):
    """Many ubatches of mixed sizes over a small hot set: the kernel compacts its state many times."""
    rng = np.random.default_rng(seed)
    records = []
    for u in range(n_ub):
        ntok = int(rng.choice([1, 1, 1, 2, 3, 9, 33]))
        for il in range(n_layer):
            picks = [rng.choice(n_expert, size=k, replace=False, p=None) for _ in range(ntok)]
            records.append((u, il, ntok, [int(e) for p in picks for e in p]))
    return records


def test_a_long_trace_streamed_in_small_chunks_with_compacted_state_equals_the_reference():
    from moe_model.workload import stream_of

    n_layer, n_expert, k = 2, 8, 2  # 16 keys: the state is compacted every ~48 records
    model = tiny_model(n_layer, n_expert, k)
    records = long_random_records(600, n_layer, n_expert, k)
    work = make_workload(records, n_layer, n_expert, k)
    slot_bytes = model.layers[0].slot_bytes
    budgets = sorted({max(1, n * slot_bytes // MIB) for n in range(1, 12)})
    whole = simulate_budgets(model, work, budgets)
    chunked = simulate_budgets(model, stream_of(work, max_records=7), budgets)
    for res, other in zip(whole, chunked, strict=True):
        assert res.as_dict() == other.as_dict()
        plan = plan_cache(model, res.budget_mib)
        if not plan.starts:
            continue
        groups = [(g.layers, g.n_slots, len(g.tensor_bytes)) for g in plan.groups]
        ref = reference_counts([(il, ntok, ids) for _, il, ntok, ids in records], k, k, n_expert, groups)
        assert (res.small.hits, res.small.misses) == tuple(ref["small"])
        assert (res.large.hits, res.large.misses) == tuple(ref["large"])
        assert res.copied_experts == ref["copied"]


def test_more_than_64_budgets_share_one_pass_over_the_stream_and_equal_each_alone(gt_model):
    work = load_recorded(GROUNDTRUTH / "traces" / "b25.npz")
    budgets = list(range(15, 15 + 130 * 12, 12))  # 130 budgets: three mask words per entry
    together = simulate_budgets(gt_model, work, budgets)
    for b in (0, 63, 64, 129):
        assert together[b].as_dict() == simulate(gt_model, work, budgets[b]).as_dict()


def test_a_run_this_machine_cannot_hold_is_refused_before_it_starts_in_one_line():
    from moe_model.llama.simulate import RunEstimate, check_run

    with pytest.raises(WorkloadError, match="needs about 8.0 GiB .* more than this machine has free") as info:
        check_run(RunEstimate(n_passes=4, peak_bytes=8 * 2**30, seconds=1.0), available=4 * 2**30)
    assert "\n" not in str(info.value)
    with pytest.raises(WorkloadError, match="above this tool's limit of 60 minutes"):
        check_run(RunEstimate(n_passes=4, peak_bytes=1, seconds=7200.0), available=4 * 2**30)
    check_run(RunEstimate(n_passes=4, peak_bytes=2**30, seconds=10.0), available=4 * 2**30)  # positive control


def test_the_memory_estimate_counts_the_queued_chunks_ids_and_every_passs_modes():
    from dataclasses import replace

    from moe_model.limits import LANE_QUEUE_JOBS, SIM_CHUNK_BYTES_PER_ID, SIM_CHUNK_LOOKUPS
    from moe_model.llama.lru_kernel import state_bytes
    from moe_model.llama.simulate import estimate_run
    from moe_model.workload import stream_of

    stream = stream_of(make_workload([(t, 0, 1, [0, 1]) for t in range(50)], 1, 8, 2))
    caps = [np.array([4, 8])]
    base = estimate_run(stream, caps, 8, 32_768).peak_bytes
    many_ids = replace(stream, n_lookups=10 * SIM_CHUNK_LOOKUPS)  # a chunk holds at most SIM_CHUNK_LOOKUPS ids
    extra_ids = (SIM_CHUNK_LOOKUPS - stream.n_lookups) * SIM_CHUNK_BYTES_PER_ID * (1 + LANE_QUEUE_JOBS)
    assert estimate_run(many_ids, caps, 8, 32_768).peak_bytes == base + extra_ids
    one_more = estimate_run(stream, caps * 2, 8, 32_768).peak_bytes - base  # a second pass: its state and its modes
    assert one_more == state_bytes(1, 8, 2) + stream.n_records * (1 + LANE_QUEUE_JOBS)


def test_a_watched_replay_says_how_far_it_is_and_stops_between_chunks_once_told():
    from moe_model.progress import Watch, WorkStoppedError, watching
    from moe_model.workload import stream_of

    model, work = tiny_model(2, 8, 2), make_workload(long_random_records(200, 2, 8, 2), 2, 8, 2)
    with watching(Watch()) as watch:
        simulate_budgets(model, stream_of(work, max_records=7), [1, 4])
    assert watch.step == "replaying the cache" and 0 < watch.done < watch.total == work.n_records
    stopped = Watch()
    stopped.stop.set()
    with watching(stopped), pytest.raises(WorkStoppedError):
        simulate_budgets(model, stream_of(work, max_records=7), [1, 4])
