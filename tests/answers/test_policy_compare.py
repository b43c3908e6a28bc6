"""One price: Explore's policy chart, `predict --policy NAME` and `recommend` give the same number to the digit."""

from __future__ import annotations

import json

import pytest
from conftest import GROUNDTRUTH, GT_HEADER

from moe_model.answers.basis import MODELLED, REPLAYED, SYNTHETIC
from moe_model.answers.basis import TRACE as FROM_TRACE
from moe_model.answers.explore import explore_point
from moe_model.answers.policy_compare import (
    compare,
    compare_priced,
    hit_rate_bases,
    policy_scenario,
    policy_workload,
)
from moe_model.cli.main import main
from moe_model.fits.calibration import default_time_model
from moe_model.llama.batching import workload_from
from moe_model.policies import CLASS_LRU, CPU_SHARE, POLICIES, REFERENCE
from moe_model.readers.traces import load_any
from moe_model.settings import DEFAULT_CPU_SHARE
from moe_model.speed.hardware import preset
from moe_model.speed.scenario import Scenario
from moe_model.workload import Batching

TRACE = GROUNDTRUTH / "traces" / "b25.npz"
BUDGETS = (97, 633, 1614)  # the recommender's grid for this model on an H200 (--cpu-moe; shares at its full budget)


