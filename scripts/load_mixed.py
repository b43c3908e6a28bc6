"""Mixed load right after start: 8 sessions (3 Explore, 2 Logs uploads, 2 Shopping, 1 Learn) that begin
10 s after `streamlit run`; prints each session's longest wait.

    python scripts/load_mixed.py                    # 8 sessions for 90 s of interaction, Streamlit's protocol
    python scripts/load_mixed.py --seconds 60 --start-after 10
    python scripts/load_mixed.py --client browser   # 8 Chromium pages instead (needs Chromium and Playwright)
    python scripts/load_mixed.py --browser-cpu 1    # the clients on CPU 1, the server on the others (as if remote)
    python scripts/load_mixed.py --mix explore,explore,explore   # other sessions (kinds: explore logs shopping learn)
    python scripts/load_mixed.py --mix 12 --after-close 150   # issue 39's 12 sessions, then RSS once all closed
    python scripts/load_mixed.py --mix explore --seconds 5 --after-close 150   # a fresh server after one visit

Starts its own server bound to 127.0.0.1 on a free port, with a fresh app (empty caches) and this install's
numba cache as it is. A wait is the time from an action (opening the page, moving a slider, uploading a log,
switching the GPU, stepping Learn) until the run it started has ended; each is bounded at --timeout s (a wait
that hits it is reported as such). The issue's target: no session waits over 15 s. Not part of the test run.

Clients. `protocol` (the default): each session speaks Streamlit's own browser protocol over the websocket
(load_protocol.py) and waits for the rerun's script_finished; it costs the machine almost nothing, so the waits
are the server's (visitors' browsers run on their own machines). Its actions: Explore's --moe-cache-mib slider a
tenth of its range down, then up (PageDown/PageUp); a Logs upload of a run3 log (the five in turn) by the uploader's
own flow (upload url, PUT, rerun); Shopping's sidebar GPU switched to the next of RTX 3090, Tesla T4, RTX 4090
that differs from the one shown; Learn's step slider one step right (back one at its end). `browser`: Chromium
pages (Playwright) do the same with keys and clicks and wait until the page is idle and drawn, so the waits
include drawing the page, and the 8 renderers take most of a 2-core machine; its idle check can pass while a run
computes before its spinner shows (Streamlit delays it 0.5 s): a page open may end early, its rest in the next wait.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load_protocol import Session, slider_moved, tenth_of_range  # noqa: E402 - the sibling protocol client
from load_test import BUSY, HOST, IDLE, ROOT, free_port, rss_mib  # noqa: E402 - the sibling load script

LOGS = sorted((ROOT / "sample_data" / "groundtruth" / "run3" / "logs").glob("server_b*.log"))  # real runs
GPUS = ("RTX 3090", "Tesla T4", "RTX 4090")
KINDS = ("explore", "logs", "shopping", "learn")
MIX = ("explore", "explore", "explore", "logs", "logs", "shopping", "shopping", "learn")  # the issue's
MIX_12 = (*MIX, "explore", "logs", "shopping", "learn")  # issue 39's 12 sessions: the 8, one more of each kind
CLIENTS = ("protocol", "browser")


def start_server(port: int, cpus: set[int] | None = None) -> tuple[subprocess.Popen, float]:
    """`streamlit run app.py` on loopback (on `cpus` if given); returns it and when it started, once it answers."""
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port)]
    cmd += ["--server.headless", "true", "--server.address", HOST]
    started = time.monotonic()
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None  # before exec: every thread it starts inherits it
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=pin)
    while time.monotonic() < started + 90:
        with contextlib.suppress(OSError):
            if urllib.request.urlopen(f"http://{HOST}:{port}/_stcore/health", timeout=2).read() == b"ok":
                return proc, started
        time.sleep(0.5)
    proc.kill()
    raise SystemExit("streamlit did not become healthy in 90 s")


def split_cores(browser_cpu: int | None) -> set[int] | None:
    """None, or the server's CPUs (all but `browser_cpu`) with this process, and the Chromium it starts, on that one."""
    if browser_cpu is None:
        return None
    cpus = os.sched_getaffinity(0)
    if browser_cpu not in cpus or len(cpus) < 2:
        raise SystemExit(f"--browser-cpu {browser_cpu}: needs one of CPUs {sorted(cpus)} and at least two")
    os.sched_setaffinity(0, {browser_cpu})
    return cpus - {browser_cpu}


async def settle(page, timeout_s: float, start_s: float = 1.5) -> None:
    """Wait for the rerun an action started (if it shows within start_s) and then for an idle page."""
    with contextlib.suppress(Exception):  # a rerun faster than the poll never shows the widget
        await page.wait_for_function(BUSY, timeout=start_s * 1000)
    await page.wait_for_function(IDLE, timeout=timeout_s * 1000)


