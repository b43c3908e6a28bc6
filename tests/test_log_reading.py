"""A user's own b12170+ logs pick ClassLRU's reading: the reading nearest their decode hit rates."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import GPT_OSS

from moe_model.llama.simulate import LRU_KERNEL
from moe_model.llama.slot_plan import Placement
from moe_model.policies import class_lru
from moe_model.readers.model_spec import load_model
from moe_model.routing.logged import LoggedHitRate, RunLength, simulated_hit_rates
from moe_model.routing.synthetic import preset_for
from moe_model.speed.log_reading import pick_reading

NON_DEFAULT = {"clock": "group", "age_clock": "own", "ties": "low-class", "increment_per": "token"}
LENGTH = RunLength(1024, 256)


def _points(model, reading, budgets=(2434, 4854)):
    """Logged points of a b12170+ server (-np 4) whose hit rates the project's own ClassLRU made under `reading`."""
    logged = [
        LoggedHitRate(f"b{b}.log#1", b, Placement(cpu_moe=True), 0.5, 1024, 4, 4, class_lru.kernel()) for b in budgets
    ]
    made = simulated_hit_rates(
        model, preset_for(model).knobs, [replace(p, kernel=class_lru.kernel(**reading)) for p in logged], LENGTH
    )
    return [replace(p, hit_rate=made[p.name]) for p in logged]


def test_the_logs_of_a_non_default_reading_pick_that_reading_and_its_hit_rates():
    model = load_model(GPT_OSS)
    points = _points(model, NON_DEFAULT)
    pick = pick_reading(model, points, preset_for(model).knobs, LENGTH)
    assert pick.reading == NON_DEFAULT and pick.rms_points < 1
    for p in points:
        assert 100 * pick.simulated[p.name] == pytest.approx(100 * p.hit_rate, abs=1)
    default = class_lru.reading_name(class_lru.all_readings()[0])
    assert pick.readings_rms_points[default] > 1  # the default is told apart (a tie rule alone barely moves it)


def test_logs_of_an_exact_lru_build_pick_no_reading():
    model = load_model(GPT_OSS)
    lru = [replace(p, kernel=LRU_KERNEL) for p in _points(model, {})]
    assert pick_reading(model, lru, preset_for(model).knobs, LENGTH) is None
