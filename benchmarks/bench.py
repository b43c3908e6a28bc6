"""Benchmarks (a script, not timed tests): the numbers in docs/benchmarks.md come from this.

    python -m benchmarks.bench                             (repository root; pip install -r requirements-bench.txt)
    python -m benchmarks.bench --write docs/benchmarks-latest.md  (also writes the table, with the date and the machine)

Every ratio is between timings of the same run (the machine is shared: absolute times move between runs).

1. A 64-budget hit-rate curve over a 20,000-token Qwen3-30B-A3B-shaped trace (48 layers x 8 of 128 experts,
   7.68 M lookups per budget) with the simulator, against libCacheSim's C LRU computing the same 64 pool
   sizes (one pool over both groups) and against one numpy pass over the same keys (np.bincount); the same
   with one budget, on one thread, and with 1,024 budgets.
2. Belady per pool size against libCacheSim's Belady on the same keys (4 sizes).
3. `simulate --policy all` on 4 budgets against plain `simulate` (each a fresh process: time and peak RSS).
4. The numba kernel against the same kernel run as plain Python (on a shorter trace).
5. Parsing a 6.6 MB GGUF header (152k-token vocabulary with merges) against gguf.GGUFReader; a 200 MB log.
6. The ClassLRU curve (b12170+) on the same 64 budgets and trace as 1, against the exact LRU's: every core numba
   has, and one core.
7. The same ClassLRU curve with its readings band (policies.class_lru_band.band_kernel) against the single reading's.
8. `recommend` for Qwen3-235B-A22B on one card (RTX 4090), fresh processes after one that fills the caches (wall and
   CPU seconds); with --baseline DIR, the same command in another checkout (e.g. a `git worktree` of main), the two
   alternated, so that the ratio is between runs at the same load.

    python -m benchmarks.bench --only class_lru,recommend --baseline ../main   (a subset; `--only` names below)

Each row carries the 1-minute load average when it was measured (`uptime`): this 2-core machine is shared.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from unittest import mock

import numpy as np

from moe_model.llama import lru_kernel
from moe_model.llama.batching import build_workload
from moe_model.llama.simulate import simulate_budgets
from moe_model.llama.slot_plan import full_budget_mib, min_budget_mib
from moe_model.policies import run_policy
from moe_model.readers.gguf import read_header
from moe_model.readers.gguf_writer import StringArray, header_bytes
from moe_model.readers.model_spec import load_model
from moe_model.routing.synthetic import Knobs, Shape, generate
from moe_model.workload import Batching

ROOT = Path(__file__).resolve().parent.parent
QWEN = ROOT / "sample_data" / "models" / "Qwen3-30B-A3B-Q4_K_M.gguf"
QWEN_235B = "sample_data/models/Qwen3-235B-A22B-Q4_K_M-00001-of-00003.gguf"  # relative: also a baseline's own copy
ROWS: list[tuple[str, str]] = []  # (what, result) of this run, in order


def report(what: str, result: str) -> None:
    result += f" (load {os.getloadavg()[0]:.1f})"
    ROWS.append((what, result))
    print(f"{what}: {result}", flush=True)


def timed(fn, repeat: int = 3) -> tuple[float, float, object]:
    """(wall seconds, CPU seconds of every thread, result) of the fastest of `repeat` runs."""
    best, best_cpu, out = float("inf"), 0.0, None
    for _ in range(repeat):
        start, cpu = time.perf_counter(), time.process_time()
        out = fn()
        wall = time.perf_counter() - start
        if wall < best:
            best, best_cpu = wall, time.process_time() - cpu
    return best, best_cpu, out


def access_stream(work) -> np.ndarray:
    """The (layer, expert) keys in access order: each record's distinct experts, first appearance first."""
    keys = []
    for r in range(work.n_records):
        ids = work.ids[work.rec_off[r] : work.rec_off[r] + work.k * work.rec_ntok[r]]
        keys.append(work.rec_layer[r] * work.n_expert + np.array(list(dict.fromkeys(ids.tolist())), dtype=np.int64))
    return np.concatenate(keys)


