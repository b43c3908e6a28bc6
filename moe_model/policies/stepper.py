"""Step through llama.cpp's cache one (layer, ubatch) at a time, keeping every slot's content.

For teaching on small models: b11549's plan() through the list engine the policies run (lru_lists: linked
list of slots, hits refreshed first, sorted misses take the head), one record at a time, recording what each
step hit, filled and evicted. Its counts equal the policy's (tests/test_policies.py). Policies it can show:
STEPPABLE.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moe_model.errors import MoeModelError
from moe_model.llama.lru_kernel import check_kernel_inputs
from moe_model.llama.pool_rule import copies_from_pool, uses_pool
from moe_model.llama.slot_plan import CachePlan
from moe_model.policies import REFERENCE, get_policy
from moe_model.policies.lazy_unload import idle_limit
from moe_model.policies.lru_lists import HEADS, KEY_OF, NEXT, fill_misses, new_lists, refresh_hits, unload_idle
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


class _Pools:
    """The groups' pools as lru_lists' list engine keeps them (one pool per group; an uncached group has none)."""

    def __init__(self, slots: list[int], n_layer: int, n_expert: int) -> None:
        self.sizes = np.array(slots, dtype=np.int64)
        self.starts = np.concatenate(([0], np.cumsum(self.sizes)[:-1])).astype(np.int64)
        self.lists = new_lists(self.sizes, n_layer * n_expert)
        n = max(int(self.sizes.max(initial=0)), n_expert)  # a record's experts, or a pool's keys unloaded at once
        self.hits, self.misses, self.slots, self.evicted = (np.empty(n, dtype=np.int64) for _ in range(4))

    def contents(self, p: int) -> np.ndarray:
        start = self.starts[p]
        return self.lists[KEY_OF][start : start + self.sizes[p]].copy()

    def order(self, p: int) -> tuple[int, ...]:
        """Pool p's slots from the next eviction (head) to the most recently used."""
        out, s = [], int(self.lists[HEADS][p])
        while s >= 0:
            out.append(s - int(self.starts[p]))
            s = int(self.lists[NEXT][s])
        return tuple(out)


def steps(
    work: Workload, plan: CachePlan, n_expert: int, limit: int = 2000, policy: str = REFERENCE, **knobs
) -> list[Step]:
    """The first `limit` records of the workload, step by step, under a policy of STEPPABLE."""
    if policy not in STEPPABLE:
        raise MoeModelError(f"the stepper shows {', '.join(STEPPABLE)}; {policy!r} runs only in the simulator")
    check_kernel_inputs(work.rec_layer, work.rec_ntok, work.rec_off, work.ids, work.k, n_expert, work.n_layer)
    idle = idle_limit(**(dict(get_policy(policy).knobs) | knobs)) if policy == "lazy-unload" else 0
    group_of = {il: gi for gi, g in enumerate(plan.groups) if g.cached and plan.starts for il in g.layers}
    cached = [g.cached and plan.starts for g in plan.groups]
    pools = _Pools([g.n_slots if c else 0 for g, c in zip(plan.groups, cached, strict=True)], work.n_layer, n_expert)
    out, total_hits, total_misses, rounds = [], 0, 0, [-1] * len(cached)
    for r in range(min(limit, work.n_records)):
        layer, ntok, ub = int(work.rec_layer[r]), int(work.rec_ntok[r]), int(work.rec_ubatch[r])
        ids = work.ids[work.rec_off[r] : work.rec_off[r] + work.k * ntok]
        gi = group_of.get(layer)
        hits, fills, evicted, path = (), (), (), "not cached"
        if gi is not None and ntok > 0:
            if uses_pool(ntok, work.k, n_expert, int(pools.sizes[gi])):
                path = "cache"
                unloaded: tuple = ()
                if idle and rounds[gi] != ub:  # a new round for this pool: unload what sat idle
                    rounds[gi] = ub
                    n = unload_idle(pools.lists, gi, ub - idle, pools.evicted)
                    unloaded = tuple((int(key) // n_expert, int(key) % n_expert) for key in pools.evicted[:n])
                hits, fills, evicted = _plan(pools, gi, layer, ids, n_expert, ub)
                evicted = unloaded + evicted
                total_hits, total_misses = total_hits + len(hits), total_misses + len(fills)
            else:
                path = "large batch (copy)" if copies_from_pool(ntok) else "CPU"
        out.append(
            Step(
                r,
                ub,
                layer,
                ntok,
                gi,
                path,
                hits,
                fills,
                evicted,
                tuple(pools.contents(p) if c else np.zeros(0, int) for p, c in enumerate(cached)),
                total_hits,
                total_misses,
                tuple(pools.order(p) if c else () for p, c in enumerate(cached)),
            )
        )
    return out


def _plan(pools: _Pools, p: int, layer: int, ids: np.ndarray, n_expert: int, round_: int):
    """llama.cpp's plan() on pool p through the list engine: hits go to the tail first, then sorted misses take the
    head slot. Returns the hit experts, the (expert, slot) fills and the (layer, expert) evictions."""
    uniq = np.array(list(dict.fromkeys(ids.tolist())), dtype=np.int64)
    base = layer * n_expert
    nh, nm = refresh_hits(pools.lists, p, base, uniq, len(uniq), round_, pools.hits, pools.misses)
    refuse_none = np.zeros(nm, dtype=np.bool_)
    room = int(pools.sizes[p]) - nh
    fill_misses(pools.lists, p, base, pools.misses, nm, refuse_none, room, round_, pools.slots, pools.evicted)
    start = int(pools.starts[p])
    fills = tuple((int(pools.misses[j]), int(pools.slots[j]) - start) for j in range(nm))
    gone = tuple((int(e) // n_expert, int(e) % n_expert) for e in pools.evicted[:nm] if e >= 0)
    return tuple(int(e) for e in pools.hits[:nh]), fills, gone
