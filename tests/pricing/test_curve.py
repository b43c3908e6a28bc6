"""The curve pipeline: each budget resolved and planned once, replayed and priced exactly as one budget alone."""

from __future__ import annotations

import sys
from dataclasses import replace

import numpy as np
import pytest
from conftest import GROUNDTRUTH

from moe_model.llama import slot_plan
from moe_model.llama.simulate import simulate_budgets, simulate_plans
from moe_model.llama.slot_plan import Placement
from moe_model.policies import class_lru
from moe_model.pricing import curve as curve_module
from moe_model.pricing.curve import budget_axis, curve
from moe_model.readers.traces import load_recorded
from moe_model.speed.hardware import preset
from moe_model.speed.range_inputs import RangeInputs
from moe_model.speed.rates import TimeParams
from moe_model.speed.scenario import Scenario, resolve
from moe_model.speed.time_model import predict
from moe_model.speed.traffic import from_workload

BUDGETS_64 = list(range(20, 20 + 64 * 25, 25))  # 20..1595 MiB: from below the smallest that starts to near full


@pytest.fixture(scope="module")
def work():
    return load_recorded(GROUNDTRUTH / "traces" / "b25.npz")


@pytest.fixture
def calls(monkeypatch):
    """Every resolve of the curve and every plan_cache anywhere in moe_model, counted by budget."""
    counted = {"resolve": [], "plan_cache": []}
    real_resolve, real_plan = curve_module.resolve, slot_plan.plan_cache

    def resolve_counted(model, hw, sc):
        counted["resolve"].append(sc.budget_mib)
        return real_resolve(model, hw, sc)

    def plan_counted(model, budget_mib, placement=None):
        counted["plan_cache"].append(budget_mib)
        return real_plan(model, budget_mib, placement)

    monkeypatch.setattr(curve_module, "resolve", resolve_counted)
    for name, module in list(sys.modules.items()):
        if name.startswith("moe_model") and getattr(module, "plan_cache", None) is real_plan:
            monkeypatch.setattr(module, "plan_cache", plan_counted)
    return counted


def test_a_64_budget_curve_resolves_and_plans_each_budget_once(gt_model, work, calls):
    points = curve(gt_model, preset("h200"), TimeParams(), Scenario(), BUDGETS_64, lambda sc: work).points
    assert sorted(calls["resolve"]) == BUDGETS_64
    assert sorted(calls["plan_cache"]) == BUDGETS_64
    replayed = [p for p in points if p.counts is not None]
    assert len(replayed) > 60 and all(p.traffic is not None for p in replayed)  # positive control: it replayed


def test_a_64_budget_fit_curve_resolves_each_budget_once(gt_model, work, calls):
    fit = Scenario(Placement(cpu_moe=False, fit=True))
    curve(gt_model, preset("h200"), TimeParams(), fit, BUDGETS_64, lambda sc: work)
    assert sorted(calls["resolve"]) == BUDGETS_64  # --fit's own search plans more; the curve resolves once


@pytest.mark.parametrize("policy", ["", "belady", "cpu-share-b12191"])
def test_each_budget_of_a_curve_is_priced_as_predict_prices_it_alone(gt_model, work, policy):
    hw, params = preset("h200"), TimeParams()
    base = Scenario(policy=policy, knobs=(("share", 0.8),) if policy.startswith("cpu") else ())
    budgets = [14, 161, 403, 806]
    points = curve(gt_model, hw, params, base, budgets, lambda sc: work, RangeInputs(0.1, 2.0)).points
    for budget, point in zip(budgets, points, strict=True):
        sc = base.with_budget(budget)
        layout = resolve(gt_model, hw, sc)
        traffic = from_workload(gt_model, layout, sc, work) if layout.plan.starts else None
        kernel = sc.band_kernel()
        banded = layout.plan.starts and kernel is not None and kernel.band is not None  # ClassLRU's readings
        band = simulate_plans(gt_model, work, [layout.plan], kernel)[0].band if banded else None
        alone = predict(gt_model, hw, params, sc, traffic, layout=layout, ranges=RangeInputs(0.1, 2.0),
                        policy_band=band)  # fmt: skip
        assert point.prediction.decode_tps == alone.decode_tps
        assert point.prediction.decode_tps_range == alone.decode_tps_range
        assert (point.prediction.policy_band is not None) == (policy == "" and layout.plan.starts)
    assert not points[0].prediction.starts and points[2].prediction.decode_tps > 0  # 14 MiB refuses, 403 starts


