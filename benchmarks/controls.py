"""How fast a control change on Explore answers, in a browser (issue 38: "a control change answers within 1 s").

    python -m benchmarks.controls                 # 5 repetitions, each in a fresh server (needs Chromium)
    python -m benchmarks.controls --reps 2 --only budget,np   # those changes alone (the others not made)

Each repetition starts its own `streamlit run app.py` on 127.0.0.1 (empty app caches; this install's numba cache and
kept routing draws as they are: moe_model.stored, so only a first run after an install draws the prompts' routing),
opens Explore on the sample data (Qwen3-30B-A3B on the Tesla T4) in Chromium at 1400x900 as tests/browser does, and
makes each change once, in this order, each a computation the server has not made before in that process: the budget
typed in the number box, one "describe your host" part (the CPU model), the GPU, -np 1 -> 4 (then back to 1, not timed),
"simulate prompts too", "compare policies", then Qwen3-235B-A22B (not timed) and its GPU; then -np 1 -> 3 and the Learn
page clicked 1.5 s later, that curve replaying (server CPU seconds in the 8 s after: the curve stopped or not, and when
Learn was drawn); the same, each in a new session on Qwen3-235B-A22B (seconds of replays), for Explore's best setting
(`leave_best`: Explore on the RTX 4090 settled, "best setting" switched on, Learn clicked 1.5 s later) and for Shopping
(`leave_shopping`: Shopping opened on the RTX 4080 with 64 GiB, issue 38's question; Learn clicked 1.5 s after its
progress shows, during the cards' shared replays). Per change, from the input event that commits it as the page receives
it (the option's click, Enter in a box, the toggle's click, the last of the arrow presses; what leads up to it is made
first: the list opened and filtered, the number typed, the earlier presses, whose runs are still going when the last one
lands; before issue 38's third stop (2026-12-06) the watch started before the lead-up and Playwright's checks before
each input, which added 0.3-0.6 s to the GPU's and -np's figures: docs/benchmarks-history.md has those): **answer** =
the headline's text changed (-np: to the one at 4 streams; "compare policies": its table of each policy at the chosen
budget drawn, before the curves; "simulate prompts too", which leaves the headline as it was to its digits: the caption
under it saying what the prompts moved, drawn once both are replayed) and **settled** = Streamlit's running indicator
gone (no status widget, skeleton, spinner or stale element for 0.3 s; a change with its own answer settles only after
it). Prints p50/p95 per change with the 1-minute load average seen during it, and (--write FILE) a markdown table. A
benchmark, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
VIEWPORT = {"width": 1400, "height": 900}
WAIT_MS = 600_000
RUNNING = '[data-testid="stStatusWidget"], [data-testid="stSkeleton"], [data-testid="stSpinner"], [data-stale="true"]'
HEADLINE = r"^At [\d,]+ MiB"
POLICY_TABLE = (  # the comparison's first answer: each policy at the chosen budget, drawn before the curves
    "[...document.querySelectorAll('[data-testid=\"stMarkdownContainer\"] table')]"
    ".some(e => /hit rate at [\\d,]+ MiB/.test(e.innerText))"
)
PROMPTS_EFFECT = (  # what simulating the prompts changed at the chosen budget, drawn under the headline
    "[...document.querySelectorAll('[data-testid=\"stCaptionContainer\"]')]"
    ".some(e => /^Simulating the first [\\d,]+ prompt tokens/.test(e.innerText))"
)
NP4 = (  # the headline at -np 4, not an intermediate value the three key presses passed
    "[...document.querySelectorAll('[data-testid=\"stMarkdownContainer\"]')]"
    ".some(e => /^At [\\d,]+ MiB/.test(e.innerText) && e.innerText.includes('over 4 streams'))"
)
QWEN235 = "Qwen3-235B-A22B-Q4_K_M-00001-of-00003.gguf"
LEAVES = ("leave", "leave_best", "leave_shopping")  # measured as server CPU seconds, not as answer times
CHANGES = ("budget", "host_cpu", "gpu", "np", "sim_prompts", "compare", "gpu_235b", *LEAVES)
LEAVE_S = 8  # how long the server's CPU is read after the session left a page mid-computation
LABELS = {
    "budget": "cache budget typed (10,000 -> 7,777 MiB)",
    "host_cpu": 'one host part ("CPU model": Ryzen 7 7700X)',
    "gpu": "GPU (Tesla T4 -> RTX 3090)",
    "np": "-np 1 -> 4",
    "sim_prompts": '"simulate prompts too" on',
    "compare": '"compare policies" on (every policy offered: 7 at the default build)',
    "gpu_235b": "GPU on a Qwen3-235B-A22B Explore (RTX 3090 -> RTX 4090)",
    "leave": f"server CPU s in the {LEAVE_S} s after leaving Explore mid-curve (-np 1 -> 3, then Learn)",
    "leave_best": f"server CPU s in the {LEAVE_S} s after leaving Explore's best setting mid-ranking (235B, 4090)",
    "leave_shopping": f"server CPU s in the {LEAVE_S} s after leaving Shopping mid-computation (235B, 4080, 64 GiB)",
}
LEARN_HEADER = "How the MoE cache works"
# In the page: note when the run shows (busy), when the headline changed (or the JS expression `done` holds), and
# when the page has been idle for 300 ms after either. Polled every 20 ms; ms from the first input event after the
# watch is set (the commit's click or key press as the page receives it: Playwright's checks before it are not the
# app's time), or from the watch's start where none comes.
WATCH = """([running, headline, done, before]) => {
  const t0 = performance.now();
  const w = {busy: null, changed: null, settled: null, idleAt: null, input: null};
  const onInput = (e) => { if (w.input === null) { w.input = e.timeStamp - t0; } };
  for (const kind of ['pointerdown', 'keydown']) document.addEventListener(kind, onInput, {capture: true, once: true});
  const head = () => {
    const el = [...document.querySelectorAll('[data-testid="stMarkdownContainer"]')]
      .find(e => new RegExp(headline).test(e.innerText));
    return el ? el.innerText : '';
  };
  window.__watch = w;
  const id = setInterval(() => {
    const now = performance.now() - t0 - (w.input || 0), run = document.querySelectorAll(running).length > 0;
    if (run && w.busy === null) w.busy = now;
    if (w.changed === null && (done ? eval(done) : head() && head() !== before))
      w.changed = now;
    if (run) { w.idleAt = null; return; }
    if ((w.busy === null || done) && w.changed === null) return;  // a `done` answer must be seen first
    if (w.idleAt === null) w.idleAt = now;
    if (now - w.idleAt >= 300) { w.settled = w.idleAt; clearInterval(id); }
  }, 20);
}"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def start_server(port: int, log) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port)]
    cmd += ["--server.headless", "true", "--server.address", HOST]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://{HOST}:{port}/_stcore/health", timeout=2) as answer:
                if answer.read() == b"ok":
                    return proc
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit("streamlit did not become healthy in 120 s")


