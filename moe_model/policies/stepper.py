"""Step through llama.cpp's cache one (layer, ubatch) at a time, keeping every slot's content.

For teaching on small models: the literal b11549 plan() (linked list of slots, hits refreshed first,
sorted misses take the head), recording what each step hit, filled and evicted; and b12170's ClassLRU
written the same plain way (one list per class, each key's CRF), the readable reference of its kernel.
Slow by design; its counts equal the policy's (tests/test_policies.py). Policies it can show: STEPPABLE.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moe_model.errors import MoeModelError
from moe_model.llama.lru_kernel import check_kernel_inputs
from moe_model.llama.pool_rule import OFFLOAD_MIN_BATCH, uses_pool
from moe_model.llama.slot_plan import CachePlan
from moe_model.policies import CLASS_LRU, REFERENCE, get_policy
from moe_model.policies.class_lru import KNOBS, crf_class, decayed
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
    classes: tuple[np.ndarray, ...] = ()  # ClassLRU, per group: each slot's class list (-1 empty)
    crf: tuple[np.ndarray, ...] = ()  # ClassLRU, per group: each slot's CRF at its last use (0 empty)


STEPPABLE = (REFERENCE, CLASS_LRU, "lazy-unload")


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

    def victim(self) -> int:
        return self.order[0]

    def eviction_order(self) -> tuple[int, ...]:
        return tuple(self.order)

    def unload_idle(self, before: int) -> list[int]:
        """lazy-unload: clear the keys last used before round `before` (they lead the list); returns them."""
        gone = [self.key_of[s] for s in self.order if self.key_of[s] >= 0 and self.last_round[s] < before]
        for key in gone:
            self.key_of[self.slot_of.pop(key)] = -1
        return gone


class _ClassPool(_Pool):
    """ClassLRU (moe_model.policies.class_lru) on plain lists: one per class, each key's CRF and last use kept
    across evictions, the clocks per layer (or one per group)."""

    def __init__(self, n_slots: int, n_expert: int, knobs: dict) -> None:
        super().__init__(n_slots)
        self.n_expert, self.knobs = n_expert, knobs
        self.crf: dict[int, float] = {}
        self.last_use: dict[int, int] = {}
        self.clock: dict[int | str, int] = {}
        self.lists: list[list[int]] = [[] for _ in range(int(knobs["n_classes"]))]
        self.cls = [-1] * n_slots
        self.t = [0] * n_slots
        self.plan: set[int] = set()  # slots this plan() used

    def _clock_of(self, layer: int) -> int | str:
        return "group" if self.knobs["clock"] == "group" else layer

    def now(self, layer: int) -> int:
        return self.clock.get(self._clock_of(layer), 0)

    def start_plan(self, layer: int, n_tokens: int) -> None:
        """plan(): the clock advances by the ubatch's real token count; nothing is used yet."""
        self.clock[self._clock_of(layer)] = self.now(layer) + n_tokens
        self.plan = set()

    def use(self, key: int, layer: int) -> int:
        """The key's CRF after a use now (decayed, plus the increment) and its class."""
        now = self.now(layer)
        old = self.crf.get(key)
        value = self.knobs["increment"] + (0.0 if old is None else decayed(old, now - self.last_use[key], self.hl))
        self.crf[key], self.last_use[key] = value, now
        return crf_class(value, len(self.lists))

    @property
    def hl(self) -> float:
        return float(self.knobs["half_life_tokens"])

    def place(self, slot: int, cls: int, layer: int) -> None:
        if self.cls[slot] >= 0:
            self.lists[self.cls[slot]].remove(slot)
        self.lists[cls].append(slot)
        self.cls[slot], self.t[slot] = cls, self.now(layer)
        self.plan.add(slot)

    def score(self, slot: int) -> float:
        key = self.key_of[slot]
        return (self.now(key // self.n_expert) - self.t[slot]) / 2 ** self.cls[slot]

    def victim(self) -> int:
        empty = [s for s in range(len(self.key_of)) if self.key_of[s] < 0]
        if empty:
            return empty[0]
        heads = [lst[0] for lst in self.lists if lst and lst[0] not in self.plan]  # untouched lists only
        high = self.knobs["ties"] == "high-class"
        best = heads[0]
        for slot in heads[1:]:  # lowest class first: an equal score keeps it, unless ties go to the higher class
            gain = self.score(slot) - self.score(best)
            if gain > 0 or (high and gain == 0):
                best = slot
        return best

    def eviction_order(self) -> tuple[int, ...]:
        """Empty slots, then the held ones by score (largest first), class, and place in their list."""
        held = [s for s in range(len(self.key_of)) if self.key_of[s] >= 0]
        empty = [s for s in range(len(self.key_of)) if self.key_of[s] < 0]
        rank = sorted(held, key=lambda s: (-self.score(s), self.cls[s], self.lists[self.cls[s]].index(s)))
        return tuple(empty + rank)


def steps(
    work: Workload, plan: CachePlan, n_expert: int, limit: int = 2000, policy: str = REFERENCE, **knobs
) -> list[Step]:
    """The first `limit` records of the workload, step by step, under a policy of STEPPABLE."""
    if policy not in STEPPABLE:
        raise MoeModelError(f"the stepper shows {', '.join(STEPPABLE)}; {policy!r} runs only in the simulator")
    check_kernel_inputs(work.rec_layer, work.rec_ntok, work.rec_off, work.ids, work.k, n_expert, work.n_layer)
    idle = idle_limit(**(dict(get_policy(policy).knobs) | knobs)) if policy == "lazy-unload" else 0
    group_of = {il: gi for gi, g in enumerate(plan.groups) if g.cached and plan.starts for il in g.layers}
    pools = [_new_pool(g.n_slots, policy, knobs, n_expert) if g.cached and plan.starts else None for g in plan.groups]
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
                hits, fills, evicted = _plan(pool, layer, ntok, list(dict.fromkeys(ids)), n_expert, ub)
                evicted = unloaded + evicted
                total_hits, total_misses = total_hits + len(hits), total_misses + len(fills)
            else:
                path = "large batch (copy)" if ntok >= OFFLOAD_MIN_BATCH else "CPU"
        snapshot = tuple(np.array(p.key_of) if p else np.zeros(0, int) for p in pools)
        classes = tuple(np.array(p.cls) if isinstance(p, _ClassPool) else np.zeros(0, int) for p in pools)
        crfs = tuple(
            np.array([p.crf.get(kk, 0.0) for kk in p.key_of]) if isinstance(p, _ClassPool) else np.zeros(0)
            for p in pools
        )
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
                tuple(p.eviction_order() if p else () for p in pools),
                classes if policy == CLASS_LRU else (),
                crfs if policy == CLASS_LRU else (),
            )
        )
    return out


