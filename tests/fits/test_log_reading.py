"""A user's own b12170+ logs pick ClassLRU's reading: the reading nearest their decode hit rates."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from cli_runs import run_cli
from conftest import GPT_OSS, SAMPLE

from moe_model.fits.log_reading import pick_reading
from moe_model.fits.routing_from_logs import logged_hit_rates
from moe_model.llama.simulate import LRU_KERNEL
from moe_model.llama.slot_plan import Placement
from moe_model.policies import class_lru
from moe_model.readers.logs import parse_lines
from moe_model.readers.model_spec import load_model
from moe_model.routing.logged import LoggedHitRate, RunLength, simulated_hit_rates
from moe_model.routing.synthetic import preset_for
from moe_model.speed.hardware import preset

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


RUN3 = SAMPLE / "groundtruth" / "run3"
CASES = ("off", "b10", "b25", "b50", "b75", "np4_b25")  # the run3 servers with a cache at several budgets


def _b12170_logs(tmp_path, model, reading) -> list[Path]:
    """The run3 logs as a b12569 server under `reading` would have logged them: its build line, and in place of
    b11549's teardown lines one of an unknown form whose hits and misses the project's ClassLRU made."""
    hw, paths = preset("h200"), [tmp_path / f"server_{c}.log" for c in CASES]
    originals = {p: (RUN3 / "logs" / p.name).read_text(errors="replace") for p in paths}
    runs = {p: parse_lines(text.splitlines())[0] for p, text in originals.items()}
    points = [q for p, run in runs.items() for q in logged_hit_rates([run], model, hw, str(p), 12569)]
    made = simulated_hit_rates(
        model, preset_for(model).knobs, [replace(q, kernel=class_lru.kernel(**reading)) for q in points],
        RunLength.of(points),
    )  # fmt: skip
    for path, text in originals.items():
        text = text.replace("build 0 (unknown)", "build 12569 (c4fb5796)")
        lines = [line for line in text.splitlines() if "llama_moe_cache: ubatch  > 8" not in line]
        if (name := f"{path}#1") in made:
            small = runs[path].small
            lookups = small.hits + small.misses
            fills = lookups - small.hits / decode_hit_rate_of(runs[path], model, hw)  # the warm-up's, as removed
            hits = round(made[name] * (lookups - fills))
            line = next(i for i, line in enumerate(lines) if "llama_moe_cache: ubatch <= 8" in line)
            stamp = lines[line].split(" ", 1)[0]
            lines[line] = f"{stamp} I llama_moe_cache: decode: hits = {hits}, misses = {lookups - hits}"
        path.write_text("\n".join(lines) + "\n")
    return paths


def decode_hit_rate_of(run, model, hw) -> float:
    return logged_hit_rates([run], model, hw, "x", 12569)[0].hit_rate


def test_calibrate_on_b12170_logs_of_a_non_default_reading_recovers_it_and_its_hit_rates(tmp_path):
    model = load_model(RUN3 / "model-header.gguf")
    paths = _b12170_logs(tmp_path, model, NON_DEFAULT)
    machine = tmp_path / "machine.json"
    run = run_cli("calibrate", *map(str, paths), "--model", str(RUN3 / "model-header.gguf"), "--hardware", "h200",
                  "-o", str(machine), "--json")  # fmt: skip
    out = json.loads(run.stdout)
    fit = out["class_lru_fit"]
    assert out["class_lru_reading"] == NON_DEFAULT and fit["rms_points"] < 1
    for name, logged in fit["logged"].items():
        assert 100 * fit["simulated"][name] == pytest.approx(100 * logged, abs=1)
    assert len(fit["logged"]) == len(CASES) - 1  # every run with a cache (not the one without)
