"""Logs drive the routing: run3's logged decode hit rates pin the routing, and predictions at the logged
budgets on the machine calibrated from the same logs reproduce the logged decode speeds."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import GROUNDTRUTH

from moe_model.fits.calibration import default_time_model
from moe_model.fits.machine_fit import calibrate_machine
from moe_model.fits.points import log_points, measured_kind_tps
from moe_model.fits.routing_from_logs import logged_hit_rates, routing_from_logs, unused_logs
from moe_model.llama.builds import EXACT_BUILD, MAINLINE_BUILD
from moe_model.llama.simulate import LRU_KERNEL
from moe_model.policies import class_lru
from moe_model.pricing.workloads import synthetic_workload
from moe_model.readers.logs import parse_log
from moe_model.readers.model_spec import load_model
from moe_model.resources import data_path
from moe_model.speed.hardware import preset
from moe_model.speed.range_inputs import RangeInputs
from moe_model.speed.scenario import resolve
from moe_model.speed.time_model import predict
from moe_model.speed.traffic import from_workload
from moe_model.workload import Batching

RUN3 = GROUNDTRUTH / "run3"
CACHE_RUNS = ("minany", "b10", "b25", "b50", "b75", "full")  # the six single-stream runs with a cache


@pytest.fixture(scope="module")
def run3():
    model = load_model(RUN3 / "model-header.gguf")
    logs = [(case, parse_log(RUN3 / "logs" / f"server_{case}.log")) for case in CACHE_RUNS]
    return model, preset("H200"), logs  # the GPU the logs name, as the Logs page picks it


def runs_of(logs, case: str):
    return next(runs for name, runs in logs if name == case)


def test_each_log_gives_its_decode_hit_rate_without_the_start_up(run3):
    model, hw, logs = run3
    points = {p.name: p for case, runs in logs for p in logged_hit_rates(runs, model, hw, case)}
    assert list(points) == [f"{case}#1" for case in CACHE_RUNS]
    b50 = points["b50#1"]
    assert (b50.budget_mib, b50.decode_tokens, b50.requests) == (4185, 256, 1)
    # the log prints 69.41 % with the start-up's misses (BOS+EOS, then b11549's seq_rm probe); without them the
    # lookups left are the decode's own: 255 one-token decodes (the first of 256 tokens comes from the prompt)
    small = runs_of(logs, "b50")[0].small
    assert b50.hit_rate > 0.6941
    assert small.hits / b50.hit_rate == pytest.approx(255 * model.n_layer * model.n_expert_used, rel=0.002)


def test_each_logged_hit_rate_is_fitted_through_its_builds_policy(run3):
    model, hw, logs = run3
    runs = logs[0][1]  # run3's logs name no build, but their cache size line is b11549's form: the exact LRU
    for given in (None, EXACT_BUILD, MAINLINE_BUILD):
        assert [p.kernel for p in logged_hit_rates(runs, model, hw, "minany", given)] == [LRU_KERNEL], given
    later = [replace(r, devices=[replace(d, mib_only=False) for d in r.devices]) for r in runs]  # a later line
    (exact,) = logged_hit_rates(later, model, hw, "minany", EXACT_BUILD)  # then the build given, else mainline
    (mainline,) = logged_hit_rates(later, model, hw, "minany")
    assert exact.kernel == LRU_KERNEL
    assert mainline.kernel == class_lru.kernel() and mainline.kernel.name == "class-lru-b12170"


def test_a_log_without_a_hit_rate_is_named_with_why(run3):
    """run5's six mmap logs: the no-cache one gives no hit rate, and says so (the routing counts it as given)."""
    model, hw, _ = run3
    run5 = data_path("groundtruth", "run5", "logs")
    cases = ("mm_b10", "mm_b25", "mm_b50", "mm_b75", "mm_full", "mm_off")
    logs = [(f"server_{c}.log", parse_log(run5 / f"server_{c}.log")) for c in cases] + [("other.log", [])]
    unused = dict(unused_logs(logs, model, hw))
    assert unused == {
        "server_mm_off.log": "no MoE cache (--moe-cache-mib 0 or none), so no hit rate",
        "other.log": f"no run of {model.name} in it",
    }


def test_runs_without_a_cache_or_statistics_give_no_hit_rate(run3):
    model, hw, _ = run3
    for case in ("off", "gpu"):
        assert logged_hit_rates(parse_log(RUN3 / "logs" / f"server_{case}.log"), model, hw, case) == []


@pytest.mark.slow
def test_predictions_at_the_logged_budgets_reproduce_the_logs_within_the_calibrations_error(run3):
    model, hw, logs = run3
    params = default_time_model().params
    # run3's logs name no build; their cache size line says a plain-LRU build, taken as b11549 (no build given)
    points = [p for case, runs in logs for p in log_points(runs, model, hw, case, hw.name)]
    assert {p.scenario.build for p in points} == {EXACT_BUILD}
    machine = calibrate_machine(points, hw, params)
    assert machine.accepted, machine.reason
    routing = routing_from_logs(model, logs, hw)
    assert routing.fitted_to == "fitted to your 6 logs" and routing.spread_points < 5
    work = routing.workload(model, Batching())
    for p in points:
        layout = resolve(model, machine.hardware, p.scenario)
        traffic = from_workload(model, layout, p.scenario, work)
        pred = predict(
            model, machine.hardware, params, p.scenario, traffic, layout=layout,
            ranges=RangeInputs(machine.rel_error, routing.spread_points),
        )  # fmt: skip
        # each log timed one request, its server's first: priced as a first request (the steady replay's cold fills
        # on top, as the calibration compares them: measured_kind_tps)
        kind = measured_kind_tps(p, pred)[0]
        lo, hi = (v * kind / pred.decode_tps for v in pred.decode_tps_range)
        assert abs(kind / p.decode_tps - 1) <= machine.rel_error, (p.name, kind, p.decode_tps)
        assert lo <= p.decode_tps <= hi, p.name
    # positive control: the model's routing preset, which ignores the logs, misses b50 by far more (issue 21)
    b50 = next(p for p in points if p.name == "b50#1")
    layout = resolve(model, machine.hardware, b50.scenario)
    preset_traffic = from_workload(model, layout, b50.scenario, synthetic_workload(model, b50.scenario))
    preset_tps = predict(model, machine.hardware, params, b50.scenario, preset_traffic, layout=layout).decode_tps
    assert preset_tps / b50.decode_tps > 2