def _new_pool(n_slots: int, policy: str, knobs: dict, n_expert: int) -> _Pool:
    return _ClassPool(n_slots, n_expert, KNOBS | knobs) if policy == CLASS_LRU else _Pool(n_slots)


def _plan(pool: _Pool, layer: int, n_tokens: int, uniq: list[int], n_expert: int, round_: int):
    """llama.cpp's plan(): hits go to the tail first, then sorted misses take the victim (LRU: the head)."""
    classes = {}
    if isinstance(pool, _ClassPool):  # the clock moves by this record's tokens, then every key's CRF
        pool.start_plan(layer, n_tokens)
        classes = {e: pool.use(layer * n_expert + e, layer) for e in uniq}
    hits = [e for e in uniq if layer * n_expert + e in pool.slot_of]
    for e in hits:
        _refresh(pool, pool.slot_of[layer * n_expert + e], classes.get(e), layer, round_)
    fills, evicted = [], []
    for e in sorted(set(uniq) - set(hits)):
        slot = pool.victim()
        old = pool.key_of[slot]
        if old >= 0:
            del pool.slot_of[old]
            evicted.append((old // n_expert, old % n_expert))
        pool.key_of[slot] = layer * n_expert + e
        pool.slot_of[layer * n_expert + e] = slot
        _refresh(pool, slot, classes.get(e), layer, round_)
        fills.append((e, slot))
    return hits, fills, evicted


def _refresh(pool: _Pool, slot: int, cls: int | None, layer: int, round_: int) -> None:
    if isinstance(pool, _ClassPool):
        pool.place(slot, cls, layer)
    else:
        pool.touch(slot, round_)
