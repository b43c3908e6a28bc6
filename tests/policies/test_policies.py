"""Every registered policy sees the same lookups, never beats Belady, and does what it says on tiny traces."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from conftest import GROUNDTRUTH, GT_BUDGETS, GT_HEADER, ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from workload_cases import make_workload, random_runs, tiny_model

from moe_model.cli.main import main
from moe_model.errors import MoeModelError
from moe_model.llama.pool_rule import uses_pool
from moe_model.llama.simulate import simulate, simulate_budgets
from moe_model.llama.slot_plan import plan_cache
from moe_model.policies import POLICIES, REFERENCE, class_lru, run_policy
from moe_model.policies.class_lru_kernel import NEVER, PLACE
from moe_model.policies.class_lru_lanes import _score
from moe_model.policies.class_lru_lists import best
from moe_model.policies.lru_lists import lru_lists_pass
from moe_model.policies.static_set import split_workload
from moe_model.policies.stepper import STEPPABLE, ReadingChange, Victim, class_lru_step, steps
from moe_model.readers.traces import load_recorded
from moe_model.routing.toy import toy_model, toy_workload

TWO_SLOTS, FOUR_SLOTS = 9, 15  # toy budgets in MiB: 3 MiB slots, minus llama.cpp's guard slot


def group_records(work, group, n_expert: int) -> np.ndarray:
    """Records of the group's layers that use its pool (pool_rule.uses_pool), for the plain replays below."""
    return np.isin(work.rec_layer, group.layers) & uses_pool(work.rec_ntok, work.k, n_expert, group.n_slots)


def decode(experts_per_step, n_expert=8):
    """One layer, k = 1, one token per ubatch: the record of step t looks up experts_per_step[t]."""
    return make_workload([(t, 0, 1, [e]) for t, e in enumerate(experts_per_step)], 1, n_expert, 1)


def totals(result):
    return int(result.hits.sum()), int(result.uploads.sum()), int(result.cpu.sum())


def one(name, experts, budget=TWO_SLOTS, **knobs):
    return totals(run_policy(name, tiny_model(1, 8, 1, mixed=False), decode(experts), [budget], **knobs)[0])


def test_lru_on_a_hand_traced_two_slot_pool():
    # 0 miss, 1 miss, 0 hit (1 is now LRU), 2 evicts 1, 1 evicts 0, 0 evicts 2: 1 hit, 5 uploads
    assert one("lru-b11549", [0, 1, 0, 2, 1, 0]) == (1, 5, 0)


def test_belady_keeps_what_comes_back_soonest_and_does_not_keep_what_never_does():
    # 0, 1 fill; 0 hits; 2 is never used again, 0 and 1 are: it is not kept (CPU); 1 and 0 hit
    assert one("belady", [0, 1, 0, 2, 1, 0]) == (3, 2, 1)


def test_static_set_pins_the_most_looked_up_experts_and_uploads_each_once():
    # in-sample counts 0:3, 1:2, 2:1 -> pins {0, 1}: first lookups of 0 and 1 upload, 2 runs on the CPU
    assert one("static-hot-set", [0, 1, 0, 2, 1, 0]) == (3, 2, 1)


def test_static_set_chosen_on_one_part_loses_when_routing_moves():
    # profile {0, 1}; the replay uses 2 and 3: nothing pinned is ever looked up
    profile = decode([0, 1, 0, 1])
    assert one("static-hot-set", [2, 3, 2, 3], profile=profile) == (0, 0, 4)


def test_class_lru_keeps_a_hot_expert_through_a_burst_of_one_off_experts():
    # 4 slots. Expert 0 is used 8 times: CRF = sum of 2^(-age/128) ~ 7.8, class 2; then 1..6 once each (class 0).
    # LRU: 1, 2, 3 fill, 4 evicts 0 (least recent), 0 misses on return: 7 hits.
    # ClassLRU: 4, 5, 6 each evict the oldest one-off (age 3, score 3) before 0 (age 4-6, score age / 2^2 <= 1.5):
    # 0 hits on return: 8 hits.
    burst = [0] * 8 + [1, 2, 3, 4, 5, 6] + [0]
    assert one("lru-b11549", burst, FOUR_SLOTS) == (7, 8, 0)
    assert one("class-lru-b12170", burst, FOUR_SLOTS) == (8, 7, 0)
    assert one("class-lru-b12170", burst, FOUR_SLOTS, n_classes=1) == (7, 8, 0)  # one class: plain LRU


