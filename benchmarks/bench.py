"""Benchmarks (a script, not timed tests): the numbers quoted in the README come from this.

    python -m benchmarks.bench            (from the repository root; pip install -r requirements-bench.txt)

1. A 64-budget hit-rate curve over a 20,000-token Qwen3-30B-A3B-shaped trace (48 layers x 8 of
   128 experts) with the simulator, against libCacheSim's C LRU computing the same 64 pool sizes.
2. The numba kernel against the same kernel run as plain Python (on a shorter trace).
3. Parsing a 6.6 MB GGUF header (152k-token vocabulary with merges) against gguf.GGUFReader.
4. The ClassLRU curve (b12170+) on the same 64 budgets and trace as 1, against the exact LRU's: every core numba
   has, and one core.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from moe_model.llama import lru_kernel
from moe_model.llama.batching import build_workload
from moe_model.llama.simulate import simulate_budgets
from moe_model.llama.slot_plan import full_budget_mib, min_budget_mib
from moe_model.readers.gguf import read_header
from moe_model.readers.gguf_writer import StringArray, header_bytes
from moe_model.readers.model_spec import load_model
from moe_model.routing.synthetic import Knobs, Shape, generate
from moe_model.workload import Batching

ROOT = Path(__file__).resolve().parent.parent
QWEN = ROOT / "moe_model" / "data" / "models" / "Qwen3-30B-A3B-Q4_K_M.gguf"


def timed(fn, repeat: int = 3):
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def access_stream(work) -> np.ndarray:
    """The (layer, expert) keys in access order: each record's distinct experts, first appearance first."""
    keys = []
    for r in range(work.n_records):
        ids = work.ids[work.rec_off[r] : work.rec_off[r] + work.k * work.rec_ntok[r]]
        keys.append(work.rec_layer[r] * work.n_expert + np.array(list(dict.fromkeys(ids.tolist())), dtype=np.int64))
    return np.concatenate(keys)


def libcachesim_curve(keys: np.ndarray, sizes: list[int]) -> tuple[float, list[float]]:
    import libcachesim as lcs

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.oracleGeneral"
        rec = np.zeros(len(keys), dtype=[("t", "<u4"), ("id", "<u8"), ("size", "<u4"), ("next", "<i8")])
        rec["t"], rec["id"], rec["size"], rec["next"] = np.arange(len(keys)), keys + 1, 1, -1
        path.write_bytes(rec.tobytes())
        start = time.perf_counter()
        hit = []
        for size in sizes:
            reader = lcs.TraceReader(str(path), lcs.TraceType.ORACLE_GENERAL_TRACE)
            miss_ratio, _ = lcs.LRU(size).process_trace(reader)
            hit.append(1 - miss_ratio)
        return time.perf_counter() - start, hit


def bench_curve() -> None:
    model = load_model(QWEN)
    trace = generate(Shape(48, 128, 8), Knobs(), 20_000, seed=0)
    work = build_workload(trace, Batching(warmup=False), 128)
    budgets = np.linspace(min_budget_mib(model), full_budget_mib(model), 64).astype(int).tolist()
    simulate_budgets(model, work, budgets[:2])  # compile
    ours, results = timed(lambda: simulate_budgets(model, work, budgets))
    n_access = int(results[0].small.lookups)
    print(f"simulator: 64 budgets, {n_access:,} lookups per budget: {ours:.2f} s")
    try:
        keys = access_stream(work)
        sizes = [sum(g.n_slots for g in r.plan.groups) for r in results]
        theirs, hit = libcachesim_curve(keys, sizes)
        print(
            f"libCacheSim C LRU, same 64 pool sizes (one pool over both groups): {theirs:.2f} s -> {theirs / ours:.1f}x"
        )
        ours_hit = [r.hit_rate for r in results]
        print(
            f"  hit rate at the middle budget: ours {ours_hit[32]:.4f} (2 groups, llama.cpp order), "
            f"libCacheSim {hit[32]:.4f}"
        )
    except ImportError:
        print("libCacheSim not installed: pip install -r requirements-bench.txt")


def bench_kernel() -> None:
    model = load_model(QWEN)
    trace = generate(Shape(48, 128, 8), Knobs(), 400, seed=0)
    work = build_workload(trace, Batching(warmup=False), 128)
    budgets = [2000, 6000, 10000]
    simulate_budgets(model, work, budgets)
    jit, _ = timed(lambda: simulate_budgets(model, work, budgets))
    names = ["_feed", "_compact", "_status", "_prefix", "_add", "_count", "_first_above"]
    compiled = {n: getattr(lru_kernel, n) for n in names}
    try:
        for n in names:  # lru_kernel.feed looks _feed up at call time: the plain Python kernel runs
            setattr(lru_kernel, n, compiled[n].py_func)
        plain, _ = timed(lambda: simulate_budgets(model, work, budgets), repeat=1)
    finally:
        for n in names:
            setattr(lru_kernel, n, compiled[n])
    print(
        f"kernel, 400 tokens x 3 budgets: numba {jit * 1000:.1f} ms, "
        f"plain Python {plain * 1000:.0f} ms -> {plain / jit:.0f}x"
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
        ours, _ = timed(lambda: read_header(path))
        import gguf

        theirs, _ = timed(lambda: gguf.GGUFReader(path), repeat=1)
    print(f"header of {len(data) / 1e6:.1f} MB: ours {ours * 1000:.0f} ms, gguf.GGUFReader {theirs * 1000:.0f} ms")


def bench_log() -> None:
    """A 200 MB llama-server log: real lines of a ground-truth run, then repeated slot chatter."""
    import tracemalloc

    from moe_model.readers.logs import parse_log

    head = (ROOT / "moe_model" / "data" / "groundtruth" / "logs" / "server_np4_b25.log").read_bytes()
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
    print(
        f"log of {size / 1e6:.0f} MB: {elapsed:.1f} s ({size / 1e6 / elapsed:.0f} MB/s), "
        f"peak traced memory {peak / 2**20:.2f} MiB"
    )


def bench_class_lru() -> None:
    import numba

    from moe_model.policies import class_lru

    model = load_model(QWEN)
    trace = generate(Shape(48, 128, 8), Knobs(), 20_000, seed=0)
    work = build_workload(trace, Batching(warmup=False), 128)
    budgets = np.linspace(min_budget_mib(model), full_budget_mib(model), 64).astype(int).tolist()
    kernel = class_lru.kernel()
    simulate_budgets(model, work, budgets[:2], kernel=kernel)  # compile
    lru, _ = timed(lambda: simulate_budgets(model, work, budgets))
    ours, _ = timed(lambda: simulate_budgets(model, work, budgets, kernel=kernel))
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        one, _ = timed(lambda: simulate_budgets(model, work, budgets, kernel=kernel))
    finally:
        numba.set_num_threads(threads)
    print(
        f"ClassLRU curve, 64 budgets: {ours:.2f} s on {threads} threads ({ours / lru:.1f}x the exact LRU's "
        f"{lru:.2f} s), {one:.2f} s on one ({one / lru:.1f}x)"
    )


if __name__ == "__main__":
    bench_header()
    bench_log()
    bench_kernel()
    bench_curve()
    bench_class_lru()
