"""Temporary: the shared-queue ClassLRU kernel against the per-pool-size kernel it replaces, on many small cases."""

from __future__ import annotations

import numpy as np
import pytest

from moe_model.llama.lru_kernel import MODE_CACHE, MODE_PROBE, MODE_SKIP
from moe_model.policies import class_lru, class_lru_old

KNOB_SETS = [{}, {"clock": "group"}, {"ties": "high-class"}, {"increment": 0.5, "half_life_tokens": 3.0},
             {"n_classes": 2}, {"n_classes": 1}]  # fmt: skip


def random_case(rng):
    n_layer, n_expert, k = int(rng.integers(1, 4)), int(rng.choice([4, 8, 16])), int(rng.integers(1, 4))
    hot = int(rng.integers(min(k, n_expert), n_expert + 1))
    n_rec = int(rng.integers(1, 300))
    layer = rng.integers(0, n_layer, n_rec).astype(np.int32)
    ntok = rng.choice([0, 1, 1, 1, 2, 3, 5], n_rec).astype(np.int32)
    ids = [rng.choice(hot, size=k, replace=False) if k <= hot else np.arange(k) for t in range(int(ntok.sum()))]
    ids = np.concatenate(ids).astype(np.int32) if ids else np.zeros(0, np.int32)
    off = np.concatenate([[0], np.cumsum(ntok.astype(np.int64) * k)[:-1]]).astype(np.int64)
    distinct = np.array([len(set(ids[o : o + n * k].tolist())) for o, n in zip(off, ntok, strict=True)])
    smallest = max(1, int(distinct.max(initial=1))) + int(rng.integers(0, 3))
    n_caps = int(rng.choice([1, 3, 10, 70, 140]))
    spread = int(rng.choice([2, n_expert, 4 * n_expert * n_layer]))  # tight pools evict often, large ones never
    caps = np.sort(rng.integers(smallest, smallest + spread, n_caps)).astype(np.int64)
    mode = rng.choice([MODE_CACHE, MODE_CACHE, MODE_CACHE, MODE_PROBE, MODE_SKIP], n_rec).astype(np.int8)
    large = rng.integers(0, 2, n_rec).astype(np.int8)
    return n_layer, n_expert, k, caps, (layer, ntok, off, mode, large, ids)


def run(module, case, knobs, cuts):
    n_layer, n_expert, k, caps, (layer, ntok, off, mode, large, ids) = case
    state = module.new_state(caps, n_layer, n_expert, **knobs)
    for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
        rows = slice(lo, hi)
        module.feed(state, layer[rows], ntok[rows], off[rows], mode[rows], large[rows], ids, k, n_expert)
    return module.results(state)


@pytest.mark.parametrize("seed", range(8))
def test_shared_queue_kernel_equals_the_per_pool_size_kernel(seed):
    rng = np.random.default_rng(seed)
    evicting = 0
    for _ in range(40):
        case = random_case(rng)
        knobs = KNOB_SETS[int(rng.integers(len(KNOB_SETS)))]
        n_rec = len(case[4][0])
        cuts = np.unique(np.concatenate([[0, n_rec], rng.integers(0, n_rec + 1, int(rng.integers(0, 6)))]))
        old = run(class_lru_old, case, knobs, [0, n_rec])
        new = run(class_lru, case, knobs, cuts.tolist())
        evicting += int(new[0].sum(axis=(0, 1))[0] < run(class_lru, case[:3] + (case[3][:1] * 0 + 10**6,) + case[4:], knobs, [0, n_rec])[0].sum())
        for a, b in zip(old, new, strict=True):
            assert np.array_equal(a, b), (seed, knobs, case[3])
    print('evicting', evicting)
