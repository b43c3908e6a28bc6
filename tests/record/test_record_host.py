"""The host record of a recording: measured speeds, the model's files and expert types, this host's facts."""

from __future__ import annotations

from pathlib import Path

import pytest

from moe_model.limits import DRIVE_MIN_BYTES
from moe_model.readers.host_record import read_host_record
from moe_model.record.drive import DriveRead
from moe_model.record.host import drive_of, expert_types, host_record, memory_gib, model_files, physical_cores
from moe_model.record.session import Recording, Timings
from moe_model.record.tiny_models import write_tiny_model


def _recording(timings: Timings) -> Recording:
    return Recording((), timings, (), False, 512)


def test_the_host_record_holds_the_measured_speeds_and_reads_back(tmp_path):
    model = model_files(write_tiny_model(tmp_path / "m.gguf", "deepseek2"))
    timed = Timings(prompt_tokens=100, prompt_s=0.5, decode_tokens=10, decode_s=0.25, decode_depth_sum=10 * 105)
    record = host_record(model, _recording(timed), threads=3, runtime_version="0.3.36")
    path = tmp_path / "host.json"
    path.write_text(record.to_json())
    back = read_host_record(path)
    assert back == record
    assert (back.prompt_tps, back.decode_tps, back.decode_depth_tokens) == (200.0, 40.0, 105)
    assert back.threads == 3 and back.runtime == "llama-cpp-python 0.3.36" and back.llama_cpp is None
    assert back.model_file_bytes == (tmp_path / "m.gguf").stat().st_size and back.model_name == "tiny-deepseek2"


def test_no_timed_generation_token_makes_no_host_record(tmp_path):
    model = model_files(write_tiny_model(tmp_path / "m.gguf", "qwen3moe"))
    assert host_record(model, _recording(Timings(prompt_tokens=10, prompt_s=0.1)), 2, "0.3.36") is None


def test_expert_types_are_each_type_once_in_layer_order(tmp_path):
    model = model_files(write_tiny_model(tmp_path / "m.gguf", "gpt-oss"))
    assert expert_types(model.spec) == ("f32",) and model.shards == (str(tmp_path / "m.gguf"),)


def test_host_facts_are_read_or_left_unknown():
    ram, free = memory_gib()
    assert physical_cores() >= 1
    assert ram is None or 0 <= free <= ram
    assert drive_of(Path("/proc/self/status")) is None  # procfs is on no block device


def test_the_runtimes_llama_cpp_and_a_drive_read_go_into_the_record(tmp_path):
    model = model_files(write_tiny_model(tmp_path / "m.gguf", "qwen3moe"))
    timed = Timings(prompt_tokens=100, prompt_s=0.5, decode_tokens=10, decode_s=0.25, decode_depth_sum=10 * 105)
    cold = DriveRead(DRIVE_MIN_BYTES, 0.1, 0.0)
    record = host_record(model, _recording(timed), 2, "0.3.36", "commit 0c1e570 (no build number exposed)", cold)
    back = read_host_record(record.to_json().encode())
    assert back.llama_cpp == "commit 0c1e570 (no build number exposed)"
    assert back.drive_read_gbs == pytest.approx(DRIVE_MIN_BYTES / 0.1 / 1e9) and back.drive_read_cold is True
    warm = host_record(model, _recording(timed), 2, "0.3.36", None, DriveRead(DRIVE_MIN_BYTES, 0.01, 1.0))
    assert (warm.drive_read_gbs, warm.drive_read_cold) == (None, False)
    assert host_record(model, _recording(timed), 2, "0.3.36").drive_read_cold is None  # not measured


def test_the_runtime_reports_the_llama_cpp_its_wheel_vendors():
    pytest.importorskip("llama_cpp", reason="llama-cpp-python (pip install -e '.[record]') runs the recorder")
    from moe_model.record.runtime import load_runtime

    vendored = load_runtime().llama_cpp
    assert vendored.startswith("commit ") and "no build number exposed" in vendored
