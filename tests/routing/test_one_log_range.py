"""One log of the user's at another budget and a described host narrow a prediction's range, and a range narrowed
by a real log still holds the logged speeds the plain one held."""

from __future__ import annotations

import math

import pytest

from moe_model.fits.calibration import default_time_model
from moe_model.fits.points import log_points
from moe_model.fits.routing_from_logs import routing_from_logs
from moe_model.llama.slot_plan import Placement
from moe_model.pricing.curve import curve
from moe_model.pricing.workloads import synthetic_workload
from moe_model.readers.logs import parse_log
from moe_model.readers.model_spec import load_model
from moe_model.resources import data_path
from moe_model.routing.logged import one_log_miss_spread
from moe_model.routing.synthetic import preset_for
from moe_model.speed.hardware import preset
from moe_model.speed.host_parts import described
from moe_model.speed.range_inputs import RangeInputs
from moe_model.speed.scenario import Scenario
from moe_model.speed.time_model import predict
from moe_model.workload import Batching

RUN5 = data_path("groundtruth", "run5", "logs")


def _width(pred) -> float:
    low, high = pred.decode_tps_range
    return math.log(high / low)


def test_a_described_host_and_one_log_at_another_budget_nearly_halve_the_range_and_name_its_largest_source():
    """Issue 29's 3060 example: RTX 3060 12 GB, Qwen3-30B-A3B at 9,470 MiB. Neither: the routing preset's spread and
    every host part undescribed. Both: CPU, RAM kit and slot given, and the routing fitted to one log at another
    budget (its in-fit error ~0, the measured one-log factor on the misses). Both leave 0.52 of the width, not the
    issue's half: the time model's own left-out error (±22 %) is what remains."""
    model = load_model(data_path("models", "Qwen3-30B-A3B-Q4_K_M.gguf"))
    tm, sc = default_time_model(), Scenario(Placement(cpu_moe=True), 9470)
    kw = {"hit_rate": 0.958}
    preset_range = tm.ranges((preset_for(model).spread_points, 0.0))
    neither = predict(model, preset("3060"), tm.params, sc, ranges=preset_range, **kw)
    hw = described(preset("3060"), "Ryzen 7 7700X", "2x32 GB DDR5-6000", "PCIe 4.0 x16")
    both = predict(model, hw, tm.params, sc, ranges=tm.ranges((0.0, one_log_miss_spread(model))), **kw)
    assert _width(both) <= 0.55 * _width(neither)
    assert {s.source for s in neither.range_sources} >= {"routing (hit rate)", "host: RAM kit", "time model"}
    assert not any(s.source.startswith("host:") for s in both.range_sources)
    assert both.range_sources[0].source == "time model" and "calibrated" in both.range_sources[0].narrowed_by
    assert neither.range_sources[0].source == "routing (hit rate)"


@pytest.fixture(scope="module")
def run5_predictions():
    """run5's H200 logs (random-weight model, mmap'd experts): the routing fitted to the 25 % budget's log alone,
    each logged budget's steady decode predicted with it and with the model's preset."""
    model = load_model(data_path("groundtruth", "run3", "model-header.gguf"))
    hw, tm = preset("h200"), default_time_model()
    routing = routing_from_logs(model, [("b25", parse_log(RUN5 / "server_mm_b25.log"))], hw)
    out = {}
    for case in ("b10", "b50", "b75", "full"):
        point = log_points(parse_log(RUN5 / f"server_mm_{case}.log"), model, hw, case, "h200", steady=True)[0]
        sc = point.scenario
        plain = curve(model, hw, tm.params, sc, [sc.budget_mib], lambda s: synthetic_workload(model, s),
                      RangeInputs(tm.rel_error, preset_for(model).spread_points))  # fmt: skip
        logged_routing = lambda s: routing.workload(model, Batching(s.concurrency))  # noqa: E731
        logged = curve(model, hw, tm.params, sc, [sc.budget_mib], logged_routing, tm.ranges(routing.spreads))
        out[case] = (point.decode_tps, plain.points[0].prediction, logged.points[0].prediction)
    return routing, out


def test_a_range_from_one_real_log_holds_every_logged_speed_the_plain_range_held(run5_predictions):
    routing, out = run5_predictions
    assert routing.miss_spread == one_log_miss_spread(load_model(data_path("groundtruth", "run3", "model-header.gguf")))

    def holds(pred, tps):
        return pred.decode_tps_range[0] <= tps <= pred.decode_tps_range[1]

    plain = {case for case, (tps, p, _) in out.items() if holds(p, tps)}
    logged = {case for case, (tps, _, q) in out.items() if holds(q, tps)}
    assert plain <= logged and len(logged) > len(plain)  # the log moves the routing onto the real one
