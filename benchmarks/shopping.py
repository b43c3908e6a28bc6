"""Shopping's first view and a sidebar GPU switch, issue 32's 235B question (4080 or 4090 at 64 and 128 GiB), and
`recommend` warm and on a fresh install (README "Benchmarks").

    python -m benchmarks.shopping             # the app's page through Streamlit's AppTest, then the CLI
    python -m benchmarks.shopping --fresh     # also `recommend` with an empty numba cache (compiles: ~1 min)

Each measurement runs in a new process (empty app caches) with this install's numba cache as it is (the
first line says whether it is compiled). Prints seconds per step, the first view's CPU seconds, and the machine's
load average, since the same step takes several times longer on a busy machine. A benchmark, not a test: nothing
is asserted.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "sample_data" / "models" / "Qwen3-30B-A3B-Q4_K_M.gguf"
SWITCH_TO = "RTX 3090"  # a card outside Shopping's defaults: the switch adds new work, not only cached rows
PAGE_STEPS = """
import time
from streamlit.testing.v1 import AppTest
at = AppTest.from_file("app.py", default_timeout=600)
at.switch_page("pages/shopping.py")
start, cpu = time.perf_counter(), time.process_time(); at.run(); first = time.perf_counter() - start
cpu = time.process_time() - cpu
assert not at.exception, at.exception
rows = len(at.dataframe[0].value)
start = time.perf_counter(); at.selectbox(key="gpu").set_value({switch!r}).run(); switch = time.perf_counter() - start
assert not at.exception, at.exception
cards = list(at.dataframe[0].value["GPU"])
start = time.perf_counter(); at.selectbox(key="gpu").set_value("Tesla T4").run(); back = time.perf_counter() - start
print(f"shopping first view ({{rows}} cards): {{first:.1f}} s ({{cpu:.1f}} s of CPU, every thread of the process)")
print(f"sidebar GPU switch to {switch!r} (cards now {{len(cards)}}): {{switch:.1f}} s")
print(f"and back to Tesla T4: {{back:.1f}} s")
"""

# issue 32's question: Qwen3-235B-A22B on the 4080 or the 4090, in a 64 GiB host (nothing fits) then 128 GiB
QUESTION_STEPS = """
import time
from streamlit.testing.v1 import AppTest
at = AppTest.from_file("app.py", default_timeout=600)
query = {{"model": {model!r}, "gpu": "RTX 4090", "ram": "64", "cards": "RTX 4080 16GB;RTX 4090"}}
for key, value in query.items():
    at.query_params[key] = value
at.switch_page("pages/shopping.py")
start = time.perf_counter(); at.run(); first = time.perf_counter() - start
assert not at.exception, at.exception
lead = lambda: next(e.value for e in at.main if e.type in ("warning", "info"))  # slow or unusable: a warning
verdict = lead()
start = time.perf_counter(); at.sidebar.number_input(key="hw_ram_RTX 4090").set_value(128.0).run()
more = time.perf_counter() - start
print(f"shopping first view, Qwen3-235B on the 4080 and 4090 at 64 GiB: {{first:.1f}} s ({{verdict}})")
print(f"the same at 128 GiB: {{more:.1f}} s ({{lead()}})")
"""
QUESTION_MODEL = "Qwen3-235B-A22B-Q4_K_M-00001-of-00003.gguf"


def load() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def timed(command: list[str], env: dict | None = None) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode not in (0, 1):  # recommend exits 1 when nothing fits: still an answer
        raise SystemExit(f"{' '.join(command)} failed: {done.stderr.strip()[-500:]}")
    return time.perf_counter() - start, done.stdout + done.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fresh", action="store_true", help="also time recommend with an empty numba cache")
    args = parser.parse_args()
    from moe_model.warmup import is_compiled

    print(f"numba cache compiled for this install: {is_compiled()}; {load()}")
    seconds, out = timed([sys.executable, "-c", PAGE_STEPS.format(switch=SWITCH_TO)])
    print(out.strip())
    print(f"(the page process took {seconds:.1f} s with its imports; {load()})")
    seconds, out = timed([sys.executable, "-c", QUESTION_STEPS.format(model=QUESTION_MODEL)])
    print(out.strip())
    print(f"(that page process took {seconds:.1f} s with its imports; {load()})")
    recommend = [sys.executable, "-m", "moe_model", "recommend", "--model", str(MODEL), "--hardware", "t4"]
    seconds, _ = timed(recommend)
    print(f"recommend, Qwen3-30B on a T4, warm numba cache: {seconds:.1f} s ({load()})")
    if args.fresh:
        with tempfile.TemporaryDirectory() as cache:
            seconds, out = timed(recommend, env={**os.environ, "NUMBA_CACHE_DIR": cache})
        said = [line for line in out.splitlines() if "compil" in line]
        print(f"recommend on a fresh install (empty numba cache): {seconds:.1f} s; it said: {said}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
