"""A prediction's range split into its sources, largest first, each saying what narrows it."""

from __future__ import annotations

import math
import re

import pytest

from moe_model.fits.calibration import default_time_model
from moe_model.llama.slot_plan import Placement
from moe_model.readers.model_spec import load_model
from moe_model.resources import data_path
from moe_model.speed.hardware import preset
from moe_model.speed.host_parts import described
from moe_model.speed.range_inputs import RangeInputs
from moe_model.speed.ranges import (
    POLICY_SOURCE,
    TIME_MODEL_SOURCE,
    RangeSource,
    combine,
    decode_sources,
    largest_step,
)
from moe_model.speed.scenario import Scenario
from moe_model.speed.time_model import predict


@pytest.fixture(scope="module")
def qwen30b():
    return load_model(data_path("models", "Qwen3-30B-A3B-Q4_K_M.gguf"))


def _desktop(qwen30b, hw, rel_error, spread, hit_rate=0.958):
    sc = Scenario(Placement(cpu_moe=True), 9470)  # issue 29's example: a 12 GB 3060 at its best budget
    return predict(qwen30b, hw, default_time_model().params, sc, hit_rate=hit_rate,
                   ranges=RangeInputs(rel_error, spread))  # fmt: skip


def test_sources_add_their_widths_in_log_space():
    a, b = RangeSource("a", 50.0, 200.0, ""), RangeSource("b", 80.0, 125.0, "")
    lo, hi = combine(100.0, (a, b))
    assert lo == pytest.approx(100 * 0.5 * 0.8) and hi == pytest.approx(100 * 2 * 1.25)
    assert combine(100.0, ()) == (100.0, 100.0)


def test_the_range_names_each_source_largest_first_with_what_narrows_it(qwen30b):
    pred = _desktop(qwen30b, preset("3060"), 0.21, 5.3)
    names = [s.source for s in pred.range_sources]
    assert {"routing (hit rate)", "time model", "host: RAM kit"} <= set(names)
    widths = [s.high_tps / s.low_tps for s in pred.range_sources]
    assert widths == sorted(widths, reverse=True)
    assert all(s.narrowed_by for s in pred.range_sources)
    assert pred.decode_tps_range == pytest.approx(combine(pred.decode_tps, pred.range_sources))
    top = pred.range_sources[0]
    assert top.without_tps[1] - top.without_tps[0] < pred.decode_tps_range[1] - pred.decode_tps_range[0]
    d = pred.as_dict()
    assert set(d["range_sources"][0]) >= {"source", "low_tps", "high_tps", "narrowed_by"}
    assert top.source in d["range_step"]


def test_a_described_host_and_a_log_halve_the_range_and_the_largest_source_is_still_named(qwen30b):
    """The same prediction with CPU, RAM kit and slot given and a logged hit rate (no routing spread) against
    neither: at most half as wide in log terms."""
    import math

    neither = _desktop(qwen30b, preset("3060"), 0.21, 5.3)
    hw = described(preset("3060"), "Ryzen 7 7700X", "2x32 GB DDR5-6000", "PCIe 4.0 x16")
    both = _desktop(qwen30b, hw, 0.21, 0.0)
    width = [math.log(p.decode_tps_range[1] / p.decode_tps_range[0]) for p in (neither, both)]
    assert width[1] <= width[0] / 2
    assert both.range_sources[0].source == "time model" and neither.range_sources[0].source != "time model"


def test_a_policy_band_is_a_source_priced_at_its_hit_rate_edges():
    def decode_at(hw, shift):
        return 100.0 + shift  # 1 t/s per hit-rate point

    sources = decode_sources(100.0, preset("3060"), decode_at, 0.0, (0.0, 0.0), (-12.0, 4.0))
    policy = next(s for s in sources if s.source == POLICY_SOURCE)
    assert (policy.low_tps, policy.high_tps) == (88.0, 104.0) and "b12170+" in policy.narrowed_by
    assert all(s.source != POLICY_SOURCE for s in decode_sources(100.0, preset("3060"), decode_at, 0.0, (0.0, 0.0)))


