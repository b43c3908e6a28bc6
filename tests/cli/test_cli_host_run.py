"""`--host` on predict and recommend: the user's CPU run (a host record, or llama-bench's JSON or markdown) prices
the host side, every number says how it is known, and a bad file is one line; a recorded trace leaves no routing
source on the exact-LRU builds."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from cli_runs import run_cli
from conftest import GT_HEADER, QWEN30B
from llama_bench_cases import DEFAULT_ROWS, as_json, as_markdown

from moe_model.readers.model_spec import load_model
from moe_model.resources import data_path
from tests.readers.test_host_record import RECORD

MODEL = load_model(QWEN30B)
TYPES = tuple(sorted({t.type_name for layer in MODEL.layers for t in layer.experts}))
PREDICT = ("predict", "--model", str(QWEN30B), "--hardware", "RTX 3060 12GB", "--budget-mib", "0")  # CPU experts
HOST_SOURCES = {"host: CPU", "host: RAM kit"}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """This model's CPU run as each file a user may have: a host record, llama-bench JSON and markdown."""
    folder = tmp_path_factory.mktemp("host")
    record = replace(RECORD, expert_types=TYPES, model_file_bytes=MODEL.total_bytes)
    rows = [{**r, "model_size": MODEL.total_bytes} for r in DEFAULT_ROWS]
    out = {"record": folder / "host.json", "json": folder / "bench.json", "md": folder / "bench.md"}
    out["record"].write_text(record.to_json())
    out["json"].write_text(as_json(rows))
    out["md"].write_text(as_markdown(rows))
    return out


def _json(*args: str) -> dict:
    out = run_cli(*args, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def plain() -> dict:
    return _json(*PREDICT)


@pytest.mark.parametrize(("kind", "said"), [("record", "host record"), ("json", "llama-bench JSON")])
def test_predict_with_a_cpu_run_is_calibrated_its_host_sources_go_and_its_own_speeds_are_measured(
    files, plain, kind, said
):
    out = _json(*PREDICT, "--host", str(files[kind]))
    assert plain["basis"]["decode_tps"] == "modelled" and out["basis"]["decode_tps"] == "calibrated"
    assert out["decode_tps"] != plain["decode_tps"]
    assert HOST_SOURCES & {s["source"] for s in plain["range_sources"]}
    assert not HOST_SOURCES & {s["source"] for s in out["range_sources"]}
    run = out["host_run"]
    assert run["basis"] == "measured" and run["kind"] == said and run["decode_tps"] in (21.5, 21.47)
    assert plain["host_run"] is None and out["basis"]["hit_rate"] == plain["basis"]["hit_rate"] == "modelled"


def test_predict_text_says_the_run_and_how_each_number_is_known(files):
    out = run_cli(*PREDICT, "--host", str(files["md"]))
    assert out.returncode == 0, out.stderr
    assert "your CPU run (llama-bench markdown)" in out.stdout
    assert "How each number is known: hit rate modelled" in out.stdout and "decode calibrated" in out.stdout


def test_recommend_with_a_cpu_run_ranks_on_the_calibrated_machine(files):
    flags = ("recommend", "--model", str(QWEN30B), "--hardware", "RTX 3060 12GB")
    out = _json(*flags, "--host", str(files["json"]))
    assert out["basis"]["decode_tps"] == "calibrated" and out["host_run"]["kind"] == "llama-bench JSON"
    assert out["best"] and out["hardware"]["host_record"]
    text = run_cli(*flags, "--host", str(files["record"])).stdout
    assert "your CPU run (host record)" in text and "How each number is known" in text


def test_a_recorded_trace_on_an_lru_build_is_replayed_with_no_routing_source():
    trace = data_path("groundtruth", "traces", "b25.npz")
    flags = (
        "predict",
        "--model",
        str(GT_HEADER),
        "--hardware",
        "Tesla T4",
        "--budget-mib",
        "400",
        "--trace",
        str(trace),
    )
    exact = _json(*flags, "--build", "11549")
    assert exact["basis"]["hit_rate"] == "replayed"
    assert not any(s["source"].startswith(("routing", "policy")) for s in exact["range_sources"])
    banded = _json(*flags, "--build", "12569")  # ClassLRU: your routing through a modelled policy
    assert banded["basis"]["hit_rate"] == "modelled"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (None, "no such host record"),
        ("hello\n", "nor llama-bench output"),
        (as_json([{**r, "backends": "CUDA", "n_gpu_layers": 99} for r in DEFAULT_ROWS]), "-ngl 99"),
        (as_json([{**r, "model_size": 8_000_000_000} for r in DEFAULT_ROWS]), "this model's"),  # another file
    ],
)
def test_a_bad_cpu_run_is_one_line_and_exit_1(tmp_path, text, says):
    path = tmp_path / "host.json"
    if text is not None:
        path.write_text(text)
    out = run_cli(*PREDICT, "--host", str(path))
    assert out.returncode == 1 and out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1 and says in out.stderr, out.stderr
