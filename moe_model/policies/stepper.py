"""Step through llama.cpp's cache one (layer, ubatch) at a time, keeping every slot's content.

For teaching on small models: b11549's plan() through the list engine the policies run (lru_lists: linked
list of slots, hits refreshed first, sorted misses take the head), one record at a time, recording what each
step hit, filled and evicted; and b12170's ClassLRU written the plain way (one list per class, each key's CRF),
the readable reference of its kernel. Its counts equal the policy's (tests/policies/test_policies.py). Policies it can
show: STEPPABLE. For a ClassLRU step, class_lru_step adds the victims' scores and which open readings would evict
another expert from the same pool.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from moe_model.errors import MoeModelError
from moe_model.llama.lru_kernel import check_kernel_inputs
from moe_model.llama.pool_rule import copies_from_pool, uses_pool
from moe_model.llama.slot_plan import CachePlan
from moe_model.policies import CLASS_LRU, CPU_SHARE, REFERENCE, get_policy
from moe_model.policies.class_lru import KNOBS, OPEN_READINGS, crf_class, decayed
from moe_model.policies.cpu_share import split_selections
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
    classes: tuple[np.ndarray, ...] = ()  # ClassLRU, per group: each slot's class list (-1 empty)
    crf: tuple[np.ndarray, ...] = ()  # ClassLRU, per group: each slot's CRF at its last use (0 empty)
    victims: tuple[Victim, ...] = ()  # ClassLRU: each eviction of this step, as its score chose it


@dataclass(frozen=True)
class Victim:
    """A slot ClassLRU evicted: its (layer, expert), class, age and score age / 2^class when it was chosen."""

    layer: int
    expert: int
    cls: int
    age: int
    score: float


@dataclass(frozen=True)
class ReadingChange:
    """An open reading of ClassLRU (class_lru.OPEN_READINGS) that, from the same pool, evicts other experts at a
    step: the knob, the reading, and the (layer, expert) it would evict."""

    knob: str
    reading: str
    evicted: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class ClassLruStep:
    """One ClassLRU step for Learn: the step, and each other open reading replayed on the pool as it stood before
    it (its CRF history kept): those that evict something else, and those that agree."""

    step: Step
    changes: tuple[ReadingChange, ...]
    agree: tuple[str, ...]

    def lines(self) -> list[str]:
        """The step in words: each victim's class, age and score, then the readings that change it."""
        out = [
            f"evicted L{v.layer}E{v.expert}: class {v.cls}, age {v.age} tokens, score {v.age} / 2^{v.cls} = "
            f"{v.score:g} (the largest of the list heads this step did not use)"
            for v in self.step.victims
        ]
        for c in self.changes:
            went = ", ".join(f"L{layer}E{e}" for layer, e in c.evicted) or "nothing"
            out.append(f"with {c.knob} = {c.reading} this step would evict {went} instead")
        if self.agree:
            out.append(f"the same victims with {', '.join(self.agree)}")
        return out


STEPPABLE = (REFERENCE, CLASS_LRU, "lazy-unload")  # what Learn shows; the CPU share steps too (its reference)


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


