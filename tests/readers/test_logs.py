"""Parsing llama.cpp logs: real ground-truth logs, messy variants, and files that are not logs."""

from __future__ import annotations

import os
import re
import tracemalloc

import pytest
from conftest import GROUNDTRUTH, SAMPLE, run_within
from log_cases import FORK_LOG

from moe_model.errors import LogError
from moe_model.fits.log_timings import derive, point_from_run
from moe_model.fits.points import log_points
from moe_model.limits import MAX_LOG_ALERTS, MAX_LOG_LINE_CHARS
from moe_model.readers.logs import parse_lines, parse_log
from moe_model.speed.hardware import preset

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


def test_each_run_names_its_build_in_every_form_llama_cpp_prints_it():
    head = "0.00.412.118 I llama_model_loader: - kv  19:   qwen3moe.block_count u32   = 48\n"
    for line, build in (
        ("build: 12569 (c4fb5796) with cc (GCC) 13.3.0 for x86_64-linux-gnu", 12569),
        ("0.00.105.058 I cmn  common_param: common_params_print_info: build 12100 (ab12cd) with GNU 13.3.0", 12100),
        ("main: build = 11549 (4b060f27)", 11549),
        ("0.00.105.058 I cmn  common_param: common_params_print_info: build 0 (unknown) with GNU 13.3.0", None),
    ):
        (run,) = parse_lines([line + "\n", head])
        assert run.build == build and run.engine == "mainline", line
    (real,) = parse_log(LOGS / "server_b25.log")  # built without git: "build 0 (unknown)"
    assert real.build is None and real.as_dict()["build"] is None


def test_a_cache_size_line_in_mib_only_is_told_from_one_that_says_more():
    # b11549 prints "... MiB for ... MiB of host experts" and nothing after; b12170 (#31233) adds the size in tokens
    line = "0.02.120.004 I impl:      CUDA0 MoE cache size =  9999.32 MiB for 16740.00 MiB of host experts"
    (old,) = parse_lines([line + "\n"])
    (later,) = parse_lines([line + " (4096 tokens)\n"])
    assert [(d.cache_mib, d.mib_only) for d in old.devices] == [(9999.32, True)]
    assert [(d.cache_mib, d.mib_only) for d in later.devices] == [(9999.32, False)]


def test_the_qvac_fabric_forks_cache_lines_are_recognised_and_not_read_as_mainlines():
    (run,) = parse_lines(FORK_LOG.splitlines(keepends=True))
    assert run.engine == "qvac-fabric fork" and run.build == 7311
    assert run.fork_cache == {
        "auto_mib": 1671.12,
        "percent": 10,
        "expert_mib": 16711.2,
        "buffer": "CUDA0",
        "cache_mib": 1670.5,
        "slots": 570,
    }
    assert not run.devices and not run.groups and not run.has_stats  # mainline's lines, none seen
    (mainline,) = parse_log(LOGS / "server_b25.log")
    assert mainline.engine == "mainline" and not mainline.fork_cache  # positive control


_COLOURS = {"I": "\x1b[32m", "W": "\x1b[35m", "E": "\x1b[31m"}
_PREFIXED = re.compile(r"^(\d+\.\d+\.\d+\.\d+) ([IWED]) (.*)$")


def llama_colours(text: str) -> str:
    """A log as common/log.cpp writes it with colours to a terminal capture (CRLF): a blue timestamp, a coloured
    level, and after a warning or error the colour reset at the start of the next line."""
    out = []
    for line in text.splitlines():
        if (m := _PREFIXED.match(line)) is None:
            out.append(f"{line}\r\n")
            continue
        stamp, level, msg = m.groups()
        reset_before, reset_after = ("\x1b[0m", "") if level == "I" else ("", "\x1b[0m")
        out.append(f"\x1b[34m{stamp}\x1b[0m {_COLOURS.get(level, '')}{level} {reset_before}{msg}\r\n{reset_after}")
    return "".join(out)


@pytest.mark.parametrize("boundary", ["killed-mid-line", "build-line-before-the-clock"])
def test_two_server_runs_appended_with_colours_crlf_and_a_refused_second_split_exactly_into_two(boundary):
    # both once parsed as three runs, the middle one a single line: "no libllama INFO lines"
    started = (LOGS / "server_b10.log").read_text(errors="replace")
    refused = (LOGS / "server_minany_minus1.log").read_text(errors="replace")
    (alone_started,), (alone_refused,) = parse_log(started.encode()), parse_log(refused.encode())
    first_part, second_part = llama_colours(started), llama_colours(refused)
    if boundary == "killed-mid-line":  # the first server died inside its last line; the second appends to it
        first_part = first_part.removesuffix("\r\n")
        expected_lines = (alone_started.n_lines - 1, alone_refused.n_lines)
    else:  # a build line without a timestamp, then the second run's restarted clock: one boundary, not two
        second_part = "build: 5753 (e1a7059) with cc (GCC) 13.3.0 for x86_64-linux-gnu\r\n" + second_part
        expected_lines = (alone_started.n_lines, alone_refused.n_lines + 1)
    first, second = parse_log((first_part + second_part).encode())
    assert (first.n_lines, second.n_lines) == expected_lines
    assert first.starts and first.groups == alone_started.groups and first.small == alone_started.small
    assert not second.starts and second.errors == alone_refused.errors and second.warnings == alone_refused.warnings


