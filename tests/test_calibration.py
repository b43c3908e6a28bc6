"""Calibration: the stored fit is what the code computes, a fit recovers the parameters that made its data, and
the logged hit rate a point uses leaves out the warm-up (a machine from its own logs: tests/test_machine.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import ROOT

from moe_model.readers.logs import parse_log
from moe_model.readers.model_spec import load_model
from moe_model.speed.calibration import decode_errors, fit, load_calibration
from moe_model.speed.hardware import preset
from moe_model.speed.measured import decode_hit_rate, h200_points, log_points
from moe_model.speed.time_model import TimeParams, predict

RUN3 = ROOT / "moe_model" / "data" / "groundtruth" / "run3"


@pytest.fixture(scope="module")
def run3_points():
    model, hw = load_model(RUN3 / "model-header.gguf"), preset("h200")
    cases = ("gpu", "off", "minany", "b10", "b25", "b50", "b75", "full")
    return [p for c in cases for p in log_points(parse_log(RUN3 / "logs" / f"server_{c}.log"), model, hw, c, "h200")]


def test_the_stored_calibration_reproduces_its_own_errors_on_the_h200_runs():
    record = load_calibration()
    params = TimeParams(**record["params"])
    errors = decode_errors(h200_points(), params)
    for name, err in errors.items():
        assert err == pytest.approx(record["fit_errors"][name], abs=1e-9), name
    assert set(record["leave_one_machine_out"]) == set(record["machines"])


def test_a_fit_recovers_the_parameters_that_generated_its_points(run3_points):
    truth = TimeParams()  # the priors' centres, so the data and the priors agree
    made = [
        replace(p, decode_tps=predict(p.model, p.hw, truth, p.scenario, p.traffic, layout=p.layout).decode_tps)
        for p in run3_points
    ]
    fitted = fit(made, start=replace(truth, sync_us_cuda=20.0, pageable_copy_us=200.0))
    assert max(abs(e) for e in decode_errors(made, fitted).values()) < 0.03


def test_the_logged_hit_rate_leaves_out_the_warm_up_that_decode_timings_do_not_include():
    model, hw = load_model(RUN3 / "model-header.gguf"), preset("h200")
    run = parse_log(RUN3 / "logs" / "server_full.log")[0]
    point = log_points([run], model, hw, "full", "h200")[0]
    decoded = 256 * model.n_layer * model.n_expert_used  # one request of 256 tokens, every layer cached
    rate = decode_hit_rate(run.small, model, point.layout)
    assert rate > run.small.hit_rate
    assert run.small.hits / rate == pytest.approx(decoded, rel=0.005)  # the lookups left are the decode's
