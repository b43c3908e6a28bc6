"""llama-bench's output of a CPU-only run read as a host record, in each of its formats; a host record file through
the same entry; anything else one line."""

from __future__ import annotations

import pytest
from llama_bench_cases import CPU, DEFAULT_ROWS, MODEL_SIZE, as_json, as_jsonl, as_markdown, row

from moe_model.readers.host_record import HostRecordError
from moe_model.readers.llama_bench import NO_CPU_INFO, read_host_input
from tests.readers.test_host_record import RECORD


@pytest.mark.parametrize(
    ("text", "kind"),
    [(as_json(), "llama-bench JSON"), (as_jsonl(), "llama-bench JSONL"), (as_markdown(), "llama-bench markdown")],
)
def test_each_format_gives_the_tg_and_pp_rows_threads_and_build_and_says_which_it_was(text, kind):
    got = read_host_input(text.encode())
    r = got.record
    assert got.kind == kind and r.source == "llama-bench" and r.runtime == "llama-bench"
    assert (r.decode_tps, r.decode_tokens, r.decode_depth_tokens) == (21.47, 128, 0)
    assert (r.prompt_tps, r.prompt_tokens, r.n_ubatch, r.threads) == (88.51, 512, 512, 8)
    assert r.llama_cpp == "b7150 (0104b151)" and r.model_name == "qwen3moe 30B.A3B Q4_K - Medium"
    assert r.expert_types == ()  # llama-bench names the file type, not the experts'
    assert abs(r.model_file_bytes - MODEL_SIZE) < 0.01 * 2**30  # the table prints GiB to two decimals
    assert r.cpu_model == (NO_CPU_INFO if kind.endswith("markdown") else CPU)
    assert kind in got.described and "measured" in got.described


def test_a_file_on_disk_and_a_host_record_go_through_the_same_entry(tmp_path):
    bench, record = tmp_path / "bench.md", tmp_path / "host.json"
    bench.write_text(as_markdown())
    record.write_text(RECORD.to_json())
    assert read_host_input(bench).record.decode_tps == 21.47
    got = read_host_input(record)
    assert got.kind == "host record" and got.record == RECORD


def test_the_fastest_thread_count_at_the_first_depth_and_its_longest_prompt_are_taken():
    rows = [
        row(0, 128, 15.0, n_threads=4),
        row(512, 0, 60.0, n_threads=4),
        row(0, 128, 21.0, n_threads=8),
        row(0, 128, 12.0, n_threads=8, n_depth=4096),
        row(512, 0, 80.0, n_threads=8),
        row(2048, 0, 75.0, n_threads=8, n_ubatch=1024),
    ]
    r = read_host_input(as_json(rows).encode()).record
    assert (r.threads, r.decode_tps, r.decode_depth_tokens, r.prompt_tokens, r.prompt_tps) == (8, 21.0, 0, 2048, 75.0)
    assert r.n_ubatch == 1024


def test_a_decode_only_at_depth_keeps_its_depth():
    rows = [row(0, 64, 18.0, n_depth=1024), row(512, 0, 80.0)]
    assert read_host_input(as_jsonl(rows).encode()).record.decode_depth_tokens == 1024


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (as_json([row(0, 128, 90.0, backends="CUDA", n_gpu_layers=99), row(512, 0, 900.0)]), "-ngl 99"),
        (as_markdown(ngl=True, backend="CUDA", rows=[row(0, 128, 9.0, n_gpu_layers=99)]), "-ngl 99"),
        (as_json([row(0, 128, 20.0, backends="CUDA"), row(512, 0, 300.0, backends="CUDA")]), "-nopo 1"),
        (as_json([row(512, 0, 88.0)]), "no decode (tg) row"),
        (as_json([row(0, 128, 21.0)]), "no prompt (pp) row"),
        (as_json([*DEFAULT_ROWS, row(0, 128, 40.0, model_type="gpt-oss 20B MXFP4 MoE")]), "several models"),
        (as_json([row(0, 128, 21.0)]).replace('"avg_ts": 21.000000', '"avg_ts": NaN'), "not JSON"),
        (as_jsonl().replace('"avg_ts": 21.470000', '"avg_ts": NaN'), "not JSON"),
        (as_json([row(0, 128, 21.0, n_threads="8")]), "n_threads"),
        ("| a | b |\n|---|---|\n| 1 | 2 |\n", "no test and t/s"),
        ("hello world\n", "nor llama-bench output"),
        ('{"format": "moe-cache-explorer-host", "version": 2}', "version 2"),
        (b"\xff\xfe".decode("latin-1"), "nor llama-bench output"),
    ],
)
def test_bad_input_is_one_line(text, says):
    with pytest.raises(HostRecordError) as err:
        read_host_input(text.encode())
    assert says in str(err.value) and "\n" not in str(err.value)


def test_a_gpu_build_at_ngl_0_with_op_offload_off_is_a_cpu_run():
    rows = [row(0, 128, 20.0, backends="CUDA", no_op_offload=1), row(512, 0, 70.0, backends="CUDA", no_op_offload=1)]
    assert read_host_input(as_json(rows).encode()).record.prompt_tps == 70.0


def test_output_past_the_size_bound_is_refused_unread():
    with pytest.raises(HostRecordError, match="at most"):
        read_host_input(as_json(DEFAULT_ROWS * 40).encode())
