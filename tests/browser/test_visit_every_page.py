"""Every page's first view in a fresh session, timed."""

from __future__ import annotations

import time

import pytest

from .steps import ARTIFACTS, BUSY_MS, PAGES, assert_clean, wait_idle, watched

pytestmark = pytest.mark.browser


def test_every_page_opens_without_an_exception(browser, server, timings):  # a browser already open, as a user has
    page = watched(browser)
    ARTIFACTS.mkdir(exist_ok=True)
    for path, heading in PAGES.items():
        start = time.time()
        page.goto(f"{server}/{path}")
        page.get_by_text(heading, exact=False).first.wait_for(timeout=BUSY_MS)
        idle = wait_idle(page)
        timings[f"first view of {path or 'model'}"] = idle - start
        if not path:
            timings["streamlit run to first page usable"] = idle - timings["started_at"]
        assert_clean(page)
        page.screenshot(path=str(ARTIFACTS / f"page-{path or 'model'}.png"), full_page=True)
    assert not page.outside, page.outside  # works offline: no fonts or icons from another host
    page.close()
