"""The CLI contract: flags, JSON fields and exit codes that other tools script against."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cli_runs import main_exit, run_cli, run_process
from conftest import GPT_OSS, GROUNDTRUTH, GT_HEADER, MIXTRAL, MODELS, QWEN30B, SAMPLE

from moe_model.cli import build_parser
from moe_model.cli.output import to_json


def test_plan_json_has_the_contract_fields_and_groundtruth_slots():
    out = run_process("plan", str(GT_HEADER), "--budget-mib", "403", "--json")
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
        out = run_process("plan", source, "--budget-mib", "100")
        assert out.returncode == 1
        assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr


def test_simulate_json_contract_on_a_recorded_trace_matches_the_log():
    out = run_cli(
        "simulate",
        "--model",
        str(GT_HEADER),
        "--trace",
        str(GROUNDTRUTH / "traces" / "b25.npz"),
        "--budgets-mib",
        "14,403",
        "--build",
        "11549",  # the build of the recorded run: its exact LRU
        "--json",
    )
    assert out.returncode == 0, out.stderr
    budgets = json.loads(out.stdout)["budgets"]
    refused, b25 = budgets
    assert refused["starts"] is False and refused["n_slots"] == 0
    for key in ("budget_mib", "starts", "groups", "n_slots", "small", "large", "copied_experts", "bypassed_ubatches"):
        assert key in b25
    assert b25["small"]["hits"] == 11457 and b25["small"]["misses"] == 17422
    assert set(b25["small"]) >= {"hits", "misses", "hit_rate", "uploaded_bytes"}
    assert [g["n_slots"] for g in b25["groups"]] == [191, 255] and b25["n_slots"] == 446
    assert b25["copied_experts"] == 552


def test_simulate_synthetic_budget_range_and_batching_flags():
    out = run_cli(
        "simulate",
        "--model",
        str(QWEN30B),
        "--synthetic",
        "--tokens",
        "600",
        "--budget-range",
        "50:16746:3",
        "--concurrency",
        "2",
        "--draft",
        "4",
        "--accept",
        "0.5",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    budgets = json.loads(out.stdout)["budgets"]
    assert [b["budget_mib"] for b in budgets] == [50, 8398, 16746]
    assert budgets[-1]["small"]["hit_rate"] > budgets[1]["small"]["hit_rate"]
    assert budgets[-1]["large"]["hits"] > 0  # 2 streams x 5 verified tokens = 10 tokens: the "> 8" class


def test_simulate_refuses_a_trace_of_another_model_in_one_line():
    out = run_cli(
        "simulate",
        "--model",
        str(QWEN30B),
        "--trace",
        str(SAMPLE / "traces" / "gpt-oss-20b" / "routing.npz"),
        "--budget-mib",
        "1000",
    )
    assert out.returncode == 1 and out.stderr.strip() == "error: the trace has 24 layers, the model 48"


def test_parse_log_json_contract_and_crosscheck():
    out = run_cli("parse-log", str(GROUNDTRUTH / "logs" / "server_np4_b25.log"), "--model", str(GT_HEADER), "--json")
    assert out.returncode == 0, out.stderr
    (run,) = json.loads(out.stdout)["runs"]
    for key in ("model", "placement", "devices", "groups", "stats", "timings", "warnings", "errors"):
        assert key in run
    assert run["devices"] == [{"name": "CUDA0", "cache_mib": 402.75, "host_experts_mib": 1611.0}]
    assert run["groups"][0] == {"n_layers": 6, "type": "q6_K", "n_slots": 191, "percent": 24.9}
    assert set(run["stats"]) == {"small", "large", "copied"} and run["stats"]["copied"] == {
        "experts": 1845,
        "mib": 548.17,
    }
    assert set(run["stats"]["small"]) >= {"hits", "misses", "hit_rate", "uploaded_mib"}
    assert run["timings"][0]["decode_tokens"] == 256 and run["timings"][0]["decode_tps"] > 0
    assert all(line["ok"] for line in run["crosscheck"]["lines"] if line["comparable"])
    assert run["crosscheck"]["lines"][-1]["what"] == "replacement policy" and run["engine"] == "mainline"


def test_parse_log_of_a_non_log_exits_1_with_one_line(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("shopping list\neggs\nmilk\n")
    out = run_cli("parse-log", str(path))
    assert out.returncode == 1 and out.stderr.strip().startswith("error: this is not a llama.cpp log")


def test_predict_json_contract():
    out = run_cli(
        "predict",
        "--model",
        str(QWEN30B),
        "--hardware",
        "Tesla T4",
        "--budget-mib",
        "10000",
        "--hit-rate",
        "0.957",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    pred = json.loads(out.stdout)
    for key in ("starts", "decode_tps", "decode_tps_range", "verdict", "prefill_tps", "hit_rate", "breakdown_ms"):
        assert key in pred
    lo, hi = pred["decode_tps_range"]
    assert lo < pred["decode_tps"] < hi and pred["vram"]["moe_cache"] > 9999
    assert pred["verdict"] in ("helps", "hurts", "too close to call")
    assert pred["scenario"]["placement"] == "cpu-moe" and "traffic" in pred  # fields scripts already read
    assert (pred["policy"], pred["policy_exact"], pred["build"]) == ("class-lru-b12170", False, 12569)
    assert pred["scenario"]["build"] == 12569 and pred["known_problems"] == []
    refused = json.loads(
        run_cli("predict", "--model", str(QWEN30B), "--hardware", "Tesla T4", "--budget-mib", "49", "--json").stdout
    )
    assert refused["starts"] is False


def test_predict_takes_the_request_and_the_host_and_reports_prompt_time_first_token_and_first_request():
    def predict(*flags: str) -> dict:
        args = ("predict", "--model", str(QWEN30B), "--hardware", "rtx 4090", "--budget-mib", "10000")
        out = run_cli(*args, "--hit-rate", "0.9", "--ctx", "32768", "--json", *flags)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    long = predict("--prompt-tokens", "4000", "--depth", "16000", "-fa", "off", "--n-predict", "128")
    assert long["depth"] == 16000 and long["scenario"]["flash_attn"] == "off"
    assert long["ttft_s"] == pytest.approx(4000 / long["prefill_tps"])
    assert set(long["first_request"]) >= {"decode_tps", "prefill_tps", "ttft_s", "cold_fills", "decode_tps_range"}
    low, high = long["first_request"]["decode_tps_range"]
    assert long["first_request"]["n_predict"] == 128 and low <= long["first_request"]["decode_tps"] <= high
    assert long["first_request"]["decode_tps"] < long["decode_tps"]
    assert predict("--depth", "0")["decode_tps"] > predict("--depth", "16000")["decode_tps"]
    host_kv = predict("--depth", "16000", "--no-kv-offload")
    assert host_kv["vram"]["kv_cache"] == 0 and host_kv["decode_tps"] < predict("--depth", "16000")["decode_tps"]
    slow, fast = predict("--host-copy-gbs", "4"), predict("--host-copy-gbs", "8")
    assert fast["decode_tps"] > slow["decode_tps"] and fast["hardware"]["host"]["copy_gbs"] == 8
    wide = predict("--mem-channels", "4", "--mem-mts", "6000", "--vm", "--cpu-family", "client")
    assert wide["hardware"]["host"]["mem_channels"] == 4 and wide["hardware"]["host"]["mem_bw_gbs"] is None
    refused = run_cli("predict", "--model", str(QWEN30B), "--hardware", "t4", "--depth", "9000", "--ctx", "4096")
    assert refused.returncode == 1 and "does not fit the context" in refused.stderr


def test_recommend_cli_and_unknown_hardware():
    out = run_cli("recommend", "--model", str(GT_HEADER), "--hardware", "H200", "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["best"]["command"].endswith("-lv 4") and result["options"]
    assert (result["build"], result["policy"], result["policy_exact"]) == (12569, "class-lru-b12170", False)
    assert all({"policy", "policy_exact", "build"} <= set(o) for o in result["options"])
    old = json.loads(
        run_cli("recommend", "--model", str(GT_HEADER), "--hardware", "H200", "--build", "11549", "--json").stdout
    )
    assert old["policy_exact"] and all(o["policy"] == "lru-b11549" for o in old["options"])  # no CPU share yet
    assert result["fits"] is True and result["would_fit"] == [] and result["summary"].startswith("fits: ")
    assert result["hardware"]["name"] == "H200"
    bad = run_cli("predict", "--model", str(QWEN30B), "--hardware", "Voodoo 2")
    assert bad.returncode == 1 and "unknown GPU 'Voodoo 2'" in bad.stderr
    near = run_cli("predict", "--model", str(QWEN30B), "--hardware", "rtx 4075").stderr.strip().splitlines()
    assert near[-1].endswith(
        "nearest: RTX 4070 12GB, RTX 5070, RTX 4090. For another card, start from the nearest "
        "preset and give your card's datasheet figures: --hardware 'RTX 4070 12GB' --vram-gib N "
        "--gpu-bw-gbs N --pcie-gen N --pcie-lanes N"
    )
    ambiguous = run_cli("predict", "--model", str(QWEN30B), "--hardware", "rtx 50")
    assert ambiguous.returncode == 1 and "ambiguous: " in ambiguous.stderr and "RTX 5090" in ambiguous.stderr


FLASH_NEXT = MODELS / "Qwen3.8-Flash-Next-UD-Q4_K_XL.gguf"


def test_predict_without_ram_never_adds_a_disk_term_and_says_the_ram_it_needs():
    """Flash-Next's ~72 GiB of host experts on an RTX 3090 preset (whose host's 32 GiB nobody stated): priced in RAM
    with the RAM it needs named; with --ram-gib 32 stated, the disk term is there as before."""
    args = ("predict", "--model", str(FLASH_NEXT), "--hardware", "rtx 3090", "--placement", "cpu-moe", "--json")
    unknown = json.loads(run_cli(*args).stdout)
    assert unknown["breakdown_ms"]["disk"] == 0 and unknown["prefill_breakdown_ms"]["disk"] == 0
    assert any(n.startswith("RAM not stated: this setting needs ") for n in unknown["notes"])
    small = json.loads(run_cli(*args, "--ram-gib", "32").stdout)
    assert small["breakdown_ms"]["disk"] > 0 and not any(n.startswith("RAM not stated") for n in small["notes"])


def test_recommend_ends_its_table_with_a_one_line_summary():
    text = run_cli("recommend", "--model", str(GT_HEADER), "--hardware", "H200")
    """The state first (streams from disk, does not fit, fits), then the best setting (issue 37)."""
    assert text.returncode == 0 and text.stdout.splitlines()[-1].startswith("summary: fits: ")
    assert "; best: " in text.stdout.splitlines()[-1]


def test_recommend_when_nothing_fits_the_ram_says_what_would_fit_and_exits_1():
    """Mixtral (8 experts a layer: seconds) on 2 GiB, no room for a page cache beside the reserve (on 8 GiB its
    mmap'd experts stream from disk: test_recommend.py)."""
    args = ("recommend", "--model", str(MIXTRAL), "--hardware", "rtx 3060 12gb", "--ram-gib", "2")
    out = run_cli(*args, "--json")
    assert out.returncode == 1 and out.stderr.startswith("error: nothing fits RTX 3060") and out.stderr.count("\n") == 1
    result = json.loads(out.stdout)
    assert result["fits"] is False and result["best"] is None and result["options"]
    assert not any(o["usable"] for o in result["options"])
    ram = [c for c in result["would_fit"] if c["kind"] == "ram"]
    assert ram and ram[0]["ram_gib"] > 2 and ram[0]["text"] in result["summary"]


def test_calibrate_refuses_logs_without_runs_with_one_line_and_exit_1(tmp_path):
    log = tmp_path / "pipeline.log"
    log.write_text("step 1 ok\nstep 2 ok\n")
    out = run_cli(
        "calibrate", str(log), "--model", str(GT_HEADER), "--hardware", "h200", "-o", str(tmp_path / "m.json")
    )
    assert out.returncode == 1 and out.stderr.count("\n") == 1 and "not a llama.cpp log" in out.stderr


def test_calibrate_refuses_logs_that_mix_the_fork_with_mainline_in_one_line(tmp_path):
    from log_cases import FORK_LOG

    lines = (GROUNDTRUTH / "logs" / "server_b10.log").read_text().splitlines(keepends=True)
    fork_lines = FORK_LOG.splitlines(keepends=True)
    fork = tmp_path / "fork.log"  # a timed run with the fork's --fit line (its automatic cache) among its first
    fork.write_text("".join([lines[0], fork_lines[1], *lines[1:]]))
    mainline = GROUNDTRUTH / "logs" / "server_b25.log"
    out = run_cli("calibrate", str(mainline), str(fork), "--model", str(GT_HEADER), "--hardware", "h200")
    assert out.returncode == 1 and out.stderr.count("\n") == 1
    assert f"mix engines that cache differently (mainline: {mainline}#1; qvac-fabric fork: {fork}#1)" in out.stderr


def test_simulate_exports_a_workload_that_replays_to_the_same_counts(tmp_path):
    path = tmp_path / "w.npz"
    first = run_cli(
        "simulate",
        "--model",
        str(GT_HEADER),
        "--synthetic",
        "--tokens",
        "300",
        "--concurrency",
        "2",
        "--budget-mib",
        "403",
        "--export-workload",
        str(path),
        "--json",
    )
    again = run_cli("simulate", "--model", str(GT_HEADER), "--trace", str(path), "--budget-mib", "403", "--json")
    assert first.returncode == again.returncode == 0, first.stderr + again.stderr
    assert json.loads(first.stdout)["budgets"][0]["small"] == json.loads(again.stdout)["budgets"][0]["small"]


def test_an_export_cut_short_leaves_the_previous_file_as_it_was(tmp_path, monkeypatch):
    import numpy as np

    path = tmp_path / "w.npz"
    path.write_bytes(b"the previous export")

    def disk_fills(target, **arrays):
        target.write(b"PK\x03\x04 half an archive")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez_compressed", disk_fills)
    args = ("simulate", "--model", str(GT_HEADER), "--synthetic", "--tokens", "30", "--budget-mib", "403")
    out = run_cli(*args, "--export-workload", str(path))
    assert out.returncode == 1 and out.stderr == f"error: No space left on device: {path}\n"
    assert path.read_bytes() == b"the previous export" and [p.name for p in tmp_path.iterdir()] == ["w.npz"]


# --- hostile input: one-line errors, never a crash or an invalid number ---


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--hit-rate", "2", "argument --hit-rate: must be in 0.0..1.0, got 2"),
        ("--hit-rate", "nan", "argument --hit-rate: must be in 0.0..1.0, got nan"),
        ("--concurrency", "1000000", "argument --concurrency: must be in 1..256, got 1000000"),
        ("--draft", "-1", "argument --draft: must be in 0..64, got -1"),
        ("--budget-mib", "99999999999", "argument --budget-mib: must be in 0..16,777,216, got 99999999999"),
        ("--ctx", "x", "argument --ctx: expected a number, got 'x'"),
    ],
)
def test_out_of_range_numeric_flags_are_usage_errors_not_wrong_numbers(capsys, flag, value, message):
    code, _, err = main_exit(capsys, "predict", "--model", str(QWEN30B), "--hardware", "Tesla T4", flag, value)
    assert code == 1 and err.strip().splitlines() == [err.strip()] and err.strip().endswith(message)


