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
    queue: list  # [rows [n, 5] (QUEUE_FIELDS), starts [n_classes + 1]]: each class's latest uses in order of use
    heads: np.ndarray  # [n_blocks, width, n_classes, len(HEAD_FIELDS)]: each lane's class lists
    filled: np.ndarray  # [n_blocks, width] slots taken so far (empty slots are used first)
    remainder: np.ndarray  # [n_blocks, width] the CPU share's carried fraction of a miss
    hit_bits: np.ndarray  # [n_blocks, n_keys] bit per lane: the key's latest use was a hit
    cpu_bits: np.ndarray  # [n_blocks, n_keys] bit per lane: the key's latest use was a miss sent to the CPU
    hits: np.ndarray  # [n_blocks, n_layer, 2, width]
    cpu: np.ndarray  # [n_blocks, n_layer, width]
    probe: np.ndarray  # [n_blocks, width]
    distinct: np.ndarray  # [n_layer, 2]


QUEUE_FIELDS = ("key", "rec", "seq", "next", "last")  # per queued use: key, record, event number, next use, clock
_KEY, _QREC, _QSEQ, _NEXT, _LAST = range(5)
# per lane and class list: the head record (evicted from so far, -1 none) and the order key of its last eviction,
# where that record starts in the queues and where its misses resume; the next eviction: its place (-1 not known),
# event number, record, order key, clock at its use and clock owner
HEAD_FIELDS = ("rec", "thr", "pos", "resume", "cand", "cand_seq", "cand_rec", "cand_order", "cand_last", "cand_owner")
_H_REC, _H_THR, _H_POS, _H_RES, _C_POS, _C_SEQ, _C_REC, _C_ORDER, _C_LAST, _C_OWNER = range(10)
SUB_CHUNK_RECORDS = 2048  # records per step: the queues of a step's uses stay in the core's cache
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
        [np.zeros((0, len(QUEUE_FIELDS)), np.int64), np.zeros(n_cls + 1, np.int64)],
        _new_heads(blocks, n_cls, width),
        np.zeros((blocks, width), dtype=np.int64),
        np.zeros((blocks, width), dtype=np.float64),
        np.zeros((blocks, n_keys), dtype=np.int64),
        np.zeros((blocks, n_keys), dtype=np.int64),
        np.zeros((blocks, n_layer, 2, width), dtype=np.int64),
        np.zeros((blocks, n_layer, width), dtype=np.int64),
        np.zeros((blocks, width), dtype=np.int64),
        np.zeros((n_layer, 2), dtype=np.int64),
    )


def _new_heads(blocks: int, n_cls: int, width: int) -> np.ndarray:
    heads = np.full((blocks, width, n_cls, len(HEAD_FIELDS)), -1, dtype=np.int64)
    heads[..., _H_POS] = 0
    return heads


def state_bytes(n_layer: int, n_expert: int, caps: np.ndarray) -> int:
    """Bytes of one ClassLruState (what `new_state` allocates), with its queues of live uses, before a chunk's."""
    n_keys, n_caps = n_layer * n_expert, len(caps)
    blocks = n_blocks(n_caps)
    per_lane = 8 * (len(HEAD_FIELDS) * N_CLASSES + 2 + 3 * n_layer + 1)
    return n_keys * (48 + 8 * len(QUEUE_FIELDS) + 16 * blocks) + per_lane * (n_caps + blocks)


def ns_per_lookup(n_caps: int) -> float:
    """Kernel time per lookup of a pass: the shared uses once, then each pool size's test and evictions."""
    return SIM_NS_PER_LOOKUP_PASS / 4 + CLASS_LRU_NS_PER_LOOKUP_BUDGET * n_caps


def feed(s: ClassLruState, rec_layer, rec_ntok, rec_off, rec_mode, rec_large, ids, k: int, n_expert: int) -> None:
    """Replay one chunk of a group's records (offsets into this chunk's `ids`), continuing the pass."""
    for lo in range(0, len(rec_mode), SUB_CHUNK_RECORDS):
        rows = slice(lo, lo + SUB_CHUNK_RECORDS)
        _step(s, rec_layer[rows], rec_ntok[rows], rec_off[rows], rec_mode[rows], rec_large[rows], ids, k, n_expert)