def test_with_lru_the_curve_keeps_llamacpps_own_statistics_beside_another_policys_counts(gt_model, work):
    budgets = [161, 403]
    share = Scenario(knobs=(("share", 0.8),))  # mainline by default: the cache's own statistics are ClassLRU's
    points = curve(gt_model, preset("h200"), TimeParams(), share, budgets, lambda sc: work, with_lru=True).points
    own = simulate_budgets(gt_model, work, budgets, kernel=class_lru.kernel())
    for point, sim in zip(points, own, strict=True):
        np.testing.assert_array_equal(point.simulated.layer_hits, sim.layer_hits)
        assert point.counts.cpu.sum() > 0  # the priced counts are the CPU share's, not the cache's own
    old = Scenario(build=11549, policy="belady")  # before b12170: the exact LRU's statistics
    points = curve(gt_model, preset("h200"), TimeParams(), old, budgets, lambda sc: work, with_lru=True).points
    for point, sim in zip(points, simulate_budgets(gt_model, work, budgets), strict=True):
        np.testing.assert_array_equal(point.simulated.layer_hits, sim.layer_hits)
    assert curve(gt_model, preset("h200"), TimeParams(), share, budgets, lambda sc: work).points[0].simulated is None


def test_a_given_hit_rate_replays_nothing_and_prices_that_rate(gt_model):
    def no_workload(sc):
        raise AssertionError("a hit rate given must not read a workload")

    hw, params = preset("h200"), TimeParams()
    point = curve(gt_model, hw, params, Scenario(), [403], no_workload, hit_rate=0.6).points[0]
    assert point.counts is None and point.prediction.hit_rate == pytest.approx(0.6)
    assert (
        point.prediction.decode_tps == predict(gt_model, hw, params, Scenario(budget_mib=403), hit_rate=0.6).decode_tps
    )


def test_budget_0_of_one_token_ubatches_needs_no_workload_and_several_tokens_do(gt_model, work):
    def no_workload(sc):
        raise AssertionError("no cache and one token per ubatch: nothing to count")

    assert curve(gt_model, preset("h200"), TimeParams(), Scenario(), [0], no_workload).points[0].counts is None
    two = replace(Scenario(), concurrency=2)
    assert curve(gt_model, preset("h200"), TimeParams(), two, [0], lambda sc: work).points[0].counts is not None


def test_the_axis_spreads_the_same_budgets_for_every_card_and_stops_the_slider_where_the_card_fits(gt_model, qwen30b):
    assert (
        budget_axis(qwen30b, preset("t4"), Scenario()).budgets
        == budget_axis(qwen30b, preset("rtx 3090"), Scenario()).budgets
    )
    for model, hw in ((gt_model, preset("h200")), (qwen30b, preset("t4"))):
        axis = budget_axis(model, hw, Scenario())
        stops = set(range(0, axis.top_mib + 1, axis.step_mib))
        assert list(axis.budgets) == sorted(set(axis.budgets)) and axis.budgets[0] == axis.lowest_mib
        assert axis.budgets[-1] == max(axis.full_mib, axis.lowest_mib)
        assert axis.top_mib <= max(axis.fits_mib, axis.full_mib) and len(stops) <= 41
        assert set(axis.policy_budgets()) <= set(range(axis.lowest_mib, axis.full_mib + 1))
    assert not budget_axis(qwen30b, preset("t4").with_changes(vram_gib=1.0), Scenario()).cache_fits


