"""`predict`'s host as people know it, its range's sources and the disk term, through the CLI a user runs."""

from __future__ import annotations

import json

from cli_runs import run_cli
from conftest import QWEN30B

from moe_model.resources import data_path

QWEN235 = data_path("models", "Qwen3-235B-A22B-Q4_K_M-00001-of-00003.gguf")


def _predict(*flags: str) -> dict:
    out = run_cli("predict", "--model", str(QWEN30B), "--hardware", "3060", "--json", *flags)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_predict_json_lists_its_range_sources_largest_first():
    out = _predict("--budget-mib", "9470")
    sources = out["range_sources"]
    assert sources and all({"source", "low_tps", "high_tps", "narrowed_by"} <= set(s) for s in sources)
    assert sources[0]["source"] in out["range_step"]


def test_threads_as_typed_win_over_the_cpu_part_and_change_the_cpu_path():
    eight = _predict("--placement", "cpu-moe", "--budget-mib", "0", "--cpu", "Ryzen 9 7950X")
    four = _predict("--placement", "cpu-moe", "--budget-mib", "0", "--cpu", "Ryzen 9 7950X", "--threads", "4")
    assert eight["hardware"]["host"]["threads"] == 16 and four["hardware"]["host"]["threads"] == 4
    assert four["decode_tps"] < eight["decode_tps"]


def test_a_described_host_leaves_only_the_time_model_routing_and_policy_readings_as_sources():
    out = _predict("--budget-mib", "9470", "--cpu", "7700x", "--ram-kit", "2x32 GB DDR5-6000", "--slot", "pcie 4.0 x16")
    left = {"routing (hit rate)", "time model", "host: drive", "policy (ClassLRU readings)"}  # b12569: ClassLRU's
    assert {s["source"] for s in out["range_sources"]} <= left


def test_a_ram_kit_not_understood_is_one_line():
    out = run_cli("predict", "--model", str(QWEN30B), "--hardware", "RTX 3060 12GB", "--ram-kit", "fast ram")
    assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1 and "as on the box" in out.stderr


def test_ram_changes_the_answer_where_mmapd_experts_exceed_it_and_the_disk_term_says_so():
    flags = ("predict", "--model", str(QWEN235), "--hardware", "4090", "--placement", "cpu-moe", "--budget-mib", "0")
    small, large = (json.loads(run_cli(*flags, "--json", "--ram-gib", r).stdout) for r in ("64", "192"))
    assert small["breakdown_ms"]["disk"] > 0 and large["breakdown_ms"]["disk"] == 0
    assert small["decode_tps"] < large["decode_tps"] / 2
    assert any("GiB per token from disk" in n for n in small["notes"])
    slow, fast = (
        json.loads(run_cli(*flags, "--json", "--ram-gib", "64", "--drive", d).stdout) for d in ("sata", "gen5")
    )
    assert slow["decode_tps"] < small["decode_tps"] < fast["decode_tps"]
    text = run_cli(*flags, "--ram-gib", "64").stdout
    assert "GiB per token from disk" in text and "range from" in text


def test_pinned_experts_that_exceed_ram_still_have_no_disk_term():
    flags = ("predict", "--model", str(QWEN235), "--hardware", "4090", "--placement", "cpu-moe", "--budget-mib", "0")
    out = json.loads(run_cli(*flags, "--json", "--ram-gib", "64", "--load-mode", "none").stdout)
    assert out["breakdown_ms"]["disk"] == 0