def _victim(slots, ties_high=False, n_expert=8, age_planning=False):
    """The class_lru kernel's choice during a plan() (record 100) of layer 1 at clock 11 (layer 0's clock is at
    10): class c's list holds only one use, of an expert of the (layer, last use) given (a use of layer 1 at 11 is
    this plan()'s); each class's queue is that use and its sentinel (class_lru_kernel.queues)."""
    n, now_rec, bit = len(slots), 100, np.uint64(1)
    start = np.arange(0, 2 * n + 1, 2, dtype=np.int64)
    places = np.zeros(2 * n, dtype=PLACE)
    places["nxt"], places["rec"], places["dies"] = np.arange(2 * n), NEVER, NEVER
    for c, (layer, t) in enumerate(slots):
        rec = now_rec if (layer, t) == (1, 11) else t  # a use of layer 1 at 11 is this plan()'s
        for field, value in zip(("rec", "key", "owner", "time"), (rec, layer * n_expert + c, layer, t), strict=True):
            places[field][2 * c] = value
    res, hitf = np.full(2 * n_expert, bit), np.zeros(2 * n_expert, dtype=np.uint64)
    heads, cached = np.zeros((1, n), dtype=np.int64), np.full((1, n, 5), -1, dtype=np.int64)
    pool = (start, places, np.zeros(2 * n, dtype=np.uint64), res, hitf, heads, cached)
    clock, inv = np.array([10, 11], dtype=np.int64), 2.0 ** -np.arange(n)
    scores = np.array([_score(0, c, bit, 11, now_rec, clock, pool, inv, age_planning) for c in range(n)])
    return best(scores, ties_high)


def test_class_lru_evicts_the_largest_age_over_two_to_the_class_among_untouched_list_heads():
    # heads (layer 0): class 0 aged 2 (score 2), class 1 aged 6 (score 3), class 2 aged 10 (score 2.5): class 1's
    assert _victim([(0, 8), (0, 4), (0, 0)]) == 1
    # equal scores (2 and 4 / 2^1): the lower class goes first, unless the knob gives ties to the higher class
    assert _victim([(0, 8), (0, 6)]) == 0 and _victim([(0, 8), (0, 6)], ties_high=True) == 1
    # class 0's head was used by layer 0's last plan() (age 0), class 1's by this plan() of layer 1 (age 0 too):
    # even with ties to the higher class, this plan's list is passed over (all of a record's experts stay in)
    assert _victim([(0, 10), (1, 11)], ties_high=True) == 0


def test_class_lru_age_clock_reading_ages_another_layers_slot_in_the_planning_layers_clock():
    # class 0's head (layer 0, used at 8): age 2 in its own clock (10), 3 in the planning layer's (11); class 1's
    # head (layer 1, used at 6): age 5, score 2.5: its own clock evicts class 1, the planning clock class 0
    assert _victim([(0, 8), (1, 6)]) == 1 and _victim([(0, 8), (1, 6)], age_planning=True) == 0


def test_class_lru_increment_per_token_reading_adds_one_per_token_that_chose_the_expert():
    work = make_workload([(0, 0, 3, [0, 0, 1])], 1, 8, 1)  # one 3-token ubatch: expert 0 chosen twice
    mode, large = np.ones(1, dtype=np.int8), np.zeros(1, dtype=np.int8)
    crf = {}
    for per in class_lru.INCREMENTS_PER:
        state = class_lru.new_state(np.array([2]), 1, 8, increment_per=per)
        class_lru.feed(state, work.rec_layer, work.rec_ntok, work.rec_off, mode, large, work.ids, 1, 8)
        crf[per] = state.crf[:2].tolist()
    assert crf == {"plan": [1.0, 1.0], "token": [2.0, 1.0]}


def test_every_open_class_lru_reading_is_a_knob_defaulting_to_its_first_reading():
    assert {r.knob for r in class_lru.OPEN_READINGS} == {"clock", "age_clock", "ties", "increment_per"}
    assert all(class_lru.KNOBS[r.knob] == r.readings[0] and r.rests_on for r in class_lru.OPEN_READINGS)
    with pytest.raises(MoeModelError, match="age_clock must be one of"):
        class_lru.kernel(age_clock="sideways")


