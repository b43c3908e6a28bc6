"""What the browser tests do on a page (shared by every file in tests/browser/), and the CLI's answers they compare."""

from __future__ import annotations

import base64
import io
import json
import re
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
from conftest import ROOT

ARTIFACTS = ROOT / "artifacts"
DOCS = ROOT / "docs"
# how long any step may take: a machine busy with other work (two spinning processes and three test workers on two
# cores) draws a page in minutes; every answer is still checked, only the wait is long
BUSY_MS = 300_000
PAGES = {
    "": "Model & budget",
    "explore": "Explore",
    "reference": "Reference measurements",
    "logs": "Logs",
    "learn": "How the MoE cache works",
    "shopping": "Hardware shopping",
}
QWEN30, QWEN235 = "Qwen3-30B-A3B-Q4_K_M.gguf", "Qwen3-235B-A22B-Q4_K_M-00001-of-00003.gguf"
RUN3 = ROOT / "sample_data" / "groundtruth" / "run3"
RUN3_CACHE_LOGS = [RUN3 / "logs" / f"server_{case}.log" for case in ("minany", "b10", "b25", "b50", "b75", "full")]


def wait_idle(page) -> float:
    """Until Streamlit has finished the run: no status widget, no skeleton placeholders left. Returns when
    that was seen (time.time()), before the settling pause that follows it."""
    page.wait_for_timeout(500)
    page.wait_for_function(
        "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')"
        " && document.querySelectorAll('[data-testid=\"stSkeleton\"]').length === 0",
        timeout=BUSY_MS,
    )
    idle = time.time()
    page.wait_for_timeout(1000)
    return idle


def assert_clean(page) -> None:
    assert page.locator("[data-testid='stException']").count() == 0
    assert "Traceback" not in page.content()


def watched(browser):
    """A page that records every request to a host other than the app's."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(BUSY_MS)
    page.outside = []
    page.on(
        "request",
        lambda r: None if r.url.startswith(("http://127.0.0.1", "data:", "blob:")) else page.outside.append(r.url),
    )
    return page


def open_app(browser, server: str):
    """A watched page on the app's first page, idle."""
    page = watched(browser)
    page.goto(server)
    page.get_by_text("Model & budget").first.wait_for(timeout=BUSY_MS)
    wait_idle(page)
    return page


def combobox(page, label: str):
    return page.get_by_test_id("stSidebar").get_by_role("combobox", name=label, exact=True)


def sidebar_select(page, label: str, option: str) -> None:
    combobox(page, label).click()
    page.keyboard.type(option)  # the list draws only the options in view (90 GPUs): typed, the option is among them
    page.get_by_role("option", name=option, exact=True).click()
    wait_idle(page)


def selected(page, label: str) -> str:
    return combobox(page, label).input_value()


def go_to(page, title: str) -> float:
    """Follow the sidebar's link to a page (same session); seconds until it is idle."""
    start = time.time()
    page.get_by_test_id("stSidebarNav").get_by_text(title, exact=True).click()
    idle = wait_idle(page)
    assert_clean(page)
    return idle - start


def headline(page, timeout_ms: int = BUSY_MS) -> str:
    """Explore's headline once it is drawn (a busy machine draws it after the run looks idle), "" if it never is."""
    from playwright.sync_api import TimeoutError as PageTimeout  # imported by the fixtures first, or skipped there

    found = page.locator("[data-testid='stMarkdownContainer']").filter(has_text=re.compile(r"^At [\d,]+ MiB"))
    try:
        if timeout_ms > 0:  # playwright reads a timeout of 0 as "wait forever"
            found.first.wait_for(timeout=timeout_ms)
    except PageTimeout:
        return ""
    return found.first.inner_text() if found.count() else ""


def shot(page, name: str) -> None:
    """A small PNG of the view for the README (downscaled, 128 colours: under 150 KB)."""
    from PIL import Image

    image = Image.open(io.BytesIO(page.screenshot()))
    image = image.resize((image.width * 2 // 3, image.height * 2 // 3)).quantize(128)
    DOCS.mkdir(exist_ok=True)
    image.save(DOCS / f"{name}.png", optimize=True)


def shopping_pick(page, gpu: str) -> str:
    page.locator(".js-plotly-plot").first.wait_for(timeout=BUSY_MS)
    wait_idle(page)
    return page.evaluate(
        """(gpu) => {
        const bars = document.querySelectorAll('.js-plotly-plot')[0].data[0];
        return bars.customdata[Array.from(bars.x).indexOf(gpu)];
    }""",
        gpu,
    )


def shopping_row(page, gpu: str) -> tuple[str, float]:
    """A card's best setting and decode t/s from Shopping's chart (plotly sends the numbers base64-encoded)."""
    label, y, i = page.evaluate(
        """(gpu) => {
        const bars = document.querySelectorAll('.js-plotly-plot')[0].data[0];
        const i = Array.from(bars.x).indexOf(gpu);
        return [bars.customdata[i], bars.y.bdata ? {dtype: bars.y.dtype, bdata: bars.y.bdata} : bars.y, i];
    }""",
        gpu,
    )
    if isinstance(y, dict):
        y = np.frombuffer(base64.b64decode(y["bdata"]), dtype=np.dtype(y["dtype"])).tolist()
    return label, float(y[i])


def cli_best(gpu: str, model: str, ctx: int = 4096, ram: float | None = None) -> str:
    """`python -m moe_model recommend`'s pick, in a subprocess as a user runs it."""
    args = [
        "--model",
        str(ROOT / "sample_data" / "models" / model),
        "--hardware",
        gpu,
        "--ctx",
        str(ctx),
        "--json",
    ]
    args += ["--ram-gib", str(ram)] if ram else []
    out = subprocess.run(
        [sys.executable, "-m", "moe_model", "recommend", *args], capture_output=True, text=True, cwd=ROOT
    )
    return json.loads(out.stdout)["best"]["label"]


def cli_picks(*asked: tuple) -> dict[tuple, Future]:
    """The CLI's picks, computed one after another on a thread while the browser waits on the app (they would
    otherwise add their whole time to the story's)."""
    pool = ThreadPoolExecutor(max_workers=1)
    picks = {args: pool.submit(cli_best, *args) for args in asked}
    pool.shutdown(wait=False)
    return picks


def logged_decode(path) -> tuple[int, float]:
    """A run3 log's budget and measured decode t/s (the measurement the app must reproduce)."""
    from moe_model.fits.log_timings import decode_tps_of
    from moe_model.fits.points import scenario_of_run
    from moe_model.readers.logs import parse_log
    from moe_model.readers.model_spec import load_model

    run = parse_log(path)[0]
    return scenario_of_run(run, load_model(RUN3 / "model-header.gguf")).budget_mib, decode_tps_of(run)


def assert_chosen(page, model: str, title: str) -> None:
    """The uploaded model and the calibrated machine are still this page's choices."""
    assert selected(page, "Model") == model, title
    assert page.get_by_test_id("stSidebar").get_by_label("use my calibrated machine (H200)").is_checked(), title
