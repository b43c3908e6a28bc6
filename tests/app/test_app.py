"""Every page of the explorer through Streamlit's AppTest: renders, reacts to controls, refuses bad input."""

from __future__ import annotations

import base64
import io
import json

import numpy as np
import pytest
from conftest import GPT_OSS, GROUNDTRUTH, GT_HEADER, QWEN30B, ROOT
from streamlit.testing.v1 import AppTest

from moe_model.charts import DECODE_HITS
from moe_model.llama.builds import MAINLINE_BUILD
from moe_model.policies import REFERENCE
from moe_model.speed.hardware import unknown_gpu
from ui.text import literal

PAGES = [
    "pages/model_budget.py",
    "pages/explore.py",
    "pages/reference.py",
    "pages/logs.py",
    "pages/learn.py",
    "pages/shopping.py",
]


def open_page(page: str, **query) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    for key, value in query.items():
        at.query_params[key] = value
    at.switch_page(page)
    at.run()
    return at


def upload_header(at: AppTest, data: bytes | None = None) -> None:
    """Choose "upload a header prefix" in the sidebar and upload `data` (the ground-truth header by default)."""
    at.sidebar.selectbox(key="model_choice").set_value("upload a header prefix").run()
    at.sidebar.get("file_uploader")[0].set_value(("h.gguf", data or GT_HEADER.read_bytes(), "application/octet-stream"))


RANGE_TITLE = "Decode range by source"  # charts.range_bar's, drawn in a headline above the page's charts


def _figures(at: AppTest) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def _is_range(fig: dict) -> bool:
    return fig["layout"].get("title", {}).get("text") == RANGE_TITLE


def charts(at: AppTest) -> dict[str, dict]:
    """Plotly figures on the page in order, as the JSON the browser receives; the drawn decode ranges of the
    headline left out (range_rows reads them), so that "0" is the page's first chart."""
    return {str(i): f for i, f in enumerate(f for f in _figures(at) if not _is_range(f))}


def range_rows(at: AppTest) -> list[str]:
    """The rows of the page's first drawn decode range (charts.range_bar): "whole range: lo-hi t/s", then each
    source's "source: lo-hi t/s"."""
    return next(f for f in _figures(at) if _is_range(f))["data"][0]["y"]


def _values(v):
    """Plotly sends numpy arrays as {"dtype", "bdata"}: decode them to lists."""
    if isinstance(v, dict) and "bdata" in v:
        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"])).tolist()
    return v


def trace(fig: dict, name: str) -> dict:
    found = next(t for t in fig["data"] if t.get("name") == name)
    return {key: _values(value) for key, value in found.items()}


SMALL_MODEL = "Mixtral-8x7B-Q4_K_M.gguf"  # 8 experts a layer: where the model is not the point, seconds not tens

TABLE_PAGES = ("pages/model_budget.py", "pages/reference.py", "pages/logs.py")  # default views with tables


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_its_default_view_without_exceptions_and_readable_table_columns(page):
    at = open_page(page)
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    if page != "pages/logs.py":
        assert at.get("plotly_chart")
    if page in TABLE_PAGES:
        frames = [d.value for d in at.dataframe] + [t.value for t in at.table]
        assert frames and not [c for f in frames for c in f.columns if "_" in str(c)]  # no field names (decode_tps)


def test_model_page_shows_llama_servers_lines_and_follows_the_budget():
    at = open_page("pages/model_budget.py")
    assert "24 layers, q6_K:  1834 slots (59.7%)" in at.code[0].value  # default: Qwen3-30B-A3B at 10,000 MiB
    before = trace(charts(at)["0"], "slots")["y"]
    at.slider(key="budget").set_value(50).run()
    assert "24 layers, q6_K:     8 slots (0.3%)" in at.code[0].value
    assert trace(charts(at)["0"], "slots")["y"] == [8, 8] != before
    at.slider(key="budget").set_value(49).run()
    assert any("refuses to start" in e.value for e in at.error) and not at.exception


