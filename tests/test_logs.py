"""Parsing llama.cpp logs: real ground-truth logs, messy variants, and files that are not logs."""

from __future__ import annotations

import tracemalloc

import pytest
from conftest import GROUNDTRUTH, SAMPLE

from moe_model.errors import LogError
from moe_model.readers.logs import parse_lines, parse_log

LOGS = GROUNDTRUTH / "logs"
NP4 = (LOGS / "server_np4_b25.log").read_text(errors="replace")


def test_server_log_gives_model_placement_cache_stats_and_timings():
    (run,) = parse_log(LOGS / "server_np4_b25.log")
    assert run.program == "llama-server" and run.starts
    assert run.model["n_layer"] == 14 and run.model["n_expert"] == 128 and run.model["n_expert_used"] == 8
    assert run.model["file_type"] == "Q4_K - Medium" and run.model["params"] == "2.92 B"
    assert run.placement["model_buffers_mib"] == {"CPU_Mapped": 1655.77, "CUDA0": 52.83}
    assert run.placement["n_seq_max"] == 4 and run.placement["gpu"] == "NVIDIA H200"
    assert [(d.name, d.cache_mib, d.host_experts_mib) for d in run.devices] == [("CUDA0", 402.75, 1611.0)]
    assert [(g.n_layers, g.type, g.n_slots, g.percent) for g in run.groups] == [
        (6, "q6_K", 191, 24.9),
        (8, "q4_K", 255, 24.9),
    ]
    assert (run.small.hits, run.small.misses, run.small.uploaded_mib) == (33275, 62914, 56549.07)
    assert run.large is None and (run.copied_experts, run.copied_mib) == (1845, 548.17)
    assert len(run.timings) == 4 and {t.decode_tokens for t in run.timings} == {256}
    assert run.timings[0].prompt_tokens == 132
    assert run.placement["flash_attn"] == "off"  # "llama_context: flash_attn = disabled" (the runs used -fa off)


def test_refusal_log_reports_the_warnings_and_the_error():
    (run,) = parse_log(LOGS / "server_minany_minus1.log")
    assert not run.starts
    assert run.warnings == [
        "MoE cache budget is too small for 6 layers, they are not cached",
        "MoE cache budget is too small for 8 layers, they are not cached",
    ]
    assert run.errors[0] == "failed to create context: MoE cache is too small to hold the experts of one token"


def test_the_larger_than_8_class_is_read():
    (run,) = parse_log(LOGS / "prog_short_b25.log")
    assert (run.large.hits, run.large.misses, run.large.uploaded_mib) == (91, 661, 589.3)


def strip_prefix(text):
    return "\n".join(line.split(" ", 2)[2] if line[:1].isdigit() else line for line in text.splitlines())


@pytest.mark.parametrize(
    "variant",
    [
        lambda t: t,
        strip_prefix,
        lambda t: t.replace("\n", "\r\n"),
        lambda t: "\n".join(f"\x1b[32m{line}\x1b[0m" for line in t.splitlines()),
        lambda t: "\n".join(f"{line}\nsystemd[1]: unrelated line {i}" for i, line in enumerate(t.splitlines())),
    ],
    ids=["as-is", "no-prefix", "crlf", "ansi", "interleaved"],
)
def test_messy_variants_parse_to_the_same_facts(variant):
    (run,) = parse_lines(variant(NP4).splitlines(keepends=True))
    assert [(g.n_layers, g.n_slots) for g in run.groups] == [(6, 191), (8, 255)]
    assert run.small.hits == 33275 and len(run.timings) == 4


def test_several_runs_in_one_file_are_split():
    text = (LOGS / "server_b10.log").read_text(errors="replace") + (LOGS / "server_b50.log").read_text(errors="replace")
    runs = parse_log(text.encode())
    assert [r.groups[0].n_slots for r in runs] == [75, 383]
    unprefixed = parse_lines((strip_prefix(text) + "\n").splitlines(keepends=True))
    assert [r.groups[0].n_slots for r in unprefixed] == [75, 383]


def test_a_killed_server_has_no_statistics_and_says_why():
    text = "\n".join(line for line in NP4.splitlines() if "llama_moe_cache:" not in line)
    (run,) = parse_lines(text.splitlines(keepends=True))
    assert not run.has_stats
    assert any("clean shutdown" in note for note in run.notes())


def test_default_verbosity_log_tells_the_user_to_add_lv_4():
    (run,) = parse_log(SAMPLE / "logs" / "t4-default-verbosity.log")
    assert run.timings and not run.devices
    assert any("-lv 4" in note for note in run.notes())


