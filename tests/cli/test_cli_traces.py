"""The CLI's --trace (cli/simulate, cli/predict): hostile traces refused in one line, work held to --max-lookups,
recorded traces streamed to the in-memory counts."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_runs import main_exit, run_cli, run_process
from conftest import GROUNDTRUTH, GT_HEADER, QWEN30B, SAMPLE
from hostile_csv import hostile_csvs, run_measured


def test_a_trace_with_expert_id_40000_exits_1_with_one_line_not_a_segfault(tmp_path):
    experts = np.random.default_rng(0).integers(0, 128, (600, 48, 8))
    experts[5, 3, 2] = 40_000  # wrapped negative in int16 and crashed the kernel (exit 139)
    np.savez(tmp_path / "t.npz", experts=experts)
    out = run_process(
        "simulate", "--model", str(QWEN30B), "--trace", str(tmp_path / "t.npz"), "--budget-mib", "3000", "--no-warmup"
    )
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.strip().splitlines() == ["error: expert ids must be in 0..4,095, got 0..40,000"]


@pytest.mark.parametrize("kind", ["10^7 columns", "100,003 fields"])
def test_the_hostile_csvs_of_issue_39_exit_1_with_one_line_before_the_model_is_read(tmp_path_factory, kind):
    """Before: the 10^7-column header ran out of memory at 4.3-4.7 GiB (`unexpected MemoryError`), the 100,003-field
    row peaked at 3.6 GiB. The trace is checked before the kernels or the model are touched (the peak is the CLI's
    imports and the file's first MiB)."""
    path = hostile_csvs(tmp_path_factory.getbasetemp())[kind]
    argv = ["simulate", "--model", str(QWEN30B), "--trace", str(path), "--budget-mib", "3000"]
    body = (
        "import contextlib, io\nfrom moe_model.cli.main import main\nerr = io.StringIO()\n"
        f"with contextlib.redirect_stderr(err):\n    code = main({argv!r})\n"
        "result = {'code': code, 'stderr': err.getvalue()}"
    )
    result = run_measured(body)
    print(f"simulate --trace {kind}: {result['seconds']:.3f} s, peak RSS {result['peak_rss_mib']:.0f} MiB")
    (line,) = result["stderr"].strip().splitlines()
    assert result["code"] == 1 and line.startswith("error: ") and "CSV trace" in line
    assert result["peak_rss_mib"] < 300


def test_the_npz_bomb_is_refused_in_under_5_s_naming_the_limit(npz_bomb):
    import time

    start = time.perf_counter()  # a 0.75 MB file of 768,000,000 ids: simulate read all of it for 57 s
    out = run_process("simulate", "--model", str(QWEN30B), "--trace", str(npz_bomb), "--budget-mib", "3000")
    seconds = time.perf_counter() - start
    assert out.returncode == 1 and out.stdout == "" and seconds < 5, (seconds, out.stderr)
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("error: the NPZ would inflate 1,0") and line.endswith(
        "above this tool's limit of 32x its zipped size"
    )


def test_a_trace_above_max_lookups_is_refused_before_replaying_and_the_flag_raises_it():
    trace = str(SAMPLE / "traces" / "gpt-oss-20b" / "routing.npz")  # 4,101,024 ids
    model = str(SAMPLE / "models" / "gpt-oss-20b-MXFP4.gguf")
    for command in (["simulate", "--budget-mib", "3000"], ["predict", "--hardware", "t4", "--budget-mib", "3000"]):
        refused = run_cli(*command, "--model", model, "--trace", trace, "--max-lookups", "4000000")
        assert refused.returncode == 1 and refused.stderr.strip().splitlines()[-1] == (
            "error: this trace holds 4,101,024 expert ids; the CLI replays at most 4,000,000; --max-lookups raises it"
        )
    raised = run_cli("simulate", "--budget-mib", "3000", "--model", model, "--trace", trace, "--max-lookups", "4101024")
    assert raised.returncode == 0, raised.stderr


def test_simulate_streams_a_recorded_trace_longer_than_one_chunk_to_the_in_memory_counts(tmp_path, capsys, gt_model):
    from moe_model.cli.main import to_json
    from moe_model.limits import SIM_CHUNK_RECORDS
    from moe_model.llama.simulate import simulate_budgets
    from moe_model.policies import get_policy
    from moe_model.readers.traces import load_recorded, open_trace, save_npz
    from moe_model.workload import Workload, WorkloadStream

    one = load_recorded(GROUNDTRUTH / "traces" / "b25.npz")
    times = 10  # 36,120 records, more than one chunk; each repeat with its expert ids rotated
    long = Workload(
        one.n_layer,
        one.n_expert,
        one.k,
        np.concatenate([one.rec_ubatch + i * one.n_ubatches for i in range(times)]),
        np.tile(one.rec_layer, times),
        np.tile(one.rec_ntok, times),
        np.concatenate([one.rec_off + i * len(one.ids) for i in range(times)]),
        np.tile(one.rec_phase, times),
        np.concatenate([(one.ids + 37 * i) % one.n_expert for i in range(times)]).astype(np.int32),
    )
    path = tmp_path / "long.npz"
    save_npz(path, long)
    stream = open_trace(str(path))
    assert isinstance(stream, WorkloadStream) and stream.n_records > SIM_CHUNK_RECORDS
    assert len(list(stream.chunks())) > 1
    budgets = [15, 161, 403, 1614]
    for build in ("11549", "12569"):  # the exact LRU and ClassLRU both stream
        argv = ["--model", str(GT_HEADER), "--trace", str(path), "--budgets-mib", "15,161,403,1614"]
        code, out, err = main_exit(capsys, "simulate", *argv, "--build", build, "--json")
        assert code == 0, err
        data = json.loads(out)
        streamed = data["budgets"]
        policy = get_policy(data["policy"])
        kernel = (policy.band_kernel or policy.kernel)()  # ClassLRU's with its readings band, as simulate runs it
        in_memory = simulate_budgets(gt_model, load_recorded(path), budgets, kernel=kernel)
        for got, want in zip(streamed, in_memory, strict=True):
            for name, stats in (("small", want.small), ("large", want.large)):
                assert (got[name]["hits"], got[name]["misses"]) == (stats.hits, stats.misses)
            assert got == json.loads(to_json(want.as_dict() | {"policy": data["policy"]}))
        assert streamed[2]["small"]["hits"] > 0  # positive control: the cache works on it


def test_predict_streams_a_recorded_trace_and_prices_its_exact_lru_counts(capsys):
    from moe_model.cli.main import main
    from moe_model.llama.simulate import simulate
    from moe_model.readers.model_spec import load_model
    from moe_model.readers.traces import load_recorded

    trace = GROUNDTRUTH / "traces" / "b25.npz"
    argv = ["predict", "--model", str(GT_HEADER), "--hardware", "h200", "--budget-mib", "403", "--trace", str(trace)]
    assert main([*argv, "--build", "11549", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    exact = simulate(load_model(GT_HEADER), load_recorded(trace), 403)
    decode_rate = exact.layer_hits.sum() / exact.layer_lookups.sum()
    assert out["hit_rate"] == pytest.approx(decode_rate, rel=0.02) and out["routing"] == f"the trace {trace}"
