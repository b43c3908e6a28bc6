"""`record` from the command line: the trace and host record it writes are read back and replayed by `simulate`;
bad input, a missing extra and Ctrl-C are each one line."""

from __future__ import annotations

import sys

import pytest
from cli_runs import run_cli

from moe_model.readers.host_record import read_host_record
from moe_model.readers.traces import load_recorded
from moe_model.record.tiny_models import write_tiny_model
from moe_model.workload import PHASE_WARMUP

PROMPTS = "the quick brown fox\n\nof and to the lazy dog\n"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("m") / "qwen3moe.gguf", "qwen3moe")


@pytest.fixture
def prompts(tmp_path):
    path = tmp_path / "prompts.txt"
    path.write_text(PROMPTS)
    return path


def _record(model, prompts, out, *flags: str):
    return run_cli("record", "--model", str(model), "--prompts", str(prompts), "-o", str(out), *flags)


def test_record_writes_a_trace_simulate_replays_and_a_host_record(model, prompts, tmp_path):
    pytest.importorskip("llama_cpp", reason="llama-cpp-python (pip install -e '.[record]') runs the recorder")
    out, host = tmp_path / "t.npz", tmp_path / "host.json"
    run = _record(
        model, prompts, out, "-n", "8", "-b", "16", "-ub", "8", "--threads", "2", "--host-out", str(host),
        "--measure-drive",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "drive: not measured: the file is too small to time a drive" in run.stdout  # a tiny model's few KB
    trace = load_recorded(out)
    assert trace.rec_phase[0] == PHASE_WARMUP and trace.decode_tokens == 2 * 7 and trace.k == 4
    record = read_host_record(host)
    assert record.source == "record" and record.threads == 2 and record.expert_types == ("f32",)
    assert record.decode_tps > 0 and record.prompt_tps > 0 and record.n_ubatch == 8
    assert record.model_file_bytes == model.stat().st_size
    assert record.llama_cpp.startswith("commit ") and record.drive_read_gbs is None
    replay = run_cli("simulate", "--model", str(model), "--trace", str(out), "--budget-mib", "1")
    assert replay.returncode == 0, replay.stderr
    assert "recorded llama.cpp trace: 14 decode tokens" in replay.stdout


def test_build_decides_whether_the_servers_start_up_probe_is_recorded(model, prompts, tmp_path):
    pytest.importorskip("llama_cpp", reason="llama-cpp-python (pip install -e '.[record]') runs the recorder")
    start_ups = []
    for build in ("b12569", "11000"):  # the probe is in every build read from b11063 on
        out = tmp_path / f"{build}.npz"
        assert _record(model, prompts, out, "-n", "2", "--threads", "1", "--build", build).returncode == 0
        trace = load_recorded(out)
        start_ups.append(len(set(trace.rec_ubatch[trace.rec_phase == PHASE_WARMUP].tolist())))
    assert start_ups == [2, 1]


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (("-b", "8", "-ub", "16"), "-b 8 is below -ub 16"),
        (
            (
                "-np",
                "2",
            ),
            "one request at a time",
        ),
        (("-n", "0"), "must be in 1.."),
        (("--threads", "0"), "must be in 1.."),
        (("--build", "banana"), "a llama.cpp build is a release number"),
    ],
)
def test_bad_flags_are_one_line(model, prompts, tmp_path, flags, says):
    run = _record(model, prompts, tmp_path / "t.npz", *flags)
    assert run.returncode in (1, 2) and says in run.stderr.strip().splitlines()[-1]  # argparse's usage, then the line
    assert not (tmp_path / "t.npz").exists()


def test_a_missing_model_or_empty_prompts_are_one_line(model, prompts, tmp_path):
    missing = _record(tmp_path / "no.gguf", prompts, tmp_path / "t.npz")
    (tmp_path / "empty.txt").write_text("\n\n")
    empty = _record(model, tmp_path / "empty.txt", tmp_path / "t.npz")
    assert missing.returncode == 1 and missing.stderr.strip().splitlines() == [
        "error: no such file: " + str(tmp_path / "no.gguf")
    ]
    assert empty.returncode == 1 and "holds no prompt" in empty.stderr and len(empty.stderr.splitlines()) == 1


def test_a_prompt_longer_than_the_context_is_one_line(model, tmp_path):
    pytest.importorskip("llama_cpp", reason="llama-cpp-python (pip install -e '.[record]') runs the recorder")
    long_prompt = tmp_path / "long.txt"
    long_prompt.write_text("x" * 300)
    run = _record(model, long_prompt, tmp_path / "t.npz", "-c", "256")
    assert run.returncode == 1 and "needs -c" in run.stderr and len(run.stderr.splitlines()) == 1


def test_without_the_extra_record_says_how_to_install_it(model, prompts, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import llama_cpp raises ImportError
    run = _record(model, prompts, tmp_path / "t.npz")
    assert run.returncode == 1 and "pip install -e '.[record]'" in run.stderr and "from source" in run.stderr
    assert len(run.stderr.splitlines()) == 1


def test_ctrl_c_keeps_the_complete_ubatches_and_exits_130(model, prompts, tmp_path, monkeypatch):
    pytest.importorskip("llama_cpp", reason="llama-cpp-python (pip install -e '.[record]') runs the recorder")
    from moe_model.cli import record as cli_record
    from moe_model.record import session

    def stop_after_4(n_kept: int) -> None:
        if n_kept == 4:
            raise KeyboardInterrupt

    real = session.record
    monkeypatch.setattr(session, "record", lambda *a, **kw: real(*a, **kw, on_ubatch=stop_after_4))
    run = _record(model, prompts, tmp_path / "t.npz", "--host-out", str(tmp_path / "h.json"))
    assert run.returncode == cli_record.INTERRUPTED and "interrupted" in run.stderr
    assert len(load_recorded(tmp_path / "t.npz").rec_layer) == 4 * 3
    assert not (tmp_path / "h.json").exists()  # no timing ran
