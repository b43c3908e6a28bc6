"""Step through llama.cpp's cache one (layer, ubatch) at a time, keeping every slot's content.

For teaching on small models: the literal b11549 plan() (linked list of slots, hits refreshed first,
sorted misses take the head), recording what each step hit, filled and evicted. Slow by design; its
counts equal the policy's (tests/test_policies.py). Policies it can show: STEPPABLE.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moe_model.errors import MoeModelError
from moe_model.llama.lru_kernel import check_kernel_inputs
from moe_model.llama.pool_rule import OFFLOAD_MIN_BATCH, uses_pool
from moe_model.llama.slot_plan import CachePlan
from moe_model.policies import REFERENCE, get_policy
from moe_model.policies.lazy_unload import idle_limit
from moe_model.workload import Workload


@dataclass(frozen=True)
class Step:
    """One (layer, ubatch) record as the cache saw it."""

    record: int
    ubatch: int
    layer: int
    n_tokens: int
    group: int | None
    path: str  # "cache", "large batch (copy)", "CPU", "not cached"
    hits: tuple[int, ...]  # expert ids
    fills: tuple[tuple[int, int], ...]  # (expert id, slot)
    evicted: tuple[tuple[int, int], ...]  # (layer, expert) pushed out (or unloaded when idle)
    slots: tuple[np.ndarray, ...]  # per group: key (layer * n_expert + expert) per slot, -1 empty
    total_hits: int
    total_misses: int
    order: tuple[tuple[int, ...], ...] = ()  # per group: slots in LRU order after the step, next eviction first


STEPPABLE = (REFERENCE, "lazy-unload")


class _Pool:
    def __init__(self, n_slots: int) -> None:
        self.order = list(range(n_slots))  # head (least recently used) first
        self.key_of = [-1] * n_slots
        self.slot_of: dict[int, int] = {}
        self.last_round = [0] * n_slots

    def touch(self, slot: int, round_: int) -> None:
        self.order.remove(slot)
        self.order.append(slot)
        self.last_round[slot] = round_

    def unload_idle(self, before: int) -> list[int]:
        """lazy-unload: clear the keys last used before round `before` (they lead the list); returns them."""
        gone = [self.key_of[s] for s in self.order if self.key_of[s] >= 0 and self.last_round[s] < before]
        for key in gone:
            self.key_of[self.slot_of.pop(key)] = -1
        return gone


def steps(
    work: Workload, plan: CachePlan, n_expert: int, limit: int = 2000, policy: str = REFERENCE, **knobs
) -> list[Step]:
    """The first `limit` records of the workload, step by step, under a policy of STEPPABLE."""
    if policy not in STEPPABLE:
        raise MoeModelError(f"the stepper shows {', '.join(STEPPABLE)}; {policy!r} runs only in the simulator")
    check_kernel_inputs(work.rec_layer, work.rec_ntok, work.rec_off, work.ids, work.k, n_expert, work.n_layer)
    idle = idle_limit(**(dict(get_policy(policy).knobs) | knobs)) if policy == "lazy-unload" else 0
    group_of = {il: gi for gi, g in enumerate(plan.groups) if g.cached and plan.starts for il in g.layers}
    pools = [_Pool(g.n_slots) if g.cached and plan.starts else None for g in plan.groups]
    out, total_hits, total_misses, rounds = [], 0, 0, [-1] * len(pools)
    for r in range(min(limit, work.n_records)):
        layer, ntok, ub = int(work.rec_layer[r]), int(work.rec_ntok[r]), int(work.rec_ubatch[r])
        ids = work.ids[work.rec_off[r] : work.rec_off[r] + work.k * ntok].tolist()
        gi = group_of.get(layer)
        hits, fills, evicted, path = [], [], [], "not cached"
        if gi is not None and ntok > 0:
            pool = pools[gi]
            if uses_pool(ntok, work.k, n_expert, len(pool.key_of)):
                path = "cache"
                unloaded = []
                if idle and rounds[gi] != ub:  # a new round for this pool: unload what sat idle
                    rounds[gi] = ub
                    unloaded = [(key // n_expert, key % n_expert) for key in pool.unload_idle(ub - idle)]
                hits, fills, evicted = _plan(pool, layer, list(dict.fromkeys(ids)), n_expert, ub)
                evicted = unloaded + evicted
                total_hits, total_misses = total_hits + len(hits), total_misses + len(fills)
            else:
                path = "large batch (copy)" if ntok >= OFFLOAD_MIN_BATCH else "CPU"
        snapshot = tuple(np.array(p.key_of) if p else np.zeros(0, int) for p in pools)
        out.append(
            Step(
                r,
                int(work.rec_ubatch[r]),
                layer,
                ntok,
                gi,
                path,
                tuple(hits),
                tuple(fills),
                tuple(evicted),
                snapshot,
                total_hits,
                total_misses,
                tuple(tuple(p.order) if p else () for p in pools),
            )
        )
    return out


def _plan(pool: _Pool, layer: int, uniq: list[int], n_expert: int, round_: int):
    """llama.cpp's plan(): hits go to the tail first, then sorted misses take the head slot."""
    hits = [e for e in uniq if layer * n_expert + e in pool.slot_of]
    for e in hits:
        pool.touch(pool.slot_of[layer * n_expert + e], round_)
    fills, evicted = [], []
    for e in sorted(set(uniq) - set(hits)):
        slot = pool.order[0]
        old = pool.key_of[slot]
        if old >= 0:
            del pool.slot_of[old]
            evicted.append((old // n_expert, old % n_expert))
        pool.key_of[slot] = layer * n_expert + e
        pool.slot_of[layer * n_expert + e] = slot
        pool.touch(slot, round_)
        fills.append((e, slot))
    return hits, fills, evicted
