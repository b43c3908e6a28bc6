"""What the Explore page shows, computed below the UI: its curve, the answer at a budget, measured points."""

from __future__ import annotations

import pandas as pd
import pytest

from moe_model.limits import MAX_ROUTING_DRAWS
from moe_model.speed.calibration import default_time_model
from moe_model.speed.curve import curve
from moe_model.speed.explore import answer_at, explore_curve, explore_point, measured_points, simulated_prompt_tokens
from moe_model.speed.hardware import preset
from moe_model.speed.measured import synthetic_workload
from moe_model.speed.measurements import load_reference
from moe_model.speed.scenario import Scenario
from moe_model.speed.time_model import verdict


@pytest.fixture(scope="module")
def setting(qwen30b):
    tm, base = default_time_model(), Scenario()
    return qwen30b, preset("t4"), tm, base, synthetic_workload(qwen30b, base, n_tokens=600)


@pytest.fixture(scope="module")
def view(setting):
    model, hw, tm, base, work = setting
    return explore_curve(model, hw, tm.params, base, work, rel_error=tm.rel_error, spread_points=1.0)


def test_the_curve_is_drawn_at_the_axis_budgets_with_llamacpps_statistics_at_each(view):
    assert view.curve.budgets == view.axis.budgets
    assert [r.budget_mib for r in view.simulated] == list(view.axis.budgets)
    assert any(s is not None for s in view.speeds) and len(view.ranges) == len(view.speeds)


def test_a_budget_typed_between_the_stops_is_answered_as_the_curve_answers_it(setting, view):
    model, hw, tm, base, work = setting
    on_curve = view.curve.points[len(view.curve.points) // 2]
    alone = explore_point(
        model, hw, tm.params, base, work, on_curve.budget_mib, rel_error=tm.rel_error, spread_points=1.0
    )
    assert alone.prediction.decode_tps == on_curve.prediction.decode_tps
    assert alone.simulated.hit_rate == on_curve.simulated.hit_rate


def test_the_headline_judges_the_cache_against_the_same_placement_without_one(setting, view):
    model, hw, tm, base, work = setting
    point = view.curve.points[-1]
    answer = answer_at(model, hw, view, point)
    assert answer.verdict == verdict(point.prediction, view.without) and answer.host.fits
    assert (
        view.without.decode_tps
        == curve(model, hw, tm.params, base, [0], lambda sc: work).points[0].prediction.decode_tps
    )
    zero = explore_point(model, hw, tm.params, base, work, 0)
    assert answer_at(model, hw, view, zero).verdict == "no cache" and zero.simulated is not None
    assert set(view.no_cache) == {"--fit", "--cpu-moe"}
    assert view.no_cache["--cpu-moe"].decode_tps == view.without.decode_tps  # the base is --cpu-moe


def test_no_speed_is_drawn_where_the_host_cannot_hold_the_experts(setting):
    model, hw, tm, base, work = setting
    small_ram = explore_curve(model, hw.with_changes(ram_gib=8.0), tm.params, base, work)
    assert not any(small_ram.ram_fits) and all(s is None for s in small_ram.speeds)
    assert any(p.usable for p in small_ram.curve.predictions)  # the time model still priced them


def test_the_csv_table_has_one_row_per_budget_and_the_drawn_speeds(view):
    table = view.table()
    assert list(table["budget_mib"]) == list(view.axis.budgets)
    drawn = table["predicted_decode_tps"]
    assert drawn.isna().tolist() == [s is None for s in view.speeds]
    assert drawn.dropna().tolist() == [s for s in view.speeds if s is not None]
    assert {"hit_rate_small", "hit_rate_large", "uploaded_mib_per_token", "starts"} <= set(table.columns)


def test_measured_points_are_this_gpu_model_concurrency_and_placement_plus_the_users_logs(qwen30b):
    reference = load_reference()
    points = measured_points(reference, None, preset("t4"), qwen30b, 1, "--cpu-moe")
    assert len(points) and set(points["gpu"]) == {"Tesla T4"} and set(points["placement"]) == {"--cpu-moe"}
    assert set(points["parallel"]) == {1} and points["decode_tps"].notna().all()
    logged = pd.DataFrame({"model": [qwen30b.name, "other"], "decode_tps": [10.0, 20.0]})
    with_logs = measured_points(reference, logged, preset("t4"), qwen30b, 1, "--cpu-moe")
    assert len(with_logs) == len(points) + 1 and 10.0 in with_logs["decode_tps"].tolist()


def test_simulated_prompt_routing_stays_within_the_draw_limit(qwen30b):
    assert simulated_prompt_tokens(100, qwen30b) == 100
    capped = simulated_prompt_tokens(10**6, qwen30b)
    assert capped < 10**6 and capped * qwen30b.n_layer * qwen30b.n_expert * 12 <= MAX_ROUTING_DRAWS