def test_a_gpu_name_that_is_not_exact_says_on_stderr_which_card_it_became(capsys):
    args = ("predict", "--model", str(QWEN30B), "--hit-rate", "0.5", "--json")
    code, out, err = main_exit(capsys, *args, "--hardware", "rtx 3060")
    assert code == 0 and json.loads(out)["hardware"]["name"] == "RTX 3060 12GB"
    assert (
        err.strip() == "note: 'rtx 3060' is the RTX 3060 12GB preset (12 GB, 360 GB/s, PCIe 4.0 x16), not RTX 3060 Ti"
    )
    code, out, err = main_exit(capsys, *args, "--hardware", "RTX 3060 12GB")
    assert code == 0 and err == ""  # positive control: an exact name needs no note


def test_simulate_prompt_tokens_beyond_the_limit_are_refused_before_allocation(capsys):
    # Mixtral: 10 billion draws, far beyond memory if allocated (Qwen3-30B spent 2 s more of CPU before refusing)
    code, _, err = main_exit(
        capsys, "simulate", "--model", str(MIXTRAL), "--synthetic", "--budget-mib", "3000", "--prompt-tokens", "1000000"
    )
    assert code == 1 and "drawn routing is above this tool's limit" in err and len(err.strip().splitlines()) == 1


def test_parse_log_refuses_a_logged_number_that_overflows_in_one_line_never_invalid_json(tmp_path, capsys):
    log = tmp_path / "huge.log"
    huge = "1" + "0" * 400  # float() gives inf, which json.dumps writes as the invalid token Infinity
    log.write_text(
        "build: 1 (abc)\nllama_moe_cache: ubatch <= 8: hits = 1, misses = 1, hit rate = 50.00%, "
        f"uploaded = {huge}.00 MiB\n"
    )
    code, text, err = main_exit(capsys, "parse-log", str(log), "--json")
    assert code == 1 and text == "" and len(err.strip().splitlines()) == 1  # issue 39: was shown as inf (null)
    assert err.startswith("error: the log's uploaded MiB is 1000") and "above this tool's limit" in err


