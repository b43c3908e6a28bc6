"""llama.cpp b12170+ ClassLRU (PR #31233): one LRU list per frequency class over a group's slots.

Modelled from the opening comment of `src/llama-moe-cache.cpp` at ggml-org/llama.cpp commit c4fb5796 (its
state declarations were readable, its plan() body was not; docs/llamacpp-cache.md section 10):
- per (layer, expert) a CRF (combined recency and frequency): its uses, decayed with a half-life of 128 tokens,
  kept across evictions (`crf[n_layer * n_expert]`, `last_use[...]`: "layer clock at the last use");
- class = floor(log2(CRF)), at most n_class - 1, n_class = 8 (the class of CRF_max = 1 / (1 - 2^(-1/128)));
- a slot sits in the LRU list of its class as of its last use;
- victim: an empty slot, else among the least recently used slots of the lists not in the current plan(), the
  one with the largest age / 2^class; the clock advances by the real token count of each ubatch.
The rest is b11549's plan() (hits refreshed first in first-appearance order, then sorted misses) and its
get_slot_map rule. What the comment leaves open is a knob (OPEN_READINGS below: each reading's default and the
comment line it rests on); `band_kernel` runs the others beside it as a band.

The curve is one pass per group and class of budgets that see the same records: the CRF, its class and the
clock depend only on the lookups, so they are computed once per chunk and every budget's lists replay them. What
each pool size holds cannot be shared: ClassLRU is not a stack policy (with ages in each layer's own clock a smaller
pool can keep a key a larger one evicts; tests/policies/test_class_lru.py pins a case), so each pool size replays on
its own: a small one on its own linked lists (policies.class_lru_lists), the others in lanes of 64 that share the
class queues and test a key's hits in all of them with one word (policies.class_lru_lanes).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from math import floor, log2

import numpy as np
from numba import get_num_threads, set_num_threads, set_parallel_chunksize

from moe_model.errors import MoeModelError
from moe_model.limits import (
    CLASS_LRU_LANE_MIN_POOLS,
    CLASS_LRU_LIST_SHARE_OF_KEYS,
    CLASS_LRU_NS_PER_LOOKUP_BUDGET,
    SIM_NS_PER_LOOKUP_PASS,
)
from moe_model.llama.lru_kernel import MODE_SKIP
from moe_model.llama.simulate import Kernel, simulate_budgets
from moe_model.llama.slot_plan import Placement
from moe_model.numba_cache import parallel_kernels_may_overlap
from moe_model.policies.base import MODELLED, Policy, PolicyResult
from moe_model.policies.class_lru_kernel import _by_crf, _entries, _shared, carry, queues
from moe_model.policies.class_lru_lanes import _UNTIL, LANE_BITS
from moe_model.policies.class_lru_lanes import replay as replay_pools
from moe_model.policies.class_lru_lists import _CPU, _SELECTIONS, _SPLIT
from moe_model.policies.knobs import Knob
from moe_model.policies.lru import from_simulation
from moe_model.readers.model_spec import ModelSpec

HALF_LIFE_TOKENS = 128.0  # crf_half_life in the source
N_CLASSES = 8  # n_class in the source
NAME = "class-lru-b12170"  # the policy and its kernels


@dataclass(frozen=True)
class OpenReading:
    """A point the source comment leaves open: the knob, its readings (the default first) and the comment line
    the default rests on."""

    knob: str
    readings: tuple[str, ...]
    rests_on: str

    @property
    def default(self) -> str:
        return self.readings[0]


OPEN_READINGS = (
    # "layer clock at the last use": one clock per layer, advanced by its plan()'s tokens (ages in tokens, as the
    # CRF_max derivation assumes); "group": one clock for the group, advanced at every plan()
    OpenReading("clock", ("layer", "group"), 'last_use[n_layer * n_expert]: "layer clock at the last use"'),
    # "own": a slot's age counts in its own layer's clock (what last_use was stamped with); "planning": in the
    # clock of the layer whose plan() is choosing (moot with one group clock)
    OpenReading("age_clock", ("own", "planning"), 'last_use: "layer clock at the last use" (aged in that clock)'),
    # "low-class": of equal scores the lower class is evicted (the lists scanned from class 0 up); "high-class"
    OpenReading("ties", ("low-class", "high-class"), "victim: the largest age / 2^class (no tie rule stated)"),
    # "plan": +increment per expert per plan() (a use is a lookup: hits and misses count distinct experts);
    # "token": + increment per token of the ubatch that chose it
    OpenReading("increment_per", ("plan", "token"), "crf: its uses, decayed (a use as hits and misses count it)"),
)
READING_CHOICES = {r.knob: r.readings for r in OPEN_READINGS}
CLOCKS, AGE_CLOCKS, TIES, INCREMENTS_PER = (READING_CHOICES[k] for k in ("clock", "age_clock", "ties", "increment_per"))
DECLARED = (
    Knob("half_life_tokens", HALF_LIFE_TOKENS, "the CRF's half-life in tokens (crf_half_life)"),
    Knob("n_classes", N_CLASSES, "frequency classes, one LRU list each (n_class)", 1, 64),
    Knob("increment", 1.0, "what a use adds to the CRF"),
    *(Knob(r.knob, r.default, f"an open reading of {r.rests_on}", choices=r.readings) for r in OPEN_READINGS),
)
KNOBS = {k.name: k.default for k in DECLARED}

# the readings beside the default whose hit rates bound all of all_readings' within 0.63 points (16 cases: the real
# GPT-OSS-20B routing and a synthetic one, -np 1 and 4, pools of 12.5-75 %; scripts/class_lru_readings.py,
# moe_model/data/class_lru_readings.json): per-token increments keep the most, one group clock the least
BAND_READINGS = (
    {"clock": "layer", "age_clock": "own", "ties": "low-class", "increment_per": "token"},
    {"clock": "group", "age_clock": "own", "ties": "low-class", "increment_per": "plan"},
)


def all_readings() -> tuple[dict[str, str], ...]:
    """Every combination of the open readings (the default first); the age clock only with per-layer clocks (one
    group clock ages every slot alike)."""
    combos = itertools.product(*(r.readings for r in OPEN_READINGS))
    out = [dict(zip(READING_CHOICES, c, strict=True)) for c in combos]
    return tuple(r for r in out if r["clock"] == "layer" or r["age_clock"] == AGE_CLOCKS[0])


def reading_name(reading: dict[str, str]) -> str:
    """A reading in one word per knob, e.g. 'layer/own/low-class/plan'."""
    return "/".join(reading[k] for k in READING_CHOICES)


def crf_class(crf: float, n_classes: int = N_CLASSES) -> int:
    """floor(log2(CRF)) capped to 0..n_classes - 1 (a CRF below 1 only with an increment below 1)."""
    return min(n_classes - 1, max(0, floor(log2(crf)))) if crf > 0 else 0


def decayed(crf: float, age_tokens: float, half_life_tokens: float = HALF_LIFE_TOKENS) -> float:
    """The source's decayed_crf: the CRF `age_tokens` after its last use."""
    return crf * 2.0 ** (-age_tokens / half_life_tokens)