def idle(page) -> None:
    page.wait_for_timeout(300)
    page.wait_for_function(f"() => document.querySelectorAll('{RUNNING}').length === 0", timeout=WAIT_MS)


def headline(page) -> str:
    found = page.locator("[data-testid='stMarkdownContainer']").filter(has_text=re.compile(HEADLINE))
    found.first.wait_for(timeout=WAIT_MS)
    return found.first.inner_text()


@dataclass(frozen=True)
class Change:
    """A control change as a user makes it: what leads up to it (a list opened and its filter typed, a number
    typed, the first of several key presses) and the event that commits it, from which its answer is timed."""

    commit: Callable[[], None]
    prepare: Callable[[], None] = lambda: None

    def __call__(self) -> None:
        self.prepare()
        self.commit()


def timed(page, change: Change, done: str = "") -> tuple[float, float, float]:
    """(answer s, settled s, load average) of one change: its lead-up made, the watch started, then it committed."""
    before = headline(page)
    change.prepare()
    page.evaluate(WATCH, [RUNNING, HEADLINE, done, before])
    change.commit()
    page.wait_for_function("() => window.__watch.settled !== null", timeout=WAIT_MS, polling=100)
    w = page.evaluate("() => window.__watch")
    answer = w["changed"] if w["changed"] is not None else w["settled"]
    return answer / 1000, w["settled"] / 1000, os.getloadavg()[0]


def sidebar_select(page, label: str, option: str) -> Change:
    """A sidebar list opened and filtered by typing (nothing reaches the server), committed by the option's click."""

    def prepare():
        page.get_by_test_id("stSidebar").get_by_role("combobox", name=label, exact=True).click()
        page.keyboard.type(option)
        page.get_by_role("option", name=option, exact=True).wait_for()

    return Change(page.get_by_role("option", name=option, exact=True).click, prepare)


def fill(box, value: str) -> Change:
    """A number or text typed into a box, committed by Enter."""
    return Change(lambda: box.press("Enter"), lambda: box.fill(value))