def cli_json(capsys, *argv: str) -> dict:
    assert main([*argv, "--model", str(GT_HEADER), "--hardware", "h200", "--trace", str(TRACE), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def explore(gt_model):
    """The numbers Explore's policy chart shows: the library function its cached call runs, on the same trace."""
    work = workload_from(load_any(TRACE), Batching(), gt_model.n_expert)
    tm = default_time_model()
    return compare_priced(gt_model, preset("h200"), tm.params, Scenario(), policy_workload(work), BUDGETS)


def test_explore_policy_chart_and_predict_policy_agree_to_the_digit_for_every_policy(explore, capsys):
    at = BUDGETS.index(633)
    for name in POLICIES:
        share = ["--cpu-share", "0.5"] if name == CPU_SHARE else []
        predicted = cli_json(capsys, "predict", "--policy", name, "--budget-mib", "633", *share)
        assert explore.decode_tps[name][at] == predicted["decode_tps"], name
    assert explore.decode_tps["belady"][at] > explore.decode_tps[REFERENCE][at]  # positive control: they differ


def test_explore_policy_chart_and_recommend_agree_to_the_digit(explore, capsys):
    options = cli_json(capsys, "recommend")["options"]

    def option(budget: int, share: float) -> float:
        (found,) = [
            o["decode_tps"]
            for o in options
            if o["scenario"]["placement"] == "cpu-moe"
            and o["scenario"]["budget_mib"] == budget
            and o["scenario"]["load_mode"] == "mmap"
            and o["scenario"]["cpu_share"] == share
        ]
        return found

    for budget in (97, 633):  # the default build (mainline) runs ClassLRU
        assert option(budget, 0.0) == explore.decode_tps[CLASS_LRU][BUDGETS.index(budget)]
    assert option(1614, 0.5) == explore.decode_tps[CPU_SHARE][BUDGETS.index(1614)]


@pytest.mark.parametrize("share", [0.2, 0.5, 0.8])
def test_the_charts_cpu_share_row_prices_the_sidebars_share_as_the_headline_does(gt_model, share):
    """Explore's headline (explore_point on the sidebar's scenario) and the chart's row of the same policy, on the
    same workload and budget: one number at any share (the chart once priced its default 0.5 whatever was set)."""
    work = policy_workload(workload_from(load_any(TRACE), Batching(), gt_model.n_expert))
    hw, tm, base, at = preset("h200"), default_time_model(), Scenario(knobs=(("share", share),)), BUDGETS.index(633)
    headline = explore_point(gt_model, hw, tm.params, base, work, 633).prediction
    chart = compare_priced(gt_model, hw, tm.params, base, work, BUDGETS, names=[CPU_SHARE, "belady"])
    assert base.policy_name == CPU_SHARE and chart.decode_tps[CPU_SHARE][at] == headline.decode_tps
    default = compare_priced(gt_model, hw, tm.params, Scenario(), work, [633], names=[CPU_SHARE])
    assert (default.decode_tps[CPU_SHARE][0] == headline.decode_tps) == (share == DEFAULT_CPU_SHARE)  # it moves


def test_a_cpu_share_row_keeps_the_scenarios_share_or_its_default_and_every_other_policy_runs_without_one():
    assert policy_scenario(Scenario(knobs=(("share", 0.8),)), CPU_SHARE).policy_knobs == {"share": 0.8}
    assert policy_scenario(Scenario(), CPU_SHARE).policy_knobs == {"share": POLICIES[CPU_SHARE].knobs["share"]}
    belady = policy_scenario(Scenario(knobs=(("share", 0.8),)), "belady")
    assert belady.policy_name == "belady" and belady.cpu_share == 0.0


def test_the_counts_only_comparison_is_the_priced_ones_counts(gt_model, explore):
    work = workload_from(load_any(TRACE), Batching(), gt_model.n_expert)
    counts = compare(gt_model, policy_workload(work), BUDGETS, names=["belady", CPU_SHARE])
    assert counts.hit_rates() == {name: explore.hit_rates()[name] for name in counts.results}


def test_the_threaded_comparison_counts_what_one_policy_after_another_counts_and_reuses_the_builds_simulation(gt_model):
    work = policy_workload(workload_from(load_any(TRACE), Batching(), gt_model.n_expert))
    threaded = compare(gt_model, work, BUDGETS[:2], build_policy=CLASS_LRU)
    serial = compare(gt_model, work, BUDGETS[:2], threads=False)
    assert threaded.hit_rates() == serial.hit_rates() and list(threaded.results) == list(POLICIES)
    simulated = [int(r.layer_hits.sum()) for r in threaded.simulation]
    assert simulated == [int(r.hits.sum()) for r in threaded.results[CLASS_LRU]] and not serial.simulation
    knobbed = compare(
        gt_model, work, BUDGETS[:2], names=[CLASS_LRU], knobs={CLASS_LRU: {"n_classes": 1}}, build_policy=CLASS_LRU
    )  # knobs of its own: run beside the simulation, not reusing it
    assert [int(r.hits.sum()) for r in knobbed.results[CLASS_LRU]] != simulated


def test_a_comparison_from_a_memo_prices_another_card_without_replaying_again(gt_model):
    from moe_model.pricing.curve import ReplayMemo

    work = policy_workload(workload_from(load_any(TRACE), Batching(), gt_model.n_expert))
    tm, memo, names = default_time_model(), ReplayMemo(work), [CPU_SHARE, "belady"]
    compare_priced(gt_model, preset("h200"), tm.params, Scenario(), memo, BUDGETS, names)
    replayed = memo.replayed_budgets
    other = compare_priced(gt_model, preset("t4"), tm.params, Scenario(), memo, BUDGETS, names)
    assert memo.replayed_budgets == replayed and other.n_ubatches == work.n_ubatches
    plain = compare_priced(gt_model, preset("t4"), tm.params, Scenario(), work, BUDGETS, names)
    assert other.decode_tps == plain.decode_tps and other.hit_rates() == plain.hit_rates()


def test_the_first_answer_at_the_users_budget_is_each_curves_own_figure_there(gt_model, explore):
    """Explore's table before the curves (issue 38): every policy at one budget, priced alone, is the comparison's
    point at that budget to the digit, with its hit rate's basis (a transcription replaying a trace: replayed)."""
    work = policy_workload(workload_from(load_any(TRACE), Batching(), gt_model.n_expert))
    alone = compare_priced(gt_model, preset("h200"), default_time_model().params, Scenario(), work, [633])
    rows = alone.at(633, Scenario(), FROM_TRACE)
    assert [r.policy for r in rows] == list(POLICIES)
    at = BUDGETS.index(633)
    for r in rows:
        assert r.hit_rate == explore.hit_rates()[r.policy][at] and r.decode_tps == explore.decode_tps[r.policy][at]
        assert r.hit_basis == (REPLAYED if POLICIES[r.policy].label == "exact" else MODELLED), r.policy
    assert {r.hit_basis for r in alone.at(633, Scenario(), SYNTHETIC)} == {MODELLED}  # the preset: a model


def test_the_comparisons_captions_name_each_basis_once_with_its_policies():
    names = [REFERENCE, CLASS_LRU, "belady"]
    assert hit_rate_bases(names, Scenario(), FROM_TRACE) == {REPLAYED: [REFERENCE, "belady"], MODELLED: [CLASS_LRU]}
    assert hit_rate_bases(names, Scenario(), SYNTHETIC) == {MODELLED: names}


def test_a_comparison_on_threads_stops_at_its_next_policy_once_its_watcher_stops_it(gt_model):
    """The page's comparison runs its policies on threads: each sees the page's stop (ui.background)."""
    from moe_model.progress import Watch, WorkStoppedError, watching

    work = policy_workload(workload_from(load_any(TRACE), Batching(), gt_model.n_expert))
    watch = Watch()
    watch.stop.set()
    with watching(watch), pytest.raises(WorkStoppedError):
        compare_priced(gt_model, preset("h200"), default_time_model().params, Scenario(), work, [633])
