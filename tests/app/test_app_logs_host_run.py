"""The Logs page takes the sidebar's "your CPU run" as Explore and Shopping do: its calibration holds the CPU rate
the run measured and fits the rest on the logs, as `calibrate --host` does (run11's logs and run11c's host record:
the no-cache run, which alone pinned the CPU rate, is then checked by the others) (AppTest)."""

from __future__ import annotations

import gzip

from test_app import open_page, upload_header

from moe_model.resources import data_path

RUN11 = data_path("groundtruth", "run11")
SERVERS = ("off", "c2092", "c4185", "c6278")


def _row(at, server: str) -> dict:
    table = at.table[0].value.set_index("run")
    return table.loc[f"server_{server}.log#1"].to_dict()


def test_the_logs_calibration_holds_the_cpu_runs_rate_and_checks_the_no_cache_run():
    at = open_page("pages/logs.py")
    upload_header(at, data_path("groundtruth", "run3", "model-header.gguf").read_bytes())  # run11's model
    at.run()
    logs = [
        (f"server_{s}.log", gzip.decompress((RUN11 / "logs" / f"server_{s}.log.gz").read_bytes()), "text/plain")
        for s in SERVERS
    ]
    next(u for u in at.get("file_uploader") if u.label.startswith("llama-server")).set_value(logs).run()
    at.button(key="calibrate").click().run()
    assert not at.exception and _row(at, "off")["judges the fit"] == "no"  # alone it pins the CPU rate
    assert "the CPU's expert rate" in at.success[0].value and "cpu_expert_gbs" not in at.success[0].value
    host = (RUN11 / "run11c" / "host_default.json").read_bytes()
    uploader = next(u for u in at.sidebar.get("file_uploader") if "your CPU run" in u.label)
    uploader.set_value(("host.json", host, "application/json")).run()
    at.button(key="calibrate").click().run()
    assert not at.exception and not at.error and not at.sidebar.warning
    off = _row(at, "off")
    assert off["judges the fit"] == "yes" and abs(float(off["error when left out %"])) <= 15
    assert "the CPU's expert rate" not in at.success[0].value and "the upload rate" in at.success[0].value
    held = [c.value for c in at.caption if c.value.startswith("Held from your CPU run (host record)")]
    assert len(held) == 1 and "at 16 threads (measured, not fitted)" in held[0]
    machine = at.session_state["machine"].hardware
    assert machine.host_record and machine.cpu_expert_threads == 16