async def act(kind: str, page, url: str, step: int) -> None:
    """One interaction of a session of this kind (the first one opens its page)."""
    if step == 0:
        await page.goto(f"{url}/{kind}")  # each kind is its page's path
        await page.locator("[data-testid='stSidebarNav']").wait_for()  # the run has begun: idle before it is no answer
        return
    if kind == "explore":
        slider = page.locator("[data-testid='stSlider']").filter(has_text="--moe-cache-mib").get_by_role("slider")
        await slider.focus()
        await slider.press("PageDown" if step % 2 else "PageUp")
    elif kind == "logs":
        uploader = page.get_by_test_id("stMain").locator("input[type=file]").first  # not the sidebar's CPU run
        await uploader.set_input_files(str(LOGS[step % len(LOGS)]))
    elif kind == "shopping":
        await page.get_by_test_id("stSidebar").get_by_role("combobox", name="GPU", exact=True).click()
        await page.get_by_role("option", name=GPUS[step % len(GPUS)], exact=True).click()  # as a person switches
    else:
        slider = page.locator("[data-testid='stSlider']").filter(has_text="step").get_by_role("slider")
        await slider.focus()
        await slider.press("ArrowRight")


async def act_protocol(kind: str, visitor, step: int) -> None:
    """The same interaction through Streamlit's protocol (the first one opens its page and waits for its run)."""
    if step == 0:
        await visitor.open(kind)
    elif kind == "explore":
        slider = visitor.widget("slider", "--moe-cache-mib")
        tenth = tenth_of_range(slider)
        await visitor.set_slider(slider, slider_moved(slider, visitor.value(slider), -tenth if step % 2 else tenth))
    elif kind == "logs":
        await visitor.upload(visitor.widget("file_uploader", "llama-server", exact=False), LOGS[step % len(LOGS)])
    elif kind == "shopping":
        box = visitor.widget("selectbox", "GPU", sidebar=True)
        shown = visitor.value(box)
        await visitor.select(box, next(g for g in GPUS[step % len(GPUS) :] + GPUS if g != shown))
    else:
        slider = visitor.widget("slider", "step")
        await visitor.set_slider(slider, slider_moved(slider, visitor.value(slider), 1))


async def interact(i: int, kind: str, step_once, stop_at: float, out: dict) -> None:
    """One session: an action, its wait, a pause to read, until stop_at; `step_once(step)` returns errors shown."""
    waits, errors, step = [], [], 0
    while time.monotonic() < stop_at:
        start = time.monotonic()
        try:
            errors += await step_once(step)
        except Exception as err:  # noqa: BLE001 - a timed-out or failed action is reported, not fatal
            errors.append(f"step {step}: {type(err).__name__}")
        waits.append(time.monotonic() - start)
        step += 1
        await asyncio.sleep(1.0)  # a person reads before the next action
    out[f"{i} {kind}"] = (waits, errors)


async def browser_session(i: int, kind: str, browser, url: str, stop_at: float, timeout_s: float, out: dict) -> None:
    context = await browser.new_context(viewport={"width": 1400, "height": 1000})
    page = await context.new_page()
    page.set_default_timeout(timeout_s * 1000)  # a busy server is measured, not cut off at playwright's 30 s

    async def step_once(step: int) -> list[str]:
        await act(kind, page, url, step)
        await settle(page, timeout_s)
        return ["exception shown"] if await page.locator("[data-testid='stException']").count() else []

    await interact(i, kind, step_once, stop_at, out)
    await context.close()


async def protocol_session(i: int, kind: str, url: str, stop_at: float, timeout_s: float, out: dict) -> None:
    visitor = Session(url, timeout_s)

    async def step_once(step: int) -> list[str]:
        await act_protocol(kind, visitor, step)
        return visitor.take_errors()

    try:
        await interact(i, kind, step_once, stop_at, out)
    finally:
        await visitor.close()


@contextlib.asynccontextmanager
async def sessions(client: str, chromium: str | None):
    """Yields `start(i, kind, url, stop_at, timeout_s, out)` for the client: Chromium is launched once for all."""
    if client == "protocol":
        yield protocol_session
        return
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-dev-shm-usage"])
        yield lambda i, kind, *rest: browser_session(i, kind, browser, *rest)
        await browser.close()


async def after_close(pid: int, seconds: float) -> list[tuple[float, float]]:
    """(seconds since every session closed, server RSS MiB) every 5 s for `seconds`: what the server gives back."""
    closed, samples = time.monotonic(), []
    while (since := time.monotonic() - closed) <= seconds:
        samples.append((since, rss_mib(pid)))
        await asyncio.sleep(5)
    return samples


