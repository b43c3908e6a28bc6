"""Constant-memory simulation: peak RSS and time per lookup at any trace length (README "Benchmarks").

    python -m benchmarks.streaming --tokens 1000000 --budgets 64      # Qwen3-235B-A22B shape, 94 layers
    python -m benchmarks.streaming --token-trace 100000,300000,1000000 --budgets 64

Synthetic routing is generated for --unique-tokens tokens (a block of sequences) and replayed with the
experts of every layer rotated on each repeat, so a long trace costs no generation time; the simulator
sees one stream of whole ubatches, never the whole workload. Prints one row: tokens, budgets, passes,
seconds, ns per (token x layer x k) lookup, and the peak RSS of this process.

--token-trace writes that routing as a token-trace NPZ (`experts` [n, 94, 8] deflated, 512-token
sequences) of each length, then replays each file in a fresh process the way `simulate --trace` does
(open_trace, then the stream batched at --concurrency) and prints its time and peak RSS.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np

from moe_model.limits import MAX_LOOKUPS_FLAG
from moe_model.llama.batching import stream_from
from moe_model.llama.simulate import simulate_budgets
from moe_model.llama.slot_plan import full_budget_mib, min_budget_mib
from moe_model.readers.model_spec import load_model
from moe_model.readers.traces import CLI_REPLAY, open_trace
from moe_model.routing.synthetic import SEQ_LEN, Knobs, Shape, generate, stream_workload
from moe_model.workload import Batching, Workload, WorkloadStream

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "sample_data" / "models" / "Qwen3-235B-A22B-Q4_K_M-00001-of-00003.gguf"


def tiled(stream: WorkloadStream, repeats: int) -> WorkloadStream:
    """The stream `repeats` times, expert ids rotated by a different step each time (new routing, same locality)."""
    blocks = list(stream.chunks())

    def chunks() -> Iterator[Workload]:
        for rep in range(repeats):
            for block in blocks:
                yield replace(block, ids=((block.ids + 37 * rep) % stream.n_expert).astype(np.int32))

    return replace(
        stream,
        n_records=stream.n_records * repeats,
        n_lookups=stream.n_lookups * repeats,
        decode_tokens=stream.decode_tokens * repeats,
        n_ubatches=stream.n_ubatches * repeats,
        make_chunks=chunks,
    )


def budgets_for(model, count: int) -> list[int]:
    return np.linspace(min_budget_mib(model), full_budget_mib(model), count).astype(int).tolist()


def peak_rss_mib() -> float:
    """This process's peak RSS since it started: VmHWM (ru_maxrss also counts a parent's RSS at fork time)."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def write_token_trace(path: Path, shape: Shape, n_tokens: int, unique_tokens: int) -> None:
    """A token-trace NPZ of n_tokens written block by block (never held whole): the synthetic routing of
    unique_tokens tokens, repeated with the experts rotated as in `tiled`."""
    block = generate(shape, Knobs(), unique_tokens, seed=0).experts
    header = {"descr": np.lib.format.dtype_to_descr(block.dtype), "fortran_order": False}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        with archive.open("experts.npy", "w", force_zip64=True) as f:
            np.lib.format.write_array_header_2_0(f, header | {"shape": (n_tokens, shape.n_layer, shape.k)})
            for rep, start in enumerate(range(0, n_tokens, unique_tokens)):
                rows = block[: min(unique_tokens, n_tokens - start)]
                f.write(((rows.astype(np.int64) + 37 * rep) % shape.n_expert).astype(block.dtype).tobytes())
        offsets = np.append(np.arange(0, n_tokens, SEQ_LEN), n_tokens).astype(np.int64)
        with archive.open("seq_offsets.npy", "w") as f:
            np.lib.format.write_array(f, offsets)


