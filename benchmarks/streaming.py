"""Constant-memory simulation: peak RSS and time per lookup at any trace length (README "Benchmarks").

    python -m benchmarks.streaming --tokens 1000000 --budgets 64      # Qwen3-235B-A22B shape, 94 layers

Synthetic routing is generated for --unique-tokens tokens (a block of sequences) and replayed with the
experts of every layer rotated on each repeat, so a long trace costs no generation time; the simulator
sees one stream of whole ubatches, never the whole workload. Prints one row: tokens, budgets, passes,
seconds, ns per (token x layer x k) lookup, and the peak RSS of this process.
"""

from __future__ import annotations

import argparse
import resource
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np

from moe_model.llama.simulate import simulate_budgets
from moe_model.llama.slot_plan import full_budget_mib, min_budget_mib
from moe_model.readers.model_spec import load_model
from moe_model.routing.synthetic import Knobs, Shape, stream_workload
from moe_model.workload import Workload, WorkloadStream

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "moe_model" / "data" / "models" / "Qwen3-235B-A22B-Q4_K_M-00001-of-00003.gguf"


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1_000_000)
    parser.add_argument("--unique-tokens", type=int, default=16 * 512)
    parser.add_argument("--budgets", type=int, default=64)
    args = parser.parse_args()
    model = load_model(MODEL)
    shape = Shape(model.n_layer, model.n_expert, model.n_expert_used)
    budgets = np.linspace(min_budget_mib(model), full_budget_mib(model), args.budgets).astype(int).tolist()
    simulate_budgets(model, stream_workload(shape, Knobs(), 512), budgets[:2])  # compile (or load the cache)
    stream = tiled(stream_workload(shape, Knobs(), args.unique_tokens), -(-args.tokens // args.unique_tokens))
    start = time.perf_counter()
    results = simulate_budgets(model, stream, budgets)
    seconds = time.perf_counter() - start
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"{model.name}: {stream.decode_tokens:,} tokens x {model.n_layer} layers x {model.n_expert_used}, "
        f"{len(budgets)} budgets: {seconds:.1f} s, {seconds / stream.n_lookups * 1e9:.0f} ns per lookup, "
        f"peak RSS {peak_mib:.0f} MiB, hit rate at the middle budget {results[len(results) // 2].hit_rate:.4f}"
    )


if __name__ == "__main__":
    main()
