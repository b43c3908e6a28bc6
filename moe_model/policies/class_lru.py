"""llama.cpp b12170+ ClassLRU (PR #31233): one LRU list per frequency class over a group's slots.

Modelled from the opening comment of `src/llama-moe-cache.cpp` at ggml-org/llama.cpp commit c4fb5796 (its
state declarations were readable, its plan() body was not; ../shared/docs/llamacpp-moe-cache.md section 10):
- per (layer, expert) a CRF (combined recency and frequency): its uses, decayed with a half-life of 128 tokens,
  kept across evictions (`crf[n_layer * n_expert]`, `last_use[...]`: "layer clock at the last use");
- class = floor(log2(CRF)), at most n_class - 1, n_class = 8 (the class of CRF_max = 1 / (1 - 2^(-1/128)));
- a slot sits in the LRU list of its class as of its last use;
- victim: an empty slot, else among the least recently used slots of the lists not in the current plan(), the
  one with the largest age / 2^class; the clock advances by the real token count of each ubatch.
The rest is b11549's plan() (hits refreshed first in first-appearance order, then sorted misses) and its
get_slot_map rule. What the comment leaves open is a knob, defaulting to its most literal reading:
- `clock`: "layer" (one clock per layer, advanced by the record's tokens at each plan() of that layer: ages in
  tokens, as the CRF_max derivation assumes) or "group" (one clock for the group, advanced at every plan():
  ages in layer steps);
- `increment`: CRF added per use (hit or miss), 1;
- `ties`: "low-class" (equal scores: the lower class is evicted) or "high-class".

The curve is one pass per group and class of budgets that see the same records: the CRF, its class and the
clock depend only on the lookups, so they are computed once per chunk and every budget's lists replay them.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from math import floor, log2

import numba
import numpy as np
from numba import njit, prange

from moe_model.errors import MoeModelError
from moe_model.limits import CLASS_LRU_NS_PER_LOOKUP_BUDGET, SIM_NS_PER_LOOKUP_PASS
from moe_model.llama.lru_kernel import MODE_CACHE, MODE_PROBE, MODE_SKIP
from moe_model.llama.simulate import Kernel, simulate_budgets
from moe_model.llama.slot_plan import Placement
from moe_model.policies.base import MODELLED, Policy, PolicyResult
from moe_model.policies.lru import from_simulation
from moe_model.readers.model_spec import ModelSpec

HALF_LIFE_TOKENS = 128.0  # crf_half_life in the source
N_CLASSES = 8  # n_class in the source
CLOCKS = ("layer", "group")
TIES = ("low-class", "high-class")
KNOBS = {"half_life_tokens": HALF_LIFE_TOKENS, "n_classes": N_CLASSES, "increment": 1.0, "clock": "layer",
         "ties": "low-class"}  # fmt: skip


def crf_class(crf: float, n_classes: int = N_CLASSES) -> int:
    """floor(log2(CRF)) capped to 0..n_classes - 1 (a CRF below 1 only with an increment below 1)."""
    return min(n_classes - 1, max(0, floor(log2(crf)))) if crf > 0 else 0


def decayed(crf: float, age_tokens: float, half_life_tokens: float = HALF_LIFE_TOKENS) -> float:
    """The source's decayed_crf: the CRF `age_tokens` after its last use."""
    return crf * 2.0 ** (-age_tokens / half_life_tokens)


