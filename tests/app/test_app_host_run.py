"""The sidebar's "your CPU run" (a host record or llama-bench output) prices Explore and Shopping, which say the
decode is calibrated; a recorded trace on Shopping is replayed; a bad file is one warning (AppTest)."""

from __future__ import annotations

import io
from dataclasses import replace

import numpy as np
from conftest import MODELS
from llama_bench_cases import DEFAULT_ROWS, as_json
from test_app import SMALL_MODEL, open_page, range_rows

from moe_model.readers.model_spec import load_model
from tests.readers.test_host_record import RECORD

MODEL = load_model(MODELS / SMALL_MODEL)
TYPES = tuple(sorted({t.type_name for layer in MODEL.layers for t in layer.experts}))
# a slow CPU: 2 t/s of this model on the CPU alone, far from what the preset's host would price
SLOW_RUN = replace(RECORD, expert_types=TYPES, model_file_bytes=MODEL.total_bytes, decode_tps=2.0, threads=4)


def _upload(at, name: str, data: bytes) -> None:
    uploader = next(u for u in at.sidebar.get("file_uploader") if "your CPU run" in u.label)
    uploader.set_value((name, data, "application/json")).run()


def _headline(at) -> str:
    return next(m.value for m in at.markdown if m.value.startswith("**At "))


def _captions(at) -> str:
    return "\n".join(c.value for c in at.caption)


def test_a_host_record_changes_explores_prediction_and_labels_it_calibrated():
    at = open_page("pages/explore.py", model=SMALL_MODEL, gpu="RTX 3060 12GB", budget="0")
    before = _headline(at)
    assert not at.exception and "modelled" in before and "How each number is known" in _captions(at)
    _upload(at, "host.json", SLOW_RUN.to_json().encode())
    after = _headline(at)
    assert not at.exception and after != before and "calibrated" in after
    said = _captions(at)
    assert "decode :violet-badge[calibrated]" in said and "your CPU run (host record)" in said
    assert range_rows(at) and not any(r.startswith("host: CPU") for r in range_rows(at))


def test_llama_bench_output_changes_shoppings_cards_which_say_calibrated_and_a_bad_file_is_one_warning():
    at = open_page("pages/shopping.py", model=SMALL_MODEL, cards="Tesla T4;RTX 3060 12GB")
    before = at.dataframe[0].value.set_index("GPU").loc["Tesla T4"].to_dict()
    assert not at.exception and before["decode is"] == "modelled"
    rows = [{**r, "model_size": MODEL.total_bytes, "avg_ts": r["avg_ts"] / 10} for r in DEFAULT_ROWS]
    _upload(at, "bench.json", as_json(rows).encode())
    after = at.dataframe[0].value.set_index("GPU").loc["Tesla T4"].to_dict()
    assert not at.exception and after["decode is"] == "calibrated" and after["decode t/s"] != before["decode t/s"]
    assert at.dataframe[0].value.set_index("GPU").loc["RTX 3060 12GB", "decode is"] == "calibrated"  # in your host
    assert "your CPU run (llama-bench JSON)" in _captions(at)
    _upload(at, "bad.json", b"not a run\n")
    warnings = [w.value for w in at.sidebar.warning if w.value.startswith("Your CPU run")]
    assert not at.exception and len(warnings) == 1 and "nor llama-bench output" in warnings[0]
    assert at.dataframe[0].value.set_index("GPU").loc["Tesla T4"]["decode is"] == "calibrated"  # the kept run stays


def test_shopping_replays_an_uploaded_trace_with_no_routing_spread_and_says_replayed():
    rng = np.random.default_rng(36)
    experts = np.stack([rng.permutation(MODEL.n_expert)[:2] for _ in range(600 * MODEL.n_layer)])
    buf = io.BytesIO()
    np.savez(buf, experts=experts.reshape(600, MODEL.n_layer, 2))
    at = open_page("pages/shopping.py", model=SMALL_MODEL, cards="Tesla T4", build="11549")
    before = at.dataframe[0].value.set_index("GPU").loc["Tesla T4"].to_dict()
    assert not at.exception and before["hit rate is"] == "modelled"
    at.radio(key="shop_routing").set_value("your trace (upload)").run()
    uploader = next(u for u in at.get("file_uploader") if u.label.startswith("trace"))
    uploader.set_value(("OUT.npz", buf.getvalue(), "application/octet-stream")).run()
    after = at.dataframe[0].value.set_index("GPU").loc["Tesla T4"].to_dict()
    assert not at.exception and after["hit rate is"] == "replayed"
    assert "hit rate :blue-badge[replayed] (your routing replayed by lru-b11549, exact)" in _captions(at)