def test_plan_simulate_and_predict_take_the_same_placement_spellings(capsys):
    plan = ["plan", str(QWEN30B), "--budget-mib", "2000", "--json"]
    by_alias = main_exit(capsys, *plan, "--n-cpu-moe", "6")
    assert by_alias[0] == 0 and by_alias == main_exit(capsys, *plan, "--placement", "n-cpu-moe:6")
    assert main_exit(capsys, *plan, "--cpu-moe") == main_exit(capsys, *plan, "--placement", "cpu-moe")
    sim = ["simulate", "--model", str(QWEN30B), "--synthetic", "--tokens", "300", "--budget-mib", "2000", "--json"]
    assert main_exit(capsys, *sim, "--n-cpu-moe", "6") == main_exit(capsys, *sim, "--placement", "n-cpu-moe:6")
    pred = ["predict", "--model", str(QWEN30B), "--hardware", "t4", "--budget-mib", "2000", "--hit-rate", "0.5"]
    code, text, _ = main_exit(capsys, *pred, "--n-cpu-moe", "6", "--json")
    assert code == 0 and json.loads(text)["scenario"]["placement"] == "n-cpu-moe:6"  # the --placement string
    assert (code, text) == main_exit(capsys, *pred, "--placement", "n-cpu-moe:6", "--json")[:2]


