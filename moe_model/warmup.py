"""Compile every numba kernel once per install: `python -m moe_model.warmup` (the README's install step).

numba caches compiled kernels (cache=True) under NUMBA_CACHE_DIR, which moe_model points at a user
cache folder; after this step no command or page pays the ~14 s of compilation again. A stamp named after
the kernels' sources says whether this install has compiled them, so a first run can say it is compiling.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from moe_model.numba_cache import COMPILE_TIME, PACKAGE, kernel_sources_digest, unwritable


def stamp_path() -> Path:
    """The stamp of this install's compiled kernels: named after their sources, their path and numba's version
    (numba's own cache is keyed by source file and path too)."""
    cache = Path(os.environ.get("NUMBA_CACHE_DIR") or PACKAGE / "__pycache__")
    return cache / f"moe-model-kernels-{kernel_sources_digest()}.compiled"


def is_compiled() -> bool:
    """Whether this install has compiled the kernels (its stamp exists)."""
    return stamp_path().is_file()


def warm_up() -> float:
    """Run every kernel on a tiny workload (each policy, the CPU share, the LRU at many budgets, ClassLRU's lanes, the
    distinct count); seconds taken."""
    from moe_model.llama.batching import build_workload
    from moe_model.llama.simulate import simulate_budgets
    from moe_model.policies import POLICIES, class_lru, run_policy
    from moe_model.readers.model_spec import uniform_spec
    from moe_model.readers.traces import make_token_trace
    from moe_model.speed.traffic import decode_distinct
    from moe_model.workload import Batching

    start = time.perf_counter()
    model = uniform_spec(2, 8, 2)
    experts = np.random.default_rng(0).integers(0, 8, size=(64, 2, 2))
    experts[:, :, 1] = (experts[:, :, 0] + 1) % 8  # k distinct experts per token
    work = build_workload(make_token_trace(experts), Batching(concurrency=2))
    simulate_budgets(model, work, [3, 5, 9])
    decode_distinct(work)  # the time model's distinct experts per decode ubatch
    for name in POLICIES:
        run_policy(name, model, work, [5, 9])
    run_policy(class_lru.NAME, model, work, list(range(3, 18)))  # 13 pools of 4-16 of 16 keys: ClassLRU's lanes
    _write_stamp()
    return time.perf_counter() - start


def _write_stamp() -> None:
    try:
        stamp = stamp_path()
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(f"{time.time():.0f}\n")
    except OSError:
        return  # an unwritable cache: every run says it compiles, which numba then skips from its own cache


def ensure_compiled(say: Callable[[str], None]) -> None:
    """On the first run after install, compile the kernels here, saying so and how long it took; not where the
    cache folder cannot be written (numba_cache says so once): each kernel then compiles, in memory, when used."""
    if is_compiled() or unwritable(stamp_path().parent):
        return
    say(
        f"compiling the simulation kernels once for this install ({COMPILE_TIME}; `python -m moe_model.warmup` does "
        "it ahead)"
    )
    say(f"compiled the kernels in {warm_up():.1f} s")


def main() -> int:
    print(f"compiled the kernels in {warm_up():.1f} s into {os.environ.get('NUMBA_CACHE_DIR', 'the package folder')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