@dataclass(frozen=True, eq=False)
class ClassLruState:
    """One pass's state between chunks: the shared CRF, clocks and latest uses, and per pool size (each distinct
    size once: equal sizes replay alike) its bits and heads in a lane of up to 64 (policies.class_lru_lanes)."""

    caps: np.ndarray  # the pool sizes asked for
    pick: np.ndarray  # [len(caps)] each one's distinct pool size
    pool_caps: np.ndarray  # the distinct pool sizes, ascending
    n_list: int  # the smallest distinct pool sizes, each on its own lists (policies.class_lru_lists)
    lane_of: np.ndarray  # [n_pools - n_list] each other distinct pool size's lane
    bit_of: np.ndarray  # [n_pools - n_list] and its bit there
    half_life: float
    n_classes: int
    increment: float
    group_clock: bool
    age_planning: bool  # ages in the planning layer's clock (age_clock "planning")
    ties_high: bool
    per_token: bool  # the increment per token that chose the expert (increment_per "token")
    crf: np.ndarray  # [n_keys]
    last_use: np.ndarray  # [n_keys] clock at the last use, -1 before the first
    clock: np.ndarray  # [n_layer] (index 0 only with group_clock)
    carried: tuple  # (start [n_classes + 1], key, time, owner, record, rank) of each key's latest use, class by class
    # (its record: an order among the carried, class_lru_kernel.queues renumbers them)
    lane_caps: np.ndarray  # [n_lanes, 64] each bit's pool size (0: no pool)
    masks: np.ndarray  # [n_lanes] uint64: the bits in use
    res: np.ndarray  # [n_lanes, n_keys] uint64: the pools that hold the key
    hitf: np.ndarray  # [n_lanes, n_keys] uint64: the pools where the key's latest use was a hit
    fill: np.ndarray  # [n_lanes, 64] slots taken so far (empty slots are used in order)
    heads: np.ndarray  # [n_lanes, 64, n_classes] places in the class queues before which no use is in the list
    cached: np.ndarray  # [n_lanes, 64, n_classes, 5] each list's head last found (class_lru_lanes._POS...)
    misses: np.ndarray  # [n_lanes, 64, 2, n_layer]
    distinct: np.ndarray  # [n_layer, 2]
    lane_probe: np.ndarray  # [n_lanes, 64] probe hits
    share: float  # b12191's --moe-cache-cpu-share (policies.cpu_share), 0 for ClassLRU itself
    remainder: np.ndarray  # [n_lanes, 64] the share's carried fraction of a missed selection
    share_counts: np.ndarray  # [n_lanes, 64, 3, n_layer] the share's CPU-only, split and CPU selection counts
    lists: tuple  # the small pools' (caps, first slots, slot_of, links, used, first, last, [fill, probe hits],
    # misses [.., 2, n_layer], share counts [.., 3, n_layer], remainder [.., 1]) (class_lru_lists.list_pool)

    def per_pool(self, lane_array: np.ndarray, list_array: np.ndarray) -> np.ndarray:
        """The rows of each distinct pool size, in pool_caps' order: the small pools' from list_array, the others'
        from lane_array."""
        return np.concatenate([list_array, lane_array[self.lane_of, self.bit_of]])

    @property
    def filled(self) -> np.ndarray:
        return self.per_pool(self.fill, self.lists[7][:, 0])

    def held(self) -> np.ndarray:
        """[n_pools, n_keys] whether each distinct pool size holds the key."""
        in_lanes = (self.res[self.lane_of] >> self.bit_of.astype(np.uint64)[:, None]) & np.uint64(1) == 1
        return np.concatenate([self.lists[2] >= 0, in_lanes])

    @property
    def hits(self) -> np.ndarray:
        """[n_layer, 2, n_pools] the lookups each pool size held."""
        return self.distinct[:, :, None] - self.per_pool(self.misses, self.lists[8]).transpose(2, 1, 0)


