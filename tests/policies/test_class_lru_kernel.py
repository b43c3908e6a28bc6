"""ClassLRU's replay (small pool sizes on their own lists, policies/class_lru_lists.py; the others in lanes of 64 over
shared class queues, policies/class_lru_lanes.py; equal pool sizes replayed once, passes on threads) counts exactly as
the kernel before it (tests/policies/reference_class_lru.py): on random cases with repeated pool sizes and pools at and
beyond the working set, on numba's threads and in turn, and through simulate_budgets on a two-group model; the lists
and the lanes count alike at every pool size for every reading (those the reference lacks too)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from unittest import mock

import numpy as np
import reference_class_lru as before
from conftest import SAMPLE
from test_class_lru import random_case

from moe_model.llama.batching import build_workload
from moe_model.llama.lru_kernel import MODE_CACHE
from moe_model.llama.simulate import simulate_budgets
from moe_model.llama.slot_plan import full_budget_mib, min_budget_mib
from moe_model.policies import class_lru, class_lru_band
from moe_model.policies.class_lru_kernel import class_bounds
from moe_model.readers.model_spec import load_model
from moe_model.routing.synthetic import Knobs, Shape, generate
from moe_model.workload import Batching

ROOT = Path(__file__).resolve().parents[2]


def _with_more_pools(case, rng):
    """The case's pool sizes, some repeated, one holding every key and one beyond, shuffled (not ascending)."""
    inputs, caps, knobs, share, n_layer, n_expert = case
    every = n_layer * n_expert
    more = np.concatenate([caps, rng.choice(caps, size=2), [every, every + 5]])
    return inputs, rng.permutation(more), knobs, share, n_layer, n_expert


def _counts(module, case, feed):
    inputs, caps, knobs, share, n_layer, n_expert = case
    state = module.new_state(caps, n_layer, n_expert, share=share, **knobs)
    for chunk in inputs:
        feed(state, *chunk)
    cpu = module.cpu_counts(state)
    return (*module.results(state), cpu[0] if isinstance(cpu, tuple) else cpu)


def test_repeated_pool_sizes_and_pools_beyond_the_working_set_count_as_the_kernel_before_on_threads_and_in_turn():
    rng = np.random.default_rng(38)
    for _ in range(300):
        case = _with_more_pools(random_case(rng), rng)
        want = _counts(before, case, before.feed)
        for feed in (class_lru.feed, class_lru.feed_in_turn):
            got = _counts(class_lru, case, feed)
            assert all(np.array_equal(g, w) for g, w in zip(got, want, strict=True)), (feed.__name__, case)


def _all_counts(case, feed=class_lru.feed):
    inputs, caps, knobs, share, n_layer, n_expert = case
    state = class_lru.new_state(caps, n_layer, n_expert, share=share, **knobs)
    for chunk in inputs:
        feed(state, *chunk)
    return (*class_lru.results(state), *class_lru.cpu_counts(state), state.filled, state.held())


def test_the_lists_and_the_lanes_count_alike_at_every_pool_size_for_every_reading():
    rng = np.random.default_rng(39)
    readings = class_lru.all_readings()
    for i in range(120):
        inputs, caps, _, share, n_layer, n_expert = _with_more_pools(random_case(rng), rng)
        case = (inputs, caps, readings[i % len(readings)], share, n_layer, n_expert)
        with mock.patch.object(class_lru, "CLASS_LRU_LIST_SHARE_OF_KEYS", 2.0):  # every pool size on its own lists
            lists = _all_counts(case)
        every_in_a_lane = {"CLASS_LRU_LIST_SHARE_OF_KEYS": 0.0, "CLASS_LRU_LANE_MIN_POOLS": 1}
        with mock.patch.multiple(class_lru, **every_in_a_lane):
            in_lanes = _all_counts(case, class_lru.feed_in_turn)
        assert all(np.array_equal(a, b) for a, b in zip(lists, in_lanes, strict=True)), case


def test_more_than_64_large_pool_sizes_fill_several_lanes_and_count_as_the_kernel_before():
    rng = np.random.default_rng(64)
    n_layer, n_expert, k, n_rec = 2, 128, 4, 400
    ntok = rng.choice([1, 1, 1, 2, 5], size=n_rec).astype(np.int32)
    ids = np.concatenate([rng.permuted(np.tile(np.arange(110), (t, 1)), axis=1)[:, :k].ravel() for t in ntok])
    off = np.concatenate([[0], np.cumsum(ntok.astype(np.int64) * k)[:-1]])
    layer, mode = rng.integers(0, n_layer, size=n_rec).astype(np.int32), np.full(n_rec, MODE_CACHE, dtype=np.int8)
    chunks = [slice(0, 150), slice(150, n_rec)]
    inputs = [(layer[c], ntok[c], off[c], mode[c], (ntok[c] > 8).astype(np.int8), ids.astype(np.int32), k, n_expert)
              for c in chunks]  # fmt: skip
    caps = np.arange(60, 256)  # above a quarter of the 256 keys from 64: 192 pool sizes in 3 lanes
    case = (inputs, caps, {}, 0.0, n_layer, n_expert)
    state = class_lru.new_state(caps, n_layer, n_expert)
    assert state.masks.shape[0] == 3 and state.n_list == 4
    want = _counts(before, case, before.feed)
    for feed in (class_lru.feed, class_lru.feed_in_turn):
        assert all(np.array_equal(g, w) for g, w in zip(_counts(class_lru, case, feed), want, strict=True))


