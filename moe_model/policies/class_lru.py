"""llama.cpp b12170+ ClassLRU (PR #31233, "LRFU/MQ-like hybrid"), modelled from its commit bullets
(../shared/docs/llamacpp-moe-cache.md section 10): exact formulas were not seen.

Modelled: a clock advancing by each pool record's tokens; per key a combined recency-frequency (CRF)
value, sum over its uses of 2^(-age / half life); its class is floor(log2 CRF), capped at n_classes - 1.
A class decays by one per half life, so the victim (lowest decayed class, least recent among equals) is the
key of lowest class + last_use / half_life, a priority fixed at each use: a heap finds it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numba import njit  # nogil=True: a run lets the app's other sessions (threads of one server) go on

from moe_model.llama.slot_plan import GroupPlan, Placement
from moe_model.policies.base import MODELLED, Policy, PolicyResult, per_budget
from moe_model.policies.belady import group_counts
from moe_model.policies.entries import PoolEntries
from moe_model.readers.model_spec import ModelSpec
from moe_model.workload import Workload


@njit(cache=True, nogil=True)
def _priorities(order, key, clock, half_life, n_classes):
    """Per entry: its key's class after this use, plus this use's clock in half lives."""
    prio = np.empty(len(key), dtype=np.float64)
    crf, last_key, last_t = 0.0, -1, 0.0
    for i in order:  # entries by key, then time
        t = clock[i]
        crf = crf * 2.0 ** (-(t - last_t) / half_life) + 1.0 if key[i] == last_key else 1.0
        last_key, last_t = key[i], t
        prio[i] = min(n_classes - 1, np.floor(np.log2(crf))) + t / half_life
    return prio


def priorities(entries: PoolEntries, ntok: np.ndarray, half_life: float, n_classes: int) -> np.ndarray:
    """The eviction priority of each entry; the clock counts tokens over the group's pool records."""
    bounds = entries.record_bounds()
    clock = np.cumsum(ntok[entries.rec[bounds[:-1]]].astype(np.float64))
    per_entry = np.repeat(clock, np.diff(bounds))
    return _priorities(np.lexsort((entries.rec, entries.key)), entries.key, per_entry, half_life, n_classes)


def run(
    model: ModelSpec,
    work,
    budgets_mib: Sequence[int],
    placement: Placement | None = None,
    half_life_tokens: float = 8.0,
    n_classes: int = 8,
) -> list[PolicyResult]:
    """half_life_tokens: decode tokens per half life (the clock advances once per layer of the group)."""
    entries = PoolEntries.build(work.for_model(model.n_expert))

    def group(w: Workload, g: GroupPlan, use: np.ndarray):
        sel = entries.select(g.layers, g.n_slots)
        prio = priorities(sel, w.rec_ntok, half_life_tokens * g.n_layers, int(n_classes))
        return group_counts(sel, w.n_layer, g.n_slots, prio, False)

    return per_budget(model, work, budgets_mib, placement, group)


POLICY = Policy(
    "class-lru-b12170",
    MODELLED,
    "llama.cpp b12170 release notes (PR #31233, ClassLRU/CRF); ../shared/docs/llamacpp-moe-cache.md section 10",
    "8 classes of combined recency-frequency with a half life: evict the lowest decayed class, least recent first",
    run,
    {"half_life_tokens": 8.0, "n_classes": 8},
)