def test_the_memo_replays_budgets_with_the_same_pools_once_and_answers_each_at_its_own_budget(qwen30b, monkeypatch):
    from moe_model.llama.slot_plan import full_budget_mib
    from moe_model.pricing.curve import ReplayMemo, replay
    from moe_model.pricing.workloads import synthetic_workload

    base, hw = Scenario(build=11549), preset("rtx 5090")
    work = synthetic_workload(qwen30b, base, n_tokens=200)
    full = full_budget_mib(qwen30b, base.placement)
    budgets = [full // 3, full, full + 500, 2 * full]  # the last three cache every expert: the same pools
    asked = []
    real = curve_module.replay_counts
    monkeypatch.setattr(
        curve_module, "replay_counts", lambda *a: asked.append([p.budget_mib for p in a[3]]) or real(*a)
    )
    memo = ReplayMemo(work)
    shared = replay(qwen30b, hw, base, budgets, memo)
    assert asked == [[full // 3, full]] and memo.replayed_budgets == 2
    alone = [replay(qwen30b, hw, base, [b], lambda sc: work)[0] for b in budgets]
    for one, other, budget in zip(shared, alone, budgets, strict=True):
        assert one.counts.budget_mib == budget and one.simulated.budget_mib == budget
        assert one.counts.as_dict() == other.counts.as_dict()
        assert one.simulated.plan == other.simulated.plan and one.simulated.hit_rate == other.simulated.hit_rate


def test_two_threads_asking_a_memo_for_the_same_budgets_replay_them_once(qwen30b, monkeypatch):
    import threading

    from moe_model.pricing.curve import ReplayMemo, replay
    from moe_model.pricing.workloads import synthetic_workload

    base, hw = Scenario(build=11549), preset("t4")
    work = synthetic_workload(qwen30b, base, n_tokens=200)
    calls, started, release, second_asks = [], threading.Event(), threading.Event(), threading.Event()
    real = curve_module.replay_counts

    def held(*args):  # the first replay holds until the second thread has asked for the same budgets
        calls.append([p.budget_mib for p in args[3]])
        if len(calls) == 1:
            started.set()
            release.wait(60)
        return real(*args)

    class Memo(ReplayMemo):
        def claim(self, keys):
            if threading.current_thread().name == "second":
                second_asks.set()
            return super().claim(keys)

    monkeypatch.setattr(curve_module, "replay_counts", held)
    memo, out = Memo(work), {}
    budgets = [300, 900, 2000]
    first = threading.Thread(target=lambda: out.update(a=replay(qwen30b, hw, base, budgets, memo)))
    second = threading.Thread(target=lambda: out.update(b=replay(qwen30b, hw, base, budgets, memo)), name="second")
    first.start()
    assert started.wait(60)
    second.start()
    assert second_asks.wait(60)
    release.set()
    first.join(120)
    second.join(120)
    assert calls == [budgets] and memo.replayed_budgets == 3  # the second waited for the first's replay
    assert [r.counts.as_dict() for r in out["a"]] == [r.counts.as_dict() for r in out["b"]]


def test_a_memo_without_waiting_replays_a_budget_another_thread_holds_and_shares_what_is_known(qwen30b, monkeypatch):
    import threading

    from moe_model.pricing.curve import ReplayMemo, replay
    from moe_model.pricing.workloads import synthetic_workload

    base, hw = Scenario(build=11549), preset("t4")
    work = synthetic_workload(qwen30b, base, n_tokens=200)
    started, release, real = threading.Event(), threading.Event(), curve_module.replay_counts

    def held(*args):  # the curve's replay holds until the answer has been replayed beside it
        if threading.current_thread().name == "curve":
            started.set()
            release.wait(60)
        return real(*args)

    monkeypatch.setattr(curve_module, "replay_counts", held)
    memo = ReplayMemo(work)
    curve_thread = threading.Thread(target=replay, args=(qwen30b, hw, base, [300, 900], memo), name="curve")
    curve_thread.start()
    assert started.wait(60)
    answer = replay(qwen30b, hw, base, [900], memo.without_waiting())[0]  # did not wait for the curve
    release.set()
    curve_thread.join(120)
    assert answer.counts.as_dict() == replay(qwen30b, hw, base, [900], lambda sc: work)[0].counts.as_dict()
    replayed = memo.replayed_budgets
    assert replayed == 3  # the curve's 300 and 900, the answer's 900 beside it
    assert replay(qwen30b, hw, base, [300], memo.without_waiting())[0].counts is not None
    assert memo.replayed_budgets == replayed  # 300 came from the curve's entries
