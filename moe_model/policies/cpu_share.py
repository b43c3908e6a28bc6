"""llama.cpp b12191 `--moe-cache-cpu-share F` as a *modelled* policy: its exact formulas were not available.

What is known (docs/llamacpp-cache.md section 10: llama.cpp's docs/moe-cache.md at tag b12191, PR #30966): hits run
on the GPU; once a group's slots are all filled, a share F of the distinct misses of each (layer, ubatch) is
computed on the CPU from host memory and not inserted; the count is kept on target with an accumulated remainder;
the misses sent to the CPU are those with the lowest combined recency-frequency (CRF) score. Before the pool is full
every miss is uploaded.
From b12170 the cache under it is ClassLRU (issue 20), so this runs on ClassLRU's lists and CRF (policies.class_lru,
its knobs at their defaults): share 0 gives ClassLRU's counts. Every pool size of a class of budgets in one pass per
group (base.per_class).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from moe_model.limits import SIM_CHUNK_RECORDS
from moe_model.llama.lru_kernel import MODE_CACHE, MODE_SKIP
from moe_model.llama.slot_plan import Placement
from moe_model.policies import class_lru
from moe_model.policies.base import MODELLED, Policy, PolicyResult, per_class
from moe_model.readers.model_spec import ModelSpec
from moe_model.settings import DEFAULT_CPU_SHARE
from moe_model.workload import Workload


def share_sizes(work: Workload, use: np.ndarray, slots: np.ndarray, share: float) -> np.ndarray:
    """The records `use` through ClassLRU pools of every size in `slots` with the share: [len(slots), 3, n_layer]
    counts (hits, uploads, CPU); the records fed in chunks, as simulate streams them."""
    order = np.argsort(slots, kind="stable")
    state = class_lru.new_state(np.asarray(slots)[order], work.n_layer, work.n_expert, share=share)
    mode = np.where(use, MODE_CACHE, MODE_SKIP).astype(np.int8)
    large = np.zeros(work.n_records, dtype=np.int8)  # the <= 8 / > 8 split is not a policy count
    for lo in range(0, work.n_records, SIM_CHUNK_RECORDS):
        rows = slice(lo, lo + SIM_CHUNK_RECORDS)
        args = (work.rec_layer[rows], work.rec_ntok[rows], work.rec_off[rows], mode[rows], large[rows], work.ids)
        class_lru.feed(state, *args, work.k, work.n_expert)
    hits, distinct, _ = class_lru.results(state)
    hits, cpu = hits.sum(axis=1), class_lru.cpu_counts(state)  # [n_layer, n_caps]
    counts = np.stack([hits, distinct.sum(axis=1)[:, None] - hits - cpu, cpu])  # [3, n_layer, n_caps]
    out = np.empty((len(slots), 3, work.n_layer), dtype=np.int64)
    out[order] = np.moveaxis(counts, -1, 0)
    return out


def run(
    model: ModelSpec,
    work,
    budgets_mib: Sequence[int],
    placement: Placement | None = None,
    share: float = DEFAULT_CPU_SHARE,
) -> list[PolicyResult]:
    """Once a group's pool is full, a share of its misses (the lowest CRF first) is computed on the CPU and not
    inserted. Every budget of a class in one pass per group, its pool sizes on numba's threads."""
    return per_class(
        model, work, budgets_mib, placement, lambda w, layers, use, slots: share_sizes(w, use, slots, share)
    )


POLICY = Policy(
    "cpu-share-b12191",
    MODELLED,
    "llama.cpp b12191 docs/moe-cache.md (PR #30966) on b12170's ClassLRU; docs/llamacpp-cache.md section 10",
    "ClassLRU (b12170+), but once the pool is full a share of the misses, the lowest CRF first, runs on the CPU "
    "instead of being uploaded",
    run,
    {"share": DEFAULT_CPU_SHARE},
    lambda share=DEFAULT_CPU_SHARE: share,  # once the pool is full (always, at a hit rate below 100 %)
)