def test_predict_at_ngl_0_keeps_every_layer_in_ram_and_the_gpu_holds_only_its_buffers(capsys):
    """Issue 37: `--placement gpu -ngl 0` said "does not fit: 6249 MiB over the GPU's memory" and counted no
    expert in RAM (the VRAM and RAM accounts ignored -ngl)."""
    args = ("predict", "--model", str(QWEN30B), "--hardware", "3060", "--placement", "gpu", "-ngl", "0")
    code, out, err = main_exit(capsys, *args, "--ram-gib", "32", "--json")
    pred = json.loads(out)
    assert code == 0 and pred["fits_vram"] and pred["vram"]["dense"] == pred["vram"]["experts_on_gpu"] == 0
    assert pred["ram"]["experts"] > 16_000 and pred["ram_state"] == "fits" and pred["host_layers"] == 48
    code, text, _ = main_exit(capsys, *args)
    assert code == 0 and "does not fit" not in text and "RAM MiB [modelled]: experts 16740" in text


@pytest.mark.parametrize("ubatch", ["512", "4096", "8192"])
def test_predict_fit_moves_the_layers_each_ubatch_needs_and_the_layout_fits(capsys, ubatch):
    """RTX 3060, -c 32768: --fit sizes its layers with this -ub's compute buffer, so it never reports its own
    layout as not fitting (it moved 29 layers at every -ub and then reported 1,199 MiB over at 4096)."""
    args = ("predict", "--model", str(QWEN30B), "--hardware", "3060", "--ctx", "32768", "--placement", "fit")
    code, out, err = main_exit(capsys, *args, "-ub", ubatch, "--json")
    report = json.loads(out)
    assert code == 0 and report["fits_vram"] and report["vram"]["free"] >= report["vram"]["margin"], err


