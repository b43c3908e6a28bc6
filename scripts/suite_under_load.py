"""The whole test suite, several times in a row, while other processes keep every core busy: a suite that fails
only on a busy machine blocks every submission.

    python scripts/suite_under_load.py                     # 3 runs, one busy process per core
    python scripts/suite_under_load.py --runs 1 -- -m "not browser"

Each busy process spins on arithmetic and ends itself at the deadline (--max-minutes), so nothing outlives the
check. Prints each run's result (passed/failed/errors and the failing tests) and its time, then a summary;
exits 1 when any run failed. Not part of the test run.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def spin(until: float) -> None:
    """Keep one core busy until the monotonic deadline."""
    x = 0
    while time.monotonic() < until:
        for _ in range(100_000):
            x = (x * 1_103_515_245 + 12_345) & 0xFFFFFFFF


def one_run(pytest_args: list[str], timeout_s: float) -> tuple[bool, str, float, list[str]]:
    """One pytest run: whether it passed, its summary line, seconds, the failing tests."""
    start = time.monotonic()
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args]
    try:
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return False, f"timed out after {timeout_s:.0f} s", time.monotonic() - start, []
    out = done.stdout + done.stderr
    lines = [line.strip("= ") for line in done.stdout.splitlines() if line.strip()]
    summary = lines[-1] if lines else "no output"
    failed = [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith(("FAILED ", "ERROR "))]
    return done.returncode == 0, summary, time.monotonic() - start, failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, choices=range(1, 11), metavar="1..10")
    parser.add_argument("--busy", type=int, default=os.cpu_count() or 2, help="busy processes (default: one a core)")
    parser.add_argument("--max-minutes", type=float, default=180.0, help="the whole check's deadline")
    parser.add_argument("pytest_args", nargs="*", help="after --: arguments for pytest (default: the whole suite)")
    args = parser.parse_args()
    deadline = time.monotonic() + args.max_minutes * 60
    busy = [multiprocessing.Process(target=spin, args=(deadline,), daemon=True) for _ in range(min(args.busy, 64))]
    for p in busy:
        p.start()
    results = []
    try:
        for i in range(args.runs):
            left = deadline - time.monotonic()
            if left <= 0:
                print(f"run {i + 1}: not started, the {args.max_minutes:g} min deadline has passed")
                results.append(False)
                continue
            ok, summary, seconds, failed = one_run(args.pytest_args, left)
            load = " ".join(f"{x:.1f}" for x in os.getloadavg())
            print(f"run {i + 1}: {'PASS' if ok else 'FAIL'} {summary} in {seconds:.0f} s (load average {load})")
            for name in failed:
                print(f"    {name}")
            results.append(ok)
    finally:
        for p in busy:
            p.terminate()
            p.join(5)
    print(f"{sum(results)} of {args.runs} runs passed with {len(busy)} busy processes beside them")
    return 0 if all(results) and len(results) == args.runs else 1


if __name__ == "__main__":
    raise SystemExit(main())