def _curve(kernel, budgets, work, model):
    return [(r.small.hits, r.small.misses, r.large.hits, r.layer_hits.tolist(), r.band) for r in
            simulate_budgets(model, work, budgets, kernel=kernel)]  # fmt: skip


def test_a_two_group_curve_counts_alike_with_its_passes_on_threads_and_in_turn_alone():
    model = load_model(SAMPLE / "models" / "Qwen3-30B-A3B-Q4_K_M.gguf")  # two groups: q6_K and q4_K layers
    work = build_workload(generate(Shape(48, 128, 8), Knobs(), 300, seed=5), Batching(concurrency=2), 128)
    top = full_budget_mib(model)
    budgets = [min_budget_mib(model), 900, 900, 4000, top, top + 2000]  # repeated, the full cache and beyond
    for kernel in (class_lru.kernel(), class_lru.kernel(clock="group"), class_lru_band.band_kernel()):
        on_threads = _curve(kernel, budgets, work, model)
        with mock.patch("moe_model.threads.available_cores", lambda: 1):  # one lane: each pass in turn
            in_turn = _curve(kernel, budgets, work, model)
        alone = [_curve(kernel, [b], work, model)[0] for b in budgets]
        assert on_threads == in_turn == alone
        assert on_threads[1] == on_threads[2] and on_threads[4][:3] == on_threads[5][:3]


def test_where_numba_has_only_its_workqueue_layer_the_passes_run_in_turn_and_the_process_lives():
    """numba's workqueue layer aborts the process when two threads launch parallel kernels at once: there the
    groups' passes and recommend's replays run one after another."""
    code = (
        "from moe_model.numba_cache import parallel_kernels_may_overlap as overlap; "
        "from moe_model.policies import class_lru; "
        "from moe_model.readers.model_spec import load_model; "
        "from moe_model.llama.batching import build_workload; from moe_model.llama.simulate import simulate_budgets; "
        "from moe_model.routing.synthetic import Knobs, Shape, generate; from moe_model.workload import Batching; "
        f"m = load_model({str(SAMPLE / 'models' / 'Qwen3-30B-A3B-Q4_K_M.gguf')!r}); "
        "w = build_workload(generate(Shape(48, 128, 8), Knobs(), 50), Batching(), 128); "
        "k = class_lru.kernel(); simulate_budgets(m, w, [900, 4000], kernel=k); "
        "print(overlap(), k.lane_feed is None)"
    )
    env = os.environ | {"NUMBA_THREADING_LAYER": "workqueue"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["False", "True"]


def test_a_crfs_class_counted_on_bounds_is_floor_log2_capped_at_every_power_of_two_and_between():
    for n_classes in (1, 3, 8, 64):
        bounds = class_bounds(n_classes)
        powers = 2.0 ** np.arange(-3, n_classes + 2)
        near = np.concatenate([np.nextafter(powers, 0.0), powers, np.nextafter(powers, np.inf)])
        values = np.concatenate([near, np.random.default_rng(1).uniform(0.01, 2.0**n_classes, 10_000)])
        counted = (values[:, None] >= bounds[None, 1:]).sum(axis=1)
        expected = [class_lru.crf_class(v, n_classes) for v in values]
        assert counted.tolist() == expected, n_classes


def test_a_passs_lanes_hold_its_pools_from_a_quarter_of_its_groups_keys_when_enough_with_the_same_counts():
    model = load_model(SAMPLE / "models" / "Qwen3-30B-A3B-Q4_K_M.gguf")  # two groups of 24 layers x 128 experts
    caps = np.array([700, 800, 900, 1000, 1100, 1200, 2000])  # 6 from a quarter of a group's 3,072 keys
    assert class_lru.new_state(caps, 48, 128, group_keys=3072).n_list == 1
    assert class_lru.new_state(caps, 48, 128).n_list == 7  # one above a quarter of the model's keys: too few
    assert len(class_lru.new_state(caps[-1:], 48, 128, group_keys=3072).masks) == 0  # one large pool: its list
    kernel, seen = class_lru.kernel(), []

    def spying(caps, n_layer, n_expert, group_keys=None):
        seen.append(group_keys)
        return kernel.new_state(caps, n_layer, n_expert, group_keys)

    def model_keys(caps, n_layer, n_expert, group_keys=None):  # every pass laid out against the model's keys
        return kernel.new_state(caps, n_layer, n_expert)

    work = build_workload(generate(Shape(48, 128, 8), Knobs(), 200, seed=3), Batching(), 128)
    budgets = [900, 4500, 5200, 5900, 6600, 7300, 8000]  # pools of 170 and 800-1,500 slots
    on_groups = _curve(replace(kernel, new_state=spying), budgets, work, model)
    assert on_groups == _curve(replace(kernel, new_state=model_keys), budgets, work, model)
    assert seen == [24 * 128, 24 * 128]