def test_plan_refuses_fit_in_one_line_it_needs_a_machine_and_conflicting_spellings_are_usage_errors(capsys):
    code, _, err = main_exit(capsys, "plan", str(QWEN30B), "--budget-mib", "2000", "--placement", "fit")
    assert code == 1 and err.strip().splitlines() == [
        "error: --placement fit needs a machine: use predict or recommend with --hardware "
        "(plan and simulate take cpu-moe, gpu or n-cpu-moe:K)"
    ]
    code, _, err = main_exit(capsys, "plan", str(QWEN30B), "--budget-mib", "9", "--placement", "gpu", "--cpu-moe")
    assert code == 1 and err.count("\n") == 1 and "not allowed with argument --placement" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["plan", str(QWEN30B), "--budget-mib", "403.7"],
            "argument --budget-mib: expected a whole number, got '403.7'",
        ),
        (
            ["simulate", "--model", str(QWEN30B), "--synthetic", "--budgets-mib", "403.7,15.9"],
            "argument --budgets-mib: expected whole numbers, got 403.7 in '403.7,15.9'",
        ),
        (
            ["simulate", "--model", str(QWEN30B), "--synthetic", "--budget-range", "0:100.5:3"],
            "argument --budget-range: expected whole numbers, got 100.5 in '0,100.5,3'",
        ),
        (
            ["predict", "--model", str(QWEN30B), "--hardware", "t4", "--budget-mib", "1e3.5"],
            "argument --budget-mib: expected a number, got '1e3.5'",
        ),
    ],
)
def test_fractional_budgets_are_refused_in_one_line_not_cut_to_whole_mib(capsys, argv, message):
    code, _, err = main_exit(capsys, *argv)
    assert code == 1 and err.strip().splitlines() == [err.strip()] and err.strip().endswith(message)
    whole = build_parser().parse_args(["simulate", "--model", "m", "--synthetic", "--budgets-mib", "403,15"])
    assert whole.budgets_mib == (403, 15)  # positive control: whole budgets pass as they are


def _header_file(tmp_path, name: str, extra_meta: dict | None = None, expert_shape=(256, 1024, 12)) -> str:
    """A small qwen3moe header (2 layers of 12 F32 experts) written to tmp_path, with some metadata changed."""
    from gguf import GGMLQuantizationType as T

    from moe_model.readers.gguf_writer import header_bytes

    meta = {
        "general.architecture": "qwen3moe",
        "general.name": "tiny",
        "qwen3moe.block_count": 2,
        "qwen3moe.expert_count": 12,
        "qwen3moe.expert_used_count": 2,
    } | (extra_meta or {})
    kinds = ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")
    tensors = [(f"blk.{il}.{kind}.weight", T.F32, list(expert_shape)) for il in range(2) for kind in kinds]
    path = tmp_path / name
    path.write_bytes(header_bytes(meta, tensors))
    return str(path)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("nan,1", "argument --tensor-split/-ts: must be in 0..1,000,000, got nan"),
        ("1,inf", "argument --tensor-split/-ts: must be in 0..1,000,000, got inf"),
        ("1,-1", "argument --tensor-split/-ts: must be in 0..1,000,000, got -1"),
        (",".join(["1"] * 65), "argument --tensor-split/-ts: at most 64 values (one per GPU), got 65"),
    ],
)
def test_a_tensor_split_that_is_not_finite_and_bounded_is_a_usage_error(capsys, value, message):
    assert main_exit(capsys, "plan", str(GT_HEADER), "--budget-mib", "403", "--tensor-split", "1,1")[0] == 0
    code, _, err = main_exit(capsys, "plan", str(GT_HEADER), "--budget-mib", "403", "--tensor-split", value)
    assert code == 1 and err.strip().splitlines() == [err.strip()] and err.strip().endswith(message)


