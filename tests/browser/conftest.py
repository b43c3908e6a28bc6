"""Each browser test file gets its own streamlit server (a fresh one: issue 22's starved sessions stay in the file
that made them), its own Chromium and its own timings file."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest
from conftest import ROOT

from .steps import ARTIFACTS

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
HEALTHY_S = 90  # how long a starting server may take to answer its health check
PORT_TRIES = 3  # another free port when the one picked was taken before streamlit bound it


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(proc: subprocess.Popen) -> None:
    """The server and whatever it started (its own process group): terminated, killed after 10 s."""
    for sig, wait_s in ((signal.SIGTERM, 10), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def healthy(url: str, proc: subprocess.Popen) -> bool:
    """Whether the server answers its health check before HEALTHY_S; False at once if it exited (port taken)."""
    deadline = time.time() + HEALTHY_S
    while time.time() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as answer:
                if answer.read() == b"ok":
                    return True
        except OSError:
            time.sleep(0.5)
    return False


@pytest.fixture(scope="module")
def timings(request) -> Iterator[dict[str, float]]:
    """Seconds measured by this file's tests, printed at the end and written to artifacts/timings-<file>.json."""
    measured: dict[str, float] = {}
    yield measured
    measured.pop("started_at", None)  # the server's start, a clock reading
    ARTIFACTS.mkdir(exist_ok=True)
    name = request.module.__name__.rsplit(".", 1)[-1]
    (ARTIFACTS / f"timings-{name}.json").write_text(json.dumps(measured))
    print(f"\nbrowser timings of {name} (s):", {k: round(v, 1) for k, v in measured.items()})


@pytest.fixture(scope="module")
def server(request, timings) -> Iterator[str]:
    name = request.module.__name__.rsplit(".", 1)[-1]
    ARTIFACTS.mkdir(exist_ok=True)
    with (ARTIFACTS / f"browser-server-{name}.log").open("wb") as log:
        for _ in range(PORT_TRIES):
            port = free_port()
            timings["started_at"] = time.time()
            proc = subprocess.Popen(
                [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port)]
                + ["--server.headless", "true", "--server.address", "127.0.0.1"],
                cwd=ROOT,
                stdout=log,  # a file, not a pipe: a full, unread pipe blocked the server and then its event loop
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, stopped whole at teardown
            )
            url = f"http://127.0.0.1:{port}"
            try:
                if healthy(url, proc):
                    yield url
                    return
            finally:
                stop(proc)
        pytest.fail(f"streamlit did not become healthy in {HEALTHY_S} s on {PORT_TRIES} free ports")


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI needs Chromium for the browser tests: apt-get install chromium")
        pytest.skip("no Chromium: install Debian's chromium (sudo apt-get install chromium) to run the browser tests")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-dev-shm-usage"])
        yield b
        b.close()
