"""`calibrate --host`: the user's CPU run (a host record, or llama-bench -ngl 0's output) settles the machine's CPU
expert rate, threads, RAM and drive, and the logs fit the rest. On run11 (sample_data/groundtruth/run11: four
llama-server b11549 runs on the lent H100 box, the CPU recording's host record from run11c) the no-cache run, which
alone pins the CPU rate when the logs calibrate by themselves (so nothing checks it), is predicted by the other runs
and the record."""

from __future__ import annotations

import gzip
import json

import pytest
from cli_runs import run_cli
from llama_bench_cases import as_json, row

from moe_model.fits.host_fit import HOST_SETTLED, apply_host_record
from moe_model.readers.host_record import read_host_record
from moe_model.readers.model_spec import load_model
from moe_model.resources import data_path
from moe_model.speed.hardware import preset

RUN11 = data_path("groundtruth", "run11")
HEADER = data_path("groundtruth", "run3", "model-header.gguf")  # run11's model is run3's header, random weights
HOST = RUN11 / "run11c" / "host_default.json"
SERVERS = ("off", "c2092", "c4185", "c6278")
GPU = "H100 SXM"  # the card run11's logs name (NVIDIA H100 80GB HBM3)


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> list[str]:
    folder = tmp_path_factory.mktemp("run11")
    paths = []
    for server in SERVERS:
        path = folder / f"server_{server}.log"
        path.write_bytes(gzip.decompress((RUN11 / "logs" / f"server_{server}.log.gz").read_bytes()))
        paths.append(str(path))
    return paths


def _calibrate(logs: list[str], out, *extra: str) -> dict:
    done = run_cli("calibrate", *logs, "--model", str(HEADER), "--hardware", GPU, "-o", str(out), "--json", *extra)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def fits(logs, tmp_path_factory) -> dict[str, dict]:
    folder = tmp_path_factory.mktemp("machines")
    return {
        "logs": _calibrate(logs, folder / "logs.json"),
        "host": _calibrate(logs, folder / "host.json", "--host", str(HOST)),
        "path": folder / "host.json",
    }


def _off(fit: dict) -> str:
    return next(name for name in fit["left_out_errors"] if "server_off" in name)


def test_the_host_record_holds_the_cpu_rate_and_the_logs_fit_the_rest(fits):
    plain, host = fits["logs"], fits["host"]
    assert "cpu_expert_gbs" in plain["fitted"] and plain["held"] == [] and plain["host_run"] is None
    assert host["held"] == list(HOST_SETTLED) and not set(HOST_SETTLED) & set(host["fitted"])
    assert {"pageable_gbs", "sync_us"} <= set(host["fitted"])
    model = load_model(HEADER)
    expected = apply_host_record(preset(GPU), read_host_record(HOST), model)
    assert host["hardware"]["cpu_expert_gbs"] == pytest.approx(expected.cpu_expert_gbs)
    assert host["hardware"]["cpu_expert_threads"] == 16 and host["hardware"]["host_record"]
    assert host["host_run"]["basis"] == "measured" and host["host_run"]["kind"] == "host record"


def test_with_the_record_the_no_cache_run_is_checked_by_the_others(fits):
    """Alone, the logs' no-cache run pins the CPU rate: not judged, and 31 % off when left out (the other runs do not
    see the CPU rate: b11549 uploads every miss). With the record it is judged: +10 %."""
    plain, host = fits["logs"], fits["host"]
    assert _off(plain) not in plain["judged"] and abs(plain["left_out_errors"][_off(plain)]) > 0.25
    assert _off(host) in host["judged"] and abs(host["left_out_errors"][_off(host)]) <= 0.15
    assert host["accepted"], host["reason"]
    cached = [name for name in host["left_out_errors"] if "server_off" not in name]
    for name in cached:  # the cache runs' terms are the logs' either way
        assert host["left_out_errors"][name] == pytest.approx(plain["left_out_errors"][name], abs=0.01)


def test_the_machine_file_keeps_the_record_for_predict(fits):
    out = run_cli("predict", "--model", str(HEADER), "--machine", str(fits["path"]), "--budget-mib", "0", "--json")
    assert out.returncode == 0, out.stderr
    hardware = json.loads(out.stdout)["hardware"]
    assert hardware["host_record"] and hardware["cpu_expert_gbs"] == pytest.approx(
        fits["host"]["hardware"]["cpu_expert_gbs"]
    )


def _bench(tmp_path, prompt_tps: float, decode_tps: float):
    """llama-bench -ngl 0's JSON of run11's model at 16 threads (pp512, tg128)."""
    model = load_model(HEADER)
    rows = [row(512, 0, prompt_tps), row(0, 128, decode_tps)]
    bench = tmp_path / f"bench-{decode_tps:g}.json"
    bench.write_text(as_json([{**r, "model_size": model.total_bytes, "n_threads": 16} for r in rows]))
    return bench


def test_llama_bench_output_calibrates_as_a_host_record_does(logs, tmp_path):
    bench = _bench(tmp_path, 244.4, 68.3)  # the host record's speeds, as llama-bench would print them
    out = _calibrate(logs, tmp_path / "m.json", "--host", str(bench))
    assert out["held"] == list(HOST_SETTLED) and out["host_run"]["kind"] == "llama-bench JSON"
    text = run_cli("calibrate", *logs, "--model", str(HEADER), "--hardware", GPU, "-o", str(tmp_path / "t.json"),
                   "--host", str(bench))  # fmt: skip
    assert "your CPU run (llama-bench JSON)" in text.stdout and "held from the host record" in text.stdout


def test_a_cpu_run_the_logs_contradict_is_refused_as_any_untrusted_fit(logs, tmp_path):
    """A CPU run a third as fast as run11's record: the no-cache run, now judged, is 60 % off, and nothing is
    written."""
    out = run_cli("calibrate", *logs, "--model", str(HEADER), "--hardware", GPU, "-o", str(tmp_path / "m.json"),
                  "--host", str(_bench(tmp_path, 88.5, 21.5)))  # fmt: skip
    assert out.returncode == 1 and "calibration refused: not trusted" in out.stderr
    assert not (tmp_path / "m.json").exists()


def test_a_host_record_of_another_model_is_one_line(logs, tmp_path):
    other = tmp_path / "other.json"
    other.write_text(HOST.read_text().replace("9151587328", "4000000000"))
    out = run_cli("calibrate", *logs, "--model", str(HEADER), "--hardware", GPU, "-o", str(tmp_path / "m.json"),
                  "--host", str(other))  # fmt: skip
    assert out.returncode == 1 and out.stdout == "" and not (tmp_path / "m.json").exists()
    assert len(out.stderr.strip().splitlines()) == 1 and "record this model's file" in out.stderr