def test_the_sidebar_build_is_kept_in_the_url_and_names_the_policy_and_known_problems():
    at = open_page("pages/model_budget.py", build="11549")
    assert at.sidebar.text_input(key="build").value == "b11549"
    assert any("Hit rates: lru-b11549 (exact), llama.cpp b11549." in c.value for c in at.caption)
    at.sidebar.text_input(key="build").set_value("12569").run()
    assert any("Hit rates: class-lru-b12170 (modelled), llama.cpp b12569." in c.value for c in at.caption)
    assert at.query_params["build"] == "12569"
    at.slider(key="budget").set_value(49).run()
    assert any(w.value.startswith("Known problem: --moe-cache-mib 49 is below one token's experts") for w in at.warning)
    old = open_page("pages/explore.py", build="12100", share="0.5")
    assert not old.exception and any("b12100 has no --moe-cache-cpu-share" in c.value for c in old.caption)
    assert any("Hit rates: lru-b11549 (exact), llama.cpp b12100." in c.value for c in old.caption)


def test_explores_opening_words_follow_the_policy_the_build_runs():
    """The default build runs ClassLRU: modelled, never "exactly"; b11549's plain LRU is simulated exactly."""
    new, old = (
        open_page("pages/explore.py", model=SMALL_MODEL),
        open_page("pages/explore.py", model=SMALL_MODEL, build="11549"),
    )
    assert not new.exception and not old.exception
    opening = {at: at.caption[0].value for at in (new, old)}
    assert opening[new].startswith(
        f"Hit rates are modelled: class-lru-b12170, our reading of the policy llama.cpp b{MAINLINE_BUILD} runs"
    )
    assert opening[old].startswith(
        "Hit rates are simulated exactly as llama.cpp b11549's cache would serve the workload"
    )
    assert not any("exactly" in c.value for c in new.caption)
    assert opening[new].endswith(
        "speeds come from a calibrated time model (a model, not a measurement); diamonds are measurements."
    )


def test_url_parameters_set_the_view():
    at = open_page("pages/model_budget.py", budget="100", model="gpt-oss-20b-MXFP4.gguf")
    assert at.slider(key="budget").value == 100
    assert "24 layers, mxfp4:     6 slots" in at.code[0].value


def test_uploading_a_header_prefix_reads_it_and_a_short_one_says_how_much_more():
    at = open_page("pages/model_budget.py")
    upload_header(at)
    at.run()
    assert not at.exception and "6 layers, q6_K" in at.code[0].value
    upload_header(at, GT_HEADER.read_bytes()[:5000])
    at.run()
    assert not at.exception and any("head -c" in e.value for e in at.error)


def test_an_uploaded_header_is_the_pickers_choice_right_after_the_upload():
    at = open_page("pages/model_budget.py")
    upload_header(at)
    at.run()
    assert at.sidebar.selectbox(key="model_choice").value == "h.gguf (uploaded)"  # not "upload a header prefix"
    assert any("synthetic-qwen3moe" in c.value for c in at.caption) and not at.exception
    assert "GGUF header prefix" not in [u.label for u in at.sidebar.get("file_uploader")]
    at.switch_page("pages/explore.py").run()  # and every page's, at once
    assert at.sidebar.selectbox(key="model_choice").value == "h.gguf (uploaded)" and not at.exception


def test_explore_budget_and_concurrency_change_the_chart_data():
    at = open_page("pages/explore.py", model=SMALL_MODEL)
    figs = charts(at)
    speed_before, hits_before = figs["0"], trace(figs["1"], DECODE_HITS)["y"]
    at.slider(key="budget").set_value(6000).run()
    figs = charts(at)
    assert figs["0"]["layout"]["shapes"] != speed_before["layout"]["shapes"]  # the marked budget moved
    at.slider(key="np").set_value(4).run()
    assert trace(charts(at)["1"], DECODE_HITS)["y"] != hits_before  # 4 streams: other hit rates
    assert not at.exception


def test_explore_overlays_the_measured_t4_points():
    at = open_page("pages/explore.py")
    measured = trace(charts(at)["0"], "measured")
    assert 43.2 in measured["y"] and 10000 in measured["x"]


def test_the_speed_charts_measured_points_have_a_toggle_of_their_own_kept_in_the_url():
    # issue 32: the reference overlay had no control of its own
    at = open_page("pages/explore.py")
    predicted = trace(charts(at)["0"], "predicted (model)")["y"]
    at.toggle(key="measured").set_value(False).run()
    names = [t.get("name") for t in charts(at)["0"]["data"]]
    assert "measured" not in names and trace(charts(at)["0"], "predicted (model)")["y"] == predicted
    assert at.query_params["measured"] == "False" and not at.exception
    linked = open_page("pages/explore.py", measured="False")  # a shared link keeps it off
    assert linked.toggle(key="measured").value is False
    assert "measured" not in [t.get("name") for t in charts(linked)["0"]["data"]]
    at.toggle(key="measured").set_value(True).run()
    assert 43.2 in trace(charts(at)["0"], "measured")["y"]


