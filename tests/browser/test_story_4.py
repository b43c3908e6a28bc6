"""Story 4: my own header and six logs, uploaded once and calibrated, on every page."""

from __future__ import annotations

import re
import time

import pytest

from .steps import (
    BUSY_MS,
    RUN3,
    RUN3_CACHE_LOGS,
    assert_chosen,
    go_to,
    logged_decode,
    open_app,
    shopping_row,
    shot,
    sidebar_select,
    wait_idle,
)

pytestmark = pytest.mark.browser


def test_story_4_my_own_header_and_logs_on_every_page(browser, server, timings):
    """Upload run3's header and six logs once, calibrate: every page keeps them and the machine, Explore
    reproduces the logs within the calibration's error, and Shopping's row for the machine is Explore's best."""
    page = open_app(browser, server)
    sidebar_select(page, "Model", "upload a header prefix")
    page.get_by_test_id("stSidebar").locator("input[type=file]").first.set_input_files(str(RUN3 / "model-header.gguf"))
    wait_idle(page)
    uploaded = "model-header.gguf (uploaded)"
    ctx = page.get_by_test_id("stSidebar").get_by_label("context (-c)")
    ctx.fill("8192")  # the logged runs' context
    ctx.press("Enter")
    wait_idle(page)
    go_to(page, "Logs")
    logs = [str(p) for p in RUN3_CACHE_LOGS]
    page.get_by_test_id("stMain").locator("input[type=file]").set_input_files(logs)  # the sidebar's is the CPU run's
    wait_idle(page)
    page.get_by_role("button", name="Calibrate the time model on these runs").click()
    accepted = page.locator("[data-testid='stAlertContentSuccess']").filter(has_text="every page now uses")
    accepted.wait_for(timeout=BUSY_MS)  # a busy machine can look idle before the run has drawn it
    wait_idle(page)
    accepted = accepted.inner_text()
    rel_error = float(re.search(r"carry ±([\d.]+) %", accepted).group(1)) / 100 + 0.0005  # printed to 0.1 %
    start = time.time()
    for title in ("Model & budget", "Reference", "Learn", "Logs", "Explore"):  # Shopping last, below
        go_to(page, title)
        assert_chosen(page, uploaded, title)
    page.get_by_text("fitted to your 6 logs").first.wait_for(timeout=BUSY_MS)  # the fit: once per log set
    wait_idle(page)
    timings["story 4: five pages with the uploads (the routing fitted on Explore)"] = time.time() - start
    # the logs name no build, their cache size line is b11480-b12169's: the machine brought that build, and says so
    policy = "Hit rates: lru-b11549 (exact), llama.cpp b11549."
    assert page.locator("[data-testid='stCaptionContainer']").filter(has_text=policy).count() == 1
    box = page.get_by_label("exact --moe-cache-mib (MiB)")
    for path in RUN3_CACHE_LOGS:
        budget, logged = logged_decode(path)
        box.fill(str(budget))
        box.press("Enter")
        answer = page.locator("[data-testid='stMarkdownContainer']").filter(has_text=re.compile(rf"^At {budget:,} MiB"))
        answer.first.wait_for(timeout=BUSY_MS)
        wait_idle(page)
        text = answer.first.inner_text()
        # each run3 log timed one request, its server's first: the headline's first-request figure is its prediction
        # (shown where the cold pool makes it 1 % slower or more; else the steady figure is the first request's too)
        first = re.search(r"A first request of [\d,]+ tokens after start decodes at ([\d.]+) t/s", text)
        predicted = float((first or re.search(r"MiB: ([\d.]+) t/s decode", text)).group(1))
        assert "(simulated, lru-b11549)" in text, text
        assert abs(predicted / logged - 1) <= rel_error, (path.name, predicted, logged, rel_error)
    page.get_by_text("best setting for this machine", exact=False).click()
    best = page.locator("[data-testid='stAlertContentSuccess']").filter(has_text="Best setting: ")
    best.wait_for(timeout=BUSY_MS)
    wait_idle(page)
    best = best.inner_text()
    explore_pick, rest = best.split("Best setting: ", 1)[1].split(": ", 1)
    explore_tps = float(rest.split(" t/s", 1)[0])
    go_to(page, "Hardware shopping")
    page.locator(".js-plotly-plot").first.wait_for(timeout=BUSY_MS)
    wait_idle(page)
    assert_chosen(page, uploaded, "Hardware shopping")
    label, tps = shopping_row(page, "H200")
    assert (label, round(tps, 1)) == (explore_pick.strip(), explore_tps)
    shot(page, "story-4-shopping")
    assert not page.outside, page.outside
    page.close()
