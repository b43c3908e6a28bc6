"""The host record: written by record, read back equal; every field checked, anything else one line."""

from __future__ import annotations

import json

import pytest

from moe_model.readers.host_record import HostRecord, HostRecordError, read_host_record

RECORD = HostRecord(
    source="record",
    model_name="Qwen3-30B-A3B",
    model_file_bytes=18_556_686_208,
    expert_types=("q4_K", "q6_K"),
    cpu_model="AMD Ryzen 7 7700X",
    cpu_cores=8,
    threads=8,
    decode_tps=21.5,
    decode_tokens=64,
    decode_depth_tokens=300,
    prompt_tps=88.0,
    prompt_tokens=512,
    n_ubatch=512,
    runtime="llama-cpp-python 0.3.36",
    llama_cpp=None,
    ram_gib=64.0,
    ram_free_gib=40.0,
    drive="nvme0n1",
    drive_read_gbs=None,
    copy_gbs=9.5,
)


def test_a_written_record_reads_back_equal(tmp_path):
    path = tmp_path / "host.json"
    path.write_text(RECORD.to_json())
    assert read_host_record(path) == RECORD
    assert read_host_record(path.read_bytes()) == RECORD


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda d: d.update(format="other"), "not a host record"),
        (lambda d: d["speed"].update(decode_tps=-3), "speed.decode_tps"),
        (lambda d: d["speed"].update(decode_tps=True), "speed.decode_tps"),
        (lambda d: d["cpu"].update(threads=0), "cpu.threads"),
        (lambda d: d["cpu"].pop("model"), "lacks cpu.model"),
        (lambda d: d["model"].update(expert_types="q4_K"), "model.expert_types"),
        (lambda d: d.update(source="guess"), "source must be"),
        (lambda d: d["memory"].update(ram_gib=1e30), "memory.ram_gib"),
        (lambda d: d["drive"].update(read_cold="yes"), "drive.read_cold"),
        (lambda d: d["drive"].update(read_gbs=3.0, read_cold=False), "warm read"),
        (lambda d: d["memory"].update(copy_gbs=-1), "memory.copy_gbs"),
    ],
)
def test_a_wrong_field_is_one_line_naming_it(edit, words):
    data = RECORD.as_dict()
    edit(data)
    with pytest.raises(HostRecordError, match=words) as err:
        read_host_record(json.dumps(data).encode())
    assert "\n" not in str(err.value)


def test_a_record_written_before_the_copy_rate_reads_with_none():
    data = RECORD.as_dict()
    del data["memory"]["copy_gbs"]
    assert read_host_record(json.dumps(data).encode()).copy_gbs is None


def test_not_json_and_nan_are_one_line():
    with pytest.raises(HostRecordError, match="not JSON"):
        read_host_record(b"\xff\xfe")
    with pytest.raises(HostRecordError, match="not JSON"):
        read_host_record(RECORD.to_json().replace("21.5", "NaN").encode())


def test_a_large_file_is_refused_unread(tmp_path):
    path = tmp_path / "big.json"
    path.write_bytes(b" " * (1 << 20))
    with pytest.raises(HostRecordError, match="at most"):
        read_host_record(path)


def test_a_record_written_before_read_cold_existed_reads_as_not_measured():
    data = RECORD.as_dict()
    data["drive"] = {"name": "vda", "read_gbs": None}  # run11c's host_default.json, as recorded
    assert read_host_record(json.dumps(data).encode()).drive_read_cold is None
    data["drive"] = {"name": "vda", "read_gbs": 2.5, "read_cold": True}
    back = read_host_record(json.dumps(data).encode())
    assert (back.drive_read_gbs, back.drive_read_cold) == (2.5, True)
