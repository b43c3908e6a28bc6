"""Load test: N concurrent browser sessions on loopback move the Explore page's budget slider for D seconds.

    python scripts/load_test.py                 # 12 sessions, 60 s (needs Chromium: apt-get install chromium)
    python scripts/load_test.py --sessions 4 --seconds 20

Starts its own `streamlit run app.py` bound to 127.0.0.1 on a free port (never another address), waits
until every session has drawn the page, then each session presses PageUp/PageDown on the slider and
times the rerun until Streamlit is idle again. Prints errors (exceptions on a page, browser errors,
timeouts), p50/p95 interaction latency and the server's RSS sampled every 2 s. Not part of the test run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"  # loopback only: a load test must not be pointed at someone else's server
RUNNING = (  # a run shown, a placeholder, a spinner or an element the run has not redrawn yet (data-stale)
    'document.querySelectorAll(\'[data-testid="stStatusWidget"], [data-testid="stSkeleton"],'
    ' [data-testid="stSpinner"], [data-stale="true"]\').length'
)
IDLE = f"() => {RUNNING} === 0"
BUSY = f"() => {RUNNING} > 0"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def start_server(port: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port)]
    cmd += ["--server.headless", "true", "--server.address", HOST]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 90
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(f"http://{HOST}:{port}/_stcore/health", timeout=2).read() == b"ok":
                return proc
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit("streamlit did not become healthy in 90 s")


async def session(browser, url: str, stop_at: list[float], ready: asyncio.Barrier, out: dict) -> None:
    context = await browser.new_context(viewport={"width": 1400, "height": 1000})
    page = await context.new_page()
    page.on("pageerror", lambda err: out["errors"].append(f"page error: {err}"))
    try:
        await page.goto(f"{url}/explore")
        await page.locator(".js-plotly-plot").first.wait_for(timeout=240_000)
        await page.wait_for_function(IDLE, timeout=240_000)
    except Exception as err:  # noqa: BLE001 - a session that never loads is one error, not a crash
        out["errors"].append(f"load: {type(err).__name__}")
    await ready.wait()
    slider = page.locator("[data-testid='stSlider']").filter(has_text="--moe-cache-mib").get_by_role("slider")
    key = "PageDown"
    while time.monotonic() < stop_at[0]:
        start = time.monotonic()
        try:
            await slider.focus()
            await slider.press(key)
            with contextlib.suppress(Exception):  # a rerun faster than the poll never shows the widget
                await page.wait_for_function(BUSY, timeout=2_000)
            await page.wait_for_function(IDLE, timeout=60_000)
            out["latency"].append(time.monotonic() - start)
            if await page.locator("[data-testid='stException']").count():
                out["errors"].append("exception shown on the page")
        except Exception as err:  # noqa: BLE001
            out["errors"].append(f"interaction: {type(err).__name__}")
        key = "PageUp" if key == "PageDown" else "PageDown"
    await context.close()


async def sample_rss(pid: int, stop_at: list[float], out: dict) -> None:
    start = time.monotonic()
    while time.monotonic() < stop_at[0]:
        out["rss"].append((round(time.monotonic() - start), rss_mib(pid)))
        await asyncio.sleep(2)


async def run(url: str, pid: int, sessions: int, seconds: float, chromium: str) -> dict:
    from playwright.async_api import async_playwright

    out: dict = {"errors": [], "latency": [], "rss": []}
    stop_at = [float("inf")]
    ready = asyncio.Barrier(sessions + 1)
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-dev-shm-usage"])
        tasks = [asyncio.create_task(session(browser, url, stop_at, ready, out)) for _ in range(sessions)]
        load_start = time.monotonic()
        await ready.wait()
        out["load_s"] = time.monotonic() - load_start
        stop_at[0] = time.monotonic() + seconds
        sampler = asyncio.create_task(sample_rss(pid, stop_at, out))
        await asyncio.gather(*tasks, sampler)
        await browser.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=12, choices=range(1, 33), metavar="1..32")
    parser.add_argument("--seconds", type=float, default=60.0, help="interaction time, at most 600")
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("no Chromium: apt-get install chromium")
    port = free_port()
    proc = start_server(port)
    try:
        out = asyncio.run(run(f"http://{HOST}:{port}", proc.pid, args.sessions, min(args.seconds, 600), chromium))
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    lat = sorted(out["latency"])
    rss = [mib for _, mib in out["rss"]]
    p95 = lat[min(len(lat) - 1, int(0.95 * len(lat)))] if lat else float("nan")
    print(
        f"{args.sessions} sessions x {args.seconds:.0f} s on loopback, "
        f"first draw of every session {out['load_s']:.0f} s"
    )
    print(
        f"interactions {len(lat)}, errors {len(out['errors'])}"
        + (f" ({sorted(set(out['errors']))})" if out["errors"] else "")
    )
    if lat:
        print(f"latency p50 {statistics.median(lat):.2f} s, p95 {p95:.2f} s")
    if rss:
        print(f"server RSS MiB: start {rss[0]:.0f}, max {max(rss):.0f}, end {rss[-1]:.0f}; over time {out['rss']}")
    return 1 if out["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
