"""Each logged run beside the range predicted for its settings before calibration (answers.before_calibration), on
the real H200 runs of sample_data/groundtruth: the rows exist, "inside" agrees with the numbers, first-request runs
are set beside the first-request figure, and a run that cannot be priced is named with its reason."""

from __future__ import annotations

import pytest

from moe_model.answers.before_calibration import (
    SpeedCheck,
    before_calibration,
    check_log,
    time_model_before,
    uncalibrated,
)
from moe_model.fits.calibration import default_time_model
from moe_model.fits.host_fit import host_time_model
from moe_model.readers.logs import parse_log
from moe_model.readers.model_spec import load_model
from moe_model.resources import data_path
from moe_model.speed.hardware import preset

RUN3 = data_path("groundtruth", "run3")
RUN5 = data_path("groundtruth", "run5")


def _logs(folder, cases):
    return [(f"server_{c}.log", parse_log(folder / "logs" / f"server_{c}.log")) for c in cases]


@pytest.fixture(scope="module")
def run5():
    model = load_model(RUN3 / "model-header.gguf")  # run5 ran run3's model
    logs = _logs(RUN5, ("mm_b10", "mm_full", "mm_off"))
    return before_calibration(logs, model, preset("H200"), time_model_before(False))


def test_every_run_that_timed_a_request_gets_a_row_with_its_own_settings(run5):
    assert [r.name for r in run5.runs] == ["server_mm_b10.log#1", "server_mm_full.log#1", "server_mm_off.log#1"]
    assert [r.budget_mib for r in run5.runs] == [834, 8376, 0] and not run5.not_checked
    assert {r.request for r in run5.runs} == {"steady state"}  # four requests each: the later ones are timed


def test_inside_and_outside_agree_with_the_numbers(run5):
    for r in run5.runs:
        for check in filter(None, (r.decode, r.prompt)):
            assert check.low_tps <= check.predicted_tps <= check.high_tps
            assert check.inside == (check.low_tps <= check.measured_tps <= check.high_tps)
            if not check.inside:
                edge = check.high_tps if check.off > 0 else check.low_tps
                assert check.measured_tps == pytest.approx(edge * (1 + check.off))
    assert run5.inside == sum(r.decode.inside for r in run5.runs)
    assert run5.summary.startswith(f"{run5.inside} of 3 runs fell inside the range predicted before calibration")


def test_the_range_is_the_default_time_models_and_the_routing_presets(run5):
    """The prediction before calibration carries the default time model's error and the preset's routing: at the
    full budget (every expert cached, no routing spread to speak of) the range is about ± the time model's error."""
    full = run5.runs[1]
    rel = default_time_model().rel_error
    assert full.decode.high_tps / full.decode.predicted_tps == pytest.approx(1 + rel, rel=0.02)
    assert "routing preset" in run5.predicted_with and f"±{100 * rel:.0f} %" in run5.predicted_with
    b10 = run5.runs[0]  # the preset's hit rate, not the log's: the random-weight model's routing is far less local
    assert b10.predicted_hit_rate > b10.logged_hit_rate + 0.2


def test_a_first_request_run_is_set_beside_the_first_request_figure():
    model = load_model(RUN3 / "model-header.gguf")
    result = before_calibration(_logs(RUN3, ("b50", "minany_minus1")), model, preset("H200"), time_model_before(False))
    (b50,) = result.runs
    assert b50.request == "first request" and b50.prompt is not None
    assert [(n.name, n.why) for n in result.not_checked] == [("server_minany_minus1.log#1", "did not start")]


def test_a_run_of_another_model_is_named_not_priced():
    other = load_model(data_path("models", "Qwen3-30B-A3B-Q4_K_M.gguf"))
    result = before_calibration(_logs(RUN5, ("mm_off",)), other, preset("H200"), time_model_before(False))
    (skipped,) = result.not_checked
    assert not result.runs and skipped.why.startswith("another model than") and "n_layer" in skipped.why
    assert result.summary == "No run to check against the range predicted before calibration."


def test_outside_words_say_how_far_past_the_nearer_end():
    assert SpeedCheck(10.0, 20.0, 15.0, 25.0).words == "outside (33 % below)"
    assert SpeedCheck(30.0, 20.0, 15.0, 25.0).words == "outside (20 % above)"
    assert SpeedCheck(20.0, 20.0, 15.0, 25.0).words == "inside"


def test_a_calibrated_machine_loses_its_fitted_terms_and_a_host_record_brings_its_own_error():
    h200 = preset("H200")
    fitted = h200.with_changes(sync_us=40.0, pageable_gbs=9.0, token_ms=0.3)
    assert uncalibrated(fitted) == h200 and uncalibrated(h200) is h200
    assert time_model_before(True) == host_time_model() and time_model_before(False) == default_time_model()


def test_the_runs_priced_at_once_are_bounded_and_the_rest_named():
    model = load_model(RUN3 / "model-header.gguf")
    ((name, runs),) = _logs(RUN5, ("mm_off",))
    result = check_log(name, runs * 3, model, preset("H200"), time_model_before(False), None, max_runs=1)
    assert len(result.runs) == 1 and len(result.not_checked) == 2
    assert all(n.why.startswith("beyond this tool's limit of") for n in result.not_checked)