def test_class_lru_keeps_a_keys_crf_across_its_eviction():
    # 2 slots, one layer, one token per ubatch: 0 is used at t = 1..8, pushed out by 1..5, used again at t = 14
    work = decode([0] * 8 + [1, 2, 3, 4, 5] + [0])
    state = class_lru.new_state(np.array([2]), 1, 8)
    mode, large = np.ones(work.n_records, dtype=np.int8), np.zeros(work.n_records, dtype=np.int8)
    class_lru.feed(state, work.rec_layer, work.rec_ntok, work.rec_off, mode, large, work.ids, 1, 8)
    assert int(state.hits.sum()) == 7  # the return is a miss: 0 was evicted at t = 13 (age 5, score 1.25 > 1)
    expected = sum(2 ** (-(14 - t) / 128) for t in [*range(1, 9), 14])  # the decayed uses before its eviction count
    assert state.crf[0] == pytest.approx(expected) and class_lru.crf_class(expected) == 3
    fresh = class_lru.crf_class(1.0)
    assert fresh == 0 and state.last_use[0] == 14


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    random_runs(),
    st.lists(st.integers(1, 60), min_size=1, max_size=4),
    st.sampled_from(
        [
            {},
            {"clock": "group"},
            {"ties": "high-class"},
            {"increment": 0.5, "half_life_tokens": 3.0},
            {"n_classes": 2},
            {"age_clock": "planning"},
            {"increment_per": "token", "half_life_tokens": 4.0},
            {"age_clock": "planning", "increment_per": "token", "ties": "high-class"},
        ]
    ),
)
def test_class_lru_kernel_equals_its_readable_stepper_and_one_class_is_the_exact_lru(run, budgets, knobs):
    n_layer, n_expert, k, records = run
    model, work = tiny_model(n_layer, n_expert, k), make_workload(records, n_layer, n_expert, k)
    budgets = sorted(set(budgets))
    curve = run_policy("class-lru-b12170", model, work, budgets, **knobs)
    for budget, res in zip(budgets, curve, strict=True):
        last = steps(work, plan_cache(model, budget), n_expert, work.n_records, "class-lru-b12170", **knobs)[-1]
        assert (last.total_hits, last.total_misses) == (int(res.hits.sum()), int(res.uploads.sum()))
    one_class = simulate_budgets(model, work, budgets, kernel=class_lru.kernel(n_classes=1))
    for lru, cls in zip(simulate_budgets(model, work, budgets), one_class, strict=True):
        assert np.array_equal(lru.layer_hits, cls.layer_hits) and lru.copied_experts == cls.copied_experts


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(random_runs(), st.lists(st.integers(1, 60), min_size=1, max_size=4), st.sampled_from([0.3, 0.5, 0.9, 1.0]))
def test_cpu_share_kernel_on_class_lru_lists_equals_its_readable_stepper(run, budgets, share):
    n_layer, n_expert, k, records = run
    model, work = tiny_model(n_layer, n_expert, k), make_workload(records, n_layer, n_expert, k)
    budgets = sorted(set(budgets))
    curve = run_policy("cpu-share-b12191", model, work, budgets, share=share)
    for budget, res in zip(budgets, curve, strict=True):
        last = steps(work, plan_cache(model, budget), n_expert, work.n_records, "cpu-share-b12191", share=share)[-1]
        assert (last.total_hits, last.total_misses) == (int(res.hits.sum()), int(res.uploads.sum()))


def test_class_lru_refuses_knobs_outside_their_range():
    for bad in ({"half_life_tokens": 0}, {"n_classes": 0}, {"clock": "ubatch"}, {"increment": -1.0}):
        with pytest.raises(MoeModelError):
            one("class-lru-b12170", [0], **bad)


def test_cpu_share_starts_once_the_pool_is_full():
    # 0, 1 fill the pool (uploaded whatever the share); 2: remainder 0.5, uploaded, evicts 0;
    # 3: remainder 1.0, computed on the CPU and not kept; 1 is still cached: a hit
    assert one("cpu-share-b12191", [0, 1, 2, 3, 1], share=0.5) == (1, 3, 1)


def test_lazy_unload_drops_an_expert_idle_for_n_rounds():
    # 0 is used at round 0, then 4 rounds of 1 only: idle 4 rounds, unloaded when N <= 4
    steps = [0, 1, 1, 1, 1, 0]
    assert one("lru-b11549", steps) == (4, 2, 0)
    assert one("lazy-unload", steps, idle_rounds=4, cooldown_ms=0.0) == (3, 3, 0)
    assert one("lazy-unload", steps, idle_rounds=5, cooldown_ms=0.0) == (4, 2, 0)


def test_per_layer_pools_lose_the_slots_a_quiet_layer_does_not_need():
    # layer 0 cycles 0, 1, 2; layer 1 always uses 5. Shared 4 slots hold all four keys: 3 + 1 misses.
    # Split 2 + 2, layer 0's three experts thrash its 2-slot LRU: all 6 miss; layer 1: 1 miss, 5 hits.
    records = [(t, il, 1, [[0, 1, 2][t % 3] if il == 0 else 5]) for t in range(6) for il in (0, 1)]
    work, model = make_workload(records, 2, 8, 1), tiny_model(2, 8, 1, mixed=False)
    assert totals(run_policy("lru-b11549", model, work, [FOUR_SLOTS])[0]) == (8, 4, 0)
    per_layer = run_policy("per-layer-lru", model, work, [FOUR_SLOTS])[0]
    assert totals(per_layer) == (5, 7, 0) and per_layer.hits.tolist() == [0, 5]