def test_explore_refuses_a_bad_trace_upload_with_a_message():
    at = open_page("pages/explore.py")
    at.radio(key="workload").set_value("upload a trace").run()
    at.get("file_uploader")[0].set_value(("t.npz", b"not an npz", "application/octet-stream"))
    at.run()
    assert not at.exception and any("not a readable NPZ" in e.value for e in at.error)


def test_reference_page_shows_each_machine_left_out_of_the_fit():
    at = open_page("pages/reference.py")
    machines = at.dataframe[0].value.set_index("machine")
    assert {"t4", "h200", "r9700", "v620"} <= set(machines.index)
    assert (machines["points"] > 0).all()
    engines = at.dataframe[1].value.set_index("point")["engine and build"]
    assert engines["t4-fit-cache10"] == "fork: qvac-fabric (modelled as b11480)"
    assert engines["h200-run1-b25"] == "mainline b11549" and engines["v620-1"] == "mainline b11505"


def test_logs_page_parses_an_upload_and_crosschecks_it():
    at = open_page("pages/logs.py")
    at.multiselect(key="log_examples").set_value([]).run()
    at.get("file_uploader")[0].set_value(
        ("b25.log", (GROUNDTRUTH / "logs" / "server_b25.log").read_bytes(), "text/plain")
    )
    upload_header(at)
    at.run()
    assert not at.exception and not at.get("json")  # the run reads as a table, not a JSON dump
    summary, check = (d.value for d in at.dataframe[:2])
    assert "6 layers, q6_K: 191 slots (24.9 %)" in summary.set_index("what")["logged"]["cache group 1"]
    assert set(check["ok"]) == {"ok", "info"} and "6 layers, q6_K: 191 slots (24.9%)" in check["logged"].tolist()
    policy = check.set_index("what").loc["replacement policy"]  # the information line: which policy ran
    # the log names no build and the sidebar gives b12569, but its cache size line is the plain-LRU builds' form
    assert (policy["logged"], policy["header says"]) == (
        "b11549 (not logged: its cache size line is b11480-b12169's (plain LRU))",
        "lru-b11549 (exact)",
    )
    assert summary.set_index("what")["logged"]["engine"] == "mainline"


def test_logs_page_says_a_non_log_is_not_a_llama_cpp_log():
    at = open_page("pages/logs.py")
    at.get("file_uploader")[0].set_value(("x.log", b"hello\nworld\n" * 10, "text/plain"))
    at.run()
    assert not at.exception and any("not a llama.cpp log" in e.value for e in at.error)


def test_learn_page_steps_and_its_counts_match_the_simulator():
    at = open_page("pages/learn.py")
    for _ in range(5):
        at.button(key="learn_next").click().run()
    assert at.slider(key="learn_slider").value == 6  # 1-based: the slider reads the "Step 6/..." it shows
    assert any("simulator agrees" in c.value for c in at.caption)
    at.slider(key="learn_slider").set_value(60).run()
    assert any("simulator agrees" in c.value for c in at.caption)
    at.button(key="learn_reset").click().run()
    assert at.slider(key="learn_slider").value == 1
    at.slider(key="learn_budget").set_value(17).run()
    assert any("refuse to start" in e.value for e in at.error) and not at.exception


def test_shopping_page_compares_cards_and_reacts_to_the_selection():
    at = open_page("pages/shopping.py")
    frame = at.dataframe[0].value
    assert {"GPU", "best setting", "decode t/s", "what would fit"} <= set(frame.columns) and len(frame) == 6
    assert {"RTX 4080 16GB", "RTX 4090"} <= set(frame["GPU"])  # story 3's question is answered by default
    commands = at.code[0].value  # below the table (a column was cut off), the model's path set once
    assert commands.startswith("MODEL=/path/to/") and commands.count('llama-server -m "$MODEL"') == 6
    at.multiselect(key="cards").set_value(["RTX 4090", "RTX 5090"]).run()  # the sidebar's machine always leads
    assert trace(charts(at)["0"], "best decode t/s")["x"] == ["Tesla T4", "RTX 4090", "RTX 5090"]