def test_one_logs_factor_on_the_misses_moves_a_high_hit_rate_by_few_points_and_a_low_one_by_many():
    from moe_model.speed.ranges import routing_shifts

    down, up = routing_shifts(0.96, 0.0, math.log(2.0))  # misses 4 % -> 8 % or 2 %
    assert (down, up) == (pytest.approx(-4.0), pytest.approx(2.0))
    down, up = routing_shifts(0.60, 0.0, math.log(2.0))  # misses 40 % -> 80 % or 20 %
    assert (down, up) == (pytest.approx(-40.0), pytest.approx(20.0))
    assert routing_shifts(0.96, 5.0, math.log(2.0)) == (pytest.approx(-5.0), pytest.approx(5.0))  # the wider
    assert routing_shifts(None, 3.0, 1.0) == (-3.0, 3.0) and routing_shifts(0.5, 3.0, 0.0) == (-3.0, 3.0)


def _flat(hw, shift):
    return 192.1 + 1e-6 * shift  # a hit rate that barely moves the speed (and host parts that do not)


def test_at_best_never_narrows_a_calibrated_machines_own_error():
    """Issue 37: "narrow the range to at best 192.1-192.1 t/s" on a calibrated machine that still carries ±10.6 %:
    its time model's error is settled (no step narrows it), and every other step's 'at best' keeps it."""
    calibrated = preset("H200").with_changes(sync_us=120.0)
    sources = decode_sources(192.1, calibrated, lambda hw, shift: 192.1 + shift, 0.106, (-1.0, 1.0))
    model = next(s for s in sources if s.source == TIME_MODEL_SOURCE)
    assert model.settled and model.without_tps == pytest.approx(combine(192.1, sources))
    step = largest_step(192.1, sources)
    assert "no step narrows it further" in step and "192.1-192.1" not in step
    for source in sources:
        lo, hi = source.without_tps
        assert lo <= 192.1 * (1 - 0.106) + 1e-9 and hi >= 192.1 * (1 + 0.106) - 1e-9
    alone = decode_sources(192.1, calibrated, _flat, 0.106, (-1.0, 1.0))
    assert [s.source for s in alone] == [TIME_MODEL_SOURCE]  # a routing that moves nothing is no source
    assert largest_step(192.1, alone).startswith("the range 171.7-212.5 t/s stays: the time model")


def test_the_time_models_own_step_never_claims_a_point_range():
    """Uncalibrated, calibrating replaces the ±21 % by the machine's own error, not known before it is run."""

    def drive_only(hw, shift):
        return 192.1 * (1.02 if hw.host.drive == "nvme5" else 1.0)  # the drive moves it 2 %, nothing else does

    sources = decode_sources(192.1, preset("3060"), drive_only, 0.21, (-1.0, 1.0))
    assert [s.source for s in sources] == [TIME_MODEL_SOURCE, "host: drive"] and not sources[0].settled
    step = largest_step(192.1, sources)
    assert "at best" not in step and "replaces its ±21 %" in step and "192.1-195.9" in step


def test_every_source_says_its_step_in_the_apps_words_and_the_json_keeps_the_command_lines(qwen30b):
    """The app shows the hints (issue 38: "(--ram-kit)" inside the app): its words name its controls, no flag; the
    JSON's narrowed_by stays the command line's, without the app's field."""
    pred = _desktop(qwen30b, preset("3060"), 0.21, 5.3)
    flag = re.compile(r"(?<![\w-])--[a-z]")
    assert {s.source for s in pred.range_sources} >= {"routing (hit rate)", "time model", "host: RAM kit"}
    for s in pred.range_sources:
        assert s.narrowed(app=True) == s.app_narrowed_by and not flag.search(s.app_narrowed_by), s
        assert s.narrowed() == s.narrowed_by and s.narrowed_by != s.app_narrowed_by
    assert "(--ram-kit)" in next(s.narrowed_by for s in pred.range_sources if s.source == "host: RAM kit")
    assert all("app_narrowed_by" not in d for d in pred.as_dict()["range_sources"])
    step = largest_step(pred.decode_tps, pred.range_sources, app=True)
    assert step == largest_step(pred.decode_tps, pred.range_sources).replace(
        pred.range_sources[0].narrowed_by, pred.range_sources[0].app_narrowed_by
    ) and not flag.search(step)


def test_a_range_under_one_token_a_second_keeps_two_significant_digits():
    """0.05-0.08 t/s read '0.1-0.1' (issue 38's unusable 235B on a drive): under 1 t/s two digits stay."""
    slow = (RangeSource(TIME_MODEL_SOURCE, 0.051, 0.077, "a", settled=True),)
    assert largest_step(0.063, slow) == "the range 0.051-0.077 t/s stays: the time model (0.051-0.077 t/s) is a"