@pytest.mark.parametrize("shape", [(256, 0, 12), (256, 1024, 0)])
def test_an_expert_tensor_with_an_empty_dimension_is_one_line_not_a_zero_division(tmp_path, capsys, shape):
    code, out, err = main_exit(
        capsys, "plan", _header_file(tmp_path, "e.gguf", expert_shape=shape), "--budget-mib", "99"
    )
    assert code == 1 and out == "" and len(err.strip().splitlines()) == 1
    assert "ZeroDivisionError" not in err and "expert tensor blk.0.ffn_gate_exps.weight" in err


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("qwen3moe.vocab_size", -(10**12), "qwen3moe.vocab_size is -1,000,000,000,000: it cannot be negative"),
        (
            "qwen3moe.attention.head_count_kv",
            -(10**6),
            "qwen3moe.attention.head_count_kv is -1,000,000: it cannot be negative",
        ),
    ],
)
def test_negative_metadata_is_refused_not_priced(tmp_path, capsys, key, value, message):
    # once "decode -0.0002 t/s, the cache helps" and "fits in VRAM: -3,999,682 of 15,360 MiB used"
    from gguf import GGUFValueType

    from moe_model.readers.gguf_writer import Scalar

    path = _header_file(tmp_path, "neg.gguf", {key: Scalar(GGUFValueType.INT64, value)})
    code, out, err = main_exit(capsys, "predict", "--model", path, "--hardware", "t4", "--budget-mib", "100")
    assert code == 1 and out == "" and err.strip() == f"error: {message}"


def test_a_url_with_credentials_is_refused_without_quoting_them(capsys):
    code, out, err = main_exit(capsys, "plan", "http://user:s3cret@127.0.0.1:9/model.gguf", "--budget-mib", "99")
    assert code == 1 and out == "" and "s3cret" not in err and len(err.strip().splitlines()) == 1
    assert "user name or password" in err


def test_parse_log_shows_a_cache_that_was_never_looked_up_without_dividing_by_zero(tmp_path, capsys):
    log = tmp_path / "idle.log"
    log.write_text(
        "build: 1 (abc)\nllama_moe_cache: ubatch <= 8: hits = 0, misses = 0, hit rate = 0.00%, uploaded = 0.00 MiB\n"
    )
    code, text, err = main_exit(capsys, "parse-log", str(log))
    assert code == 0, err
    assert "ubatch <= 8: hit rate - (0 hits, 0 misses)" in text
    code, text, _ = main_exit(capsys, "parse-log", str(log), "--json")
    run = json.loads(text)["runs"][0]
    assert code == 0 and run["stats"]["small"]["hit_rate"] is None and run["build"] == 1


def test_simulate_policy_all_on_synthetic_routing_keeps_the_counts_it_had_before_its_jobs_ran_on_threads():
    """Counts of the synthetic workload before the generator and the policies ran on threads (commit 4e15bce),
    with the server's start-up probe the workload gained for issue 36 (without it, the counts pinned at 4e15bce)."""
    argv = ["--synthetic", "--tokens", "300", "--budgets-mib", "2000,9000", "--policy", "all", "--json"]
    out = run_cli("simulate", "--model", str(QWEN30B), *argv)
    assert out.returncode == 0, out.stderr
    counts = {
        p["name"]: [(b["hits"], b["uploads"], b["cpu"]) for b in p["budgets"]]
        for p in json.loads(out.stdout)["policies"]
    }
    assert counts == {
        "lru-b11549": [(62316, 53979, 0), (107114, 9181, 0)],
        "class-lru-b12170": [(68566, 47729, 0), (107866, 8429, 0)],
        "cpu-share-b12191": [(59022, 29014, 28259), (106573, 6511, 3211)],
        "per-layer-lru": [(65764, 50520, 11), (107147, 9148, 0)],
        "static-hot-set": [(50876, 732, 64687), (107499, 3300, 5496)],
        "lazy-unload": [(62316, 53979, 0), (85978, 30317, 0)],
        "belady": [(86309, 22589, 7397), (111021, 4991, 283)],
    }


