"""llama.cpp b11480-b12169: one LRU per group shared by its layers, the exact simulator's numbers."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from moe_model.llama.lru_kernel import MODE_CACHE, feed, new_state, results
from moe_model.llama.simulate import LRU_KERNEL, SimResult, simulate_budgets
from moe_model.llama.slot_plan import Placement
from moe_model.policies.base import EXACT, Policy, PolicyResult
from moe_model.readers.model_spec import ModelSpec
from moe_model.workload import Workload


def from_simulation(r: SimResult) -> PolicyResult:
    """The exact simulator's result as a policy result (every miss is uploaded)."""
    return PolicyResult(
        r.budget_mib, r.starts, r.layer_hits, r.layer_lookups - r.layer_hits, np.zeros_like(r.layer_hits)
    )


def lru_sizes(work: Workload, use: np.ndarray, caps: np.ndarray, idle: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The exact kernel over the records `use` as one pool, for every pool size in `caps` at once (any order):
    (hits [len(caps), n_layer], lookups [n_layer]). idle > 0: lazy unloading (lru_kernel.feed). `work` has
    passed check_kernel_inputs (base.per_class checks it once for all its passes)."""
    order = np.argsort(caps, kind="stable")
    state = new_state(np.asarray(caps, dtype=np.int64)[order], work.n_layer, work.n_expert)
    modes, large = np.full(int(use.sum()), MODE_CACHE, dtype=np.int8), np.zeros(int(use.sum()), dtype=np.int8)
    records = (work.rec_layer[use], work.rec_ntok[use], work.rec_off[use], modes, large, work.ids)
    feed(state, *records, work.k, work.n_expert, work.rec_ubatch[use].astype(np.int64), idle)
    hits, distinct, _ = results(state)
    out = np.empty((len(caps), work.n_layer), dtype=np.int64)
    out[order] = hits.sum(axis=1).T
    return out, distinct.sum(axis=1)


def run(model: ModelSpec, work, budgets_mib: Sequence[int], placement: Placement | None = None) -> list[PolicyResult]:
    """Every budget in one pass per group (simulate_budgets)."""
    return [from_simulation(r) for r in simulate_budgets(model, work, budgets_mib, placement)]


POLICY = Policy(
    "lru-b11549",
    EXACT,
    "llama.cpp b11549 src/llama-moe-cache.cpp plan(); docs/llamacpp-cache.md section 6",
    "one LRU per group of layers: hits refreshed first, sorted misses take the least recently used slot",
    run,
    kernel=lambda: LRU_KERNEL,
)
