"""Issue 32's newcomer: a model chosen by path is the model of every page."""

from __future__ import annotations

import pytest
from conftest import ROOT

from .steps import go_to, open_app, selected, sidebar_select, wait_idle

pytestmark = pytest.mark.browser

MIXTRAL = str(ROOT / "sample_data" / "models" / "Mixtral-8x7B-Q4_K_M.gguf")
PATH_BOX = "https://.../model.gguf or /path/model.gguf"


def test_a_model_chosen_by_path_on_model_and_budget_is_the_model_of_explore_shopping_and_logs(browser, server):
    page = open_app(browser, server)
    sidebar_select(page, "Model", "URL or local path")
    box = page.get_by_test_id("stSidebar").get_by_label(PATH_BOX)
    box.fill(MIXTRAL)
    box.press("Enter")
    wait_idle(page)
    assert page.get_by_text("8 experts, 2 used").count()  # Mixtral's header read from the path
    for title in ("Explore", "Hardware shopping", "Logs"):
        go_to(page, title)
        assert selected(page, "Model") == "URL or local path", title
        assert page.get_by_test_id("stSidebar").get_by_label(PATH_BOX).input_value() == MIXTRAL, title
        assert "Mixtral-8x7B-Q4_K_M.gguf" in page.url, title  # in the URL state: a copied link keeps it
        assert not page.get_by_test_id("stAlert").filter(has_text="Qwen3-30B").count(), title
    go_to(page, "Hardware shopping")
    assert page.get_by_text(f"-m {MIXTRAL}").count()  # the commands name the chosen file
    assert not page.outside, page.outside
    page.close()


RUN3_HEADER = ROOT / "sample_data" / "groundtruth" / "run3" / "model-header.gguf"
RUN5 = ROOT / "sample_data" / "groundtruth" / "run5" / "logs"
RUN5_LOGS = [RUN5 / f"server_mm_{case}.log" for case in ("off", "b10", "b25")]
PLOT_NAMES = "() => [...document.querySelectorAll('.js-plotly-plot')].flatMap(p => p.data.map(t => t.name))"


def test_uploaded_logs_replace_the_bundled_t4_example_in_the_chips_points_and_charts(browser, server):
    page = open_app(browser, server)
    go_to(page, "Logs")
    examples = page.get_by_test_id("stMultiSelect").filter(has_text="bundled examples")
    assert "t4-cpumoe-10000.log" in examples.inner_text()  # the example shown before any upload
    sidebar_select(page, "Model", "upload a header prefix")
    page.get_by_test_id("stSidebar").locator("input[type=file]").set_input_files(str(RUN3_HEADER))
    wait_idle(page)
    page.get_by_test_id("stMain").locator("input[type=file]").set_input_files([str(p) for p in RUN5_LOGS])
    wait_idle(page)
    page.get_by_text("server_mm_b25.log, run 1").first.wait_for()
    assert "t4-cpumoe-10000.log" not in examples.inner_text()  # its chip deselected by the upload
    page.get_by_role("button", name="Calibrate the time model on these runs").click()
    wait_idle(page)
    page.locator("[data-testid='stTable']").first.wait_for()
    main = page.get_by_test_id("stMain")
    shown = main.text_content()  # the tables' cells too (drawn on a canvas, hidden from inner_text)
    assert "server_mm_b25.log#1" in shown and "t4-cpumoe" not in shown and "Tesla T4" not in shown
    names = page.evaluate(PLOT_NAMES)
    assert names and not [n for n in names if "T4" in str(n)], names
    assert not page.outside, page.outside
    page.close()