def keys(side, label: str, key: str, times: int) -> Change:
    """A sidebar slider moved `times` steps by its arrow keys pressed in a row, committed by the last (each press
    sends its value: the earlier ones start runs the last one overtakes, as a user's do)."""
    thumb = side.get_by_test_id("stSlider").filter(has_text=label).get_by_role("slider")

    def prepare():
        thumb.focus()
        for _ in range(times - 1):
            thumb.press(key)

    return Change(lambda: thumb.press(key), prepare)


def toggle(page, label: str) -> Change:
    return Change(page.get_by_test_id("stCheckbox").filter(has_text=label).locator("label").first.click)


def cpu_s(pid: int) -> float:
    """User and system CPU seconds of a process so far, its ended threads included (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def to_learn(page, pid: int) -> tuple[float, float, float]:
    """Learn clicked now: (the server's CPU seconds in the LEAVE_S s after, the seconds until Learn's header was
    drawn (LEAVE_S: not within them), the load)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    start, clicked = cpu_s(pid), time.perf_counter()
    page.get_by_test_id("stSidebar").get_by_test_id("stSidebarNav").get_by_text("Learn", exact=True).click()
    try:
        page.get_by_role("heading", name=LEARN_HEADER).wait_for(timeout=LEAVE_S * 1000)
        drawn = time.perf_counter() - clicked
    except PlaywrightTimeout:
        drawn = float(LEAVE_S)
    page.wait_for_timeout(max(0.0, LEAVE_S - (time.perf_counter() - clicked)) * 1000)
    return cpu_s(pid) - start, drawn, os.getloadavg()[0]


def left_mid_curve(page, pid: int) -> tuple[float, float, float]:
    """A new curve started (-np 1 -> 3), Learn clicked 1.5 s later (before and since issue 38 the curve is still
    replaying then): the server's CPU seconds in the LEAVE_S s after (a curve stopped leaves Learn's own run)."""
    keys(page.get_by_test_id("stSidebar"), "concurrent streams (-np)", "ArrowRight", 2)()
    page.wait_for_timeout(1500)
    return to_learn(page, pid)


def left_mid_best(browser, url: str, pid: int) -> tuple[float, float, float]:
    """A new session opens Explore on Qwen3-235B-A22B and the RTX 4090 and waits for its curve; then "best setting"
    on and Learn clicked 1.5 s later while the recommender ranks (seconds of replays)."""
    page = browser.new_page(viewport=VIEWPORT)
    page.set_default_timeout(WAIT_MS)
    try:
        page.goto(f"{url}/explore?{urlencode({'model': QWEN235, 'gpu': 'RTX 4090'})}")
        page.locator(".js-plotly-plot").first.wait_for(timeout=WAIT_MS)
        idle(page)
        toggle(page, "best setting for this machine")()
        page.wait_for_timeout(1500)
        return to_learn(page, pid)
    finally:
        page.close()


def left_mid_shopping(browser, url: str, pid: int) -> tuple[float, float, float]:
    """A new session opens Shopping on issue 38's question (Qwen3-235B-A22B, an RTX 4080 with 64 GiB, six cards:
    their shared replays, then each card ranked), Learn clicked 1.5 s after its progress bar shows."""
    page = browser.new_page(viewport=VIEWPORT)
    page.set_default_timeout(WAIT_MS)
    try:
        page.goto(f"{url}/shopping?{urlencode({'model': QWEN235, 'gpu': 'RTX 4080 16GB', 'ram': '64'})}")
        page.get_by_test_id("stProgress").first.wait_for(timeout=WAIT_MS)
        page.wait_for_timeout(1500)
        return to_learn(page, pid)
    finally:
        page.close()


def own_sessions(browser, url: str, pid: int, only: set[str], out: dict[str, list]) -> None:
    """The leaves measured in sessions of their own (Explore's best setting, Shopping), as asked."""
    if "leave_best" in only:
        out["leave_best"].append(left_mid_best(browser, url, pid))
    if "leave_shopping" in only:
        out["leave_shopping"].append(left_mid_shopping(browser, url, pid))


