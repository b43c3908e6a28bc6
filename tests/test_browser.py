"""The real app in a real browser: streamlit run, Chromium driven by Playwright.

Uses Debian's chromium (Playwright cannot download its own browser on these machines). Without it the
test is skipped with instructions, except under CI (CI=true), where it must run.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from conftest import ROOT

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = ROOT / "artifacts"
PAGES = {
    "": "Model & budget",
    "explore": "Explore",
    "reference": "Reference measurements",
    "logs": "Logs",
    "learn": "How the MoE cache works",
    "shopping": "Hardware shopping",
}

if CHROMIUM is None:
    if os.environ.get("CI") == "true":
        raise RuntimeError("CI needs Chromium for the browser test: apt-get install chromium")
    pytest.skip(
        "no Chromium: install Debian's chromium (sudo apt-get install chromium) to run the browser test",
        allow_module_level=True,
    )

sync_api = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.browser


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            "app.py",
            "--server.port",
            str(port),
            "--server.headless",
            "true",
            "--server.address",
            "127.0.0.1",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                break
        except OSError:
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("streamlit did not become healthy in 90 s")
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-dev-shm-usage"])
        yield b
        b.close()


def wait_idle(page) -> None:
    """Until Streamlit has finished the run: no status widget, no skeleton placeholders left."""
    page.wait_for_timeout(500)
    page.wait_for_function(
        "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')"
        " && document.querySelectorAll('[data-testid=\"stSkeleton\"]').length === 0",
        timeout=120_000,
    )
    page.wait_for_timeout(1000)


def assert_clean(page) -> None:
    assert page.locator("[data-testid='stException']").count() == 0
    assert "Traceback" not in page.content()


def plot_data(page, index: int = 0) -> dict:
    return page.evaluate(f"""() => {{
        const plot = document.querySelectorAll('.js-plotly-plot')[{index}];
        return {{shapes: JSON.stringify(plot.layout.shapes || []), data: JSON.stringify(plot.data.map(t => t.y))}};
    }}""")


def test_every_page_opens_without_an_exception(server, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    ARTIFACTS.mkdir(exist_ok=True)
    for path, heading in PAGES.items():
        page.goto(f"{server}/{path}")
        page.get_by_text(heading, exact=False).first.wait_for(timeout=120_000)
        wait_idle(page)
        assert_clean(page)
        page.screenshot(path=str(ARTIFACTS / f"page-{path or 'model'}.png"), full_page=True)
    page.close()


def test_moving_the_budget_redraws_the_explore_charts(server, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{server}/explore")
    page.locator(".js-plotly-plot").first.wait_for(timeout=120_000)
    wait_idle(page)
    before = plot_data(page)
    slider = page.locator("[data-testid='stSlider']").filter(has_text="--moe-cache-mib").get_by_role("slider")
    slider.focus()
    for _ in range(3):
        slider.press("PageDown")
    changed = """(before) => {
        const plot = document.querySelectorAll('.js-plotly-plot')[0];
        return plot && JSON.stringify(plot.layout.shapes || []) !== before;
    }"""
    page.wait_for_function(changed, arg=before["shapes"], timeout=90_000)  # the marked budget moved
    wait_idle(page)
    after = plot_data(page)
    assert after["shapes"] != before["shapes"]
    assert_clean(page)
    page.screenshot(path=str(ARTIFACTS / "explore-after-budget-change.png"), full_page=True)
    page.close()
