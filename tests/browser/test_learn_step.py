"""Learn at 1400x900 (issue 38): Step changes something in the first view, and the slider reads the step shown."""

from __future__ import annotations

import re

import pytest

from .steps import BUSY_MS, assert_clean, wait_idle

pytestmark = pytest.mark.browser

VIEW = {"width": 1400, "height": 900}


def in_view(page, locator) -> bool:
    box = locator.bounding_box()
    return box is not None and box["y"] >= 0 and box["y"] + box["height"] <= VIEW["height"]


def test_step_on_learn_changes_the_step_line_and_the_pools_in_the_first_view(browser, server):
    page = browser.new_page(viewport=VIEW)
    page.set_default_timeout(BUSY_MS)
    page.goto(f"{server}/learn")
    page.get_by_text("How the MoE cache works").first.wait_for()
    wait_idle(page)
    main = page.get_by_test_id("stMain")
    step_line = main.locator("[data-testid='stMarkdownContainer']").filter(has_text=re.compile(r"^Step \d+/\d+"))
    pools = main.locator("[data-testid='stMarkdownContainer']").filter(has_text=re.compile(r"^Pools"))
    step = page.get_by_role("button", name="Step", exact=True)
    before = (step_line.first.inner_text(), pools.first.inner_text())
    assert before[0].startswith("Step 1/") and in_view(page, step)
    for _ in range(2):
        step.click()
        wait_idle(page)
    after = (step_line.first.inner_text(), pools.first.inner_text())
    assert after[0].startswith("Step 3/") and after[1] != before[1], (before, after)
    assert in_view(page, step_line.first) and in_view(page, pools.first)  # seen without scrolling
    assert page.evaluate("() => window.scrollY") == 0
    thumb = main.get_by_test_id("stSlider").filter(has_text=re.compile(r"^step")).get_by_test_id("stSliderThumbValue")
    assert thumb.inner_text() == "3"  # the slider reads the step the line names (it read 2 on "Step 3/...")
    assert_clean(page)
    page.close()