@pytest.mark.parametrize("placement", ["--fit", "--n-cpu-moe K"])
def test_explore_other_placements_render_and_report_the_host_layers(placement):
    at = open_page("pages/explore.py")
    at.radio(key="placement").set_value(placement).run()
    assert not at.exception and not at.error
    summary = next(m.value for m in at.markdown if m.value.startswith("**At "))
    assert "layers' experts in host memory" in summary and "48 layers'" not in summary


def test_explore_offers_the_bundled_real_traces_of_the_models_shape():
    from moe_model.readers.model_spec import load_model
    from ui.cached import bundled_traces

    real = "GPT-OSS-20B real routing (decode)"
    assert real in bundled_traces(load_model(GPT_OSS)) and real not in bundled_traces(load_model(QWEN30B))
    assert "llama.cpp recorded run: b25" in bundled_traces(load_model(GT_HEADER))


def test_explore_replays_a_bundled_real_trace_that_fits_the_model():
    """llama.cpp's recorded run on the ground-truth header (42,312 expert ids) keeps this short; GPT-OSS-20B's
    trace (4.1 million) is offered as the test above says and replayed by the same code."""
    recorded = "llama.cpp recorded run: b25"
    at = open_page("pages/explore.py")
    at.sidebar.selectbox(key="model_choice").set_value("URL or local path").run()
    at.sidebar.text_input(key="model_path").set_value(str(GT_HEADER)).run()
    assert recorded in at.radio(key="workload").options
    at.radio(key="workload").set_value(recorded).run()
    assert at.radio(key="workload").value == recorded and at.query_params["workload"] == recorded
    assert not at.exception and trace(charts(at)["1"], DECODE_HITS)["y"]


def test_explore_draws_the_policies_chosen_with_lru_as_reference_and_belady_on_top():
    """The page draws what the library computes (every policy's counts and prices: test_policy_compare.py);
    two policies keep this test short."""
    at = open_page("pages/explore.py")
    at.multiselect(key="policies").set_value([REFERENCE, "belady"])
    at.toggle(key="compare_policies").set_value(True).run()
    assert not at.exception, [e.value for e in at.exception]
    figs = [
        f for f in charts(at).values() if f["layout"]["title"]["text"] == "Replacement policies on the same workload"
    ]
    hits, tps = figs
    lru, best = trace(hits, f"{REFERENCE} (exact)")["y"], trace(hits, "belady (exact)")["y"]
    policies = [t for t in hits["data"] if t.get("mode") == "lines+markers"]  # the budget mark: a legend line
    assert len(policies) == 2 and all(b >= a for a, b in zip(lru, best, strict=True) if a is not None)
    assert any(v for v in trace(tps, f"{REFERENCE} (exact)")["y"] if v is not None)
    (table,) = [m.value for m in at.markdown if m.value.startswith("| policy | hit rate at 10,000 MiB")]
    rows = table.splitlines()[2:]  # each policy at the page's budget, drawn before the curves, every figure badged
    assert [r.split(" | ")[0] for r in rows] == [f"| {REFERENCE}", "| belady"]
    assert all(r.count(":orange-badge[modelled]") == 2 for r in rows)  # the preset's routing, the time model
    (caption,) = [c.value for c in at.caption if c.value.startswith("First ")]
    assert f":orange-badge[modelled] {REFERENCE}, belady" in caption and "t/s :orange-badge[modelled]" in caption


def test_the_sidebars_machine_line_and_the_captions_under_the_titles_are_sentences_with_a_verb():
    at = open_page("pages/model_budget.py")
    assert any("RAM. Host experts are mmap'd (pageable). Source: " in c.value for c in at.sidebar.caption)
    assert any(c.value.startswith("This app computes what") for c in at.sidebar.caption)  # was "..., computed before"
    assert any(c.value.startswith("This page computes what") for c in at.main.caption)
    at.sidebar.selectbox(key="lm").set_value("none").run()
    assert any("Host experts are pinned (CUDA_Host). " in c.value for c in at.sidebar.caption)