def oracle_trace(keys: np.ndarray, path: Path) -> None:
    """libCacheSim's oracleGeneral binary trace: (time, id, size, next access time or -1) per request."""
    n = len(keys)
    order = np.lexsort((np.arange(n), keys))
    following = np.full(n, -1, dtype=np.int64)
    same = keys[order[1:]] == keys[order[:-1]]
    following[order[:-1][same]] = order[1:][same]
    rec = np.zeros(n, dtype=[("t", "<u4"), ("id", "<u8"), ("size", "<u4"), ("next", "<i8")])
    rec["t"], rec["id"], rec["size"], rec["next"] = np.arange(n), keys + 1, 1, following
    path.write_bytes(rec.tobytes())


def libcachesim_run(path: Path, policy: str, sizes: list[int]) -> tuple[float, list[float]]:
    """Seconds to replay the trace once per size (reading it each time), and the hit rates."""
    import libcachesim as lcs

    start = time.perf_counter()
    hit = []
    for size in sizes:
        reader = lcs.TraceReader(str(path), lcs.TraceType.ORACLE_GENERAL_TRACE)
        miss_ratio, _ = getattr(lcs, policy)(size).process_trace(reader)
        hit.append(1 - miss_ratio)
    return time.perf_counter() - start, hit


def bench_curve() -> None:
    model = load_model(QWEN)
    trace = generate(Shape(48, 128, 8), Knobs(), 20_000, seed=0)
    work = build_workload(trace, Batching(warmup=False), 128)
    budgets = np.linspace(min_budget_mib(model), full_budget_mib(model), 64).astype(int).tolist()
    simulate_budgets(model, work, budgets[:2])  # compile
    ours, ours_cpu, results = timed(lambda: simulate_budgets(model, work, budgets))
    one, _, _ = timed(lambda: simulate_budgets(model, work, budgets[32:33]))
    with mock.patch("moe_model.threads.available_cores", lambda: 1):
        single, _, _ = timed(lambda: simulate_budgets(model, work, budgets))
    many = np.linspace(min_budget_mib(model), full_budget_mib(model), 1024).astype(int).tolist()
    wide, _, _ = timed(lambda: simulate_budgets(model, work, many), repeat=1)
    keys = access_stream(work)
    numpy_pass, numpy_cpu, _ = timed(lambda: np.bincount(keys, minlength=48 * 128), repeat=10)
    n_lookups = int(results[0].small.lookups)
    report(
        f"64-budget curve, 20,000-token Qwen3-30B-A3B-shaped trace ({n_lookups / 1e6:.2f} M lookups per budget)",
        f"**{ours:.2f} s** wall, {ours_cpu:.2f} s CPU (its two groups on two threads; on one: {single:.2f} s)",
    )
    report(
        "one numpy pass over the same keys (np.bincount)",
        f"{numpy_pass:.3f} s wall, {numpy_cpu:.3f} s CPU: the curve takes **{ours / numpy_pass:.1f}x** "
        f"(CPU {ours_cpu / numpy_cpu:.0f}x)",
    )
    report("1 budget / 1,024 budgets", f"{one:.2f} s / {wide:.2f} s")
    sizes = [sum(g.n_slots for g in r.plan.groups) for r in results]
    try:
        import libcachesim  # noqa: F401
    except ImportError:
        report("libCacheSim", "not installed: pip install -r requirements-bench.txt")
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.oracleGeneral"
        oracle_trace(keys, path)
        theirs, hit = libcachesim_run(path, "LRU", sizes)
        theirs_one, _ = libcachesim_run(path, "LRU", sizes[32:33])
        bel_budgets = budgets[8::16]
        ours_bel, _, _ = timed(lambda: run_policy("belady", model, work, bel_budgets), repeat=1)
        theirs_bel, _ = libcachesim_run(path, "Belady", [sizes[i] for i in range(8, 64, 16)])
    report(
        "libCacheSim's C LRU (GPL, benchmark only), the same 64 pool sizes",
        f"{theirs:.2f} s: the curve is **{theirs / ours:.1f}x** faster; one size: libCacheSim {theirs_one:.2f} s, "
        f"ours {one:.2f} s",
    )
    report(
        "  hit rate at the middle budget",
        f"ours {results[32].hit_rate:.4f} (2 groups, llama.cpp order), libCacheSim {hit[32]:.4f} (one pool)",
    )
    report(
        "Belady per pool size (4 sizes), ours (2 groups, bypass, records) vs libCacheSim's Belady",
        f"{ours_bel / 4:.2f} s vs {theirs_bel / 4:.2f} s per size (ours **{theirs_bel / ours_bel:.1f}x** faster)",
    )