class _ClassPool:
    """ClassLRU (moe_model.policies.class_lru) on plain lists: one LRU list per class, each key's CRF and last use
    kept across evictions, the clocks per layer (or one per group). With a CPU share (policies.cpu_share), once
    the pool is full that share of a plan()'s missed selections goes to the CPU (split_selections), the lowest CRF
    first; an expert all of whose selections go is not kept."""

    def __init__(self, n_slots: int, n_expert: int, knobs: dict, share: float = 0.0) -> None:
        self.n_expert, self.knobs, self.share, self.remainder = n_expert, knobs, share, 0.0
        self.key_of = [-1] * n_slots
        self.slot_of: dict[int, int] = {}
        self.crf: dict[int, float] = {}
        self.last_use: dict[int, tuple[int, int]] = {}  # stamps in both clocks: a reading can switch between them
        self.clock: dict[int | str, int] = {}  # each layer's, and the group's ("group")
        self.lists: list[list[int]] = [[] for _ in range(int(knobs["n_classes"]))]
        self.cls = [-1] * n_slots
        self.t = [(0, 0)] * n_slots  # each slot's last use in its layer's clock and the group's
        self.used: set[int] = set()  # slots this plan() used
        self.victims: list[Victim] = []  # the last plan()'s evictions
        self.layer = 0  # the layer of the last plan(): the eviction order is scored as its next victim choice

    def _clock_of(self, layer: int) -> int | str:
        return "group" if self.knobs["clock"] == "group" else layer

    def now(self, layer: int) -> int:
        return self.clock.get(self._clock_of(layer), 0)

    def _stamp(self, layer: int) -> tuple[int, int]:
        return self.clock.get(layer, 0), self.clock.get("group", 0)

    def _kind(self) -> int:
        return 1 if self.knobs["clock"] == "group" else 0

    def use(self, key: int, layer: int, tokens: int) -> int:
        """The key's CRF after a use now by `tokens` tokens (decayed, plus the increment) and its class."""
        now, old = self.now(layer), self.crf.get(key)
        half_life = float(self.knobs["half_life_tokens"])
        add = self.knobs["increment"] * (tokens if self.knobs["increment_per"] == "token" else 1)
        value = add + (0.0 if old is None else decayed(old, now - self.last_use[key][self._kind()], half_life))
        self.crf[key], self.last_use[key] = value, self._stamp(layer)
        return crf_class(value, len(self.lists))

    def place(self, slot: int, cls: int, layer: int) -> None:
        if self.cls[slot] >= 0:
            self.lists[self.cls[slot]].remove(slot)
        self.lists[cls].append(slot)
        self.cls[slot], self.t[slot] = cls, self._stamp(layer)
        self.used.add(slot)

    def age(self, slot: int, layer: int) -> int:
        """Tokens since the slot's last use, in its layer's clock or (age_clock "planning") the planning layer's."""
        planning = self.knobs["age_clock"] == "planning"
        now = self.now(layer) if planning else self.now(self.key_of[slot] // self.n_expert)
        return max(now - self.t[slot][self._kind()], 0)

    def score(self, slot: int, layer: int) -> float:
        """age / 2^class: the victim is the list head with the largest."""
        return self.age(slot, layer) / 2 ** self.cls[slot]

    def victim(self, layer: int) -> int:
        """An empty slot, else the head of an untouched list with the largest age / 2^class."""
        empty = [s for s in range(len(self.key_of)) if self.key_of[s] < 0]
        if empty:
            return empty[0]
        heads = [lst[0] for lst in self.lists if lst and lst[0] not in self.used]
        high = self.knobs["ties"] == "high-class"
        best = heads[0]
        for slot in heads[1:]:  # lowest class first: an equal score keeps it, unless ties go to the higher class
            gain = self.score(slot, layer) - self.score(best, layer)
            if gain > 0 or (high and gain == 0):
                best = slot
        return best

    def _victim(self, slot: int, layer: int) -> Victim:
        key = self.key_of[slot]
        age = self.age(slot, layer)
        return Victim(key // self.n_expert, key % self.n_expert, self.cls[slot], age, age / 2 ** self.cls[slot])

    def eviction_order(self) -> tuple[int, ...]:
        """Empty slots, then the held ones by score (largest first), class, and place in their list."""
        held = [s for s in range(len(self.key_of)) if self.key_of[s] >= 0]
        empty = [s for s in range(len(self.key_of)) if self.key_of[s] < 0]
        rank = sorted(held, key=lambda s: (-self.score(s, self.layer), self.cls[s], self.lists[self.cls[s]].index(s)))
        return tuple(empty + rank)

    def plan(self, layer: int, n_tokens: int, ids: np.ndarray):
        """plan(): the clock moves by the ubatch's tokens, every key's CRF and class follow; hits first, then the
        sorted misses take the victims. Returns the hit experts, the (expert, slot) fills and the evictions."""
        for clock in (layer, "group"):  # both clocks move: the other reading of the clock can be compared
            self.clock[clock] = self.clock.get(clock, 0) + n_tokens
        self.used, self.layer = set(), layer
        base, uniq = layer * self.n_expert, list(dict.fromkeys(ids.tolist()))
        chose = ids.tolist()
        classes = {e: self.use(base + e, layer, chose.count(e)) for e in uniq}
        hits = [e for e in uniq if base + e in self.slot_of]
        for e in hits:
            self.place(self.slot_of[base + e], classes[e], layer)
        fills, evicted, self.victims = [], [], []
        misses = sorted(set(uniq) - set(hits))
        on_cpu: set[int] = set()
        if self.share > 0 and misses and min(self.key_of) >= 0:  # the pool is full: split the missed selections
            by_crf = sorted(misses, key=lambda e: self.crf[base + e])  # stable: ties by expert id
            split = split_selections([chose.count(e) for e in by_crf], self.share, self.remainder)
            self.remainder, on_cpu = split.remainder, {by_crf[i] for i in split.cpu_only}
        for e in misses:
            if e in on_cpu:
                continue
            slot = self.victim(layer)
            if (old := self.key_of[slot]) >= 0:
                self.victims.append(self._victim(slot, layer))
                del self.slot_of[old]
                evicted.append((old // self.n_expert, old % self.n_expert))
            self.key_of[slot], self.slot_of[base + e] = base + e, slot
            self.place(slot, classes[e], layer)
            fills.append((e, slot))
        return tuple(hits), tuple(fills), tuple(evicted)


def steps(
    work: Workload, plan: CachePlan, n_expert: int, limit: int = 2000, policy: str = REFERENCE, **knobs
) -> list[Step]:
    """The first `limit` records of the workload, step by step, under a policy of STEPPABLE."""
    if policy not in (*STEPPABLE, CPU_SHARE):
        raise MoeModelError(f"the stepper shows {', '.join(STEPPABLE)}; {policy!r} runs only in the simulator")
    share = float(knobs.pop("share", get_policy(CPU_SHARE).knobs["share"])) if policy == CPU_SHARE else 0.0
    check_kernel_inputs(work.rec_layer, work.rec_ntok, work.rec_off, work.ids, work.k, n_expert, work.n_layer)
    idle = idle_limit(**(dict(get_policy(policy).knobs) | knobs)) if policy == "lazy-unload" else 0
    group_of = {il: gi for gi, g in enumerate(plan.groups) if g.cached and plan.starts for il in g.layers}
    cached = [g.cached and plan.starts for g in plan.groups]
    pools = _Pools([g.n_slots if c else 0 for g, c in zip(plan.groups, cached, strict=True)], work.n_layer, n_expert)
    classy = [_ClassPool(g.n_slots, n_expert, KNOBS | knobs, share) if c and policy in (CLASS_LRU, CPU_SHARE) else None
              for g, c in zip(plan.groups, cached, strict=True)]  # fmt: skip
    out, total_hits, total_misses, rounds = [], 0, 0, [-1] * len(cached)
    for r in range(min(limit, work.n_records)):
        layer, ntok, ub = int(work.rec_layer[r]), int(work.rec_ntok[r]), int(work.rec_ubatch[r])
        ids = work.ids[work.rec_off[r] : work.rec_off[r] + work.k * ntok]
        gi = group_of.get(layer)
        hits, fills, evicted, path, victims = (), (), (), "not cached", ()
        if gi is not None and ntok > 0:
            if uses_pool(ntok, work.k, n_expert, int(pools.sizes[gi])):
                path = "cache"
                unloaded: tuple = ()
                if idle and rounds[gi] != ub:  # a new round for this pool: unload what sat idle
                    rounds[gi] = ub
                    n = unload_idle(pools.lists, gi, ub - idle, pools.evicted)
                    unloaded = tuple((int(key) // n_expert, int(key) % n_expert) for key in pools.evicted[:n])
                if classy[gi] is not None:
                    hits, fills, evicted = classy[gi].plan(layer, ntok, ids)
                    victims = tuple(classy[gi].victims)
                else:
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
                *_snapshot(pools, classy, cached, total_hits, total_misses),
                victims,
            )
        )
    return out


def class_lru_step(work: Workload, plan: CachePlan, n_expert: int, index: int, **knobs) -> ClassLruStep:
    """Learn's ClassLRU step `index`: the step (classes, CRF, the victims' scores) and, for each other open reading,
    whether it evicts something else from the pool as it stood before the step (the same CRF history; the band
    replays each reading's own)."""
    trail = steps(work, plan, n_expert, index + 1, CLASS_LRU, **knobs)
    step = trail[index]
    if step.path != "cache" or step.group is None:
        return ClassLruStep(step, (), ())
    pool = _pool_before(work, plan, n_expert, index, KNOBS | knobs, step.group)
    ids = work.ids[work.rec_off[index] : work.rec_off[index] + work.k * step.n_tokens]
    changes, agree = [], []
    for open_reading in OPEN_READINGS:
        for reading in open_reading.readings:
            if reading == pool.knobs[open_reading.knob]:
                continue
            name = f"{open_reading.knob} = {reading}"
            other = copy.deepcopy(pool)
            other.knobs = pool.knobs | {open_reading.knob: reading}
            evicted = other.plan(step.layer, step.n_tokens, ids)[2]
            if sorted(evicted) != sorted(step.evicted):  # other victims, not the same ones in another order
                changes.append(ReadingChange(open_reading.knob, reading, evicted))
            else:
                agree.append(name)
    return ClassLruStep(step, tuple(changes), tuple(agree))


def _pool_before(work: Workload, plan: CachePlan, n_expert: int, index: int, knobs: dict, gi: int) -> _ClassPool:
    """Group gi's ClassLRU pool just before record `index`, replayed as steps() replays it."""
    group = plan.groups[gi]
    pool = _ClassPool(group.n_slots, n_expert, knobs)
    for r in range(index):
        layer, ntok = int(work.rec_layer[r]), int(work.rec_ntok[r])
        if layer in group.layers and ntok > 0 and uses_pool(ntok, work.k, n_expert, group.n_slots):
            pool.plan(layer, ntok, work.ids[work.rec_off[r] : work.rec_off[r] + work.k * ntok])
    return pool


def _snapshot(pools: _Pools, classy: list, cached: list[bool], total_hits: int, total_misses: int) -> tuple:
    """Step's fields after `evicted`: per group the key in each slot, the counts so far, the eviction order and
    (ClassLRU) each slot's class and CRF."""
    if not any(c is not None for c in classy):
        contents = tuple(pools.contents(p) if c else np.zeros(0, int) for p, c in enumerate(cached))
        order = tuple(pools.order(p) if c else () for p, c in enumerate(cached))
        return contents, total_hits, total_misses, order, (), ()
    empty = np.zeros(0, int)
    contents = tuple(np.array(c.key_of) if c else empty for c in classy)
    order = tuple(c.eviction_order() if c else () for c in classy)
    classes = tuple(np.array(c.cls) if c else empty for c in classy)
    crf = tuple(np.array([c.crf.get(k, 0.0) for k in c.key_of]) if c else np.zeros(0) for c in classy)
    return contents, total_hits, total_misses, order, classes, crf


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
