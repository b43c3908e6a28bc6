"""Compile every numba kernel once per install: `python -m moe_model.warmup` (the README's install step).

numba caches compiled kernels (cache=True) under NUMBA_CACHE_DIR, which moe_model points at a user
cache folder; after this step no command or page pays the ~14 s of compilation again.
"""

from __future__ import annotations

import time

import numpy as np


def warm_up() -> float:
    """Run every kernel on a tiny workload (each policy, the CPU share, the LRU at many budgets); seconds taken."""
    from moe_model.llama.batching import build_workload
    from moe_model.llama.simulate import simulate_budgets
    from moe_model.policies import POLICIES, run_policy
    from moe_model.readers.model_spec import uniform_spec
    from moe_model.readers.traces import make_token_trace
    from moe_model.workload import Batching

    start = time.perf_counter()
    model = uniform_spec(2, 8, 2)
    experts = np.random.default_rng(0).integers(0, 8, size=(64, 2, 2))
    experts[:, :, 1] = (experts[:, :, 0] + 1) % 8  # k distinct experts per token
    work = build_workload(make_token_trace(experts), Batching(concurrency=2))
    simulate_budgets(model, work, [3, 5, 9])
    for name in POLICIES:
        run_policy(name, model, work, [5, 9])
    return time.perf_counter() - start


def main() -> int:
    import os

    print(f"compiled the kernels in {warm_up():.1f} s into {os.environ.get('NUMBA_CACHE_DIR', 'the package folder')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