def replay_token_trace(path: str, n_budgets: int, concurrency: int) -> None:
    """One file replayed as `simulate --trace` does; prints tokens, seconds, ns per lookup, peak RSS."""
    model = load_model(MODEL)
    budgets = budgets_for(model, n_budgets)
    shape = Shape(model.n_layer, model.n_expert, model.n_expert_used)
    simulate_budgets(model, stream_workload(shape, Knobs(), 512), budgets[:2])  # compile (or load the cache)
    start = time.perf_counter()
    cap = replace(CLI_REPLAY, max_lookups=MAX_LOOKUPS_FLAG)  # a benchmark replays traces far above the default
    stream = stream_from(open_trace(path, cap=cap), Batching(concurrency=concurrency), model.n_expert)
    results = simulate_budgets(model, stream, budgets)
    seconds = time.perf_counter() - start
    print(
        f"{stream.decode_tokens:,} tokens, concurrency {concurrency}, {n_budgets} budgets: {seconds:.1f} s, "
        f"{seconds / stream.n_lookups * 1e9:.0f} ns per lookup, peak RSS {peak_rss_mib():.0f} MiB, "
        f"hit rate at the middle budget {results[len(results) // 2].hit_rate:.4f}",
        flush=True,
    )


def token_trace_rows(lengths: list[int], n_budgets: int, unique_tokens: int, concurrency: int) -> None:
    model = load_model(MODEL)
    shape = Shape(model.n_layer, model.n_expert, model.n_expert_used)
    with tempfile.TemporaryDirectory() as tmp:
        for n_tokens in lengths:
            path = Path(tmp) / f"trace_{n_tokens}.npz"
            start = time.perf_counter()
            write_token_trace(path, shape, n_tokens, unique_tokens)
            print(
                f"wrote {path.name}: {path.stat().st_size / 2**20:,.0f} MiB deflated "
                f"({n_tokens * shape.n_layer * shape.k * 2 / 2**20:,.0f} MiB of int16 ids) "
                f"in {time.perf_counter() - start:.1f} s",
                flush=True,
            )
            argv = ["--replay", str(path), "--budgets", str(n_budgets), "--concurrency", str(concurrency)]
            subprocess.run([sys.executable, "-m", "benchmarks.streaming", *argv], check=True, cwd=ROOT)
            path.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1_000_000)
    parser.add_argument("--unique-tokens", type=int, default=16 * 512)
    parser.add_argument("--budgets", type=int, default=64)
    parser.add_argument("--token-trace", metavar="N,N,...", help="token-trace NPZ files of these lengths")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--replay", metavar="NPZ", help=argparse.SUPPRESS)  # the child process of --token-trace
    args = parser.parse_args()
    if args.replay:
        replay_token_trace(args.replay, args.budgets, args.concurrency)
        return
    if args.token_trace:
        lengths = [int(n) for n in args.token_trace.split(",")]
        token_trace_rows(lengths, args.budgets, args.unique_tokens, args.concurrency)
        return
    model = load_model(MODEL)
    shape = Shape(model.n_layer, model.n_expert, model.n_expert_used)
    budgets = budgets_for(model, args.budgets)
    simulate_budgets(model, stream_workload(shape, Knobs(), 512), budgets[:2])  # compile (or load the cache)
    stream = tiled(stream_workload(shape, Knobs(), args.unique_tokens), -(-args.tokens // args.unique_tokens))
    start = time.perf_counter()
    results = simulate_budgets(model, stream, budgets)
    seconds = time.perf_counter() - start
    print(
        f"{model.name}: {stream.decode_tokens:,} tokens x {model.n_layer} layers x {model.n_expert_used}, "
        f"{len(budgets)} budgets: {seconds:.1f} s, {seconds / stream.n_lookups * 1e9:.0f} ns per lookup, "
        f"peak RSS {peak_rss_mib():.0f} MiB, hit rate at the middle budget {results[len(results) // 2].hit_rate:.4f}"
    )


if __name__ == "__main__":
    main()