@dataclass(frozen=True, eq=False)
class ClassLruState:
    """One pass's state between chunks: what every pool size shares (the CRF, the clocks, each key's latest use and
    the class queues of the latest uses), and per pool size ("lane", 64 to a block of lanes run on one thread) its
    list heads, fill, CPU-share remainder and one bit per key (its latest use was a hit / was sent to the CPU)."""

    caps: np.ndarray  # [n_caps]
    lane_of: np.ndarray  # [n_caps, 2]: (block, lane) of each pool size
    cap_of: np.ndarray  # [n_blocks, width]: pool size of each lane (0: no pool size)
    n_lanes: np.ndarray  # [n_blocks]
    half_life: float
    n_classes: int
    increment: float
    group_clock: bool
    ties_high: bool
    share: float  # the CPU share (cpu_share: b12191's --moe-cache-cpu-share), 0 for ClassLRU itself
    crf: np.ndarray  # [n_keys]
    last_use: np.ndarray  # [n_keys] clock at the last use, -1 before the first
    clock: np.ndarray  # [n_layer] (index 0 only with group_clock)
    key_use: np.ndarray  # [n_keys, 4]: the latest pool use (record, event number, class, place in the queues)
    counters: np.ndarray  # [2]: records and pool events of the pass so far
    queue: dict  # the class queues (QUEUE_FIELDS, "start"): every key's latest pool use, each class in order of use
    head_rec: np.ndarray  # [n_blocks, n_classes, width] record of the list's head (its evictions so far), -1 none
    thr: np.ndarray  # [n_blocks, n_classes, width] order key of the head record's last eviction, -1 none
    hpos: np.ndarray  # [n_blocks, n_classes, width] place in the queues where the head record starts
    cand: np.ndarray  # [n_blocks, n_classes, width] place of the next eviction, -1 not known
    filled: np.ndarray  # [n_blocks, width] slots taken so far (empty slots are used first)
    remainder: np.ndarray  # [n_blocks, width] the CPU share's carried fraction of a miss
    hit_bits: np.ndarray  # [n_blocks, n_keys] bit per lane: the key's latest use was a hit
    cpu_bits: np.ndarray  # [n_blocks, n_keys] bit per lane: the key's latest use was a miss sent to the CPU
    hits: np.ndarray  # [n_blocks, n_layer, 2, width]
    cpu: np.ndarray  # [n_blocks, n_layer, width]
    probe: np.ndarray  # [n_blocks, width]
    distinct: np.ndarray  # [n_layer, 2]


QUEUE_FIELDS = ("key", "rec", "seq", "next", "last")  # per queued use: key, record, event number, next use, clock
LANES_PER_BLOCK = 64  # one int64 of bits per key and block


def check_knobs(half_life_tokens: float, n_classes: int, increment: float, clock: str, ties: str) -> None:
    if not (np.isfinite(half_life_tokens) and half_life_tokens > 0):
        raise MoeModelError(f"half_life_tokens must be a positive number of tokens, got {half_life_tokens}")
    if n_classes != int(n_classes) or not 1 <= n_classes <= 64:
        raise MoeModelError(f"n_classes must be a whole number in 1..64, got {n_classes}")
    if not (np.isfinite(increment) and increment > 0):
        raise MoeModelError(f"increment must be a positive number, got {increment}")
    if clock not in CLOCKS or ties not in TIES:
        raise MoeModelError(f"clock must be one of {CLOCKS} and ties one of {TIES}, got {clock!r}, {ties!r}")


