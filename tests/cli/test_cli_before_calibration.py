"""`calibrate` sets each run beside the range predicted for its settings before the calibration (the JSON's new
`before_calibration`, the text's lines and count), and says what it fitted in words (run11's logs, H100)."""

from __future__ import annotations

import gzip
import json

import pytest
from cli_runs import run_cli

from moe_model.resources import data_path

RUN11 = data_path("groundtruth", "run11")
HEADER = data_path("groundtruth", "run3", "model-header.gguf")  # run11's model
SERVERS = ("off", "c2092", "c4185", "c6278")


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> list[str]:
    folder = tmp_path_factory.mktemp("run11_before")
    for server in SERVERS:
        (folder / f"server_{server}.log").write_bytes(
            gzip.decompress((RUN11 / "logs" / f"server_{server}.log.gz").read_bytes())
        )
    return [str(folder / f"server_{server}.log") for server in SERVERS]


def _calibrate(logs, tmp_path, *extra):
    return run_cli("calibrate", *logs, "--model", str(HEADER), "--hardware", "H100 SXM", "-o", str(tmp_path / "m.json"),
                   *extra)  # fmt: skip


def test_calibrate_json_gives_each_runs_range_before_calibration_with_the_host_records_error(logs, tmp_path):
    done = _calibrate(logs, tmp_path, "--json", "--host", str(RUN11 / "run11c" / "host_default.json"))
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    before = out["before_calibration"]
    assert [r["run"] for r in before["runs"]] == [f"{path}#1" for path in logs] and not before["not_checked"]
    for row in before["runs"]:
        low, high = row["decode"]["range_tps"]
        assert row["decode"]["inside"] == (low <= row["decode"]["measured_tps"] <= high)
    assert before["inside"] == sum(r["decode"]["inside"] for r in before["runs"])
    assert "with a host record" in before["predicted_with"]  # the error a prediction with a CPU run carries
    assert out["fitted"] and set(out["fitted"]) <= {"token_ms", "cpu_expert_gbs", "pinned_gbs", "pageable_gbs",
                                                    "sync_us"}  # fmt: skip


def test_calibrate_text_counts_the_runs_inside_and_names_the_fitted_terms_in_words(logs, tmp_path):
    done = _calibrate(logs, tmp_path)
    assert done.returncode == 0, done.stderr
    fitted = done.stdout.splitlines()[0]
    assert "fitted the CPU's expert rate" in fitted and "cpu_expert_gbs" not in fitted
    (count,) = [line for line in done.stdout.splitlines() if "fell inside the range predicted before" in line]
    inside = sum(line.endswith(": inside") for line in done.stdout.splitlines())
    assert count.strip().startswith(f"{inside} of {len(SERVERS)} runs fell inside")
