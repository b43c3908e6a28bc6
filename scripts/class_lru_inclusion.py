"""Whether ClassLRU's pool sizes nest in practice (issue 38: a stack policy's curve is one pass for every pool size,
as the exact LRU's is): 64 pool sizes replay a workload, and after every two tokens' records of each layer the
script checks that each pool holds all its next-smaller neighbour holds. Workloads: benchmarks/bench.py's synthetic
routing (1,500 tokens) batched as llama-server would batch it (-np 1 and 4, its warm-up, prompts in 512- and
32-token ubatches, 3 drafted tokens), the default reading and one group clock; the real GPT-OSS-20B routing at -np
1 and 4, and at -np 1 with one class (the plain LRU's lists). Prints a line per workload; under a minute.

    python scripts/class_lru_inclusion.py
"""

from __future__ import annotations

import sys

import numpy as np

from moe_model.llama.batching import build_workload
from moe_model.llama.lru_kernel import MODE_CACHE, MODE_SKIP
from moe_model.llama.pool_rule import uses_pool
from moe_model.policies import class_lru
from moe_model.readers.traces import load_trace
from moe_model.resources import data_path
from moe_model.routing.synthetic import Knobs, Shape, generate
from moe_model.workload import Batching

BATCHINGS = {
    "-np 1": Batching(warmup=False),
    "-np 4": Batching(warmup=False, concurrency=4),
    "-np 1 and the warm-up": Batching(),
    "512-token prompts, ubatch 512": Batching(warmup=False, prompt_tokens=512),
    "64-token prompts, ubatch 32": Batching(warmup=False, prompt_tokens=64, ubatch_size=32),
    "3 drafted tokens": Batching(warmup=False, draft_tokens=3),
}


def nesting_breaks(work, n_layer: int, n_expert: int, k: int, **knobs) -> tuple[int, int]:
    """(checks where some pool holds a key its next-larger one does not, checks)."""
    smallest = 4 * k * int(work.rec_ntok.max())  # every pool holds a record's experts
    caps = np.unique(np.linspace(max(64, smallest), n_layer * n_expert, 64).astype(int))
    # a record past get_slot_map's guard changes no pool; the stats' ubatch class changes nothing a pool holds
    mode = np.where(uses_pool(work.rec_ntok, k, n_expert, int(caps[0])), MODE_CACHE, MODE_SKIP).astype(np.int8)
    large = np.zeros(work.n_records, dtype=np.int8)
    state = class_lru.new_state(caps, n_layer, n_expert, **knobs)
    broken, step = 0, 2 * n_layer
    for a in range(0, work.n_records, step):
        part = slice(a, a + step)
        chunk = (work.rec_layer[part], work.rec_ntok[part], work.rec_off[part], mode[part], large[part])
        class_lru.feed(state, *chunk, work.ids, k, n_expert)
        held = state.held()
        broken += bool(np.any(held[:-1] & ~held[1:]))
    return broken, -(-work.n_records // step)


def main() -> int:
    synthetic = generate(Shape(48, 128, 8), Knobs(), 1_500, seed=0)
    real = load_trace(data_path("traces", "gpt-oss-20b", "routing.npz"))
    qwen = (48, 128, 8)
    batched = {name: build_workload(synthetic, b, 128) for name, b in BATCHINGS.items()}
    cases = [(f"synthetic, {name}", work, qwen, {}) for name, work in batched.items()]
    for name in ("-np 1", "64-token prompts, ubatch 32"):
        cases.append((f"synthetic, {name}, one group clock", batched[name], qwen, {"clock": "group"}))
    shape = (real.n_layer, real.n_expert, real.k)
    for name in ("-np 1", "-np 4"):
        cases.append((f"GPT-OSS-20B routing, {name}", build_workload(real, BATCHINGS[name], real.n_expert), shape, {}))
    cases.append(("GPT-OSS-20B routing, -np 1, one class (an LRU)", cases[-2][1], shape, {"n_classes": 1}))
    for label, work, (n_layer, n_expert, k), knobs in cases:
        broken, checks = nesting_breaks(work, n_layer, n_expert, k, **knobs)
        print(f"{label}: ubatch tokens {np.unique(work.rec_ntok).tolist()}, nesting broken at {broken} of {checks}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