def test_the_build_number_is_read_into_each_run():
    kv = "llama_model_loader: - kv   2:   qwen3moe.block_count u32 = 48\n"
    lines = [
        "build: 4524 (6171c9d2) with cc (GCC) 13.3.0 for x86_64-linux-gnu\n",
        kv,
        "main: build = 11549 (a1b2c3d)\n",
        kv,
        "0.00.107.174 I cmn  common_param: common_params_print_info: build 0 (unknown) with GNU 13.3.0\n",
        kv,
    ]
    runs = parse_lines(lines)
    assert [run.build for run in runs] == [4524, 11549, None]  # build 0: llama.cpp built without git, unknown
    assert [run.as_dict()["build"] for run in runs] == [4524, 11549, None]


def test_a_cache_that_was_never_looked_up_has_no_hit_rate(gt_model):
    # hits = 0, misses = 0 once raised ZeroDivisionError in parse-log and in Logs' Calibrate
    text = NP4.replace("hits = 33275, misses = 62914, hit rate = 34.59%", "hits = 0, misses = 0, hit rate = 0.00%")
    assert text != NP4
    (run,) = parse_lines(text.splitlines(keepends=True))
    assert (run.small.hits, run.small.misses, run.small.hit_rate) == (0, 0, None)
    assert derive(run).hit_rate_small is None and point_from_run(run, "x.log")["hit_rate_pct"] is None
    (point,) = log_points([run], gt_model, preset("H200"), "x.log", "h200")  # what Logs' Calibrate fits on
    assert point.name == "x.log#1"


def test_alerts_are_capped_per_run_with_a_count_of_the_rest():
    # 10^6 error lines once rendered ~60,000 alerts
    error = "99.00.000.000 E llama_decode: failed to decode, ret = -3\n"
    (run,) = parse_lines([*NP4.splitlines(keepends=True), *[error] * 100_000])
    assert len(run.errors) == MAX_LOG_ALERTS and run.alerts_left_out == 100_000 - MAX_LOG_ALERTS
    assert any(note.startswith(f"{100_000 - MAX_LOG_ALERTS:,} more warning or error lines") for note in run.notes())
    assert run.small.hits == 33275  # the facts after and around the alerts are all read


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            "llama_context: n_seq_max     = 1000000\n",
            "the log's n_seq_max is 1,000,000, above this tool's limit of 256",
        ),
        (
            "llama_moe_cache: ubatch <= 8: hits = 9"
            + "9" * 5000
            + ", misses = 1, hit rate = 1.00%, uploaded = 1 MiB\n",
            "the log's hits has 5,001 digits, above this tool's limit",
        ),
        ("llama_model_loader: - kv  19:  qwen3moe.block_count u32 = 100000\n", "n_layer is 100,000, above"),
    ],
)
def test_a_logged_number_beyond_its_bound_is_refused_in_one_line(line, message):
    with pytest.raises(LogError, match=message) as info:
        parse_lines(["build: 1 (abc)\n", line])
    assert "\n" not in str(info.value) and len(str(info.value)) < 200


def test_a_10_mb_line_is_cut_while_reading_and_its_text_is_quoted_short(tmp_path):
    path = tmp_path / "long.log"
    name = "llama_model_loader: - kv   1:  general.name str = " + "n" * 10**7
    path.write_text(f"build: 1 (abc)\n{name}\nllama_model_loader: - kv   2:   qwen3moe.block_count u32 = 48\n")
    (run,) = parse_log(path)
    kept = re.fullmatch(r"n{120}\.\.\. \(([\d,]+) characters\)", run.model["name"])
    assert kept and int(kept.group(1).replace(",", "")) < MAX_LOG_LINE_CHARS  # the line was cut while reading
    assert run.model["n_layer"] == 48  # the rest of the long line was skipped, the next line read


def test_only_regular_files_are_read_as_logs(tmp_path):
    fifo = tmp_path / "server.log"
    os.mkfifo(fifo)
    with pytest.raises(LogError, match="server.log is a FIFO .named pipe., not a regular file"):
        run_within(30, parse_log, fifo)
    with pytest.raises(LogError, match="/dev/zero is a device, not a regular file"):
        parse_log("/dev/zero")


