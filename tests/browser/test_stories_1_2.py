"""Stories 1 and 2 in one session: a budget for a 3060 kept on every page and shared by a link, then Learn."""

from __future__ import annotations

import time

import pytest

from .steps import (
    BUSY_MS,
    QWEN30,
    cli_picks,
    go_to,
    headline,
    open_app,
    selected,
    shopping_pick,
    shot,
    sidebar_select,
    wait_idle,
    watched,
)

pytestmark = pytest.mark.browser


def test_a_budget_for_a_3060_is_kept_on_every_page_and_shared_then_learn_teaches_the_cache(browser, server, timings):
    # 1. "Which budget on my 12 GB 3060 for Qwen3-30B?": chosen once on page 1, kept on every other page
    page = open_app(browser, server)
    sidebar_select(page, "Model", QWEN30)
    sidebar_select(page, "GPU", "RTX 3060 12GB")
    timings["first view of Explore in the session"] = go_to(page, "Explore")
    for title in ("Explore", "Hardware shopping", "Logs", "Model & budget", "Explore"):
        go_to(page, title)
        assert selected(page, "GPU") == "RTX 3060 12GB" and selected(page, "Model") == QWEN30, title
    first = headline(page)
    assert " t/s decode (range " in first
    cli = cli_picks(("RTX 3060 12GB", QWEN30))  # after the first headline: its wait is not shared with it
    slider = page.locator("[data-testid='stSlider']").filter(has_text="--moe-cache-mib").get_by_role("slider")
    slider.focus()
    start = time.time()
    slider.press("PageDown")
    page.wait_for_function(
        "(before) => { const m = [...document.querySelectorAll('[data-testid=stMarkdownContainer]')]"
        ".find(e => /^At [\\d,]+ MiB/.test(e.innerText)); return m && m.innerText !== before; }",
        arg=first,
        timeout=BUSY_MS,
    )
    timings["budget change to new headline"] = time.time() - start
    wait_idle(page)
    page.get_by_text("best setting for this machine", exact=False).click()
    wait_idle(page)
    best = page.locator("[data-testid='stAlertContentSuccess']").filter(has_text="Best setting: ").inner_text()
    explore_pick = best.split("Best setting: ", 1)[1].split(": ", 1)[0].strip()
    shared, view = page.url, headline(page)
    page.get_by_test_id("stMain").evaluate("main => main.scrollTo(0, 0)")  # the picture: the headline's cards first
    shot(page, "story-1-explore")
    go_to(page, "Hardware shopping")
    assert shopping_pick(page, "RTX 3060 12GB") == explore_pick == cli[("RTX 3060 12GB", QWEN30)].result()
    # a copied link reproduces the view in a new session
    other = watched(browser)
    other.goto(shared)
    other.get_by_text("Explore").first.wait_for(timeout=BUSY_MS)
    wait_idle(other)
    assert headline(other) == view and selected(other, "GPU") == "RTX 3060 12GB"
    other.close()

    # 2. "Teach me the cache": legend, LRU order, why a step ran on the CPU, a budget where 4 users use the pool
    go_to(page, "Learn")
    for _ in range(6):
        page.get_by_role("button", name="Step", exact=True).click()
        wait_idle(page)
    assert page.get_by_text("next eviction first").count() and page.get_by_text("next eviction (least").count()
    shot(page, "story-2-learn")
    assert not page.outside, page.outside
    page.close()