def one_repetition(browser, url: str, pid: int, only: set[str], out: dict[str, list]) -> None:
    if only <= {"leave_best", "leave_shopping"}:  # no step on the first session's Explore: not opened
        own_sessions(browser, url, pid, only, out)
        return
    page = browser.new_page(viewport=VIEWPORT)
    page.set_default_timeout(WAIT_MS)
    page.goto(f"{url}/explore")
    page.locator(".js-plotly-plot").first.wait_for(timeout=WAIT_MS)
    idle(page)
    side = page.get_by_test_id("stSidebar")
    steps = [
        ("budget", fill(page.get_by_label("exact --moe-cache-mib (MiB)"), "7777"), ""),
        ("host_cpu", fill(side.get_by_label("CPU model (e.g. Ryzen 7 7700X)"), "Ryzen 7 7700X"), ""),
        ("gpu", sidebar_select(page, "GPU", "RTX 3090"), ""),
        ("np", keys(side, "concurrent streams (-np)", "ArrowRight", 3), NP4),
        ("sim_prompts", toggle(page, "simulate prompts too"), ""),
        ("compare", toggle(page, "compare them"), ""),
    ]
    for name, action, done in (step for step in steps if step[0] in only):  # --only: the others are not made
        if name == "host_cpu":
            side.get_by_text("describe your host (narrows the range)").click()
        if name == "sim_prompts" and "np" in only:  # back to -np 1, not timed: the toggle is measured at the default
            keys(side, "concurrent streams (-np)", "ArrowLeft", 3)()
            idle(page)
        if name == "compare":  # its answer: the table of each policy at the chosen budget, before the curves
            done = POLICY_TABLE
        if name == "sim_prompts":  # its answer: what simulating them changed, under the headline
            done = PROMPTS_EFFECT
        out[name].append(timed(page, action, done))
        print(f"  {name}: answer {out[name][-1][0]:.2f} s, settled {out[name][-1][1]:.2f} s", flush=True)
    if "gpu_235b" in only:
        sidebar_select(page, "Model", QWEN235)()
        page.get_by_text(re.compile(HEADLINE)).first.wait_for(timeout=WAIT_MS)
        idle(page)
        out["gpu_235b"].append(timed(page, sidebar_select(page, "GPU", "RTX 4090")))
    if "leave" in only:
        out["leave"].append(left_mid_curve(page, pid))
    page.close()
    own_sessions(browser, url, pid, only, out)


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def table(out: dict[str, list], started: str, loads: tuple[float, float]) -> str:
    rows = [
        f"Explore, Qwen3-30B-A3B on the Tesla T4 unless named; {len(next(iter(out.values()), []))} repetitions, "
        f"each in a fresh server; {started}; 1-minute load average {loads[0]:.1f} at the start, "
        f"{loads[1]:.1f} at the end.",
        "",
        "| change | answer p50 / p95 (s) | settled p50 / p95 (s) | load during (min-max) |",
        "|---|---|---|---|",
    ]
    for name, runs in out.items():
        if not runs or name in LEAVES:
            continue
        answers, settled, load = zip(*runs, strict=True)
        rows.append(
            f"| {LABELS[name]} | {statistics.median(answers):.2f} / {quantile(answers, 0.95):.2f} | "
            f"{statistics.median(settled):.2f} / {quantile(settled, 0.95):.2f} | {min(load):.1f}-{max(load):.1f} |"
        )
    for name in (n for n in LEAVES if out.get(n)):
        used, drawn, load = zip(*out[name], strict=True)
        rows.append(
            f"\n{LABELS[name]}: p50 {statistics.median(used):.2f}, max {max(used):.2f}; Learn drawn after p50 "
            f"{statistics.median(drawn):.2f} s, max {max(drawn):.2f} (load {min(load):.1f}-{max(load):.1f})."
        )
    return "\n".join(rows) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="repetitions, each in a fresh server (default 5)")
    parser.add_argument("--only", default=",".join(CHANGES), help=f"a subset of {','.join(CHANGES)}")
    parser.add_argument("--write", type=Path, help="also write the table to this file")
    args = parser.parse_args()
    only = set(args.only.split(","))
    if unknown := only - set(CHANGES):
        raise SystemExit(f"unknown change(s): {', '.join(sorted(unknown))}")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("no Chromium: apt-get install chromium")
    from playwright.sync_api import sync_playwright

    out: dict[str, list] = {name: [] for name in CHANGES if name in only}
    started, load0 = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), os.getloadavg()[0]
    log_path = ROOT / "artifacts" / "benchmark-controls-server.log"
    log_path.parent.mkdir(exist_ok=True)
    with sync_playwright() as p, log_path.open("wb") as log:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-dev-shm-usage"])
        for rep in range(args.reps):
            port = free_port()
            proc = start_server(port, log)
            try:
                one_repetition(browser, f"http://{HOST}:{port}", proc.pid, only, out)
            finally:
                os.killpg(proc.pid, 15)
                proc.wait(timeout=30)
            print(f"repetition {rep + 1}: " + ", ".join(f"{k} {v[-1][0]:.2f}/{v[-1][1]:.2f} s" for k, v in out.items()))
        browser.close()
    text = table(out, started, (load0, os.getloadavg()[0]))
    print(text)
    if args.write:
        args.write.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