def test_a_record_larger_than_its_layers_pool_runs_the_rest_on_the_cpu():
    # 2 layers, 3 slots -> pools of 2 and 1; layer 1 looks up 2 distinct experts: one is kept, one is not
    work = make_workload([(0, 0, 1, [0]), (0, 1, 2, [3, 4])], 2, 8, 1)
    res = run_policy("per-layer-lru", tiny_model(2, 8, 1, mixed=False), work, [12])[0]
    assert (res.uploads.tolist(), res.cpu.tolist()) == ([1, 1], [0, 1])


def test_unknown_policy_and_knob_names_are_refused_with_the_choices():
    work, model = decode([0]), tiny_model(1, 8, 1, mixed=False)
    with pytest.raises(MoeModelError, match="choose one of lru-b11549"):
        run_policy("fifo", model, work, [TWO_SLOTS])
    with pytest.raises(MoeModelError, match="its knobs: \\['share'\\]"):
        run_policy("cpu-share-b12191", model, work, [TWO_SLOTS], half_life=3)
    assert run_policy("cpu-share-b12191", model, work, [TWO_SLOTS], share=0.9)[0].uploads.sum() == 1


def test_every_policy_is_labelled_with_its_source():
    assert next(iter(POLICIES)) == REFERENCE
    for policy in POLICIES.values():
        assert policy.label in ("exact", "modelled") and policy.source and policy.summary


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(random_runs(), st.lists(st.integers(1, 60), min_size=1, max_size=4))
def test_every_policy_counts_the_same_lookups_and_none_beats_belady(run, budgets):
    n_layer, n_expert, k, records = run
    model, work = tiny_model(n_layer, n_expert, k), make_workload(records, n_layer, n_expert, k)
    budgets = sorted(set(budgets))
    exact = simulate_budgets(model, work, budgets)
    results = {name: run_policy(name, model, work, budgets) for name in POLICIES}
    for b, ref in enumerate(exact):
        best = int(results["belady"][b].hits.sum())
        for name, res in results.items():
            r = res[b]
            assert np.array_equal(r.lookups, ref.layer_lookups), name  # hits + uploads + cpu = lookups
            assert min(r.hits.min(), r.uploads.min(), r.cpu.min()) >= 0, name
            assert int(r.hits.sum()) <= best, name
        assert np.array_equal(results[REFERENCE][b].hits, ref.layer_hits)


@pytest.mark.parametrize("case", sorted(c for c in GT_BUDGETS if c != "minany_minus1"))  # that run did not start
def test_lru_policy_and_the_generic_lru_kernel_equal_the_exact_simulator_on_recorded_traces(gt_model, case):
    work = load_recorded(GROUNDTRUTH / "traces" / f"{case}.npz")
    budget = GT_BUDGETS[case]
    exact, res = simulate(gt_model, work, budget), run_policy(REFERENCE, gt_model, work, [budget])[0]
    assert int(res.hits.sum()) == exact.small.hits + exact.large.hits
    assert int(res.uploads.sum()) == exact.small.misses + exact.large.misses
    hits = np.zeros(gt_model.n_layer, dtype=np.int64)
    for g in exact.plan.groups if exact.starts else ():
        if g.cached:  # the generic kernel with one pool per group is b11549's LRU
            pool_of = np.full(gt_model.n_layer, -1, dtype=np.int64)
            pool_of[list(g.layers)] = 0
            rec = (
                work.rec_layer,
                work.rec_ntok,
                work.rec_off,
                work.rec_ubatch,
                group_records(work, g, gt_model.n_expert),
            )
            hits += lru_lists_pass(*rec, work.ids, work.k, gt_model.n_expert, pool_of, np.array([g.n_slots]), 0)[0]
    assert np.array_equal(hits, exact.layer_hits)


def test_profile_and_replay_parts_of_a_trace_add_up():
    work = load_recorded(GROUNDTRUTH / "traces" / "np4_b25.npz")
    head, tail = split_workload(work, 0.5)
    assert head.n_records + tail.n_records == work.n_records and len(head.ids) + len(tail.ids) == len(work.ids)
    assert tail.rec_off[0] == 0 and tail.rec_ubatch[0] == 0
    assert head.decode_tokens + tail.decode_tokens == work.decode_tokens


def run_simulate(capsys, *extra):
    code = main(["simulate", "--model", str(GT_HEADER), "--trace", str(GROUNDTRUTH / "traces" / "b25.npz"), *extra])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_policy_all_adds_one_entry_per_policy_and_keeps_the_simulate_fields(capsys):
    argv = ["--budgets-mib", "14,403", "--policy", "all", "--knob", "share=0.8", "--build", "11549", "--json"]
    code, out, err = run_simulate(capsys, *argv)
    assert code == 0, err
    data = json.loads(out)  # strict JSON: allow_nan=False in the CLI
    assert [b["budget_mib"] for b in data["budgets"]] == [14, 403] and "small" in data["budgets"][1]
    by_name = {p["name"]: p for p in data["policies"]}
    assert list(by_name) == list(POLICIES) and by_name["cpu-share-b12191"]["knobs"] == {"share": 0.8}
    lru, refused = by_name[REFERENCE]["budgets"][1], by_name[REFERENCE]["budgets"][0]
    assert lru["hits"] == data["budgets"][1]["small"]["hits"] + data["budgets"][1]["large"]["hits"]
    assert refused["hit_rate"] is None and not refused["starts"]
    for p in data["policies"]:
        assert (
            p["label"] in ("exact", "modelled") and p["budgets"][1]["hits"] <= by_name["belady"]["budgets"][1]["hits"]
        )


