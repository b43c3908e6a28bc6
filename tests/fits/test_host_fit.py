"""The host record calibrates the CPU path: the decomposition of a CPU-only decode, threads, RAM, the range."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from moe_model.fits.calibration import CALIBRATION_JSON, default_time_model
from moe_model.fits.host_fit import apply_host_record, fixed_ms, host_time_model, token_bytes
from moe_model.llama.slot_plan import Placement
from moe_model.readers.host_record import HostRecord, HostRecordError
from moe_model.readers.model_spec import load_model
from moe_model.resources import data_path
from moe_model.speed.cpu_quant import expert_quant_factor
from moe_model.speed.hardware import preset
from moe_model.speed.range_inputs import RangeInputs
from moe_model.speed.rates import GB, cpu_expert_gbs
from moe_model.speed.scenario import Scenario
from moe_model.speed.time_model import predict

PARAMS = default_time_model().params


@pytest.fixture(scope="module")
def model():
    return load_model(data_path("groundtruth", "run3", "model-header.gguf"))


def _record(model, **changes) -> HostRecord:
    types = tuple(sorted({t.type_name for layer in model.layers for t in layer.experts}))
    base = HostRecord(
        "record", "run3", int(model.total_bytes), types, "Xeon", 16, 16, 40.0, 64, 200, 150.0, 512, 512, "test"
    )
    return replace(base, **changes)


def test_the_rate_reproduces_the_recorded_decode(model):
    record = _record(model)
    hw = apply_host_record(preset("h200"), record, model)
    experts, dense, kv = token_bytes(model, record.decode_depth_tokens)
    rate = cpu_expert_gbs(hw, PARAMS, pinned=False) * GB  # q4_K-equivalent bytes
    work = experts / expert_quant_factor(model, record.threads) + dense + kv
    token_ms = fixed_ms(model, record, PARAMS) + work / rate * 1e3
    assert 1e3 / token_ms == pytest.approx(record.decode_tps, rel=1e-9)
    assert hw.cpu_expert_threads == 16 and hw.host.threads == 16 and "host record" in hw.host_record


def test_other_threads_scale_as_the_thread_term(model):
    hw = apply_host_record(preset("h200"), _record(model), model)
    at16 = cpu_expert_gbs(hw, PARAMS, False, model)
    at8 = cpu_expert_gbs(hw.with_changes(threads=8), PARAMS, False, model)
    types = expert_quant_factor(model, 8) / expert_quant_factor(model, 16)  # the measured types' factor per thread
    assert at8 == pytest.approx(at16 / 2 * types)  # the h200 host is thread-bound at 8 and 16 threads


def test_threads_the_user_stated_are_kept_and_the_rate_scaled(model):
    stated = preset("h200").with_changes(threads=4)
    hw = apply_host_record(stated, _record(model), model)
    assert hw.host.threads == 4 and hw.cpu_expert_threads == 16
    assert cpu_expert_gbs(hw, PARAMS, False) == pytest.approx(hw.cpu_expert_gbs / 4)


def test_recorded_ram_and_drive_become_the_hosts(model):
    hw = apply_host_record(preset("rtx 3090"), _record(model, ram_gib=48.0, drive_read_gbs=2.5), model)
    assert hw.host.ram_gib == 48.0 and hw.host.disk_gbs == 2.5


def test_a_recorded_copy_rate_becomes_the_hosts_unless_stated(model):
    hw = apply_host_record(preset("h200"), _record(model, copy_gbs=8.4), model)
    assert hw.host.copy_gbs == 8.4
    stated = apply_host_record(preset("h200").with_changes(copy_gbs=12.0), _record(model, copy_gbs=8.4), model)
    assert stated.host.copy_gbs == 12.0


def test_a_faster_record_gives_a_faster_cpu_path(model):
    slow = apply_host_record(preset("h200"), _record(model, decode_tps=20.0), model)
    fast = apply_host_record(preset("h200"), _record(model, decode_tps=40.0), model)
    sc = Scenario(placement=Placement.parse("cpu-moe"), budget_mib=0)
    assert predict(model, fast, PARAMS, sc).decode_tps > predict(model, slow, PARAMS, sc).decode_tps


def test_the_range_drops_the_cpu_and_ram_kit(model):
    sc = Scenario(placement=Placement.parse("cpu-moe"), budget_mib=0)
    plain = {s.source for s in predict(model, preset("rtx 3090"), PARAMS, sc, ranges=RangeInputs(0.2)).range_sources}
    hw = apply_host_record(preset("rtx 3090"), _record(model), model)
    recorded = {s.source for s in predict(model, hw, PARAMS, sc, ranges=RangeInputs(0.2)).range_sources}
    assert {"host: CPU", "host: RAM kit"} <= plain
    assert not {"host: CPU", "host: RAM kit"} & recorded


@pytest.mark.parametrize(
    ("changes", "words"),
    [({"expert_types": ("iq3_xxs",)}, "expert types"), ({"model_file_bytes": 10**9}, "GB file")],
)
def test_a_record_of_another_model_is_one_line(model, changes, words):
    with pytest.raises(HostRecordError, match=words):
        apply_host_record(preset("h200"), _record(model, **changes), model)


def test_the_host_time_model_carries_the_measured_host_record_error_or_says_none_was(tmp_path):
    record = json.loads(CALIBRATION_JSON.read_text())
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(record | {"host_record": {"rel_error": None, "points": 0, "errors": {}, "about": ""}}))
    assert host_time_model(plain).rel_error == default_time_model(plain).rel_error
    assert "no host record's error measured yet" in host_time_model(plain).source
    measured = tmp_path / "measured.json"
    entry = {"rel_error": 0.08, "points": 12, "errors": {}, "about": "a recording"}
    measured.write_text(json.dumps(record | {"host_record": entry}))
    assert host_time_model(measured).rel_error == 0.08 and "12 left-out points" in host_time_model(measured).source