def test_predict_on_a_class_lru_build_carries_the_readings_band_as_a_range_source_and_b11549_none():
    args = ["predict", "--model", str(GPT_OSS), "--hardware", "RTX 3060 12GB", "--cpu-moe", "--budget-mib", "2434"]
    args += ["--trace", str(SAMPLE / "traces" / "gpt-oss-20b" / "routing.npz"), "--concurrency", "4", "--json"]
    current, old = (json.loads(run_cli(*args, "--build", b).stdout) for b in ("12569", "11549"))
    band, sources = current["policy_band"], {s["source"]: s for s in current["range_sources"]}
    assert band["hit_rate_low"] <= current["hit_rate"] <= band["hit_rate_high"] and band["width_points"] >= 5
    policy = sources["policy (ClassLRU readings)"]
    assert policy["low_tps"] < current["decode_tps"] < policy["high_tps"] and "b12170+" in policy["narrowed_by"]
    assert old["policy_band"] is None and policy["source"] not in {s["source"] for s in old["range_sources"]}


def test_simulate_text_shows_the_readings_band_on_a_class_lru_build_only():
    args = ["simulate", "--model", str(GPT_OSS), "--trace", str(SAMPLE / "traces" / "gpt-oss-20b" / "routing.npz")]
    args += ["--concurrency", "4", "--budgets-mib", "2434"]
    current, old = (run_cli(*args, "--build", b).stdout for b in ("12569", "11549"))
    assert "readings (all)" in current and re.search(r" \d+\.\d-\d+\.\d%$", current.splitlines()[-2])
    assert "readings (all)" not in old


SIMULATE_RUNS = GROUNDTRUTH / "traces" / "b25.npz"
# `simulate --policy` before its runner moved into answers/policy_compare.py (recorded at commit 400d76c): the
# build's policy reused (mainline: ClassLRU; b11549: LRU, with a knob on another policy) and not (knobs of its own)
SIMULATE_SNAPSHOT = json.loads((Path(__file__).parent / "simulate_policy_runs.json").read_text())


@pytest.mark.parametrize("case", list(SIMULATE_SNAPSHOT))
def test_simulate_with_policies_prints_byte_for_byte_what_it_printed_before_its_runner_moved(capsys, case):
    argv = ["simulate", "--model", str(GT_HEADER), "--trace", str(SIMULATE_RUNS), *SIMULATE_SNAPSHOT[case]["argv"]]
    code, text, err = main_exit(capsys, *argv)
    assert code == 0, err
    code, out, err = main_exit(capsys, *argv, "--json")
    assert code == 0, err
    assert text == SIMULATE_SNAPSHOT[case]["text"]
    assert out == to_json(SIMULATE_SNAPSHOT[case]["json"]) + "\n"  # the fields, their order and their digits


def test_a_huge_knob_is_one_line_and_a_tiny_round_time_is_answered():
    """Issue 39: `--knob idle_rounds=1e308` printed 11 lines of numba typing (later `unexpected OverflowError`)."""
    args = ("simulate", "--model", str(GT_HEADER), "--synthetic", "--tokens", "60", "--budget-mib", "403")
    out = run_cli(*args, "--policy", "lazy-unload", "--knob", "idle_rounds=1e308")
    assert out.returncode == 1 and out.stderr == "error: knob idle_rounds must be in [0, 1e+09], got 1e+308\n"
    out = run_cli(*args, "--policy", "lazy-unload", "--knob", "ms_per_round=1e-300", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["policies"][0]["knobs"]["ms_per_round"] == 1e-300


def test_synthetic_tokens_above_what_simulate_answers_are_refused_in_one_line(capsys):
    """Issue 39: the documented maximum (2,000,000) gave no answer in 400 s; the maximum is now what is answered
    (limits.MAX_SYNTHETIC_TOKENS, measured there)."""
    from moe_model.limits import MAX_SYNTHETIC_TOKENS

    code, out, err = main_exit(
        capsys, "simulate", "--model", str(GT_HEADER), "--synthetic", "--tokens", "2000000", "--budget-mib", "403"
    )
    said = f"argument --tokens: must be in 1..{MAX_SYNTHETIC_TOKENS:,}, got 2000000"
    assert code == 1 and out == "" and err.strip().splitlines() == [err.strip()] and err.strip().endswith(said)


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["plan", str(GT_HEADER), "--budget-mib", "-5"], "argument --budget-mib: must be in 0..16,777,216, got -5"),
        (["plan"], "plan: the following arguments are required: source, --budget-mib"),
        (["frobnicate"], "argument command: invalid choice: 'frobnicate'"),
        (["plan", str(GT_HEADER), "--budget-mib", "1\n2"], "argument --budget-mib: expected a number, got '1\\n2'"),
    ],
)
def test_argparse_refusals_are_one_line_and_exit_1_as_the_readme_says(capsys, argv, said):
    code, out, err = main_exit(capsys, *argv)
    assert code == 1 and out == "" and err.count("\n") == 1 and err.startswith("error: python -m moe_model")
    assert said in err