def test_llama_moe_cache_lines_of_an_unknown_form_are_read_apart_and_the_unread_named_in_one_line():
    newer = [  # b12170+-like lines: neither b11549's teardown form nor its start-up form
        "0.09.900.000 I llama_moe_cache: CUDA0 cache = 402.75 MiB (1234 tokens worth), 446 slots",
        "0.09.900.001 I llama_moe_cache: decode: hits = 900, misses = 100 (90.0%)",
        "0.09.900.002 I llama_moe_cache: batch: hits = 50, misses = 50",
        "0.09.900.003 I llama_moe_cache: class histogram 3/1/0/0",
        "0.09.900.004 I llama_moe_cache: evictions by class follow",
    ]
    (run,) = parse_lines([*NP4.splitlines(), *newer])
    other = run.other_cache
    assert (other.cache_mib, other.slots, other.hits, other.misses, other.n_read) == (402.75, 446, 950, 150, 3)
    assert other.hit_rate == pytest.approx(950 / 1100)
    assert (run.small.hits, run.small.misses) == (33275, 62914)  # b11549's own line: not mixed with the others
    notes = [n for n in run.notes() if "does not know" in n]
    assert len(notes) == 1 and "class histogram 3/1/0/0" in notes[0] and "evictions by class" in notes[0]
    assert run.as_dict()["other_cache"]["n_unread"] == 2
    (plain,) = parse_lines(NP4.splitlines())
    assert plain.other_cache is None and not any("does not know" in n for n in plain.notes())


def _two_servers_lines() -> tuple[list[str], list[str], int]:
    """Two runs of different builds (run3's minimum-budget and b25 servers) and where the first warns."""
    mine = (LOGS / "server_minany.log").read_text().splitlines()
    other = (LOGS / "server_b25.log").read_text().splitlines()
    other = ["build: 12569 (c4fb5796) with cc for x86_64-linux-gnu", *other]
    at = next(i for i, line in enumerate(mine) if "W impl: MoE cache budget is too small" in line)
    return mine, other, at


def test_a_line_cut_after_impl_by_another_process_is_read_not_an_index_error(tmp_path):
    """Another process's write took the space after `impl:`: parse-log ended with `unexpected IndexError` (issue 39)."""
    from cli_runs import run_cli

    mine, other, at = _two_servers_lines()
    cut = mine[at].replace("impl: ", "impl:", 1)
    path = tmp_path / "cut.log"
    path.write_text("\n".join([*mine[:at], cut, *mine[at + 1 :], *other]) + "\n")
    runs = parse_log(path)
    assert any("MoE cache budget is too small" in w for run in runs for w in run.warnings)
    out = run_cli("parse-log", str(path))
    assert out.returncode == 0 and "unexpected" not in out.stderr, out.stderr


def test_two_builds_lines_interleaved_are_refused_in_one_line(tmp_path):
    """Two servers of different builds writing one file at once, line by line (issue 39's interleaved-build log):
    whose line is whose cannot be told, so the log is refused in one line, not read as one run mixing both."""
    from cli_runs import run_cli

    mine, other, at = _two_servers_lines()
    mixed = [x for pair in zip(mine[:at], other, strict=False) for x in pair] + [*other[at:], *mine[at:]]
    path = tmp_path / "mixed.log"
    path.write_text("\n".join(mixed) + "\n")
    with pytest.raises(LogError, match=r"two llama\.cpp processes are interleaved .* own log file") as err:
        parse_log(path)
    assert "\n" not in str(err.value)
    out = run_cli("parse-log", str(path))
    assert out.returncode == 1 and out.stderr.count("\n") == 1 and "interleaved" in out.stderr, out.stderr


def test_processes_one_after_another_whose_clock_steps_back_a_few_times_are_read_not_refused():
    """run10's pipeline log: five servers' lines one after another (their start lines filtered out), the clock
    stepping back 4 times by under 0.5 s: one process after another, not two at once."""
    (run,) = parse_log(GROUNDTRUTH / "run10" / "logs" / "a" / "pipeline.log")
    assert run.placement["model_buffers_mib"] == {"CPU_Mapped": 8675.65, "CUDA0": 321.77}


@pytest.mark.parametrize(
    ("number", "message"),
    [
        ("1" + "0" * 400, r"the log's uploaded MiB is 1000.*\(401 characters\), above this tool's limit of 1,000,0"),
        ("1.2.3", r"the log's uploaded MiB is 1\.2\.3: not a number"),
    ],
)
def test_an_uploaded_figure_of_400_digits_or_no_number_is_refused_in_one_line(tmp_path, number, message):
    """Issue 39: 1e400 (its 401 digits) was read as inf and shown as `uploaded inf MiB`."""
    text = (LOGS / "server_b25.log").read_text()
    assert "uploaded = 15625.15 MiB" in text and parse_log(LOGS / "server_b25.log")[0].small.uploaded_mib == 15625.15
    path = tmp_path / "edited.log"
    path.write_text(text.replace("uploaded = 15625.15 MiB", f"uploaded = {number} MiB"))
    with pytest.raises(LogError, match=message) as err:
        parse_log(path)
    assert "\n" not in str(err.value)