def test_cli_build_selects_the_policy_and_every_output_names_it(capsys, gt_model):
    work = load_recorded(GROUNDTRUTH / "traces" / "b25.npz")
    exact = simulate(gt_model, work, GT_BUDGETS["b25"])
    old = json.loads(run_simulate(capsys, "--budget-mib", str(GT_BUDGETS["b25"]), "--build", "11549", "--json")[1])
    assert (old["policy"], old["policy_exact"], old["build"]) == (REFERENCE, True, 11549)
    assert old["budgets"][0]["small"] == exact.small.as_dict() and old["budgets"][0]["policy"] == REFERENCE
    new = json.loads(run_simulate(capsys, "--budget-mib", str(GT_BUDGETS["b25"]), "--build", "b12569", "--json")[1])
    class_lru_run = run_policy("class-lru-b12170", gt_model, work, [GT_BUDGETS["b25"]])[0]
    assert (new["policy"], new["policy_exact"], new["build"]) == ("class-lru-b12170", False, 12569)
    assert new["budgets"][0]["small"]["hits"] + new["budgets"][0]["large"]["hits"] == int(class_lru_run.hits.sum())
    assert json.loads(run_simulate(capsys, "--budget-mib", "403", "--json")[1])["build"] == 12569  # mainline default
    code, out, _ = run_simulate(capsys, "--budget-mib", "403", "--build", "12100")
    assert code == 0 and out.startswith("Hit rates are simulated exactly as llama.cpp b12100's cache would serve")


def test_cli_refuses_a_cache_on_a_build_without_one_in_one_line(capsys):
    code, _, err = run_simulate(capsys, "--budget-mib", "403", "--build", "11000")
    assert code == 1 and err.strip() == (
        "error: llama.cpp b11000 has no MoE cache (--moe-cache-mib came in b11480): use a later build or no cache"
    )
    with pytest.raises(SystemExit) as usage:  # argparse's usage error: one line, exit 1
        run_simulate(capsys, "--budget-mib", "403", "--build", "twelve")
    assert usage.value.code == 1 and "a llama.cpp build is a release number" in capsys.readouterr().err


def test_cli_refuses_an_unknown_policy_or_knob_in_one_line(capsys):
    assert run_simulate(capsys, "--budget-mib", "403", "--policy", "fifo")[2].startswith("error: unknown policy")
    code, _, err = run_simulate(capsys, "--budget-mib", "403", "--policy", "belady", "--knob", "share=0.5")
    assert code == 1 and "no chosen policy has the knob" in err


@pytest.mark.parametrize("policy", STEPPABLE)
@pytest.mark.parametrize("budget", [48, 96])  # at 96 MiB unloading after 2 idle rounds costs 119 hits
def test_the_learn_stepper_counts_what_the_policy_counts(policy, budget):
    model, work = toy_model(), toy_workload(concurrency=2, n_tokens=96)
    knobs = {"idle_rounds": 2, "cooldown_ms": 0.0} if policy == "lazy-unload" else {}
    last = steps(work, plan_cache(model, budget), model.n_expert, policy=policy, **knobs)[-1]
    res = run_policy(policy, model, work, [budget], **knobs)[0]
    assert (last.total_hits, last.total_misses) == (int(res.hits.sum()), int(res.uploads.sum()))


def test_the_stepper_shows_the_list_engines_slots_and_order_on_a_hand_traced_pool():
    # two slots, list 0 -> 1: 0 fills slot 0 (order 1, 0); 1 fills slot 1 (0, 1); 0 hits (1, 0); 2 evicts 1 from slot 1
    model = tiny_model(1, 8, 1, mixed=False)
    trail = steps(decode([0, 1, 0, 2]), plan_cache(model, TWO_SLOTS), model.n_expert)
    assert [s.order[0] for s in trail] == [(1, 0), (0, 1), (1, 0), (0, 1)]
    assert [s.slots[0].tolist() for s in trail] == [[0, -1], [0, 1], [0, 1], [0, 2]]
    assert [(s.hits, s.fills, s.evicted) for s in trail[2:]] == [((0,), (), ()), ((), ((2, 1),), ((0, 1),))]


