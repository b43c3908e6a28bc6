"""What the Explore page shows, computed below the UI: its curve, the answer at a budget, measured points."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest

from moe_model.answers.explore import (
    EXPLORE_TOKENS,
    answer_at,
    explore_answer,
    explore_curve,
    explore_point,
    fitting_no_cache,
    measured_points,
    prompt_effect,
    prompt_routing_note,
    simulated_prompt_tokens,
)
from moe_model.answers.verdict import cache_verdict
from moe_model.fits.calibration import default_time_model
from moe_model.fits.log_timings import load_reference
from moe_model.limits import MAX_ROUTING_DRAWS
from moe_model.pricing.curve import curve
from moe_model.pricing.workloads import synthetic_workload
from moe_model.routing.synthetic import SEQ_LEN
from moe_model.speed.hardware import preset
from moe_model.speed.host_memory import REFUSED, STREAMS
from moe_model.speed.range_inputs import RangeInputs
from moe_model.speed.scenario import Scenario, context_for_depth
from moe_model.speed.vram import kv_cache_mib


@pytest.fixture(scope="module")
def setting(qwen30b):
    tm, base = default_time_model(), Scenario()
    return qwen30b, preset("t4"), tm, base, synthetic_workload(qwen30b, base, n_tokens=600)


@pytest.fixture(scope="module")
def view(setting):
    model, hw, tm, base, work = setting
    return explore_curve(model, hw, tm.params, base, work, ranges=RangeInputs(tm.rel_error, 1.0))


def test_the_curve_is_drawn_at_the_axis_budgets_with_llamacpps_statistics_at_each(view):
    assert view.curve.budgets == view.axis.budgets
    assert [r.budget_mib for r in view.simulated] == list(view.axis.budgets)
    assert any(s is not None for s in view.speeds) and len(view.ranges) == len(view.speeds)


def test_a_budget_typed_between_the_stops_is_answered_as_the_curve_answers_it(setting, view):
    model, hw, tm, base, work = setting
    on_curve = view.curve.points[len(view.curve.points) // 2]
    alone = explore_point(model, hw, tm.params, base, work, on_curve.budget_mib, RangeInputs(tm.rel_error, 1.0))
    assert alone.prediction.decode_tps == on_curve.prediction.decode_tps
    assert alone.simulated.hit_rate == on_curve.simulated.hit_rate


def test_the_headline_judges_the_cache_against_the_same_placement_without_one(setting, view):
    model, hw, tm, base, work = setting
    point = view.curve.points[-1]
    answer = answer_at(view, point)
    assert answer.cache == cache_verdict(point.prediction, view.without) and answer.host.fits
    assert (
        view.without.decode_tps
        == curve(model, hw, tm.params, base, [0], lambda sc: work).points[0].prediction.decode_tps
    )
    zero = explore_point(model, hw, tm.params, base, work, 0)
    assert answer_at(view, zero).verdict == "no cache" and zero.simulated is not None
    assert set(view.no_cache) == {"--fit", "--cpu-moe"}
    assert view.no_cache["--cpu-moe"].decode_tps == view.without.decode_tps  # the base is --cpu-moe


def test_the_answer_without_the_curve_is_the_curves_own_from_a_memo_of_another_card(setting, view):
    from moe_model.pricing.curve import ReplayMemo

    model, hw, tm, base, work = setting
    point, ranges, memo = view.curve.points[-2], RangeInputs(tm.rel_error, 1.0), ReplayMemo(work)
    explore_answer(model, preset("rtx 3090"), tm.params, base, memo, point.budget_mib, ranges)  # another card
    answer = explore_answer(model, hw, tm.params, base, memo, point.budget_mib, ranges)
    assert answer.point.prediction.decode_tps == point.prediction.decode_tps
    assert answer.point.prediction.decode_tps_range == point.prediction.decode_tps_range
    assert answer.cache == answer_at(view, point).cache and memo.replayed_budgets == 1  # once, for both cards


def test_simulated_prompts_say_why_the_headline_barely_moves_where_their_ubatches_bypass_the_pool():
    assert "bypass the cache's pool" in prompt_routing_note(Scenario(prompt_tokens=512, n_ubatch=512))
    assert prompt_routing_note(Scenario(prompt_tokens=512, n_ubatch=32)) == ""


@pytest.mark.parametrize("n_ubatch", [512, 32])
def test_simulating_the_prompts_is_answered_with_the_headline_without_and_with_them_at_the_budget(qwen30b, n_ubatch):
    """The toggle's answer (issue 38): both figures at the chosen budget, each the headline's own, and why they
    barely move where the prompt ubatches bypass the pool; at -ub 32 they go through it and the hit rate moves."""
    hw, tm, sc = preset("t4"), default_time_model(), Scenario(prompt_tokens=64, n_ubatch=n_ubatch)
    without, with_prompts = (synthetic_workload(qwen30b, sc, n_tokens=600, prompts=p) for p in (False, True))
    before, after = (explore_answer(qwen30b, hw, tm.params, sc, w, 4000) for w in (without, with_prompts))
    effect = prompt_effect(before, after, 64)
    assert effect.hit_rate == (before.point.prediction.hit_rate, after.point.prediction.hit_rate)
    assert effect.decode_tps == (before.point.prediction.decode_tps, after.point.prediction.decode_tps)
    text = effect.sentence("[h]", "[d]")
    assert text.startswith("Simulating the first 64 prompt tokens of each sequence: at 4,000 MiB the hit rate is ")
    assert f"{100 * effect.hit_rate[1]:.2f} % with them, {100 * effect.hit_rate[0]:.2f} % without" in text
    assert "[h] and decode is " in text and "[d]; the prompt speed" in text
    moved = abs(effect.hit_rate[1] - effect.hit_rate[0])
    if n_ubatch == 512:
        assert "bypass the cache's pool" in text and moved < 0.001
    else:  # through the pool: the prompts' experts compete with the decode's
        assert "bypass" not in text and moved > 0.001 and "points)" in text


def test_the_prompts_answer_says_so_where_no_cache_runs(qwen30b):
    sc, hw, tm = Scenario(prompt_tokens=64), preset("t4"), default_time_model()
    without, with_prompts = (synthetic_workload(qwen30b, sc, n_tokens=100, prompts=p) for p in (False, True))
    before, after = (explore_answer(qwen30b, hw, tm.params, sc, w, 0) for w in (without, with_prompts))
    effect = prompt_effect(before, after, 64)
    assert effect.hit_rate == (None, None) and "at 0 MiB no cache runs, so there is no hit rate and decode is" in (
        effect.sentence()
    )


def test_the_headline_and_the_chart_agree_where_the_experts_stream_from_disk(setting):
    """Issue 37: at 16 GiB of RAM the headline showed a speed while the chart drew none of its points (the chart
    asked whether the RAM fits, the headline whether it runs). One rule now: Layout.runs."""
    model, hw, tm, base, work = setting
    view = explore_curve(model, hw.with_changes(ram_gib=16.0), tm.params, base, work)
    answers = [answer_at(view, point) for point in view.curve.points]
    assert any(a.host.state == STREAMS and a.runs for a in answers)  # the setting the issue met
    for answer, drawn in zip(answers, view.speeds, strict=True):
        assert answer.runs == (drawn is not None)
        assert drawn is None or drawn == answer.point.prediction.decode_tps
    drawn_lines = fitting_no_cache(view)
    assert all(view.no_cache[name].layout.runs == (name in drawn_lines) for name in view.no_cache)


def test_no_speed_is_drawn_where_pinned_experts_cannot_fit_the_ram(setting):
    model, hw, tm, base, work = setting
    pinned = replace(base, load_mode="none")
    view = explore_curve(model, hw.with_changes(ram_gib=16.0), tm.params, pinned, work)
    assert all(p.layout.ram.state == REFUSED for p in view.curve.points) and all(s is None for s in view.speeds)
    assert not any(answer_at(view, p).runs for p in view.curve.points)
    assert any(p.usable for p in view.curve.predictions)  # the time model still priced them


def test_the_csv_table_has_one_row_per_budget_and_the_drawn_speeds(view):
    table = view.table()
    assert list(table["budget_mib"]) == list(view.axis.budgets)
    drawn = table["predicted_decode_tps"]
    assert drawn.isna().tolist() == [s is None for s in view.speeds]
    assert drawn.dropna().tolist() == [s for s in view.speeds if s is not None]
    assert {"hit_rate_small", "hit_rate_large", "uploaded_mib_per_token", "starts"} <= set(table.columns)


@pytest.mark.parametrize(
    ("build", "share", "policies"),
    [(11549, 0.0, {"lru-b11549": "exact"}), (12569, 0.0, {"class-lru-b12170": "modelled"}),
     (12569, 0.5, {"class-lru-b12170": "modelled"})],  # the CPU share replays per budget: no statistics of its own
)  # fmt: skip
def test_the_csv_names_the_policy_and_build_of_every_hit_rate(setting, build, share, policies):
    """Issue 37: ClassLRU's modelled hit rates went out unnamed; each row says which policy's pass gave its hit
    rates (the scenario's where it has one, the build's own elsewhere), exact or modelled, and the build."""
    model, hw, tm, _, work = setting
    base = Scenario(build=build, knobs=(("share", share),) if share else ())
    table = explore_curve(model, hw, tm.params, base, work).table()
    assert set(table["build"]) == {build}
    assert dict(zip(table["hit_rate_policy"], table["hit_rate_is"], strict=True)) == policies


def test_measured_points_are_this_gpu_model_concurrency_and_placement_plus_the_users_logs(qwen30b):
    reference = load_reference()
    points = measured_points(reference, None, preset("t4"), qwen30b, 1, "--cpu-moe")
    assert len(points) and set(points["gpu"]) == {"Tesla T4"} and set(points["placement"]) == {"--cpu-moe"}
    assert set(points["parallel"]) == {1} and points["decode_tps"].notna().all()
    logged = pd.DataFrame(
        {"model": [qwen30b.name, "other", qwen30b.name], "decode_tps": [10.0, 20.0, 30.0], "parallel": [1, 1, 4]}
    )
    with_logs = measured_points(reference, logged, preset("t4"), qwen30b, 1, "--cpu-moe")
    assert len(with_logs) == len(points) + 1 and 10.0 in with_logs["decode_tps"].tolist()  # not the -np 4 run
    at_four = measured_points(reference, logged, preset("t4"), qwen30b, 4, "--cpu-moe")
    assert 30.0 in at_four["decode_tps"].tolist() and 10.0 not in at_four["decode_tps"].tolist()


def test_simulated_prompt_routing_stays_within_the_draw_limit(qwen30b):
    assert simulated_prompt_tokens(100, qwen30b) == 100
    capped = simulated_prompt_tokens(10**6, qwen30b)
    n_seq = -(-EXPLORE_TOKENS // SEQ_LEN)  # the sequences of the workload Explore replays
    assert capped < 10**6 and capped * qwen30b.n_layer * qwen30b.n_expert * n_seq <= MAX_ROUTING_DRAWS


def test_explore_replays_the_workload_predict_replays_so_a_calibrated_setting_gets_one_number(tmp_path, capsys):
    """Issue 21: the app and the CLI gave 347.6 and 335.2 t/s at one calibrated setting (the app replayed 6,000
    synthetic tokens, predict 4,000); Explore's workload is now predict's, to the digit (for any model: the small
    one keeps this short)."""
    import json

    from conftest import MIXTRAL

    from moe_model.cli.main import main
    from moe_model.fits.machine_fit import MachineFit, save_machine
    from moe_model.readers.model_spec import load_model

    model = load_model(MIXTRAL)

    hw = preset("H200").with_changes(cpu_expert_gbs=40.0, pageable_gbs=20.0, sync_us=30.0, token_ms=2.0)
    save_machine(MachineFit(hw, ("cpu_expert_gbs",), {}, {}, (), 0.1, True, "accepted", "mmap"), tmp_path / "m.json")
    tm, base = default_time_model(), Scenario(n_ctx=8192)
    work = synthetic_workload(model, Scenario(prompt_tokens=1), n_tokens=EXPLORE_TOKENS)  # as the app builds it
    app = explore_point(model, hw, tm.params, base, work, 4000, RangeInputs(0.1)).prediction.decode_tps
    args = ["predict", "--model", str(MIXTRAL), "--machine", str(tmp_path / "m.json"), "--json"]
    assert main([*args, "--budget-mib", "4000", "--ctx", "8192"]) == 0
    assert app == json.loads(capsys.readouterr().out)["decode_tps"]


def _at_depth(depth: int, concurrency: int = 1) -> Scenario:
    """The scenario Explore's sidebar builds for a context depth: -c 4,096 raised to hold every stream."""
    return Scenario(concurrency=concurrency, n_ctx=context_for_depth(4096, depth, concurrency), depth=depth)