def _step(s: ClassLruState, rec_layer, rec_ntok, rec_off, rec_mode, rec_large, ids, k: int, n_expert: int) -> None:
    n_rec = len(rec_mode)
    n_ent = int(np.minimum(rec_ntok.astype(np.int64) * k, n_expert)[rec_mode != MODE_SKIP].sum())
    ent_start = np.zeros(n_rec + 1, dtype=np.int64)
    ent_key = np.empty(n_ent, dtype=np.int32)
    ent_cls = np.empty(n_ent, dtype=np.int8)
    ent_seq = np.empty(n_ent, dtype=np.int64)
    ent_prev = np.empty((n_ent, 3), dtype=np.int64)
    ent_crf = np.empty(n_ent, dtype=np.float64)
    ent_sorted = np.empty(n_ent, dtype=np.int32)
    rec_now = np.zeros(n_rec, dtype=np.int64)
    clock0, base_rec = s.clock.copy(), int(s.counters[0])
    _events(
        rec_layer, rec_ntok, rec_off, rec_mode, rec_large, ids, k, n_expert, s.crf, s.last_use, s.clock,
        s.half_life, s.increment, s.n_classes, s.group_clock, s.key_use, s.counters, ent_start, ent_key, ent_cls,
        ent_seq, ent_prev, ent_crf, ent_sorted, rec_now, s.distinct,
    )  # fmt: skip
    s.queue[:] = _layout(
        *s.queue, rec_mode, rec_now, ent_start, ent_key, ent_cls, ent_seq, ent_prev, ent_sorted, base_rec,
        s.n_classes, s.key_use, s.heads, s.n_lanes,
    )  # fmt: skip
    order = _by_crf(rec_mode, ent_start, ent_key, ent_crf) if s.share > 0 else ent_start[:0].astype(np.int32)
    inv = 2.0 ** -np.arange(s.n_classes, dtype=np.float64)
    _lanes(
        rec_layer, rec_mode, rec_large, ent_start, ent_key, ent_prev, order, rec_now, clock0, base_rec, n_expert,
        s.group_clock, s.ties_high, s.share, inv, *s.queue, s.n_lanes, s.cap_of, s.heads, s.filled, s.remainder,
        s.hit_bits, s.cpu_bits, s.hits, s.cpu, s.probe,
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
    n_classes, group_clock, key_use, counters, ent_start, ent_key, ent_cls, ent_seq, ent_prev, ent_crf, ent_sorted,
    rec_now, distinct,
):  # fmt: skip
    """Per record: its distinct experts in first-appearance order, each one's previous pool use (record, event
    number, class: whether a pool size still holds it follows from these) and, for a pool record, its CRF after
    this use, its class, its event number and the entries in key order; and the clock. What every pool size of
    the pass shares."""
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
            for j in range(nu):  # the record's entries in key order: insertion sort, a handful each
                q, key = j, ent_key[n + j]
                while q > 0 and ent_key[ent_sorted[n + q - 1]] > key:
                    ent_sorted[n + q] = ent_sorted[n + q - 1]
                    q -= 1
                ent_sorted[n + q] = n + j
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
    rows, starts, rec_mode, rec_now, ent_start, ent_key, ent_cls, ent_seq, ent_prev, ent_sorted, base_rec,
    n_classes, key_use, heads, n_lanes,
):  # fmt: skip
    """The class queues for a step: the uses still latest (carried over), then the step's pool uses, each class in
    order of use (a record's in key order); a use's next use set; each lane's list heads found again in the new
    places."""
    count = np.zeros(n_classes, dtype=np.int64)
    for c in range(n_classes):
        for j in range(starts[c], starts[c + 1]):
            count[c] += rows[j, _NEXT] == _NONE
    carried = count.copy()
    for r in range(len(rec_mode)):
        if rec_mode[r] == MODE_CACHE:
            for q in range(ent_start[r], ent_start[r + 1]):
                count[ent_cls[q]] += 1
    start = np.zeros(n_classes + 1, dtype=np.int64)
    for c in range(n_classes):
        start[c + 1] = start[c] + count[c]
    out = np.empty((start[n_classes], rows.shape[1]), dtype=np.int64)
    fill = start[:n_classes].copy()
    for c in range(n_classes):
        for j in range(starts[c], starts[c + 1]):
            if rows[j, _NEXT] == _NONE:
                p = fill[c]
                fill[c] += 1
                out[p] = rows[j]
                key_use[rows[j, _KEY], _POS] = p
    for b in range(len(n_lanes)):
        for c in range(n_classes):
            for i in range(n_lanes[b]):  # the first carried use at or after the head's record
                lo, hi = start[c], start[c] + carried[c]
                while lo < hi:
                    mid = (lo + hi) // 2
                    if out[mid, _QREC] < heads[b, i, c, _H_REC]:
                        lo = mid + 1
                    else:
                        hi = mid
                heads[b, i, c, _H_POS], heads[b, i, c, _C_POS], heads[b, i, c, _C_SEQ] = lo, -1, -1
                thr, hi = heads[b, i, c, _H_THR], start[c] + carried[c]
                while lo < hi and out[lo, _QREC] == heads[b, i, c, _H_REC] and out[lo, _KEY] <= thr - _MISS:
                    lo += 1  # the head record's misses resume after the last evicted
                heads[b, i, c, _H_RES] = lo
    for r in range(len(rec_mode)):
        if rec_mode[r] != MODE_CACHE:
            continue
        for j in range(ent_start[r], ent_start[r + 1]):
            q = ent_sorted[j]
            c, key = ent_cls[q], ent_key[q]
            p = fill[c]
            fill[c] += 1
            if ent_prev[q, 0] >= 0:
                out[key_use[key, _POS], _NEXT] = base_rec + r
            out[p, _KEY], out[p, _QREC], out[p, _QSEQ], out[p, _NEXT] = key, base_rec + r, ent_seq[q], _NONE
            out[p, _LAST] = rec_now[r]
            key_use[key, _POS] = p
    return out, start


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
def _score(c, i, rec, rows, starts, hit_bits, cpu_bits, h, clock, n_expert, group_clock, inv):
    """age / 2^c of lane i's next eviction from class c's list at record `rec`, -1 when the list is empty or holds
    only this record's experts (this plan()'s). The next eviction is the first use of the list's oldest record
    that is still the key's latest, held by the lane and not yet evicted; it is kept in `h` (the lane's heads)
    until evicted or used again (the lookups then forget it)."""
    if h[i, c, _C_POS] < 0:
        p, end, best, best_order = h[i, c, _H_POS], starts[c + 1], -1, _NONE
        while p < end and rows[p, _QREC] < rec:
            at, low, j = rows[p, _QREC], -1, p
            if at == h[i, c, _H_REC]:
                low = h[i, c, _H_THR]
            if low < _MISS:  # the record's hits held by the lane, by event number
                while j < end and rows[j, _QREC] == at:
                    key = rows[j, _KEY]
                    if rows[j, _NEXT] > rec and (hit_bits[key] >> i) & 1 and low < rows[j, _QSEQ] < best_order:
                        best, best_order = j, rows[j, _QSEQ]
                    j += 1
                j = p
            elif at == h[i, c, _H_REC]:
                j = h[i, c, _H_RES]
            if best < 0:  # then its misses kept by the lane, in key order: the queue's
                while j < end and rows[j, _QREC] == at:
                    key = rows[j, _KEY]
                    if rows[j, _NEXT] > rec and not ((hit_bits[key] | cpu_bits[key]) >> i) & 1:
                        best, best_order = j, _MISS + key
                        break
                    j += 1
            if best >= 0:
                break
            p = j
        h[i, c, _H_POS] = p
        if best < 0:
            return -1.0
        h[i, c, _C_POS], h[i, c, _C_SEQ], h[i, c, _C_REC] = best, rows[best, _QSEQ], rows[best, _QREC]
        h[i, c, _C_ORDER], h[i, c, _C_LAST] = best_order, rows[best, _LAST]
        h[i, c, _C_OWNER] = 0 if group_clock else rows[best, _KEY] // n_expert
    return (clock[h[i, c, _C_OWNER]] - h[i, c, _C_LAST]) * inv[c]