def test_the_build_box_takes_a_named_release_a_tag_or_a_number_and_refuses_anything_else_in_one_line():
    at = open_page("pages/model_budget.py")
    box = at.sidebar.text_input(key="build")
    box.set_value("v1.0.0").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.query_params["build"] == "12353"  # the CLI's rule (llama.builds.parse_build): v1.0.0 is b12353
    assert any("v1.0.0 is read as b12353" in c.value for c in at.sidebar.caption)
    assert any("llama.cpp b12353." in c.value for c in at.caption)
    for typed in ("b12100", "12100"):
        at.sidebar.text_input(key="build").set_value(typed).run()
        assert at.query_params["build"] == "12100" and not at.error
    at.sidebar.text_input(key="build").set_value("latest").run()
    refusals = [e.value for e in at.sidebar.error]
    assert len(refusals) == 1 and "\n" not in refusals[0] and "12569, b12569 or a named release" in refusals[0]
    assert "Priced with b12100 meanwhile" in refusals[0] and at.query_params["build"] == "12100"
    assert not at.exception and any("llama.cpp b12100." in c.value for c in at.caption)
    linked = open_page("pages/model_budget.py", build="v1.0.0")  # a link takes the same forms
    assert linked.sidebar.text_input(key="build").value == "b12353" and not linked.warning and not linked.exception


def test_explore_at_a_build_before_the_cache_says_it_has_none_and_what_it_would_take():
    at = open_page("pages/explore.py", build="11000")
    said = " ".join(c.value for c in at.caption)
    assert "llama.cpp b11000 has no MoE cache" in said and "b11480 or later" in said
    assert "b11000's cache" not in said and not at.exception  # no intro about a cache the build lacks


def test_explores_policy_choice_follows_a_build_switch_to_one_without_the_cpu_share():
    """b12569 offers the CPU share's policy; switched to b12180 the choice keeps what that build can run (the whole
    comparison failed before)."""
    at = open_page("pages/explore.py")
    assert "cpu-share-b12191" in at.multiselect(key="policies").value
    at.sidebar.text_input(key="build").set_value("b12180").run()
    assert not at.exception, [e.value for e in at.exception]
    kept = at.multiselect(key="policies")
    assert "cpu-share-b12191" not in kept.options and "cpu-share-b12191" not in kept.value and kept.value


@pytest.mark.parametrize("page", ["pages/model_budget.py", "pages/explore.py"])
def test_absurd_url_values_are_clamped_not_fatal(page):
    at = open_page(
        page,
        budget="-50",
        np="999",
        draft="x",
        accept="7",
        share="0.33",
        k="0",
        ctx="1e99",
        placement="9",
        model="../../etc/passwd",
        gpu="nope",
    )
    assert not at.exception and not at.error
    assert at.slider(key="budget").value == 0


def test_explore_prompt_length_changes_the_predicted_prompt_speed():
    at = open_page("pages/explore.py", model=SMALL_MODEL)

    def summary():
        return next(m.value for m in at.markdown if m.value.startswith("**At "))

    before = summary()
    at.number_input(key="prompt").set_value(100).run()
    assert summary() != before and not at.exception


def test_learn_steps_lru_and_class_lru_side_by_side_with_classes_and_crf():
    at = open_page("pages/learn.py")
    at.toggle(key="learn_both").set_value(True).run()
    at.slider(key="learn_slider").set_value(40).run()
    assert not at.exception and [m.value for m in at.markdown if m.value.startswith("**lru")] == [
        "**lru-b11549** (exact)"
    ]
    assert sum("simulator agrees" in c.value for c in at.caption) == 2  # both stepped and both checked
    figures = charts(at)
    cells = [cell for fig in figures.values() for row in fig["data"][0]["text"] for cell in row]
    assert any("CRF" in cell and "<br>c" in cell for cell in cells)  # ClassLRU's cells: class and CRF
    assert any("eviction order (largest age / 2^class first)" in c.value for c in at.caption)


def test_learn_step_changes_the_pool_drawing():
    at = open_page("pages/learn.py")
    for _ in range(3):
        at.button(key="learn_next").click().run()
    before = charts(at)["0"]["data"][0]["text"]
    for _ in range(4):
        at.button(key="learn_next").click().run()
    assert charts(at)["0"]["data"][0]["text"] != before