def test_one_list_lru_engine_and_one_copy_rule_in_the_library():
    sources = {p: p.read_text() for p in (ROOT / "moe_model").rglob("*.py")}
    assert [p.name for p, text in sources.items() if re.search(r"def _?touch\(", text)] == ["lru_lists.py"]
    bound = r"(\w+\.)?(OFFLOAD_MIN_BATCH|offload_min_batch|MAX_BATCH)\b"  # a token count compared with either
    threshold = re.compile(rf"[<>]=?\s*{bound}|\b(OFFLOAD_MIN_BATCH|MAX_BATCH)\s*[<>]")
    assert [p.name for p, text in sources.items() if threshold.search(text)] == ["pool_rule.py"]


def test_the_stepper_refuses_a_policy_it_cannot_show():
    with pytest.raises(MoeModelError, match="runs only in the simulator"):
        steps(toy_workload(), plan_cache(toy_model(), 48), 12, policy="belady")


def test_the_time_model_prices_the_counts_of_the_policy_a_scenario_names(gt_model):
    from dataclasses import replace

    from moe_model.speed.hardware import preset
    from moe_model.speed.rates import TimeParams
    from moe_model.speed.scenario import Scenario, resolve
    from moe_model.speed.time_model import predict
    from moe_model.speed.traffic import decode_ubatches, from_workload, steady_hits

    work = load_recorded(GROUNDTRUTH / "traces" / "b25.npz")
    hw, params = preset("h200"), TimeParams()
    lru = Scenario(budget_mib=GT_BUDGETS["b25"])
    speeds = {}
    for name in ("", "belady", "cpu-share-b12191"):
        sc = replace(lru, policy=name, knobs=(("share", 0.8),) if name.startswith("cpu") else ())
        layout = resolve(gt_model, hw, sc)
        traffic = from_workload(gt_model, layout, sc, work)
        expected = run_policy(sc.policy_name, gt_model, work, [sc.budget_mib], layout.placement, **sc.policy_knobs)[0]
        steady = steady_hits(gt_model, layout, expected, sc.build)  # the policy's counts, as a warm pool serves them
        assert traffic.hits.sum() * decode_ubatches(work) == pytest.approx(steady.sum())
        speeds[name] = predict(gt_model, hw, params, sc, traffic, layout=layout).decode_tps
    assert speeds["belady"] > speeds[""]  # fewer uploads, the same everything else
    assert (
        from_workload(
            gt_model,
            resolve(gt_model, hw, replace(lru, knobs=(("share", 0.8),))),
            replace(lru, knobs=(("share", 0.8),)),
            work,
        ).cpu_misses.sum()
        > 0
    )


def test_a_scenario_refuses_an_unknown_policy_and_a_cpu_share_on_another_policy():
    from moe_model.speed.scenario import Scenario

    with pytest.raises(MoeModelError, match="unknown policy"):
        Scenario(policy="fifo")
    with pytest.raises(MoeModelError, match="knob of cpu-share-b12191"):
        Scenario(policy="belady", knobs=(("share", 0.5),))
    assert Scenario(knobs=(("share", 0.5),)).policy_name == "cpu-share-b12191"


def test_a_scenarios_build_selects_its_policy_and_refuses_flags_it_lacks():
    from moe_model.speed.scenario import Scenario

    assert Scenario().policy_name == "class-lru-b12170" and not Scenario().policy_exact  # mainline by default
    assert Scenario(build=12169).policy_name == REFERENCE and Scenario(build=11480).policy_exact
    assert Scenario(build=12170).policy_name == "class-lru-b12170"
    assert Scenario(build=12191, knobs=(("share", 0.5),)).policy_name == "cpu-share-b12191"
    assert Scenario(build=11000).policy_fields() == {"policy": REFERENCE, "policy_exact": True, "build": 11000}
    with pytest.raises(MoeModelError, match="came in b12191"):
        Scenario(build=12190, knobs=(("share", 0.5),))
    with pytest.raises(MoeModelError, match="has no MoE cache"):
        Scenario(build=11479, budget_mib=100)
    with pytest.raises(MoeModelError, match="release number"):
        Scenario(build=0)


# --- the shared passes equal a plain replay of each budget alone ---


def list_replay(work, model, budget, pools_of, idle=0):
    """Per layer (hits, uploads, CPU) of the list LRU at one budget; pools_of(group) -> (pool of each layer, slots)."""
    plan = plan_cache(model, budget)
    out = np.zeros((3, model.n_layer), dtype=np.int64)
    for g in plan.groups if plan.starts else ():
        if g.cached:
            rec = (work.rec_layer, work.rec_ntok, work.rec_off, work.rec_ubatch, group_records(work, g, model.n_expert))
            out += np.array(lru_lists_pass(*rec, work.ids, work.k, model.n_expert, *pools_of(g), idle))
    return out