@njit(cache=True, nogil=True, inline="always")
def _best(scores, ties_high):
    """The class whose head scores highest (ties: the lowest class, or the highest with ties_high)."""
    best, best_score = -1, -1.0
    for c in range(len(scores)):
        if scores[c] >= 0 and (scores[c] > best_score or (ties_high and scores[c] == best_score)):
            best, best_score = c, scores[c]
    return best


@njit(cache=True, nogil=True, inline="always")
def _held(rec, seq, c, key, i, hit, h):
    """Whether lane i holds `key`, whose previous pool use was at record `rec` (event number `seq`, class c): a use
    is held from its record until it is evicted, which the lane's list of its class says (its head record and the
    order key of the last eviction from it)."""
    head = h[i, c, _H_REC]
    if rec != head:
        return 1 if rec > head else 0
    order = seq if (hit >> i) & 1 else _MISS + key
    return 1 if order > h[i, c, _H_THR] else 0


@njit(cache=True, nogil=True, parallel=True)
def _lanes(
    rec_layer, rec_mode, rec_large, ent_start, ent_key, ent_prev, ent_order, rec_now, clock0, base_rec, n_expert,
    group_clock, ties_high, share, inv, rows, starts, n_lanes, cap_of, heads, filled, remainder, hit_bits, cpu_bits,
    hits, cpu, probe,
):  # fmt: skip
    """The blocks of lanes (pool sizes) on numba's threads."""
    for b in prange(len(n_lanes)):
        _block(
            rec_layer, rec_mode, rec_large, ent_start, ent_key, ent_prev, ent_order, rec_now, clock0, base_rec,
            n_expert, group_clock, ties_high, share, inv, rows, starts, n_lanes[b], cap_of[b], heads[b], filled[b],
            remainder[b], hit_bits[b], cpu_bits[b], hits[b], cpu[b], probe[b],
        )  # fmt: skip