async def run(
    url: str,
    pid: int,
    begin_at: float,
    seconds: float,
    timeout_s: float,
    client: str,
    chromium: str | None,
    mix: tuple[str, ...],
    close_s: float = 0.0,
) -> dict:
    out: dict = {}
    rss: list[float] = []
    async with sessions(client, chromium) as start:
        await asyncio.sleep(max(0.0, begin_at - time.monotonic()))
        stop_at = time.monotonic() + seconds

        async def sample() -> None:
            while time.monotonic() < stop_at + timeout_s:
                rss.append(rss_mib(pid))
                await asyncio.sleep(2)

        sampler = asyncio.create_task(sample())
        await asyncio.gather(*(start(i, k, url, stop_at, timeout_s, out) for i, k in enumerate(mix)))
        sampler.cancel()
    out["rss"] = rss
    out["closed"] = await after_close(pid, close_s) if close_s else []
    return out


def p95(waits: list[float]) -> float:
    ordered = sorted(waits)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))] if ordered else float("nan")


def targets(out: dict) -> str:
    """Issue 39's figures: errors, p95 of the actions after each page open (all, and per kind of request), the
    longest page open."""
    runs = {k: v for k, v in out.items() if k not in ("rss", "closed")}
    later = [w for waits, _ in runs.values() for w in waits[1:]]
    opens = [waits[0] for waits, _ in runs.values() if waits]
    errors = sum(len(e or []) for _, e in runs.values())
    kinds = sorted({name.split()[1] for name in runs})
    per_kind = [[w for name, (ws, _) in runs.items() if name.split()[1] == kind for w in ws[1:]] for kind in kinds]
    return (
        f"errors {errors}; later actions {len(later)}, p95 {p95(later):.2f} s (target 1.5 s); longest page open "
        f"{max(opens, default=float('nan')):.1f} s (target 10 s)\np95 per request: "
        + ", ".join(f"{kind} {p95(w):.2f} s ({len(w)})" for kind, w in zip(kinds, per_kind, strict=True))
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=90.0, help="interaction time, at most 600")
    parser.add_argument("--start-after", type=float, default=10.0, help="seconds after `streamlit run`")
    parser.add_argument("--timeout", type=float, default=120.0, help="the longest one wait may take")
    parser.add_argument(
        "--browser-cpu", type=int, help="the clients on this CPU, the server on the rest (visitors' own machines)"
    )
    parser.add_argument("--client", choices=CLIENTS, default="protocol", help="Streamlit's protocol or Chromium pages")
    parser.add_argument(
        "--mix", default=",".join(MIX), help=f"the sessions, comma-separated kinds of {KINDS}; 12: issue 39's twelve"
    )
    parser.add_argument("--after-close", type=float, default=0.0, help="seconds to watch RSS once all sessions closed")
    args = parser.parse_args()
    mix = MIX_12 if args.mix == "12" else tuple(args.mix.split(","))
    if not set(mix) <= set(KINDS):
        raise SystemExit(f"--mix {args.mix}: kinds are {', '.join(KINDS)}")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None and args.client == "browser":
        raise SystemExit("no Chromium: apt-get install chromium")
    port, load_before = free_port(), " ".join(f"{x:.1f}" for x in os.getloadavg())
    proc, started = start_server(port, split_cores(args.browser_cpu))
    try:
        out = asyncio.run(
            run(
                f"http://{HOST}:{port}",
                proc.pid,
                started + args.start_after,
                min(args.seconds, 600),
                args.timeout,
                args.client,
                chromium,
                mix,
                args.after_close,
            )
        )
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    clients = "browsers" if args.client == "browser" else "protocol clients"
    where = f"{clients} on their own CPU" if args.browser_cpu is not None else f"{clients} and server sharing every CPU"
    started_at = f"{args.start_after:g} s after `streamlit run`"
    print(
        f"{len(mix)} sessions ({args.client} client) from {started_at}, {args.seconds:g} s, {where}; "
        f"load average before {load_before}, after {load}"
    )
    worst = 0.0
    for name in sorted(k for k in out if k not in ("rss", "closed")):
        waits, errors = out[name]
        worst = max(worst, max(waits, default=0.0))
        print(
            f"session {name:<12} interactions {len(waits):>3}, longest wait {max(waits, default=0):5.1f} s, "
            f"first (page open) {waits[0] if waits else float('nan'):5.1f} s, errors {errors or 0}"
        )
        print("    waits (s):", " ".join(f"{w:.1f}" for w in waits))
    if out["rss"]:
        print(f"server RSS MiB: max {max(out['rss']):.0f}, end {out['rss'][-1]:.0f}")
    if out["closed"]:
        print("server RSS MiB after every session closed:", " ".join(f"+{t:.0f}s {m:.0f}" for t, m in out["closed"]))
    print(targets(out))
    print(f"longest wait of any session: {worst:.1f} s (target: at most 15 s)")
    return 0 if worst <= 15 else 1


if __name__ == "__main__":
    raise SystemExit(main())
