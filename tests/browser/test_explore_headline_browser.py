"""Issue 38 in a real browser at 1400x900: an unusable best setting is no success box, and Explore's four metric
cards (decode, prompt, first token, hit rate), each with its basis badge, are in the first screen."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest

from moe_model.answers.basis import CALIBRATED, MEASURED, MODELLED, REPLAYED

from .steps import ARTIFACTS, BUSY_MS, QWEN235, assert_clean, headline, wait_idle

pytestmark = pytest.mark.browser

VIEW = {"width": 1400, "height": 900}
HDD_4090 = {"model": QWEN235, "gpu": "RTX 4090", "ram": "64", "drive": "HDD", "best": "True"}


def test_the_235b_on_a_4090_with_64_gib_and_a_hdd_is_no_success_box_and_the_cards_are_in_the_first_view(
    browser, server
):
    page = browser.new_page(viewport=VIEW)
    page.set_default_timeout(BUSY_MS)
    page.goto(f"{server}/explore?{urlencode(HDD_4090)}")
    assert headline(page), "Explore's headline was never drawn"
    best = page.get_by_test_id("stAlert").filter(has_text="Best setting: ")
    best.first.wait_for(timeout=BUSY_MS)  # the recommender answers after the headline
    wait_idle(page)
    assert_clean(page)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=ARTIFACTS / "explore-headline-235b-hdd.png")
    assert page.locator("[data-testid='stAlertContentSuccess']").filter(has_text="Best setting: ").count() == 0
    assert best.locator("[data-testid='stAlertContentError'], [data-testid='stAlertContentWarning']").count() == 1
    assert "What would help" in best.inner_text()
    cards = page.get_by_test_id("stMetric")
    assert cards.count() == 4
    page.evaluate("() => document.querySelector('[data-testid=\"stMain\"]').scrollTo(0, 0)")  # the first screen
    for i in range(4):
        card, box = cards.nth(i), cards.nth(i).bounding_box()
        assert box and box["y"] >= 0 and box["y"] + box["height"] <= VIEW["height"], (i, box)
        assert box["x"] >= 0 and box["x"] + box["width"] <= VIEW["width"], (i, box)
        word = next(w for w in (MEASURED, REPLAYED, CALIBRATED, MODELLED) if w in card.inner_text())
        label = card.get_by_test_id("stMetricLabel").bounding_box()
        said = card.get_by_test_id("stMetricLabel").get_by_text(word, exact=True).bounding_box()
        assert said["x"] + said["width"] <= label["x"] + label["width"], (i, "badge cut off")  # not behind an "…"
    page.close()
