"""The CLI contract: flags, JSON fields and exit codes that other tools script against."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import GT_HEADER, QWEN30B, ROOT


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "moe_model", *args], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


def test_plan_json_has_the_contract_fields_and_groundtruth_slots():
    out = run_cli("plan", str(GT_HEADER), "--budget-mib", "403", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    for key in (
        "starts",
        "error",
        "device_cache_mib",
        "host_experts_mib",
        "min_budget_mib",
        "full_budget_mib",
        "groups",
    ):
        assert key in report
    assert sorted(g["n_slots"] for g in report["groups"]) == [191, 255]
    assert set(report["groups"][0]) >= {"layers", "n_layers", "type", "slot_bytes", "n_slots", "percent"}
    assert (report["min_budget_mib"], report["full_budget_mib"]) == (15, 1614)


def test_plan_that_does_not_start_still_exits_0_with_the_error():
    report = json.loads(run_cli("plan", str(QWEN30B), "--budget-mib", "49", "--json").stdout)
    assert report["starts"] is False
    assert report["error"] == "MoE cache is too small to hold the experts of one token"


def test_plan_table_mirrors_the_server_lines():
    out = run_cli("plan", str(QWEN30B), "--budget-mib", "10000")
    assert "CUDA0 MoE cache size =  9999.32 MiB for 16740.00 MiB of host experts" in out.stdout
    assert "24 layers, q6_K:  1834 slots (59.7%)" in out.stdout


def test_plan_options_n_cpu_moe_and_tensor_split():
    one = json.loads(run_cli("plan", str(QWEN30B), "--budget-mib", "2000", "--n-cpu-moe", "6", "--json").stdout)
    assert sorted(il for g in one["groups"] for il in g["layers"]) == list(range(6))
    two = json.loads(run_cli("plan", str(QWEN30B), "--budget-mib", "10000", "--tensor-split", "1,1", "--json").stdout)
    assert [d["name"] for d in two["devices"]] == ["CUDA0", "CUDA1"]


def test_unreadable_sources_exit_1_with_one_line_and_no_traceback(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a model at all")
    for source in (str(bad), str(tmp_path / "missing.gguf")):
        out = run_cli("plan", source, "--budget-mib", "100")
        assert out.returncode == 1
        assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
