"""Belady's optimum (MIN, 1966): the upper bound on hits for any policy, computed offline from next uses.

Per group pool, under the same pool-use rule: on a miss, evict the resident key whose next lookup is
farthest away, or keep none when the missing key's own next lookup is farther still (it is then computed
on the CPU, as the CPU share or a static set may do). Misses are placed nearest next use first, and as in
plan() the keys of the current record stay resident while it runs. This is MIN with bypass for unit-size keys;
tests/test_policies.py checks on random traces that no registered policy gets more hits.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from moe_model.llama.slot_plan import GroupPlan, Placement
from moe_model.policies.base import EXACT, Policy, PolicyResult, per_budget
from moe_model.policies.entries import PoolEntries
from moe_model.policies.priority_pool import priority_pass
from moe_model.readers.model_spec import ModelSpec
from moe_model.workload import Workload


def group_counts(entries: PoolEntries, n_layer: int, n_slots: int, prio: np.ndarray, bypass: bool):
    keys = n_layer * entries.n_expert
    args = (entries.record_bounds(), entries.key, prio, keys, n_layer, entries.n_expert, n_slots, bypass)
    return priority_pass(*args)


def run(model: ModelSpec, work, budgets_mib: Sequence[int], placement: Placement | None = None) -> list[PolicyResult]:
    entries = PoolEntries.build(work.for_model(model.n_expert))

    def group(w: Workload, g: GroupPlan, use: np.ndarray):
        sel = entries.select(g.layers, g.n_slots)
        return group_counts(sel, w.n_layer, g.n_slots, -sel.next_use().astype(np.float64), True)

    return per_budget(model, work, budgets_mib, placement, group)


POLICY = Policy(
    "belady",
    EXACT,
    "L. A. Belady, 'A study of replacement algorithms for a virtual-storage computer', IBM Systems Journal 1966",
    "offline optimum: evict the key used farthest in the future (or do not keep the miss); an upper bound",
    run,
)