def bench_policy_all() -> None:
    """`simulate --policy all` and plain `simulate`, 4 budgets, the default 20,000-token synthetic workload;
    each a fresh process under /usr/bin/time (wall seconds and peak RSS), after one run that fills the caches."""
    argv = [sys.executable, "-m", "moe_model", "simulate", "--model", str(QWEN), "--synthetic"]
    argv += ["--budgets-mib", "2000,6000,10000,14000"]
    runs = {}
    for name, extra in (("plain", []), ("all", ["--policy", "all"])):
        _command([*argv, *extra], ROOT)  # compile (or load the cache)
        seconds, kib = _command([*argv, *extra], ROOT, "%e %M").strip().splitlines()[-1].split()
        runs[name] = f"{float(seconds):.1f} s, peak RSS {int(kib) / 1024:.0f} MiB"
    report(
        "`simulate --synthetic` on 4 budgets, with `--policy all` / without (fresh processes, warm numba cache)",
        f"**{runs['all']}** / {runs['plain']}",
    )


def bench_kernel() -> None:
    model = load_model(QWEN)
    trace = generate(Shape(48, 128, 8), Knobs(), 400, seed=0)
    work = build_workload(trace, Batching(warmup=False), 128)
    budgets = [2000, 6000, 10000]
    simulate_budgets(model, work, budgets)
    jit, _, _ = timed(lambda: simulate_budgets(model, work, budgets))
    names = ["_feed", "_compact", "_resolve", "_cached_in", "_prefix", "_add", "_count", "_first_above", "_bit"]
    compiled = {n: getattr(lru_kernel, n) for n in names}
    try:
        for n in names:  # lru_kernel.feed looks _feed up at call time: the plain Python kernel runs
            setattr(lru_kernel, n, compiled[n].py_func)
        plain, _, _ = timed(lambda: simulate_budgets(model, work, budgets), repeat=1)
    finally:
        for n in names:
            setattr(lru_kernel, n, compiled[n])
    report(
        "the LRU pass compiled with numba vs the same code as plain Python (400 tokens x 3 budgets)",
        f"{jit * 1000:.1f} ms vs {plain * 1000:,.0f} ms ({plain / jit:.0f}x)",
    )


def bench_header() -> None:
    meta = {
        "general.architecture": "qwen3moe",
        "tokenizer.ggml.tokens": StringArray([f"tok{i}" for i in range(151_936)]),
        "tokenizer.ggml.merges": StringArray([f"merge{i} pair{i}" for i in range(151_387)]),
    }
    data = header_bytes(meta, [("blk.0.ffn_down_exps.weight", 12, [256, 256, 8])])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "h.gguf"
        path.write_bytes(data + b"\0" * (1 << 20))  # GGUFReader maps the tensor data too
        ours, _, _ = timed(lambda: read_header(path))
        import gguf

        theirs, _, _ = timed(lambda: gguf.GGUFReader(path), repeat=1)
    report(f"GGUF header of {len(data) / 1e6:.1f} MB", f"{ours * 1000:.0f} ms, gguf.GGUFReader {theirs * 1000:,.0f} ms")


def bench_log() -> None:
    """A 200 MB llama-server log: real lines of a ground-truth run, then repeated slot chatter."""
    import tracemalloc

    from moe_model.readers.logs import parse_log

    head = (ROOT / "sample_data" / "groundtruth" / "logs" / "server_np4_b25.log").read_bytes()
    filler = b"0.10.000.000 I slot update_slots: id  0 | task 1 | kv cache rm [0, end) and some more padding\n" * 10_000
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.log"
        with path.open("wb") as f:
            f.write(head)
            while f.tell() < 200 * 10**6:
                f.write(filler)
        size = path.stat().st_size
        start = time.perf_counter()
        (run,) = parse_log(path)
        elapsed = time.perf_counter() - start
        tracemalloc.start()  # a second pass for memory: tracing slows Python down
        parse_log(path)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert run.small is not None
    report(
        f"log of {size / 1e6:.0f} MB (streamed)",
        f"{elapsed:.1f} s ({size / 1e6 / elapsed:.0f} MB/s), peak traced memory {peak / 2**20:.2f} MiB",
    )