def plain_next_use(entries) -> np.ndarray:
    """Per entry, the record of its key's next lookup (int64's max if none): Belady's priority, by its definition."""
    nxt, seen_at = np.empty(len(entries.key), dtype=np.int64), {}
    for i in range(len(entries.key) - 1, -1, -1):
        nxt[i] = seen_at.get(int(entries.key[i]), np.iinfo(np.int64).max)
        seen_at[int(entries.key[i])] = int(entries.rec[i])
    return nxt


def plain_priority_pool(entries, prio, n_slots, n_layer, bypass):
    """A pool that evicts by priority, written plainly (Belady's: -next use): the victim is the resident key outside
    the record with the lowest (priority, sequence of its last use); misses are placed highest priority first."""
    out = np.zeros((3, n_layer), dtype=np.int64)
    resident, seq = {}, 0
    bounds = entries.record_bounds()
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        record, misses = set(entries.key[lo:hi].tolist()), []
        for i in range(lo, hi):
            key = int(entries.key[i])
            if key in resident:
                out[0, key // entries.n_expert] += 1
                resident[key], seq = (prio[i], seq), seq + 1
            else:
                misses.append(i)
        for i in sorted(misses, key=lambda i: -prio[i]):
            key = int(entries.key[i])
            if len(resident) >= n_slots:
                others = [k for k in resident if k not in record]
                victim = min(others, key=lambda k: resident[k]) if others else None
                if victim is None or (bypass and resident[victim][0] >= prio[i]):
                    out[2, key // entries.n_expert] += 1
                    continue
                del resident[victim]
            resident[key], seq = (prio[i], seq), seq + 1
            out[1, key // entries.n_expert] += 1
    return out


SHARED = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@SHARED
@given(random_runs(), st.lists(st.integers(1, 60), min_size=1, max_size=5), st.integers(1, 4))
def test_lazy_unload_in_one_kernel_pass_equals_the_list_replay_of_each_budget(run, budgets, idle):
    n_layer, n_expert, k, records = run
    model, work = tiny_model(n_layer, n_expert, k), make_workload(records, n_layer, n_expert, k)
    budgets = sorted(set(budgets))
    knobs = {"idle_rounds": idle, "cooldown_ms": 0.0}

    def one_pool(g):
        pool_of = np.where(np.isin(np.arange(n_layer), g.layers), 0, -1)
        return pool_of, np.array([g.n_slots])

    for res, budget in zip(run_policy("lazy-unload", model, work, budgets, **knobs), budgets, strict=True):
        assert np.array_equal(
            np.array([res.hits, res.uploads, res.cpu]), list_replay(work, model, budget, one_pool, idle)
        )


@SHARED
@given(random_runs(), st.lists(st.integers(1, 60), min_size=1, max_size=5))
def test_per_layer_pools_in_kernel_passes_equal_the_list_replay_of_each_budget(run, budgets):
    from moe_model.policies.per_layer import layer_pools

    n_layer, n_expert, k, records = run
    model, work = tiny_model(n_layer, n_expert, k), make_workload(records, n_layer, n_expert, k)
    budgets = sorted(set(budgets))
    for res, budget in zip(run_policy("per-layer-lru", model, work, budgets), budgets, strict=True):
        expected = list_replay(work, model, budget, lambda g: layer_pools(g.layers, g.n_slots, n_layer))
        assert np.array_equal(np.array([res.hits, res.uploads, res.cpu]), expected)


@SHARED
@given(random_runs(), st.lists(st.integers(1, 60), min_size=1, max_size=5))
def test_belady_and_the_static_set_equal_their_plain_definitions_at_each_budget(run, budgets):
    from moe_model.policies.entries import PoolEntries

    n_layer, n_expert, k, records = run
    model, work = tiny_model(n_layer, n_expert, k), make_workload(records, n_layer, n_expert, k)
    budgets = sorted(set(budgets))
    entries = PoolEntries.build(work)
    belady, static = run_policy("belady", model, work, budgets), run_policy("static-hot-set", model, work, budgets)
    for b, budget in enumerate(budgets):
        plan = plan_cache(model, budget)
        best, pinned_counts = np.zeros((3, n_layer), dtype=np.int64), np.zeros((3, n_layer), dtype=np.int64)
        for g in plan.groups if plan.starts else ():
            if g.cached:
                sel = entries.select(g.layers, g.n_slots)
                best += plain_priority_pool(sel, -plain_next_use(sel).astype(float), g.n_slots, n_layer, True)
                uses = np.bincount(sel.key, minlength=n_layer * n_expert)
                hot = sorted(np.flatnonzero(uses), key=lambda key: (-uses[key], key))[: g.n_slots]
                for key in hot:  # a pinned key: uploaded once, then hits; the others run on the CPU
                    pinned_counts[:2, key // n_expert] += (uses[key] - 1, 1)
                for key in set(np.flatnonzero(uses)) - set(hot):
                    pinned_counts[2, key // n_expert] += uses[key]
        assert np.array_equal(np.array([belady[b].hits, belady[b].uploads, belady[b].cpu]), best)
        assert np.array_equal(np.array([static[b].hits, static[b].uploads, static[b].cpu]), pinned_counts)


@pytest.mark.parametrize("name", list(POLICIES))
def test_every_policy_refuses_expert_ids_outside_the_model_before_its_compiled_pass(name):
    from dataclasses import replace

    model, work = tiny_model(1, 8, 1, mixed=False), decode([0, 1, 0, 2])
    assert run_policy(name, model, work, [TWO_SLOTS])[0].lookups.sum() == 4  # positive control
    bad = replace(work, ids=np.array([0, 1, -3, 2], dtype=np.int32))  # check_fits sees only the largest id
    with pytest.raises(MoeModelError, match="outside 0..7") as info:
        run_policy(name, model, bad, [TWO_SLOTS])
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("ntok", [1, 3, 5, 32])  # 5 and 32 tokens: more keys than entries._INSERTION_MAX
def test_pool_entries_are_each_pool_records_distinct_keys_ascending(ntok):
    from moe_model.policies.entries import _INSERTION_MAX, PoolEntries

    rng, n_layer, n_expert, k = np.random.default_rng(ntok), 2, 128, 8
    records = [
        (u, il, ntok, [int(e) for _ in range(ntok) for e in rng.choice(n_expert, k, replace=False)])
        for u in range(30)
        for il in range(n_layer)
    ]
    entries = PoolEntries.build(make_workload(records, n_layer, n_expert, k))
    want = [(r, il * n_expert + e) for r, (_, il, _, ids) in enumerate(records) for e in sorted(set(ids))]
    assert list(zip(entries.rec.tolist(), entries.key.tolist(), strict=True)) == want
    assert (max(len(set(ids)) for *_, ids in records) > _INSERTION_MAX) == (ntok * k > _INSERTION_MAX)


def test_pool_entries_are_built_once_per_workload_inside_shared_builds_and_dropped_after():
    from moe_model.policies.entries import PoolEntries, shared_builds

    work, other = decode([0, 1, 0, 2, 1, 0]), decode([3, 1])
    with shared_builds():
        first = PoolEntries.build(work.for_model(8))  # a policy's own copy of the workload: the same arrays
        assert PoolEntries.build(work.for_model(8)) is first and PoolEntries.build(other) is not first
    again = PoolEntries.build(work)
    assert again is not first
    assert np.array_equal(again.rec, first.rec) and np.array_equal(again.key, first.key)


def test_class_lru_step_names_the_victims_score_and_the_open_readings_that_evict_another_expert():
    # e0 three times (CRF 2.98: class 1, last used at 3), e1 once (class 0, at 4); e2 at 5 misses a full 2-slot
    # pool: the heads tie, e1 at age 1 / 2^0 and e0 at age 2 / 2^1. The default evicts the lower class (e1);
    # ties to the higher class would evict e0; the clocks (one layer) and the increment (one token) agree
    work, plan = decode([0, 0, 0, 1, 2]), plan_cache(tiny_model(1, 8, 1, mixed=False), TWO_SLOTS)
    view = class_lru_step(work, plan, 8, 4)
    assert view.step.victims == (Victim(0, 1, 0, 1, 1.0),)
    assert view.changes == (ReadingChange("ties", "high-class", ((0, 0),)),)
    assert view.agree == ("clock = group", "age_clock = planning", "increment_per = token")  # one layer: alike
    assert view.lines()[0] == (
        "evicted L0E1: class 0, age 1 tokens, score 1 / 2^0 = 1 (the largest of the list heads this step did not use)"
    )
    assert "with ties = high-class this step would evict L0E0 instead" in view.lines()
    assert class_lru_step(work, plan, 8, 2).step.victims == ()  # a hit evicts nothing


def test_simulate_build_replays_the_policy_of_the_build_the_default_one_unless_told():
    """Issue 38: the notebook's curve was the exact LRU (11.8 % at 161 MiB) where the default build gives 20.89 %."""
    from moe_model.llama.builds import MAINLINE_BUILD
    from moe_model.policies import simulate_build
    from moe_model.readers.model_spec import load_model

    model, work = load_model(GT_HEADER), load_recorded(GROUNDTRUTH / "traces" / "b25.npz")
    default, old = simulate_build(model, work, [161]), simulate_build(model, work, [161], build=11549)
    assert (default[0].policy, default[0].build) == ("class-lru-b12170", MAINLINE_BUILD)
    assert round(100 * default[0].hit_rate, 2) == 20.89 and default[0].band is not None  # with its readings' band
    assert (old[0].policy, old[0].build) == (REFERENCE, 11549)
    assert old[0].hit_rate == simulate_budgets(model, work, [161])[0].hit_rate
    assert round(100 * old[0].hit_rate, 1) == 11.8