def test_reference_machine_filter_changes_the_listed_points():
    at = open_page("pages/reference.py")
    all_rows = list(at.dataframe[1].value["point"])
    at.multiselect(key="machines").set_value(["t4"]).run()
    shown = list(at.dataframe[1].value["point"])
    assert set(shown) < set(all_rows) and all(x.startswith("t4-") for x in shown)


def test_logs_page_several_runs_make_a_measured_curve():
    at = open_page("pages/logs.py")
    upload_header(at)
    runs = ["real H200 run: server_b10.log", "real H200 run: server_b25.log", "real H200 run: server_b50.log"]
    at.multiselect(key="log_examples").set_value(runs).run()
    fig = charts(at)["0"]
    curve = {key: _values(value) for key, value in fig["data"][0].items()}
    assert not at.exception and len(fig["data"]) == 1  # one model, one GPU, one concurrency: one line
    assert len(curve["x"]) == 3 and curve["y"] == sorted(curve["y"]) and "-np 1" in curve["name"]


def test_learns_step_slider_is_1_based_and_the_pools_line_above_the_settings_changes_with_step():
    at = open_page("pages/learn.py")
    slider = at.slider(key="learn_slider")
    last = int(slider.max)
    assert slider.min == 1 and slider.value == 1
    step, pools = _learn_step_and_pools(at)
    assert step.startswith(f"**Step 1/{last}**") and ":orange-background[L0E" in pools  # the first uploads
    at.slider(key="learn_slider").set_value(9).run()
    assert _learn_step_and_pools(at)[0].startswith(f"**Step 9/{last}**")  # issue 38: "8" on "Step 9/196"
    seen = {_learn_step_and_pools(at)[1]}
    for _ in range(3):
        at.button(key="learn_next").click().run()
        seen.add(_learn_step_and_pools(at)[1])
    assert len(seen) > 1 and at.slider(key="learn_slider").value == 12 and not at.exception
    texts = [m.value for m in at.main.markdown]  # the step and its pools come before the toy's settings
    assert texts.index(_learn_step_and_pools(at)[1]) < texts.index("**The toy's settings**")


def _learn_step_and_pools(at) -> tuple[str, str]:
    """Learn's step line and its pools line (the first policy's)."""
    step = next(m.value for m in at.markdown if m.value.startswith("**Step"))
    return step, next(m.value for m in at.markdown if m.value.startswith("**Pools"))


def test_learn_more_users_or_drafts_mean_bigger_ubatches():
    at = open_page("pages/learn.py")
    at.slider(key="learn_users").set_value(2).run()
    at.slider(key="learn_draft").set_value(2).run()
    at.slider(key="learn_slider").set_value(5).run()  # step 5: the record at index 4
    step = next(m.value for m in at.markdown if m.value.startswith("**Step"))
    assert "6 token(s)" in step and not at.exception  # 2 users x (2 drafts + 1)


def sidebar_stands(at) -> bool:
    """The sidebar's machine, serving and placement controls are all drawn (a refused model ended its run once)."""
    keys = {w.key for kind in ("selectbox", "number_input", "slider", "radio") for w in at.sidebar.get(kind)}
    return {"gpu", "placement"} <= keys and any(k.startswith("hw_ram_") for k in keys)


def test_a_local_path_or_url_can_be_given_and_a_bad_one_gets_one_line_while_the_sidebar_stands(tmp_path):
    at = open_page("pages/model_budget.py")
    at.sidebar.selectbox(key="model_choice").set_value("URL or local path").run()
    at.sidebar.text_input(key="model_path").set_value(str(GT_HEADER)).run()
    assert not at.exception and "8 layers, q4_K" in at.code[0].value
    for outside in (tmp_path / "missing.gguf", "/etc/shadow", "/proc/self/environ"):  # no oracle, no echo
        at.sidebar.text_input(key="model_path").set_value(str(outside)).run()
        (message,) = [e.value for e in at.error]
        assert not at.exception and message.startswith("only files in the allowed folders (the bundled data) are read")
        assert sidebar_stands(at) and at.code  # the page goes on with the default model meanwhile
    at.sidebar.text_input(key="model_path").set_value("http://169.254.169.254/latest/meta-data/").run()
    assert not at.exception and any("local or private address" in e.value for e in at.error)
    assert sidebar_stands(at) and len(at.error) == 1