def alternated(fns: dict, repeat: int = 3) -> dict[str, tuple[float, float]]:
    """(wall, CPU seconds of every thread) of the fastest of `repeat` runs of each, the runs alternated so that
    every one sees the same load."""
    best: dict[str, tuple[float, float]] = {}
    for _ in range(repeat):
        for name, fn in fns.items():
            wall, cpu, _ = timed(fn, repeat=1)
            if name not in best or wall < best[name][0]:
                best[name] = (wall, cpu)
    return best


def bench_class_lru() -> None:
    import numba

    from moe_model.policies import class_lru

    model = load_model(QWEN)
    trace = generate(Shape(48, 128, 8), Knobs(), 20_000, seed=0)
    work = build_workload(trace, Batching(warmup=False), 128)
    budgets = np.linspace(min_budget_mib(model), full_budget_mib(model), 64).astype(int).tolist()
    kernel = class_lru.kernel()
    simulate_budgets(model, work, budgets[:2], kernel=kernel)  # compile
    best = alternated(
        {
            "lru": lambda: simulate_budgets(model, work, budgets),
            "ours": lambda: simulate_budgets(model, work, budgets, kernel=kernel),
        }
    )
    (lru, lru_cpu), (ours, ours_cpu) = best["lru"], best["ours"]
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:  # one core: the pool sizes in turn, and the groups' passes too (one lane)
        with mock.patch("moe_model.threads.available_cores", lambda: 1):
            one, one_cpu, _ = timed(lambda: simulate_budgets(model, work, budgets, kernel=kernel))
    finally:
        numba.set_num_threads(threads)
    report(
        "ClassLRU curve (b12170+), 64 budgets",
        f"{ours:.2f} s on {threads} threads, {ours_cpu:.2f} s CPU ({ours / lru:.1f}x the exact LRU's {lru:.2f} s, "
        f"{ours_cpu / lru_cpu:.1f}x its {lru_cpu:.2f} s CPU; alternated, best of 3), {one:.2f} s on one "
        f"({one / lru:.1f}x), {one_cpu:.2f} s CPU",
    )


def bench_class_lru_band() -> None:
    from moe_model.policies import class_lru, class_lru_band

    model = load_model(QWEN)
    trace = generate(Shape(48, 128, 8), Knobs(), 20_000, seed=0)
    work = build_workload(trace, Batching(warmup=False), 128)
    budgets = np.linspace(min_budget_mib(model), full_budget_mib(model), 64).astype(int).tolist()
    single, band = class_lru.kernel(), class_lru_band.band_kernel()
    simulate_budgets(model, work, budgets[:2], kernel=band)  # compile
    alone, _, _ = timed(lambda: simulate_budgets(model, work, budgets, kernel=single))
    with_band, _, _ = timed(lambda: simulate_budgets(model, work, budgets, kernel=band))
    report(
        "ClassLRU curve with its readings band (b12170+), 64 budgets",
        f"{with_band:.2f} s, {with_band / alone:.2f}x the single-reading curve's {alone:.2f} s "
        f"({len(class_lru.BAND_READINGS)} other readings at {len(class_lru_band.band_sample(64))} "
        "of the 64 pool sizes)",
    )


# a command's fresh processes import this package as an install has it, its bytecode cached (a sandbox may set
# PYTHONDONTWRITEBYTECODE, which would compile every module again in every run)
INSTALLED = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}


def _command(argv: list[str], cwd: Path, timed: str | None = None) -> str:
    """A fresh process of argv (under /usr/bin/time -f `timed` where given): its stderr."""
    prefix = ["/usr/bin/time", "-f", timed] if timed else []
    done = subprocess.run([*prefix, *argv], check=True, capture_output=True, text=True, cwd=cwd, env=INSTALLED)
    return done.stderr


