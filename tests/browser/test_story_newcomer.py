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