def n_blocks(n_caps: int) -> int:
    """Blocks of lanes: one per thread numba has (the blocks run at once), at most 64 lanes each."""
    return max(1, min(n_caps, max(numba.get_num_threads(), -(-n_caps // LANES_PER_BLOCK))))


def new_state(caps: np.ndarray, n_layer: int, n_expert: int, share: float = 0.0, **knobs) -> ClassLruState:
    k = KNOBS | knobs
    check_knobs(k["half_life_tokens"], k["n_classes"], k["increment"], k["clock"], k["ties"])
    caps = np.asarray(caps, dtype=np.int64)
    n_caps, n_keys, n_cls = len(caps), n_layer * n_expert, int(k["n_classes"])
    blocks = n_blocks(n_caps)
    width = -(-n_caps // blocks)
    lane_of = np.stack([np.arange(n_caps) % blocks, np.arange(n_caps) // blocks], axis=1).astype(np.int64)
    cap_of = np.zeros((blocks, width), dtype=np.int64)
    cap_of[lane_of[:, 0], lane_of[:, 1]] = caps
    per_lane = (blocks, n_cls, width)
    return ClassLruState(
        caps,
        lane_of,
        cap_of,
        np.bincount(lane_of[:, 0], minlength=blocks).astype(np.int64),
        float(k["half_life_tokens"]),
        n_cls,
        float(k["increment"]),
        k["clock"] == "group",
        k["ties"] == "high-class",
        float(share),
        np.zeros(n_keys, dtype=np.float64),
        np.full(n_keys, -1, dtype=np.int64),
        np.zeros(n_layer, dtype=np.int64),
        np.full((n_keys, 4), -1, dtype=np.int64),
        np.zeros(2, dtype=np.int64),
        {"key": np.zeros(0, np.int32), **{f: np.zeros(0, np.int64) for f in QUEUE_FIELDS[1:]},
         "start": np.zeros(n_cls + 1, np.int64)},  # fmt: skip
        np.full(per_lane, -1, dtype=np.int64),
        np.full(per_lane, -1, dtype=np.int64),
        np.zeros(per_lane, dtype=np.int64),
        np.full(per_lane, -1, dtype=np.int64),
        np.zeros((blocks, width), dtype=np.int64),
        np.zeros((blocks, width), dtype=np.float64),
        np.zeros((blocks, n_keys), dtype=np.int64),
        np.zeros((blocks, n_keys), dtype=np.int64),
        np.zeros((blocks, n_layer, 2, width), dtype=np.int64),
        np.zeros((blocks, n_layer, width), dtype=np.int64),
        np.zeros((blocks, width), dtype=np.int64),
        np.zeros((n_layer, 2), dtype=np.int64),
    )


def state_bytes(n_layer: int, n_expert: int, caps: np.ndarray) -> int:
    """Bytes of one ClassLruState (what `new_state` allocates), with its queues of live uses, before a chunk's."""
    n_keys, n_caps = n_layer * n_expert, len(caps)
    blocks = n_blocks(n_caps)
    per_lane = 8 * (4 * N_CLASSES + 2 + 2 * n_layer + 1)
    return n_keys * (48 + 36 + 16 * blocks) + per_lane * (n_caps + blocks)


def ns_per_lookup(n_caps: int) -> float:
    """Kernel time per lookup of a pass: the shared uses once, then each pool size's test and evictions."""
    return SIM_NS_PER_LOOKUP_PASS / 4 + CLASS_LRU_NS_PER_LOOKUP_BUDGET * n_caps


def feed(s: ClassLruState, rec_layer, rec_ntok, rec_off, rec_mode, rec_large, ids, k: int, n_expert: int) -> None:
    """Replay one chunk of a group's records (offsets into this chunk's `ids`), continuing the pass."""
    n_rec = len(rec_mode)
    n_ent = int(np.minimum(rec_ntok.astype(np.int64) * k, n_expert)[rec_mode != MODE_SKIP].sum())
    ent_start = np.zeros(n_rec + 1, dtype=np.int64)
    ent_key = np.empty(n_ent, dtype=np.int32)
    ent_cls = np.empty(n_ent, dtype=np.int8)
    ent_seq = np.empty(n_ent, dtype=np.int64)
    ent_prev = np.empty((n_ent, 3), dtype=np.int64)
    ent_crf = np.empty(n_ent, dtype=np.float64)
    rec_now = np.zeros(n_rec, dtype=np.int64)
    clock0, base_rec = s.clock.copy(), int(s.counters[0])
    _events(
        rec_layer, rec_ntok, rec_off, rec_mode, rec_large, ids, k, n_expert, s.crf, s.last_use, s.clock,
        s.half_life, s.increment, s.n_classes, s.group_clock, s.key_use, s.counters, ent_start, ent_key, ent_cls,
        ent_seq, ent_prev, ent_crf, rec_now, s.distinct,
    )  # fmt: skip
    q = s.queue
    q["key"], q["rec"], q["seq"], q["next"], q["last"], q["start"] = _layout(
        q["key"], q["rec"], q["seq"], q["next"], q["last"], q["start"], rec_mode, rec_now, ent_start, ent_key,
        ent_cls, ent_seq, ent_prev, base_rec, s.n_classes, s.key_use, s.head_rec, s.hpos, s.cand, s.n_lanes,
    )  # fmt: skip
    order = _by_crf(rec_mode, ent_start, ent_key, ent_crf) if s.share > 0 else ent_start[:0].astype(np.int32)
    inv = 2.0 ** -np.arange(s.n_classes, dtype=np.float64)
    _lanes(
        rec_layer, rec_mode, rec_large, ent_start, ent_key, ent_prev, order, rec_now, clock0, base_rec, n_expert,
        s.group_clock, s.ties_high, s.share, inv, q["key"], q["rec"], q["seq"], q["next"], q["last"], q["start"],
        s.n_lanes, s.cap_of, s.head_rec, s.thr, s.hpos, s.cand, s.filled, s.remainder, s.hit_bits, s.cpu_bits,
        s.hits, s.cpu, s.probe,
    )  # fmt: skip


def results(s: ClassLruState) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(hits [n_layer, 2, n_caps], distinct [n_layer, 2], probe hits [n_caps]) of everything fed so far."""
    blk, lane = s.lane_of[:, 0], s.lane_of[:, 1]
    return np.moveaxis(s.hits[blk, :, :, lane], 0, -1).copy(), s.distinct.copy(), s.probe[blk, lane].copy()


def cpu_counts(s: ClassLruState) -> np.ndarray:
    """Misses computed on the CPU (the share) per layer and pool size [n_layer, n_caps]."""
    return np.moveaxis(s.cpu[s.lane_of[:, 0], :, s.lane_of[:, 1]], 0, -1).copy()


_NONE = np.iinfo(np.int64).max  # the next use of a key's latest use: none yet
_MISS = np.int64(1) << 62  # a record's misses join its class lists after its hits, in key order
_REC, _SEQ, _CLS, _POS = range(4)  # ClassLruState.key_use's columns


@njit(cache=True, nogil=True)
def _events(
    rec_layer, rec_ntok, rec_off, rec_mode, rec_large, ids, k, n_expert, crf, last_use, clock, half_life, increment,
    n_classes, group_clock, key_use, counters, ent_start, ent_key, ent_cls, ent_seq, ent_prev, ent_crf, rec_now,
    distinct,
):  # fmt: skip
    """Per record: its distinct experts in first-appearance order, each one's previous pool use (record, event
    number, class: whether a pool size still holds it follows from these) and, for a pool record, its CRF after
    this use, its class and its event number; and the clock. What every pool size of the pass shares."""
    seen = np.zeros(n_expert, dtype=np.int64)
    n, base_rec = 0, counters[0]
    for r in range(len(rec_mode)):
        ent_start[r] = n
        mode = rec_mode[r]
        if mode == MODE_SKIP:
            continue
        layer = rec_layer[r]
        nu = 0
        for i in range(rec_off[r], rec_off[r] + rec_ntok[r] * k):
            e = ids[i]
            if seen[e] != r + 1:
                seen[e] = r + 1
                key = layer * n_expert + e
                ent_key[n + nu] = key
                ent_prev[n + nu, 0], ent_prev[n + nu, 1] = key_use[key, _REC], key_use[key, _SEQ]
                ent_prev[n + nu, 2] = key_use[key, _CLS]
                nu += 1
        if mode == MODE_CACHE:
            c = 0 if group_clock else layer
            clock[c] += rec_ntok[r]
            now = clock[c]
            rec_now[r] = now
            distinct[layer, rec_large[r]] += nu
            for q in range(n, n + nu):
                key = ent_key[q]
                if last_use[key] >= 0:
                    value = crf[key] * 2.0 ** (-(now - last_use[key]) / half_life) + increment
                else:
                    value = increment
                crf[key], last_use[key], ent_crf[q] = value, now, value
                cls = min(n_classes - 1, max(0, int(np.floor(np.log2(value))))) if value > 0 else 0
                ent_cls[q], ent_seq[q] = cls, counters[1]
                key_use[key, _REC], key_use[key, _SEQ], key_use[key, _CLS] = base_rec + r, counters[1], cls
                counters[1] += 1
        n += nu
    ent_start[len(rec_mode)] = n
    counters[0] += len(rec_mode)


@njit(cache=True, nogil=True)
def _layout(
    q_key, q_rec, q_seq, q_next, q_last, q_start, rec_mode, rec_now, ent_start, ent_key, ent_cls, ent_seq, ent_prev,
    base_rec, n_classes, key_use, head_rec, hpos, cand, n_lanes,
):  # fmt: skip
    """The class queues for a chunk: the uses still latest (carried over), then the chunk's pool uses, each class in
    order of use; a use's next use set; each lane's head found again in the new places."""
    count = np.zeros(n_classes, dtype=np.int64)
    for c in range(n_classes):
        for j in range(q_start[c], q_start[c + 1]):
            count[c] += q_next[j] == _NONE
    carried = count.copy()
    for r in range(len(rec_mode)):
        if rec_mode[r] == MODE_CACHE:
            for q in range(ent_start[r], ent_start[r + 1]):
                count[ent_cls[q]] += 1
    start = np.zeros(n_classes + 1, dtype=np.int64)
    for c in range(n_classes):
        start[c + 1] = start[c] + count[c]
    n = start[n_classes]
    n_key, n_rec, n_seq = np.empty(n, np.int32), np.empty(n, np.int64), np.empty(n, np.int64)
    n_next, n_last = np.full(n, _NONE, np.int64), np.empty(n, np.int64)
    fill = start[:n_classes].copy()
    for c in range(n_classes):
        for j in range(q_start[c], q_start[c + 1]):
            if q_next[j] == _NONE:
                p = fill[c]
                fill[c] += 1
                n_key[p], n_rec[p], n_seq[p], n_last[p] = q_key[j], q_rec[j], q_seq[j], q_last[j]
                key_use[q_key[j], _POS] = p
    for b in range(len(n_lanes)):
        for c in range(n_classes):
            for i in range(n_lanes[b]):  # the first carried use at or after the head's record
                lo, hi = start[c], start[c] + carried[c]
                while lo < hi:
                    mid = (lo + hi) // 2
                    if n_rec[mid] < head_rec[b, c, i]:
                        lo = mid + 1
                    else:
                        hi = mid
                hpos[b, c, i], cand[b, c, i] = lo, -1
    for r in range(len(rec_mode)):
        if rec_mode[r] != MODE_CACHE:
            continue
        for q in range(ent_start[r], ent_start[r + 1]):
            c, key = ent_cls[q], ent_key[q]
            p = fill[c]
            fill[c] += 1
            if ent_prev[q, 0] >= 0:
                n_next[key_use[key, _POS]] = base_rec + r
            n_key[p], n_rec[p], n_seq[p], n_last[p] = key, base_rec + r, ent_seq[q], rec_now[r]
            key_use[key, _POS] = p
    return n_key, n_rec, n_seq, n_next, n_last, start


@njit(cache=True, nogil=True)
def _by_crf(rec_mode, ent_start, ent_key, ent_crf):
    """Each pool record's entries by CRF after this use, lowest first, ties by expert id (the CPU share's order)."""
    order = np.empty(len(ent_key), dtype=np.int32)
    for r in range(len(rec_mode)):
        lo = ent_start[r]
        for j in range(lo, ent_start[r + 1]):  # insertion sort: a handful each
            q = j
            while q > lo and (
                ent_crf[order[q - 1]] > ent_crf[j]
                or (ent_crf[order[q - 1]] == ent_crf[j] and ent_key[order[q - 1]] > ent_key[j])
            ):
                order[q] = order[q - 1]
                q -= 1
            order[q] = j
    return order


@njit(cache=True, nogil=True, inline="always")
def _order_key(seq, key, lane, hit_bits):
    """A use's place among its record's uses in one lane's class list: hits first by first appearance, then the
    misses by key (b11549's plan(): hits refreshed, then sorted misses filled)."""
    return seq if (hit_bits[key] >> lane) & 1 else _MISS + key


@njit(cache=True, nogil=True, inline="always")
def _head(c, i, rec, q_key, q_rec, q_seq, q_next, q_start, hit_bits, cpu_bits, head_rec, thr, hpos, cand):
    """Place in the queues of lane i's next eviction from class c's list at record `rec`, -1 when the list is
    empty or holds only this record's experts (this plan()'s): the first use of the list's oldest record that is
    still the key's latest, held by this lane and not yet evicted. Kept in `cand` until evicted or used again."""
    p = cand[c, i]
    if p >= 0 and q_next[p] > rec:
        return p
    h, end, best = hpos[c, i], q_start[c + 1], -1
    while h < end and q_rec[h] < rec:
        at, low, best_key = q_rec[h], thr[c, i] if q_rec[h] == head_rec[c, i] else -1, _NONE
        j = h
        while j < end and q_rec[j] == at:
            key = q_key[j]
            if q_next[j] > rec and not (cpu_bits[key] >> i) & 1:
                order = _order_key(q_seq[j], key, i, hit_bits)
                if low < order < best_key:
                    best, best_key = j, order
            j += 1
        if best >= 0:
            break
        h = j
    hpos[c, i], cand[c, i] = h, best
    return best


@njit(cache=True, nogil=True, inline="always")
def _score(c, i, rec, q_key, q_rec, q_seq, q_next, q_last, q_start, hit_bits, cpu_bits, head_rec, thr, hpos, cand,
           clock, n_expert, group_clock, inv):  # fmt: skip
    """age / 2^c of class c's next eviction in lane i, -1 when there is none."""
    p = _head(c, i, rec, q_key, q_rec, q_seq, q_next, q_start, hit_bits, cpu_bits, head_rec, thr, hpos, cand)
    if p < 0:
        return -1.0
    return (clock[0 if group_clock else q_key[p] // n_expert] - q_last[p]) * inv[c]


@njit(cache=True, nogil=True, inline="always")
def _best(scores, ties_high):
    """The class whose head scores highest (ties: the lowest class, or the highest with ties_high)."""
    best, best_score = -1, -1.0
    for c in range(len(scores)):
        if scores[c] >= 0 and (scores[c] > best_score or (ties_high and scores[c] == best_score)):
            best, best_score = c, scores[c]
    return best


@njit(cache=True, nogil=True, inline="always")
def _held(prev, q, key, i, hit, on_cpu, head_rec, thr):
    """Whether lane i holds `key`, whose previous pool use is prev[q] (record, event number, class): a use is held
    from its record until it is evicted, which the list of its class says (its head record and last eviction)."""
    rec, c = prev[q, 0], prev[q, 2]
    if (on_cpu >> i) & 1 or rec < head_rec[c, i]:
        return 0
    if rec > head_rec[c, i]:
        return 1
    order = prev[q, 1] if (hit >> i) & 1 else _MISS + key
    return 1 if order > thr[c, i] else 0


@njit(cache=True, nogil=True, parallel=True)
def _lanes(
    rec_layer, rec_mode, rec_large, ent_start, ent_key, ent_prev, ent_order, rec_now, clock0, base_rec, n_expert,
    group_clock, ties_high, share, inv, q_key, q_rec, q_seq, q_next, q_last, q_start, n_lanes, cap_of, head_rec_all,
    thr_all, hpos_all, cand_all, filled_all, remainder_all, hit_bits_all, cpu_bits_all, hits_all, cpu_all, probe_all,
):  # fmt: skip
    """Every lane (pool size) replays the chunk: which of a record's experts it holds, then its misses (the CPU
    share's first), then its evictions. The blocks of lanes run on numba's threads."""
    for b in prange(len(n_lanes)):
        width, caps = n_lanes[b], cap_of[b]
        head_rec, thr, hpos, cand = head_rec_all[b], thr_all[b], hpos_all[b], cand_all[b]
        hit_bits, cpu_bits, filled, remainder = hit_bits_all[b], cpu_bits_all[b], filled_all[b], remainder_all[b]
        hits, cpu, probe = hits_all[b], cpu_all[b], probe_all[b]
        clock = clock0.copy()
        found = np.zeros(width, dtype=np.int64)
        scores = np.empty(len(inv), dtype=np.float64)
        for r in range(len(rec_mode)):
            lo, hi = ent_start[r], ent_start[r + 1]
            mode = rec_mode[r]
            if mode == MODE_SKIP or lo == hi:
                continue
            if mode == MODE_PROBE:  # an offloaded large batch reads the pool, changes nothing
                for q in range(lo, hi):
                    key = ent_key[q]
                    if ent_prev[q, 0] >= 0:
                        hit, on_cpu = hit_bits[key], cpu_bits[key]
                        for i in range(width):
                            probe[i] += _held(ent_prev, q, key, i, hit, on_cpu, head_rec, thr)
                continue
            rec, layer = base_rec + r, rec_layer[r]
            clock[0 if group_clock else layer] = rec_now[r]
            found[:width] = 0
            for q in range(lo, hi):
                key = ent_key[q]
                bits = 0
                if ent_prev[q, 0] >= 0:
                    hit, on_cpu = hit_bits[key], cpu_bits[key]
                    for i in range(width):
                        held = _held(ent_prev, q, key, i, hit, on_cpu, head_rec, thr)
                        bits |= held << i
                        found[i] += held
                hit_bits[key], cpu_bits[key] = bits, 0
            for i in range(width):
                hits[layer, rec_large[r], i] += found[i]
                misses = hi - lo - found[i]
                if misses == 0:
                    continue
                if share > 0 and filled[i] == caps[i]:  # once the pool is full, a share of the misses on the CPU
                    remainder[i] += share * misses
                    n_cpu = min(misses, int(remainder[i]))
                    remainder[i] -= n_cpu
                    cpu[layer, i] += n_cpu
                    misses -= n_cpu
                    for j in range(lo, hi):  # the lowest CRF first
                        if n_cpu == 0:
                            break
                        key = ent_key[ent_order[j]]
                        if not (hit_bits[key] >> i) & 1:
                            cpu_bits[key] |= np.int64(1) << i
                            n_cpu -= 1
                empty = min(caps[i] - filled[i], misses)
                filled[i] += empty
                for n in range(misses - empty):
                    if n == 0:  # every list head's score, then only the one evicted from changes within the record
                        for c in range(len(inv)):
                            scores[c] = _score(
                                c, i, rec, q_key, q_rec, q_seq, q_next, q_last, q_start, hit_bits, cpu_bits,
                                head_rec, thr, hpos, cand, clock, n_expert, group_clock, inv,
                            )  # fmt: skip
                    c = _best(scores, ties_high)
                    p = cand[c, i]
                    head_rec[c, i], thr[c, i] = q_rec[p], _order_key(q_seq[p], q_key[p], i, hit_bits)
                    cand[c, i] = -1
                    scores[c] = _score(
                        c, i, rec, q_key, q_rec, q_seq, q_next, q_last, q_start, hit_bits, cpu_bits, head_rec, thr,
                        hpos, cand, clock, n_expert, group_clock, inv,
                    )  # fmt: skip


def kernel(**knobs) -> Kernel:
    """The ClassLRU kernel with its knobs (KNOBS's defaults where not given); the same knobs give the same
    Kernel, so that callers can group simulations by kernel."""
    k = KNOBS | knobs
    check_knobs(k["half_life_tokens"], k["n_classes"], k["increment"], k["clock"], k["ties"])
    return _kernel(tuple(sorted(k.items())))


@functools.lru_cache(maxsize=64)
def _kernel(items: tuple) -> Kernel:
    k = dict(items)
    return Kernel(
        "class-lru-b12170",
        lambda caps, n_layer, n_expert: new_state(caps, n_layer, n_expert, **k),
        feed,
        results,
        state_bytes,
        ns_per_lookup,
        lanes=False,  # its feed runs the pool sizes on numba's threads (prange): one pass at a time
    )


def run(
    model: ModelSpec, work, budgets_mib: Sequence[int], placement: Placement | None = None, **knobs
) -> list[PolicyResult]:
    """Every budget of a class in one pass per group (simulate_budgets with the ClassLRU kernel)."""
    return [from_simulation(r) for r in simulate_budgets(model, work, budgets_mib, placement, kernel(**knobs))]


POLICY = Policy(
    "class-lru-b12170",
    MODELLED,
    "llama.cpp b12170+ src/llama-moe-cache.cpp (PR #31233), its opening comment at commit c4fb5796; "
    "../shared/docs/llamacpp-moe-cache.md section 10",
    "one LRU list per frequency class (CRF: uses decayed with a 128-token half-life, kept across evictions); "
    "evict the least recent slot of the list with the largest age / 2^class",
    run,
    KNOBS,
    kernel=kernel,
)