_CARRIED = (np.int32, np.int64, np.int32, np.int64, np.int32)  # ClassLruState.carried: key, time, owner, record, rank


def _layout(caps: np.ndarray, n_keys: int) -> tuple[int, np.ndarray, np.ndarray, int]:
    """(how many of the distinct pool sizes, ascending, replay on their own lists; lane and bit of each other one;
    lanes): the rest dealt in turn over as few lanes as hold them, where they are enough to pay for the class
    queues (limits.CLASS_LRU_LANE_MIN_POOLS), else on lists too."""
    n_list = int(np.sum(caps < CLASS_LRU_LIST_SHARE_OF_KEYS * n_keys))
    if len(caps) - n_list < CLASS_LRU_LANE_MIN_POOLS:
        n_list = len(caps)
    n_lanes = -(-(len(caps) - n_list) // LANE_BITS)
    pools = np.arange(len(caps) - n_list)
    return n_list, pools % max(n_lanes, 1), pools // max(n_lanes, 1), n_lanes


def check_knobs(half_life_tokens: float, n_classes: int, increment: float, **readings: str) -> None:
    if not (np.isfinite(half_life_tokens) and half_life_tokens > 0):
        raise MoeModelError(f"half_life_tokens must be a positive number of tokens, got {half_life_tokens}")
    if n_classes != int(n_classes) or not 1 <= n_classes <= 64:
        raise MoeModelError(f"n_classes must be a whole number in 1..64, got {n_classes}")
    if not (np.isfinite(increment) and increment > 0):
        raise MoeModelError(f"increment must be a positive number, got {increment}")
    for knob, value in readings.items():
        if value not in READING_CHOICES[knob]:
            raise MoeModelError(f"{knob} must be one of {READING_CHOICES[knob]}, got {value!r}")


def _check(k: dict) -> None:
    check_knobs(k["half_life_tokens"], k["n_classes"], k["increment"], **{r: k[r] for r in READING_CHOICES})


def new_state(
    caps: np.ndarray, n_layer: int, n_expert: int, share: float = 0.0, group_keys: int | None = None, **knobs
) -> ClassLruState:
    """A pass's state; `group_keys` (its group's layers x n_expert, the model's keys where not given) decides which
    pool sizes replay on lists (limits.CLASS_LRU_LIST_SHARE_OF_KEYS): a speed choice, the counts are the same."""
    k = KNOBS | knobs
    _check(k)
    given = np.asarray(caps, dtype=np.int64)
    caps, pick = np.unique(given, return_inverse=True)
    n_keys, n_cls = n_layer * n_expert, int(k["n_classes"])
    n_list, lane_of, bit_of, n_lanes = _layout(caps, group_keys or n_keys)
    lane_caps = np.zeros((n_lanes, LANE_BITS), dtype=np.int64)
    lane_caps[lane_of, bit_of] = caps[n_list:]
    masks = np.zeros(n_lanes, dtype=np.uint64)
    np.bitwise_or.at(masks, lane_of, np.left_shift(np.uint64(1), bit_of.astype(np.uint64)))
    carried = (np.zeros(n_cls + 1, dtype=np.int64), *(np.empty(n_keys, dtype=t) for t in _CARRIED))
    per_bit = (n_lanes, LANE_BITS)
    return ClassLruState(
        given,
        pick.reshape(-1),
        caps,
        n_list,
        lane_of,
        bit_of,
        float(k["half_life_tokens"]),
        n_cls,
        float(k["increment"]),
        k["clock"] == "group",
        k["age_clock"] == "planning",
        k["ties"] == "high-class",
        k["increment_per"] == "token",
        np.zeros(n_keys, dtype=np.float64),
        np.full(n_keys, -1, dtype=np.int64),
        np.zeros(n_layer, dtype=np.int64),
        carried,
        lane_caps,
        masks,
        np.zeros((n_lanes, n_keys), dtype=np.uint64),
        np.zeros((n_lanes, n_keys), dtype=np.uint64),
        np.zeros(per_bit, dtype=np.int64),
        np.zeros((*per_bit, n_cls), dtype=np.int64),
        np.full((*per_bit, n_cls, 5), -1, dtype=np.int64),
        np.zeros((*per_bit, 2, n_layer), dtype=np.int64),
        np.zeros((n_layer, 2), dtype=np.int64),
        np.zeros(per_bit, dtype=np.int64),
        float(share),
        np.zeros(per_bit, dtype=np.float64),
        np.zeros((*per_bit, 3, n_layer), dtype=np.int64),
        _lists(caps[:n_list], n_layer, n_keys, n_cls),
    )


def _lists(caps: np.ndarray, n_layer: int, n_keys: int, n_cls: int) -> tuple:
    """The small pools' state (ClassLruState.lists)."""
    n, total = len(caps), int(caps.sum())
    return (
        caps,
        np.concatenate(([0], np.cumsum(caps)[:-1])).astype(np.int64),
        np.full((n, n_keys), -1, dtype=np.int32),
        np.full((total, 4), -1, dtype=np.int32),
        np.full(total, -1, dtype=np.int64),
        np.full((n, n_cls), -1, dtype=np.int64),
        np.full((n, n_cls), -1, dtype=np.int64),
        np.zeros((n, 2), dtype=np.int64),
        np.zeros((n, 2, n_layer), dtype=np.int64),
        np.zeros((n, 3, n_layer), dtype=np.int64),
        np.zeros((n, 1), dtype=np.float64),
    )


def state_bytes(n_layer: int, n_expert: int, caps: np.ndarray) -> int:
    """Bytes of one ClassLruState (at most what `new_state` allocates: a group's own key count puts more pool
    sizes in lanes, which take less), before a chunk's entries."""
    n_keys, pools = n_layer * n_expert, np.unique(caps)
    n_list, _, _, n_lanes = _layout(pools, n_keys)
    per_pool = 8 * (4 + 6 * N_CLASSES + 5 * n_layer)
    lanes = 16 * n_lanes * n_keys + n_lanes * LANE_BITS * per_pool
    lists = 4 * n_list * n_keys + 24 * int(pools[:n_list].sum()) + n_list * per_pool
    return 44 * n_keys + lanes + lists + 16 * n_layer


def ns_per_lookup(n_caps: int) -> float:
    """Kernel time per lookup of a pass: the shared CRF once, then each pool size's lists."""
    return SIM_NS_PER_LOOKUP_PASS / 4 + CLASS_LRU_NS_PER_LOOKUP_BUDGET * n_caps


def feed(s: ClassLruState, rec_layer, rec_ntok, rec_off, rec_mode, rec_large, ids, k: int, n_expert: int) -> None:
    """Replay one chunk of a group's records (offsets into this chunk's `ids`), continuing the pass; its pool sizes
    on numba's threads."""
    replay(s, entries(rec_layer, rec_ntok, rec_off, rec_mode, rec_large, ids, k, n_expert))


def feed_in_turn(s: ClassLruState, *chunk) -> None:
    """`feed` with the pool sizes in turn on this thread (Kernel.lane_feed: passes running beside each other)."""
    replay(s, entries(*chunk), threads=False)


def replay(s: ClassLruState, e: Entries, threads: bool = True) -> None:
    """Replay a chunk's entries (`entries`), continuing the pass."""
    _replay(s, _prepare(s, e), threads)


@dataclass(frozen=True, eq=False)
class Entries:
    """A chunk's records of the pass and their distinct experts, whatever the knobs: every reading fed the same
    chunk (the band) shares them."""

    rec_layer: np.ndarray
    rec_ntok: np.ndarray
    rec_mode: np.ndarray
    rec_large: np.ndarray
    start: np.ndarray  # [n_rec + 1] each record's first entry
    key: np.ndarray  # the record's distinct (layer, expert) keys, first appearance first
    by_key: np.ndarray  # a pool record's entries in expert-id order
    chose: np.ndarray  # tokens of the record that chose the entry's expert


def entries(rec_layer, rec_ntok, rec_off, rec_mode, rec_large, ids, k: int, n_expert: int) -> Entries:
    """The chunk's records other than skipped ones (every pool size's loop would step over them) and entries."""
    used = rec_mode != MODE_SKIP
    rec_layer, rec_ntok, rec_off, rec_mode, rec_large = (
        a[used] for a in (rec_layer, rec_ntok, rec_off, rec_mode, rec_large)
    )
    n_ent = int(np.minimum(rec_ntok.astype(np.int64) * k, n_expert).sum())
    start = np.zeros(len(rec_mode) + 1, dtype=np.int64)
    key, by_key, chose = (np.empty(n_ent, dtype=np.int32) for _ in range(3))
    _entries(rec_layer, rec_ntok, rec_off, rec_mode, ids, k, n_expert, start, key, by_key, chose)
    return Entries(rec_layer, rec_ntok, rec_mode, rec_large, start, key, by_key, chose)


def _prepare(s: ClassLruState, e: Entries) -> tuple:
    """What every pool size of a pass replays of a chunk (the CRF, classes and clock: s's knobs of the clock and
    the increment decide them, and the class queues), advancing s's CRF and clocks."""
    ent_cls = np.empty(len(e.key), dtype=np.int8)
    ent_crf = np.empty(len(e.key), dtype=np.float64)
    rec_now = np.zeros(len(e.rec_mode), dtype=np.int64)
    clock0 = s.clock.copy()
    _shared(
        e.rec_layer, e.rec_ntok, e.rec_mode, e.rec_large, s.crf, s.last_use, s.clock, s.half_life,
        s.increment, s.n_classes, s.group_clock, s.per_token, e.start, e.key, e.chose, ent_cls, ent_crf, rec_now,
        s.distinct,
    )  # fmt: skip
    by_crf = _by_crf(e.rec_mode, e.start, e.by_key, ent_crf) if s.share > 0 else e.by_key[:0]
    fed = len(e.rec_mode) if len(s.masks) else 0  # only lanes read the class queues: lists keep their own
    q = queues(
        e.rec_layer[:fed], e.rec_mode[:fed], rec_now, e.start[: fed + 1], e.key, e.by_key, ent_cls, s.group_clock,
        s.n_classes, len(s.crf), *s.carried,
    )  # fmt: skip
    chunk = (e.rec_layer, e.rec_mode, e.rec_large, rec_now, e.start, e.key, e.by_key, by_crf, e.chose, ent_cls)
    return chunk, q, clock0


def _replay(s: ClassLruState, prepared: tuple, threads: bool) -> None:
    """Every lane of s's pass replays a prepared chunk: on numba's threads, or (not `threads`) on this one; then
    the latest uses are carried to the next chunk."""
    chunk, q, clock0 = prepared
    inv = 2.0 ** -np.arange(s.n_classes, dtype=np.float64)
    knobs = (s.group_clock, s.age_planning, s.ties_high, s.share, inv)
    lane_state = (s.lane_caps, s.masks, s.res, s.hitf, s.fill, s.heads, s.cached, s.misses, s.share_counts,
                  s.remainder, s.lane_probe)  # fmt: skip
    s.cached[..., _UNTIL] = -1  # the cached heads are places in this chunk's queues
    threads_before = get_num_threads()
    if not threads:
        set_num_threads(1)  # this thread's own setting: the passes beside it keep theirs
    chunksize = set_parallel_chunksize(1)  # lanes to free threads one at a time
    try:
        replay_pools(chunk, q, clock0, knobs, lane_state, s.lists)
    finally:
        set_parallel_chunksize(chunksize)
        set_num_threads(threads_before)
    if len(s.masks):
        carry(q[0], q[1], s.heads, *s.carried)


def results(s: ClassLruState) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(hits [n_layer, 2, n_caps], distinct [n_layer, 2], probe hits [n_caps]) of everything fed so far."""
    return s.hits[:, :, s.pick], s.distinct.copy(), s.per_pool(s.lane_probe, s.lists[7][:, 1])[s.pick]


def cpu_counts(s: ClassLruState) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The CPU share's counts per layer and pool size [n_layer, n_caps]: missed experts only the CPU computes
    (never uploaded), missed experts uploaded that the CPU also computes for some of their selections, and the
    (token, chosen expert) selections computed on the CPU."""
    counts = s.per_pool(s.share_counts, s.lists[9])[s.pick]  # [n_caps, 3, n_layer]
    return tuple(counts[:, row, :].T.copy() for row in (_CPU, _SPLIT, _SELECTIONS))


def kernel(**knobs) -> Kernel:
    """The ClassLRU kernel with its knobs (KNOBS's defaults where not given); the same knobs give the same
    Kernel, so that callers can group simulations by kernel."""
    k = KNOBS | knobs
    _check(k)
    return _kernel(tuple(sorted(k.items())))


@functools.lru_cache(maxsize=64)
def _kernel(items: tuple) -> Kernel:
    k = dict(items)
    return Kernel(
        NAME,
        lambda caps, n_layer, n_expert, group_keys=None: new_state(caps, n_layer, n_expert, group_keys=group_keys, **k),
        feed,
        results,
        state_bytes,
        ns_per_lookup,
        lanes=False,  # its feed runs the pool sizes on numba's threads (prange): one pass at a time,
        lane_feed=feed_in_turn if parallel_kernels_may_overlap() else None,  # or several at once, each on one thread
    )


def run(
    model: ModelSpec, work, budgets_mib: Sequence[int], placement: Placement | None = None, **knobs
) -> list[PolicyResult]:
    """Every budget of a class in one pass per group (simulate_budgets with the ClassLRU kernel)."""
    return [from_simulation(r) for r in simulate_budgets(model, work, budgets_mib, placement, kernel(**knobs))]


POLICY = Policy(
    NAME,
    MODELLED,
    "llama.cpp b12170+ src/llama-moe-cache.cpp (PR #31233), its opening comment at commit c4fb5796; "
    "docs/llamacpp-cache.md section 10",
    "one LRU list per frequency class (CRF: uses decayed with a 128-token half-life, kept across evictions); "
    "evict the least recent slot of the list with the largest age / 2^class",
    run,
    DECLARED,
    kernel=kernel,
)
