"""The modelled CPU-share policy: share 0 is b11549 exactly; a share only starts once the pool is full."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import GROUNDTRUTH

from moe_model.llama.simulate import simulate
from moe_model.policies.cpu_share_kernel import simulate_share
from moe_model.readers.traces import load_recorded


@pytest.mark.parametrize("budget", [15, 161, 403, 1614])
def test_share_zero_equals_the_exact_simulator(gt_model, budget):
    work = load_recorded(GROUNDTRUTH / "traces" / "np4_b25.npz")
    exact, share = simulate(gt_model, work, budget), simulate_share(gt_model, work, budget, 0.0)
    assert int(share.hits.sum()) == exact.small.hits + exact.large.hits
    assert int(share.uploads.sum()) == exact.small.misses + exact.large.misses
    assert np.array_equal(share.hits, exact.layer_hits) and share.cpu.sum() == 0


def test_a_share_sends_that_share_of_misses_to_the_cpu_and_keeps_the_lookups(gt_model):
    work = load_recorded(GROUNDTRUTH / "traces" / "b25.npz")
    base, shared = simulate_share(gt_model, work, 403, 0.0), simulate_share(gt_model, work, 403, 0.8)
    misses = shared.cpu.sum() + shared.uploads.sum()
    assert shared.cpu.sum() / misses == pytest.approx(0.8, abs=0.05)  # warm-up fills the pool first
    lookups = base.hits + base.uploads
    assert np.array_equal(shared.hits + shared.uploads + shared.cpu, lookups)  # same distinct experts per layer
    assert not np.array_equal(shared.hits, base.hits)  # misses kept out of the pool change what hits later


def test_with_every_expert_cached_the_share_never_applies(gt_model):
    work = load_recorded(GROUNDTRUTH / "traces" / "b25.npz")
    assert simulate_share(gt_model, work, 1614, 0.95).cpu.sum() == 0  # the pool never fills up