def _deep_header(tmp_path, n_layer: int) -> str:
    """A qwen3moe header of `n_layer` layers of 8 small experts (2 used)."""
    from gguf import GGMLQuantizationType as T

    from moe_model.readers.gguf_writer import header_bytes

    meta = {"general.architecture": "qwen3moe", "general.name": "deep", "qwen3moe.block_count": n_layer}
    meta |= {"qwen3moe.expert_count": 8, "qwen3moe.expert_used_count": 2, "qwen3moe.embedding_length": 256}
    kinds = {"ffn_gate_exps": [256, 64, 8], "ffn_up_exps": [256, 64, 8], "ffn_down_exps": [256, 256, 8]}
    tensors = [(f"blk.{il}.{kind}.weight", T.Q4_K, shape) for il in range(n_layer) for kind, shape in kinds.items()]
    path = tmp_path / f"deep{n_layer}.gguf"
    path.write_bytes(header_bytes(meta, tensors))
    return str(path)


def test_plan_simulate_and_predict_take_the_same_headers_a_600_layer_one_and_refuse_the_same(tmp_path, capsys):
    """Issue 37: a 600-layer header planned but simulate and predict refused it as "an impossible routing shape" (a
    bound of 512 layers of their own); all three read a header with limits.MAX_LAYERS now."""
    from moe_model.limits import MAX_LAYERS

    deep = _deep_header(tmp_path, 600)
    runs = {
        "plan": ["plan", deep, "--budget-mib", "50"],
        "simulate": ["simulate", "--model", deep, "--synthetic", "--tokens", "300", "--budget-mib", "50"],
        "predict": ["predict", "--model", deep, "--hardware", "t4", "--budget-mib", "50"],
    }
    for name, argv in runs.items():
        code, out, err = main_exit(capsys, *argv)
        assert code == 0 and out, (name, err)
    too_deep = _deep_header(tmp_path, MAX_LAYERS + 1)
    for name, argv in runs.items():
        code, _, err = main_exit(capsys, *[too_deep if a == deep else a for a in argv])
        assert code == 1 and err.count("\n") == 1 and f"limit of {MAX_LAYERS:,}" in err, (name, err)


def test_a_link_rate_above_the_line_rate_is_refused_in_one_line_by_the_apps_rule(capsys):
    """Issue 37: the CLI refused it and the app cut it to the line; both refuse it now (Hardware.with_link_gbs)."""
    argv = ["predict", "--model", str(QWEN30B), "--hardware", "Tesla T4", "--budget-mib", "3000", "--link-gbs"]
    code, _, err = main_exit(capsys, *argv, "20")
    assert code == 1 and err == (
        "error: a measured host-to-device rate of 20 GB/s is above the PCIe 3.0 x16 line rate of 15.8 GB/s: no copy "
        "exceeds it (measured on another link?)\n"
    )
    code, out, _ = main_exit(capsys, *argv, "12", "--json")
    assert code == 0 and json.loads(out)["hardware"]["pinned_gbs"] == 12.0


def test_predict_prices_a_server_command_as_the_flags_it_says_and_prints_the_command_back(capsys):
    model = ["predict", "--model", str(QWEN30B), "--hardware", "Tesla T4", "--prompt-tokens", "300", "--json"]
    flags = ["--budget-mib", "3000", "--ctx", "8192", "-ub", "1024", "-fa", "off", "--no-kv-offload", "--pinned"]
    command = "llama-server -m x.gguf --cpu-moe --moe-cache-mib 3000 -c 8192 -ub 1024 -fa off -nkvo -lm none -np 1"
    code, out, err = main_exit(capsys, *model, *flags)
    by_flags = json.loads(out)
    code_2, out_2, err_2 = main_exit(capsys, *model, "--server-command", command)
    by_command = json.loads(out_2)
    assert code == code_2 == 0, err + err_2
    assert by_command["decode_tps"] == by_flags["decode_tps"] and by_command["scenario"] == by_flags["scenario"]
    assert by_command["scenario"]["prompt_tokens"] == 300  # the request stays the flags'
    assert by_command["command"] == by_flags["command"]  # the model named is --model's
    assert by_flags["command"].endswith(
        "--moe-cache-mib 3000 -np 1 -c 8192 -ub 1024 --load-mode none -fa off --no-kv-offload -lv 4"
    )