# --- hostile input (issue 14): a message, never an exception or a dead server ---


def test_explore_refuses_a_trace_whose_expert_id_would_wrap_in_int16():
    experts = np.zeros((600, 48, 8), dtype=np.int64)
    experts[5, 3, 2] = 40_000  # crashed the server (segfault in the kernel) for every user
    buf = io.BytesIO()
    np.savez(buf, experts=experts)
    at = open_page("pages/explore.py")  # refused as the trace is read, for any model
    at.radio(key="workload").set_value("upload a trace").run()
    at.get("file_uploader")[0].set_value(("t.npz", buf.getvalue(), "application/octet-stream"))
    at.run()
    assert not at.exception and any("expert ids must be in 0..4,095" in e.value for e in at.error)


def test_uploading_a_header_with_block_count_2_to_the_32_is_refused_with_the_limit():
    from moe_model.readers.gguf_writer import header_bytes

    meta = {"general.architecture": "qwen3moe", "qwen3moe.block_count": 2**32 - 1}
    meta |= {"qwen3moe.expert_count": 128, "qwen3moe.expert_used_count": 8}
    at = open_page("pages/model_budget.py")
    upload_header(at, header_bytes(meta, []))
    at.run()
    assert not at.exception
    assert any("block_count is 4,294,967,295, above this tool's limit" in e.value for e in at.error)


def test_explore_caps_the_simulated_prompt_routing_and_says_so():
    at = open_page("pages/explore.py", prompt="131072")
    at.toggle(key="sim_prompts").set_value(True).run()
    assert not at.exception  # the only error: a 131,072-token prompt's first token takes minutes, unusable
    assert [e.value.split(":")[0] for e in at.error] == ["This setting is unusable"]
    # 8 sequences of 500 tokens: the 4,000 that predict and recommend replay
    assert any("Prompt routing is simulated for the first 2,034 tokens" in c.value for c in at.caption)
    said = [c.value for c in at.caption if c.value.startswith("Simulating the first 2,034 prompt tokens")]
    assert len(said) == 1 and said[0].count(":orange-badge[modelled]") == 2  # the toggle's answer, under the headline


def test_a_links_gpu_as_typed_picks_its_preset_and_an_unknown_one_gets_the_nearest_and_how_to_describe_it():
    typed = open_page("pages/model_budget.py", gpu="4070 ti super")
    assert typed.selectbox(key="gpu").value == "RTX 4070 Ti SUPER" and typed.query_params["gpu"] == "RTX 4070 Ti SUPER"
    miss = open_page("pages/model_budget.py", gpu="rtx 4075")
    assert not miss.exception and miss.selectbox(key="gpu").value == "Tesla T4"
    advice = f"The link's gpu: {literal(unknown_gpu('rtx 4075', app=True), None)}. Showing the Tesla T4 meanwhile."
    assert [w.value for w in miss.sidebar.warning] == [advice]
    assert "edit this machine" in miss.selectbox(key="gpu").help
    laptop = open_page("pages/model_budget.py", gpu="4090 laptop")  # a laptop part: its desktop card's boxes
    assert [w.value for w in laptop.sidebar.warning] == [
        f"The link's gpu: {literal(unknown_gpu('4090 laptop', app=True), None)}. Showing the Tesla T4 meanwhile."
    ]
    assert "pick RTX 4090 under GPU" in laptop.sidebar.warning[0].value and not laptop.exception


def test_learn_renders_a_class_lru_step_with_the_victims_score_and_the_readings():
    from moe_model.llama.slot_plan import plan_cache
    from moe_model.policies.stepper import class_lru_step
    from moe_model.routing.toy import N_EXPERT, toy_model, toy_workload

    at = open_page("pages/learn.py")  # its defaults: 48 MiB, one user, no draft, mixed quant
    at.radio(key="learn_policy").set_value("class-lru-b12170").run()
    at.slider(key="learn_slider").set_value(21).run()  # step 21: the record at index 20
    view = class_lru_step(toy_workload(1, 0, 0), plan_cache(toy_model(True), 48), N_EXPERT, 20)
    notes = [m.value for m in at.markdown if m.value.startswith("- ")]
    assert not at.exception and view.changes  # a step an open reading changes
    assert notes == ["\n".join(f"- {line}" for line in view.lines())]
