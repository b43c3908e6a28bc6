"""Routing fitted to logged decode hit rates: it recovers rates it could produce, says where it comes from,
and refuses what it cannot fit."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from conftest import ROOT

from moe_model.errors import WorkloadError
from moe_model.llama.slot_plan import Placement
from moe_model.readers.model_spec import load_model, uniform_spec
from moe_model.resources import data_path
from moe_model.routing.logged import (
    ONE_LOG_SPREAD_JSON,
    CrossPrediction,
    LoggedHitRate,
    RunLength,
    fit_to_logs,
    one_log_errors,
    one_log_miss_spread,
    simulated_hit_rates,
)
from moe_model.routing.synthetic import MATCH_MODEL, Knobs, RoutingPreset
from moe_model.workload import Batching

MODEL = uniform_spec(4, 16, 2)  # 64 (layer, expert) slots of 1 MiB in one group: budget n+1 buys n slots
CPU_MOE = Placement(cpu_moe=True)
PRESET = RoutingPreset("test", Knobs(), 3.0, "a test", MATCH_MODEL)
RANDOM_WEIGHT_HEADER = data_path("groundtruth", "run3", "model-header.gguf")
TRUE_KNOBS = Knobs(skew=1.5, working_set=0.5, drift=0.01, reuse=0.4)


def _points_from(knobs: Knobs, budgets=(9, 17, 33, 49)) -> list[LoggedHitRate]:
    """Hit rates the synthetic routing itself gives at these budgets: a fit must be able to reproduce them."""
    template = [LoggedHitRate(f"b{b}", b, CPU_MOE, 0.5, 300, 1) for b in budgets]
    rates = simulated_hit_rates(MODEL, knobs, template, RunLength.of(template))
    return [LoggedHitRate(p.name, p.budget_mib, CPU_MOE, rates[p.name], 300, 1) for p in template]


@pytest.fixture(scope="module")
def four_logs():
    points = _points_from(TRUE_KNOBS)
    return points, fit_to_logs(MODEL, points, PRESET)


@pytest.fixture(scope="module")
def one_log():
    return fit_to_logs(MODEL, _points_from(TRUE_KNOBS, budgets=(17,)), PRESET)


def test_the_fit_reproduces_hit_rates_the_routing_can_produce_and_reports_a_spread(four_logs):
    points, routing = four_logs
    assert routing.fit_points < 3.0  # 2.7 since the replay runs llama-server's warm-up first (0.8 before, spread 7.9)
    assert set(routing.left_out_points) == {p.name for p in points}
    assert all(v is not None for v in routing.left_out_points.values())
    assert routing.spread_points >= routing.fit_points
    # positive control: the preset it started from misses the same points by far more
    preset_rates = simulated_hit_rates(MODEL, PRESET.knobs, points, routing.length)
    assert max(abs(preset_rates[p.name] - p.hit_rate) for p in points) > 0.05


def test_the_routing_says_it_was_fitted_to_the_logs_and_with_what_spread(four_logs):
    routing = four_logs[1]
    assert routing.describe().startswith(f"fitted to your 4 logs, ±{routing.spread_points:.1f} hit-rate points")


def test_the_routing_counts_the_logs_given_and_says_which_gave_no_hit_rate_and_why(four_logs):
    """Six logs given, one without a cache: 'fitted to 5 of your 6 logs' and the one named, never '5 logs' alone;
    two runs of one file count as one log."""
    routing = replace(four_logs[1], given=5, not_used=(("server_off.log", "no MoE cache"),))
    assert routing.fitted_to == "fitted to 4 of your 5 logs"
    assert routing.describe().startswith("fitted to 4 of your 5 logs (not used: server_off.log: no MoE cache), ±")
    two_runs = [replace(p, name=f"a.log#{i + 1}") for i, p in enumerate(four_logs[0][:2])]
    assert replace(four_logs[1], points=tuple(two_runs)).fitted_to == "fitted to your 1 log"


def test_one_log_carries_its_in_fit_error_and_the_measured_one_log_factor_on_the_misses(one_log):
    routing = one_log
    assert routing.left_out_points == {"b17": None} and routing.fitted_to == "fitted to your 1 log"
    assert routing.spread_points == round(routing.fit_points, 2)
    assert routing.miss_spread == one_log_miss_spread(MODEL) > 0
    assert routing.spreads == (routing.spread_points, routing.miss_spread)
    assert "misses x/÷" in routing.describe()


def test_several_logs_carry_their_left_out_points_and_no_factor_on_the_misses(four_logs):
    assert four_logs[1].miss_spread == 0.0


def test_the_one_log_factor_is_measured_on_a_trained_models_routing_and_on_the_random_weight_logs():
    record = json.loads(ONE_LOG_SPREAD_JSON.read_text())
    assert record["written_by"] == "scripts/one_log_spread.py" and "trained" in record["caveat"]
    assert record["miss_log_pairs"]["trained"] >= 24 and record["miss_log_pairs"]["random_weight"] >= 24
    assert one_log_miss_spread(MODEL) == record["miss_log_rms"]["trained"]  # a model with trained weights
    assert one_log_miss_spread(load_model(RANDOM_WEIGHT_HEADER)) == record["miss_log_rms"]["random_weight"]
    assert record["spread_points"] == record["all"]["rms_points"] and record["all"]["pairs"] > len(record["sets"])


def test_the_docs_show_the_stored_one_log_factor():
    record = json.loads(ONE_LOG_SPREAD_JSON.read_text())
    doc = (ROOT / "docs" / "models-and-fits.md").read_text()
    assert f"a trained model's x/÷{math.exp(record['miss_log_rms']['trained']):.2f}" in doc


def test_a_cross_prediction_weighs_its_error_as_a_factor_on_the_misses():
    pair = CrossPrediction("a", "b", 2.0, -2.0, 0.96)  # 96 % logged, 94 % simulated: misses 4 % -> 6 %
    assert pair.miss_log_error == pytest.approx(math.log(0.065 / 0.045))


def test_one_log_predicting_another_gives_a_signed_error_for_each_pair():
    points = _points_from(TRUE_KNOBS, budgets=(9, 33))
    pairs = one_log_errors(MODEL, points, PRESET)
    assert [(p.fitted, p.predicted) for p in pairs] == [("b9", "b33"), ("b33", "b9")]
    assert [p.budget_ratio for p in pairs] == [33 / 9, 9 / 33]
    assert all(math.isfinite(p.error_points) and abs(p.error_points) < 100 for p in pairs)
    # the routing fitted to b9 alone is the one fit_to_logs gives: its b33 rate is the pair's prediction
    alone = fit_to_logs(MODEL, points[:1], PRESET)
    predicted = simulated_hit_rates(MODEL, alone.knobs, points[1:], alone.length)["b33"]
    assert pairs[0].error_points == pytest.approx(100 * (predicted - points[1].hit_rate))


def test_a_workload_like_the_logs_has_their_length(one_log):
    work = one_log.workload(MODEL, Batching(warmup=False))
    assert work.decode_tokens == 300


def test_nothing_to_fit_is_one_clear_error():
    with pytest.raises(WorkloadError, match="nothing to fit"):
        fit_to_logs(MODEL, [], PRESET)
    point = LoggedHitRate("a", 17, CPU_MOE, 0.5, 300, 1)
    with pytest.raises(WorkloadError, match="its own name"):
        fit_to_logs(MODEL, [point, point], PRESET)


@pytest.mark.parametrize(
    "fields",
    [{"hit_rate": 1.5}, {"budget_mib": 0}, {"decode_tokens": 0}, {"requests": 0}],
    ids=["rate above 1", "no budget", "no tokens", "no requests"],
)
def test_an_impossible_logged_point_is_refused(fields):
    good = {"name": "a", "budget_mib": 17, "placement": CPU_MOE, "hit_rate": 0.5, "decode_tokens": 300, "requests": 1}
    LoggedHitRate(**good)  # positive control
    with pytest.raises(WorkloadError, match="logged hit rate"):
        LoggedHitRate(**(good | fields))
