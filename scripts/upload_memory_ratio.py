"""Issue 39's memory figure in one run: a fresh server's RSS after one Explore visit, then another fresh server's
after N trace uploads from successive sessions, each read once every session has closed (protocol client).

    python scripts/upload_memory_ratio.py                  # 5 uploads of 50k-token GPT-OSS-20B traces
    python scripts/upload_memory_ratio.py --uploads 8 --after-close 150

Each upload session opens Explore with GPT-OSS-20B, picks "upload a trace" and uploads its own random token trace
(upload_memory.trace_npz) through the page's uploader, then closes. RSS is read every 10 s for --after-close
seconds (the idle release drops what the closed sessions held 30 s after the last one left). The target: the
uploads' server within 1.5x of the one-visit server. Both servers run in one sitting, so the ratio is at one
load. Not part of the test run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load_mixed import start_server  # noqa: E402 - the sibling load scripts
from load_protocol import Session  # noqa: E402
from load_test import HOST, free_port, rss_mib  # noqa: E402
from upload_memory import MODEL, trace_npz  # noqa: E402


async def visit(url: str, trace: Path | None, timeout_s: float) -> list[str]:
    """One session: Explore with the model, a trace uploaded if given; the errors it was shown."""
    session = Session(url, timeout_s)
    session.query_string = f"model={MODEL}"
    try:
        await session.open("explore")
        if trace is not None:
            await session.select(session.widget("radio", "workload"), "upload a trace")
            uploader = next(w for w in session.widgets.values() if w.kind == "file_uploader" and not w.in_sidebar)
            await session.upload(uploader, trace)
        return session.take_errors()
    finally:
        await session.close()


async def after_close(pid: int, seconds: float) -> list[float]:
    samples = []
    for _ in range(int(seconds // 10) + 1):
        samples.append(rss_mib(pid))
        await asyncio.sleep(10)
    return samples


async def server_rss(traces: list[Path] | None, args) -> float:
    """A fresh server's RSS --after-close seconds after its sessions closed: one plain visit, or one per trace."""
    proc, _ = start_server(port := free_port())
    url = f"http://{HOST}:{port}"
    try:
        for trace in traces or [None]:
            start = time.monotonic()
            errors = await visit(url, trace, args.timeout)
            said = f", errors {errors}" if errors else ""
            name = trace.name if trace else "visit"
            print(f"  {name}: {time.monotonic() - start:.1f} s, RSS {rss_mib(proc.pid):.0f} MiB{said}", flush=True)
        samples = await after_close(proc.pid, args.after_close)
        print("  RSS after every session closed (every 10 s):", " ".join(f"{m:.0f}" for m in samples), flush=True)
        return samples[-1]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uploads", type=int, default=5, choices=range(1, 21), metavar="1..20")
    parser.add_argument("--tokens", type=int, default=50_000, help="tokens per uploaded trace, at most 150k")
    parser.add_argument("--after-close", type=float, default=150.0, help="seconds to watch RSS once all closed")
    parser.add_argument("--timeout", type=float, default=600.0, help="the longest one page may take")
    args = parser.parse_args()
    print(f"load average at the start: {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as folder:
        traces = [Path(folder) / f"trace{i}.npz" for i in range(args.uploads)]
        for i, path in enumerate(traces):
            trace_npz(path, min(args.tokens, 150_000), seed=i)
        print("a fresh server, one Explore visit:")
        one = asyncio.run(server_rss(None, args))
        print(f"a fresh server, {args.uploads} trace uploads:")
        uploads = asyncio.run(server_rss(traces, args))
    print(f"after every session closed: {uploads:.0f} MiB against {one:.0f} MiB, {uploads / one:.2f}x (target 1.5x); "
          f"load average at the end: {os.getloadavg()}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