def test_a_deeper_context_decodes_slower_and_its_kv_cache_is_in_the_vram_verdict(setting):
    model, hw, tm, _, work = setting
    shallow, deep = _at_depth(512), _at_depth(32768)
    views = [explore_curve(model, hw, tm.params, sc, work) for sc in (shallow, deep)]
    points = [explore_point(model, hw, tm.params, sc, work, 2000).prediction for sc in (shallow, deep)]
    assert points[1].decode_tps < points[0].decode_tps and points[1].vram.fits  # slower, not refused
    assert points[1].vram.kv_mib == kv_cache_mib(model, 32768) > points[0].vram.kv_mib == kv_cache_mib(model, 4096)
    assert points[1].vram.free_mib < points[0].vram.free_mib
    assert views[1].axis.top_mib < views[0].axis.top_mib  # less room for the cache beside the deeper KV
    assert views[1].without.decode_tps < views[0].without.decode_tps  # the no-cache line reads the same depth
    assert points[1].prefill_tps == points[0].prefill_tps  # the prompt's length, not the depth, sets its speed


def test_every_number_on_explore_reads_the_pages_depth_and_context(setting):
    """What the page passes (its Scenario) reaches the curve, the headline's point, the no-cache lines and the
    budget axis, whose top is the largest budget the headline's VRAM verdict says fits."""
    model, hw, tm, _, work = setting
    base = _at_depth(20000, concurrency=2)
    view = explore_curve(model, hw, tm.params, base, work)
    predictions = [*view.curve.predictions, view.without, *view.no_cache.values()]
    assert {(p.scenario.context_depth, p.scenario.n_ctx) for p in predictions} == {(20000, 40000)}
    assert all(p.vram.kv_mib == kv_cache_mib(model, 40000) for p in predictions if p.starts)
    top = view.axis.top_mib
    assert explore_point(model, hw, tm.params, base, work, top).prediction.vram.fits
    assert not explore_point(model, hw, tm.params, base, work, top + 1).prediction.vram.fits
