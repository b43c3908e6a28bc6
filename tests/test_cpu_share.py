"""The modelled CPU-share policy on ClassLRU's lists (b12191 runs on b12170's ClassLRU): share 0 is ClassLRU; a
share only starts once the pool is full; one default share for running and pricing."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import GROUNDTRUTH, QWEN30B

from moe_model.cli.main import main
from moe_model.policies import CLASS_LRU, CPU_SHARE, get_policy, run_policy
from moe_model.readers.traces import load_recorded
from moe_model.settings import DEFAULT_CPU_SHARE


def share_run(model, work, budget, share):
    return run_policy(CPU_SHARE, model, work, [budget], share=share)[0]


def test_share_zero_equals_class_lru(gt_model):
    work = load_recorded(GROUNDTRUTH / "traces" / "np4_b25.npz")
    budgets = [15, 161, 403, 1614]
    plain, shared = (
        run_policy(CLASS_LRU, gt_model, work, budgets),
        run_policy(CPU_SHARE, gt_model, work, budgets, share=0),
    )
    for cls, share in zip(plain, shared, strict=True):
        assert np.array_equal(share.hits, cls.hits) and np.array_equal(share.uploads, cls.uploads)
        assert share.cpu.sum() == 0


def test_a_share_sends_that_share_of_misses_to_the_cpu_and_keeps_the_lookups(gt_model):
    work = load_recorded(GROUNDTRUTH / "traces" / "b25.npz")
    base, shared = share_run(gt_model, work, 403, 0.0), share_run(gt_model, work, 403, 0.8)
    misses = shared.cpu.sum() + shared.uploads.sum()
    assert shared.cpu.sum() / misses == pytest.approx(0.8, abs=0.05)  # warm-up fills the pool first
    assert np.array_equal(shared.lookups, base.lookups)  # same distinct experts per layer
    assert not np.array_equal(shared.hits, base.hits)  # misses kept out of the pool change what hits later


def test_with_every_expert_cached_the_share_never_applies(gt_model):
    work = load_recorded(GROUNDTRUTH / "traces" / "b25.npz")
    assert share_run(gt_model, work, 1614, 0.95).cpu.sum() == 0  # the pool never fills up


def test_naming_the_cpu_share_policy_without_a_share_runs_and_prices_its_one_default():
    from moe_model.speed.scenario import Scenario

    named, given = Scenario(policy=CPU_SHARE), Scenario(cpu_share=DEFAULT_CPU_SHARE)
    assert get_policy(CPU_SHARE).knobs["share"] == DEFAULT_CPU_SHARE == named.cpu_share  # was 0 before
    assert named.policy_knobs == given.policy_knobs == {"share": DEFAULT_CPU_SHARE}
    assert get_policy(CPU_SHARE).cpu_fraction(**named.policy_knobs) == DEFAULT_CPU_SHARE  # what the time model prices
    assert Scenario(policy=CPU_SHARE, cpu_share=0.9).cpu_share == 0.9  # a share given is kept


def test_predict_naming_the_cpu_share_policy_prices_the_default_share_as_the_flag_does(capsys):
    base = ["predict", "--model", str(QWEN30B), "--hardware", "Tesla T4", "--budget-mib", "10000"]
    outs = []
    for extra in (["--policy", CPU_SHARE], ["--cpu-share", str(DEFAULT_CPU_SHARE)], ["--cpu-share", "0"]):
        assert main([*base, "--hit-rate", "0.9", "--json", *extra]) == 0
        outs.append(json.loads(capsys.readouterr().out))
    named, flag, none = outs
    assert named["scenario"]["cpu_share"] == flag["scenario"]["cpu_share"] == DEFAULT_CPU_SHARE
    assert named["decode_tps"] == flag["decode_tps"] != none["decode_tps"]  # priced with the share, not with 0
