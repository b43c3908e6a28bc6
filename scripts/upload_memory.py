"""Server memory after many uploads: distinct trace uploads from successive browser sessions, then three
concurrent uploads of one NPZ bomb; prints the server's RSS after each and once the tabs are closed.

    python scripts/upload_memory.py                       # 20 uploads of 150k-token GPT-OSS-20B traces
    python scripts/upload_memory.py --uploads 8 --tokens 50000

Starts its own server on 127.0.0.1 (a fresh app). Each session opens Explore with GPT-OSS-20B, picks "upload a
trace", uploads its own random token trace (NPZ, 24 layers x 4 of 32 experts), waits for the page and closes.
Then three sessions upload the same deflated bomb at once (an `experts` array of zeros, ~0.1 % of its size on
the wire) while RSS is sampled every 0.25 s; each session's message is printed. The issue's targets: under
1.5 GiB once the tabs close after 20 uploads; the bombs never past 1 GiB, each with the same one-line refusal.
Not part of the test run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load_mixed import settle, start_server  # noqa: E402 - the sibling load scripts
from load_test import HOST, free_port, rss_mib  # noqa: E402

MODEL = "gpt-oss-20b-MXFP4.gguf"
SHAPE = (24, 4, 32)  # GPT-OSS-20B: layers, experts per token, experts
AFTER_CLOSE_S = 150  # Streamlit keeps a closed tab's session for a reconnect for up to ~2 min


def trace_npz(path: Path, tokens: int, seed: int) -> None:
    n_layer, k, n_expert = SHAPE
    first = np.random.default_rng(seed).integers(0, n_expert, (tokens, n_layer, 1), dtype=np.int16)
    np.savez_compressed(path, experts=(first + np.arange(k, dtype=np.int16)) % n_expert)  # k distinct per token


def bomb_npz(path: Path, tokens: int) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive, archive.open("experts.npy", "w") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "<i2", "fortran_order": False, "shape": (tokens, 48, 8)})
        block = bytes(48 * 8 * 2 * 4096)
        for _ in range(tokens // 4096):
            f.write(block)


async def upload(browser, url: str, path: Path, timeout_s: float) -> str:
    """One session: Explore with the model, the trace uploaded; the page's error or warning text, if any."""
    context = await browser.new_context(viewport={"width": 1400, "height": 1000})
    page = await context.new_page()
    page.set_default_timeout(timeout_s * 1000)
    try:
        await page.goto(f"{url}/explore?model={MODEL}")
        await settle(page, timeout_s)
        await page.get_by_text("upload a trace", exact=True).click()
        await settle(page, timeout_s)
        uploader = page.get_by_test_id("stMain").locator("input[type=file]").first  # not the sidebar's CPU run
        await uploader.set_input_files(str(path))
        await settle(page, timeout_s, start_s=30)  # a busy server starts the upload's rerun late
        alerts = page.locator("[data-testid='stAlert'], [data-testid='stException']")
        return " | ".join([t.strip() for t in await alerts.all_inner_texts()][:2])
    except Exception as err:  # noqa: BLE001 - reported, the run goes on
        return f"failed: {type(err).__name__}"
    finally:
        await context.close()


async def run(url: str, pid: int, args, folder: Path, chromium: str) -> None:
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-dev-shm-usage"])
        print(f"server RSS at start: {rss_mib(pid):.0f} MiB", flush=True)
        for i in range(args.uploads):
            path = folder / f"trace{i}.npz"
            trace_npz(path, args.tokens, seed=i)
            start = time.monotonic()
            said = await upload(browser, url, path, args.timeout)
            print(
                f"upload {i + 1:>2} ({path.stat().st_size / 2**20:.1f} MiB): {time.monotonic() - start:5.1f} s, "
                f"server RSS {rss_mib(pid):6.0f} MiB{f', page said: {said[:160]!r}' if said else ''}",
                flush=True,
            )
        for _ in range(AFTER_CLOSE_S // 10):
            await asyncio.sleep(10)
        print(f"server RSS {AFTER_CLOSE_S} s after the last tab closed: {rss_mib(pid):.0f} MiB", flush=True)
        bomb = folder / "bomb.npz"
        bomb_npz(bomb, args.bomb_tokens)
        peak, done = [rss_mib(pid)], []

        async def sample() -> None:
            while not done:
                peak.append(rss_mib(pid))
                await asyncio.sleep(0.25)

        sampler = asyncio.create_task(sample())
        said = await asyncio.gather(*(upload(browser, url, bomb, args.timeout) for _ in range(3)))
        done.append(True)
        await sampler
        inflated = args.bomb_tokens * 48 * 8 * 2 / 2**20
        print(
            f"three concurrent uploads of one {bomb.stat().st_size / 2**20:.1f} MiB bomb ({inflated:,.0f} MiB "
            f"inside): server RSS before {peak[0]:.0f}, peak {max(peak):.0f} MiB"
        )
        for i, text in enumerate(said):
            print(f"  session {i + 1}: {text!r}")
        print(f"  the same message in all three: {len(set(said)) == 1}")
        await browser.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uploads", type=int, default=20, choices=range(1, 51), metavar="1..50")
    parser.add_argument("--tokens", type=int, default=150_000, help="tokens per uploaded trace, at most 300k")
    parser.add_argument(
        "--bomb-tokens", type=int, default=4096 * 500, help="rows of the bomb's experts array (1.5 GiB inside)"
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="the longest one page may take")
    args = parser.parse_args()
    args.tokens = min(args.tokens, 300_000)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("no Chromium: apt-get install chromium")
    port = free_port()
    proc, _ = start_server(port)
    try:
        with tempfile.TemporaryDirectory() as folder:
            asyncio.run(run(f"http://{HOST}:{port}", proc.pid, args, Path(folder), chromium))
    finally:
        proc.terminate()
        with contextlib.suppress(Exception):
            proc.wait(timeout=15)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