def test_a_log_from_another_program_is_refused(tmp_path):
    path = tmp_path / "nginx.log"
    path.write_text('127.0.0.1 - - [29/Nov/2026:10:00:00 +0000] "GET / HTTP/1.1" 200 612\n' * 50)
    with pytest.raises(LogError, match="not a llama.cpp log"):
        parse_log(path)
    with pytest.raises(LogError, match="not a llama.cpp log"):
        parse_log(bytes(range(256)) * 100)
    with pytest.raises(LogError, match="no such log file"):
        parse_log(tmp_path / "missing.log")


def test_the_command_line_when_shown_gives_the_flags():
    (run,) = parse_log(SAMPLE / "logs" / "t4-cpumoe-10000.log")
    assert run.flag("--moe-cache-mib") == "10000" and run.program == "llama-server"


def test_a_large_log_streams_in_bounded_memory(tmp_path):
    path = tmp_path / "big.log"
    filler = "0.10.000.000 I slot update_slots: id  0 | task 1 | kv cache rm [0, end) some padding text\n" * 2000
    with path.open("w") as f:
        f.write(NP4)
        for _ in range(60):  # ~11 MB
            f.write(filler)
    tracemalloc.start()
    (run,) = parse_log(path)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert run.small.hits == 33275
    assert peak < 8 * 2**20  # streamed: far below the file's size


def test_a_log_with_more_runs_than_the_limit_is_refused_while_streaming():
    from moe_model.limits import MAX_LOG_RUNS

    run = "build: 1 (abc)\nllama_model_loader: - kv   2:   qwen3moe.block_count u32 = 48\n"
    assert len(parse_lines((run * 3).splitlines(keepends=True))) == 3  # positive control
    lines = (run * 10_000).splitlines(keepends=True)  # 10,000 runs took minutes to render and cross-check
    with pytest.raises(LogError, match=f"more than {MAX_LOG_RUNS:,} runs, this tool's limit"):
        parse_lines(lines)


def messy_two_runs(prefixed: bool) -> str:
    """A started run, then one refused at start whose log stops right after the context failure; CRLF and ANSI."""
    started = (LOGS / "server_b25.log").read_text(errors="replace")
    refused = (LOGS / "server_minany_minus1.log").read_text(errors="replace").splitlines()
    cut = next(i for i, line in enumerate(refused) if "impl: MoE cache budget" in line)
    refused = refused[: cut + 3]  # ends on `E llama_init_from_model: failed to initialize the context: ...`
    assert "failed to initialize the context" in refused[-1] and not any("common_init_: failed" in x for x in refused)
    text = started + "\n".join(refused) + "\n"
    if not prefixed:
        text = strip_prefix(text)
    return "".join(f"\x1b[3{i % 7}m{line}\x1b[0m\r\n" for i, line in enumerate(text.splitlines()))


@pytest.mark.parametrize("prefixed", [True, False], ids=["prefixed", "no-prefix"])
def test_a_messy_log_with_a_run_refused_at_start_is_two_runs_the_second_not_starting(prefixed):
    first, second = parse_lines(messy_two_runs(prefixed).splitlines(keepends=True))
    assert first.starts and not first.errors and first.groups
    assert not second.starts
    assert second.errors == ["failed to create context: MoE cache is too small to hold the experts of one token"]


def test_a_failed_fit_trial_alone_does_not_mark_the_run_refused():
    lines = [
        "build: 1 (abc)\n",
        "E llama_init_from_model: failed to initialize the context: MoE cache is too small to hold one token\n",
        "E common_fit_params: encountered an error while trying to fit params to free device memory\n",
        "llama_model_loader: loaded meta data with 28 key-value pairs and 171 tensors from m.gguf\n",
        "llama_model_loader: - kv   2:   qwen3moe.block_count u32 = 48\n",
    ]
    (run,) = parse_lines(lines)
    assert run.starts and run.model["n_layer"] == 48


def test_every_start_marker_opens_a_run_whatever_is_missing_between():
    loader = "llama_model_loader: loaded meta data with 28 key-value pairs and 171 tensors from m.gguf\n"
    kv = "llama_model_loader: - kv   2:   qwen3moe.block_count u32 = {}\n"
    lines = [loader, kv.format(48), loader, kv.format(94), "main: build = 1 (abc)\n", loader, kv.format(14)]
    assert [run.model["n_layer"] for run in parse_lines(lines)] == [48, 94, 14]


def test_a_llama_cpp_log_without_any_run_gets_one_message():
    with pytest.raises(LogError, match="holds no run") as info:
        parse_lines(["build: 1 (abc)\n", "main: llama backend init\n"] * 3)
    assert "\n" not in str(info.value)