@njit(cache=True, nogil=True)
def _block(
    rec_layer, rec_mode, rec_large, ent_start, ent_key, ent_prev, ent_order, rec_now, clock0, base_rec, n_expert,
    group_clock, ties_high, share, inv, rows, starts, width, caps, h, filled, remainder, hit_bits, cpu_bits, hits,
    cpu, probe,
):  # fmt: skip
    """Every lane of a block replays the step: which of a record's experts it holds, then its misses (the CPU
    share's first), then its evictions."""
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
                key, prev, seq, c = ent_key[q], ent_prev[q, 0], ent_prev[q, 1], ent_prev[q, 2]
                if prev >= 0:
                    hit, on_cpu = hit_bits[key], cpu_bits[key]
                    for i in range(width):
                        probe[i] += _held(prev, seq, c, key, i, hit, h) & ~(on_cpu >> i) & 1
            continue
        rec, layer = base_rec + r, rec_layer[r]
        clock[0 if group_clock else layer] = rec_now[r]
        found[:width] = 0
        for q in range(lo, hi):
            key, prev, seq, c = ent_key[q], ent_prev[q, 0], ent_prev[q, 1], ent_prev[q, 2]
            bits = 0
            if prev >= 0:
                hit, on_cpu = hit_bits[key], cpu_bits[key]
                for i in range(width):
                    held = _held(prev, seq, c, key, i, hit, h) & ~(on_cpu >> i) & 1
                    bits |= held << i
                    found[i] += held
                    if h[i, c, _C_SEQ] == seq:  # a lane's next eviction used again: no longer the list's head
                        h[i, c, _C_POS], h[i, c, _C_SEQ] = -1, -1
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
            left = misses - empty
            if left > 0:  # every list head's score, then only the one evicted from changes within the record
                for c in range(len(inv)):
                    scores[c] = _score(c, i, rec, rows, starts, hit_bits, cpu_bits, h, clock, n_expert, group_clock,
                                       inv)  # fmt: skip
            while left > 0:
                c = _best(scores, ties_high)
                p, at, order = h[i, c, _C_POS], h[i, c, _C_REC], h[i, c, _C_ORDER]
                left -= 1
                if order >= _MISS:  # the same record's next misses score the same: evicted in a run
                    j, end = p + 1, starts[c + 1]
                    while left > 0 and j < end and rows[j, _QREC] == at:
                        key = rows[j, _KEY]
                        if rows[j, _NEXT] > rec and not ((hit_bits[key] | cpu_bits[key]) >> i) & 1:
                            p, order = j, _MISS + key
                            left -= 1
                        j += 1
                h[i, c, _H_REC], h[i, c, _H_THR], h[i, c, _H_RES] = at, order, p + 1
                h[i, c, _C_POS], h[i, c, _C_SEQ] = -1, -1
                scores[c] = _score(c, i, rec, rows, starts, hit_bits, cpu_bits, h, clock, n_expert, group_clock, inv)


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
