"""Belady's optimum (MIN, 1966): the upper bound on hits for any policy, computed offline from next uses.

Per group pool, under the same pool-use rule: on a miss, evict the resident key whose next lookup is
farthest away, or keep none when the missing key's own next lookup is farther still (it is then computed
on the CPU, as the CPU share or a static set may do). Misses are placed nearest next use first, and as in
plan() the keys of the current record stay resident while it runs. This is MIN with bypass for unit-size keys;
tests/policies/test_policies.py checks on random traces that no registered policy gets more hits.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from moe_model.llama.slot_plan import Placement
from moe_model.policies.base import EXACT, Policy, PolicyResult, per_class
from moe_model.policies.entries import PoolEntries
from moe_model.policies.next_use_pool import next_records, next_use_pass
from moe_model.readers.model_spec import ModelSpec
from moe_model.threads import on_threads
from moe_model.workload import Workload


def run(model: ModelSpec, work, budgets_mib: Sequence[int], placement: Placement | None = None) -> list[PolicyResult]:
    """Next uses are found once per group and class of budgets (a backward scan); each pool size is its own
    pass over buckets of next use (next_use_pool), on threads."""
    entries = PoolEntries.build(work.for_model(model.n_expert))

    def sizes(w: Workload, layers: tuple[int, ...], use: np.ndarray, slots: np.ndarray) -> np.ndarray:
        sel = entries.select(layers, int(slots[0]))  # every size of a class admits the same records
        bounds, n_keys = sel.record_bounds(), w.n_layer * w.n_expert
        shared = (bounds, sel.key, sel.layer.astype(np.int32), next_records(bounds, sel.key, n_keys), n_keys)
        return np.array(on_threads(next_use_pass, [(*shared, w.n_layer, w.n_expert, int(s)) for s in slots]))

    return per_class(model, work, budgets_mib, placement, sizes)


POLICY = Policy(
    "belady",
    EXACT,
    "L. A. Belady, 'A study of replacement algorithms for a virtual-storage computer', IBM Systems Journal 1966",
    "offline optimum: evict the key used farthest in the future (or do not keep the miss); an upper bound",
    run,
)