def _timed_process(argv: list[str], cwd: Path) -> tuple[float, float]:
    """(wall, user + system CPU seconds) of one fresh process under /usr/bin/time."""
    wall, user, system = (float(x) for x in _command(argv, cwd, "%e %U %S").strip().splitlines()[-1].split())
    return wall, user + system


def bench_recommend(baseline: Path | None = None, repeat: int = 3) -> None:
    """`recommend` for Qwen3-235B-A22B on an RTX 4090 (fresh processes, warm numba cache), best of `repeat` and the
    median; with a baseline checkout, its runs alternate with ours (the ratio is of the best runs)."""
    argv = [sys.executable, "-m", "moe_model", "recommend", "--model", QWEN_235B, "--hardware", "RTX 4090"]
    trees = {"this checkout": ROOT} | ({"baseline": baseline.resolve()} if baseline else {})
    for tree in trees.values():
        _command(argv, tree)  # compile (or load the numba cache) and cache the bytecode
    load_before = os.getloadavg()[0]
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
    for _ in range(repeat):
        for name, tree in trees.items():
            runs[name].append(_timed_process(argv, tree))
    best = {name: min(r) for name, r in runs.items()}
    median = {name: sorted(r)[len(r) // 2] for name, r in runs.items()}
    wall, cpu = best["this checkout"]
    result = (
        f"**{wall:.1f} s** wall, {cpu:.1f} s CPU (best of {repeat}; median {median['this checkout'][0]:.1f} s, "
        f"{median['this checkout'][1]:.1f} s CPU; load {load_before:.1f} at the start)"
    )
    if baseline:
        base_wall, base_cpu = best["baseline"]
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=baseline)
        base_median = median["baseline"]
        result += (
            f"; the baseline checkout (commit {commit.stdout.strip() or '?'}) {base_wall:.1f} s, {base_cpu:.1f} s CPU "
            f"(median {base_median[0]:.1f} s, {base_median[1]:.1f} s CPU): **{base_wall / wall:.2f}x** ours"
        )
    report("`recommend --model Qwen3-235B-A22B --hardware 'RTX 4090'` (fresh processes, warm numba cache)", result)


BENCHES = {
    "curve": bench_curve,
    "policy_all": bench_policy_all,
    "kernel": bench_kernel,
    "header": bench_header,
    "log": bench_log,
    "class_lru": bench_class_lru,
    "class_lru_band": bench_class_lru_band,
    "recommend": bench_recommend,
}


def write_markdown(path: Path, started: datetime, load: tuple[float, float, float]) -> None:
    after = os.getloadavg()
    lines = [
        "# Benchmarks",
        "",
        f"Latest run: {started:%Y-%m-%d %H:%M} UTC, `python -m benchmarks.bench --write {path.as_posix()}` on "
        f"{os.cpu_count()} cores ({platform.processor() or platform.machine()}), a machine shared with other "
        f"work: load average {load[0]:.1f} at the start, {after[0]:.1f} at the end. Ratios compare timings of "
        "this one run; absolute times move with the load. The script overwrites this file.",
        "",
        "| what | result |",
        "|---|---|",
        *(f"| {what} | {result} |" for what, result in ROWS),
        "",
    ]
    path.write_text("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", metavar="MD", help="also write the table of this run (docs/benchmarks-latest.md)")
    parser.add_argument("--only", help=f"a comma-separated subset of {', '.join(BENCHES)}")
    parser.add_argument("--baseline", type=Path, help="another checkout whose `recommend` alternates with ours")
    parser.add_argument("--repeat", type=int, default=3, help="`recommend` runs of each checkout (best and median)")
    args = parser.parse_args()
    names = args.only.split(",") if args.only else list(BENCHES)
    if unknown := [n for n in names if n not in BENCHES]:
        parser.error(f"unknown benchmark {', '.join(unknown)}: choose from {', '.join(BENCHES)}")
    started, load = datetime.now(timezone.utc), os.getloadavg()
    for name in names:
        BENCHES[name](args.baseline, args.repeat) if name == "recommend" else BENCHES[name]()
    if args.write:
        write_markdown(Path(args.write), started, load)


if __name__ == "__main__":
    main()
