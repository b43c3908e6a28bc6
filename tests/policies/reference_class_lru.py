"""The ClassLRU kernel before its class lists became linked lists (append-only queues of slots with dead marks,
moe_model/policies/class_lru.py at commit 4e15bce), kept as it was so that tests/policies/test_class_lru.py can check
that the faster kernel gives the same counts on many random cases; only `_budgets` is compiled without parallel=True
(its pool sizes are independent, so the counts are the same, and a fresh clone compiles it in a third of the time)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit, prange

from moe_model.errors import MoeModelError
from moe_model.limits import CLASS_LRU_NS_PER_LOOKUP_BUDGET, SIM_NS_PER_LOOKUP_PASS
from moe_model.llama.lru_kernel import MODE_CACHE, MODE_PROBE, MODE_SKIP

HALF_LIFE_TOKENS = 128.0  # crf_half_life in the source
N_CLASSES = 8  # n_class in the source
CLOCKS = ("layer", "group")
TIES = ("low-class", "high-class")
KNOBS = {"half_life_tokens": HALF_LIFE_TOKENS, "n_classes": N_CLASSES, "increment": 1.0, "clock": "layer",
         "ties": "low-class"}  # fmt: skip


@dataclass(frozen=True, eq=False)
class ClassLruState:
    """One pass's state between chunks: the shared CRF and clocks, and per pool size its slots and lists."""

    caps: np.ndarray
    offsets: np.ndarray  # first slot of each pool size
    half_life: float
    n_classes: int
    increment: float
    group_clock: bool
    ties_high: bool
    crf: np.ndarray  # [n_keys]
    last_use: np.ndarray  # [n_keys] clock at the last use, -1 before the first
    clock: np.ndarray  # [n_layer] (index 0 only with group_clock)
    slot_of: np.ndarray  # [n_caps, n_keys]
    meta: np.ndarray  # [total slots, 2]: the slot's last use (clock), and key << 38 | class << 32 | queue place
    queue_offsets: np.ndarray  # [n_caps] first queue entry of each pool size: n_classes queues of 2 * cap + 16
    queues: np.ndarray  # the class lists as append-only queues of slots (-1: the slot has moved on)
    head: np.ndarray  # [n_caps, n_classes] first entry not yet known stale
    tail: np.ndarray  # [n_caps, n_classes] next free entry
    heads: np.ndarray  # [n_caps, n_classes, 4] the head last seen: position (-1 none), slot, last use, clock index
    filled: np.ndarray  # [n_caps] slots taken so far (empty slots are used in order)
    hits: np.ndarray  # [n_layer, 2, n_caps]
    distinct: np.ndarray  # [n_layer, 2]
    probe: np.ndarray  # [n_caps]
    share: float  # b12191's --moe-cache-cpu-share (policies.cpu_share), 0 for ClassLRU itself
    remainder: np.ndarray  # [n_caps] the share's carried fraction of a miss
    cpu: np.ndarray  # [n_layer, n_caps] misses computed on the CPU (the share), not kept


def check_knobs(half_life_tokens: float, n_classes: int, increment: float, clock: str, ties: str) -> None:
    if not (np.isfinite(half_life_tokens) and half_life_tokens > 0):
        raise MoeModelError(f"half_life_tokens must be a positive number of tokens, got {half_life_tokens}")
    if n_classes != int(n_classes) or not 1 <= n_classes <= 64:
        raise MoeModelError(f"n_classes must be a whole number in 1..64, got {n_classes}")
    if not (np.isfinite(increment) and increment > 0):
        raise MoeModelError(f"increment must be a positive number, got {increment}")
    if clock not in CLOCKS or ties not in TIES:
        raise MoeModelError(f"clock must be one of {CLOCKS} and ties one of {TIES}, got {clock!r}, {ties!r}")


def new_state(caps: np.ndarray, n_layer: int, n_expert: int, share: float = 0.0, **knobs) -> ClassLruState:
    k = KNOBS | knobs
    check_knobs(k["half_life_tokens"], k["n_classes"], k["increment"], k["clock"], k["ties"])
    caps = np.asarray(caps, dtype=np.int64)
    n_caps, n_keys, n_cls = len(caps), n_layer * n_expert, int(k["n_classes"])
    total = int(caps.sum())
    queue_sizes = n_cls * _queue_size(caps)
    return ClassLruState(
        caps,
        np.concatenate(([0], np.cumsum(caps))).astype(np.int64),
        float(k["half_life_tokens"]),
        n_cls,
        float(k["increment"]),
        k["clock"] == "group",
        k["ties"] == "high-class",
        np.zeros(n_keys, dtype=np.float64),
        np.full(n_keys, -1, dtype=np.int64),
        np.zeros(n_layer, dtype=np.int64),
        np.full((n_caps, n_keys), -1, dtype=np.int32),
        np.full((total, 2), -1, dtype=np.int64),
        np.concatenate(([0], np.cumsum(queue_sizes)[:-1])).astype(np.int64),
        np.zeros(int(queue_sizes.sum()), dtype=np.int32),
        np.zeros((n_caps, n_cls), dtype=np.int64),
        np.zeros((n_caps, n_cls), dtype=np.int64),
        np.full((n_caps, n_cls, 4), -1, dtype=np.int64),
        np.zeros(n_caps, dtype=np.int64),
        np.zeros((n_layer, 2, n_caps), dtype=np.int64),
        np.zeros((n_layer, 2), dtype=np.int64),
        np.zeros(n_caps, dtype=np.int64),
        float(share),
        np.zeros(n_caps, dtype=np.float64),
        np.zeros((n_layer, n_caps), dtype=np.int64),
    )


def _queue_size(caps: np.ndarray) -> np.ndarray:
    """Entries per class queue: twice the pool, so a compaction (at most cap live entries) frees cap + 16."""
    return 2 * np.asarray(caps, dtype=np.int64) + 16


def state_bytes(n_layer: int, n_expert: int, caps: np.ndarray) -> int:
    """Bytes of one ClassLruState (what `new_state` allocates), before a chunk's entries."""
    n_keys, n_caps, total = n_layer * n_expert, len(caps), int(np.sum(caps))
    queues = 4 * N_CLASSES * int(_queue_size(caps).sum())
    return 16 * n_keys + 4 * n_caps * n_keys + 16 * total + queues + 8 * n_caps * (6 * N_CLASSES + 2 * n_layer + 2)


def ns_per_lookup(n_caps: int) -> float:
    """Kernel time per lookup of a pass: the shared CRF once, then each pool size's lists."""
    return SIM_NS_PER_LOOKUP_PASS / 4 + CLASS_LRU_NS_PER_LOOKUP_BUDGET * n_caps


def feed(s: ClassLruState, rec_layer, rec_ntok, rec_off, rec_mode, rec_large, ids, k: int, n_expert: int) -> None:
    """Replay one chunk of a group's records (offsets into this chunk's `ids`), continuing the pass."""
    n_rec = len(rec_mode)
    n_ent = int(np.minimum(rec_ntok.astype(np.int64) * k, n_expert).sum())
    ent_start = np.zeros(n_rec + 1, dtype=np.int64)
    ent_key = np.empty(n_ent, dtype=np.int32)
    ent_cls = np.empty(n_ent, dtype=np.int8)
    ent_sorted = np.empty(n_ent, dtype=np.int32)
    ent_crf = np.empty(n_ent, dtype=np.float64)
    rec_now = np.zeros(n_rec, dtype=np.int64)
    clock0 = s.clock.copy()
    _shared(
        rec_layer, rec_ntok, rec_off, rec_mode, rec_large, ids, k, n_expert, s.crf, s.last_use, s.clock,
        s.half_life, s.increment, s.n_classes, s.group_clock, ent_start, ent_key, ent_cls, ent_sorted, ent_crf,
        rec_now, s.distinct,
    )  # fmt: skip
    inv = 2.0 ** -np.arange(s.n_classes, dtype=np.float64)
    by_crf = _by_crf(rec_mode, ent_start, ent_sorted, ent_crf) if s.share > 0 else ent_sorted[:0]
    _budgets(
        rec_layer, rec_mode, rec_large, ent_start, ent_key, ent_cls, ent_sorted, rec_now, clock0,
        n_expert, s.group_clock, s.ties_high, inv, s.caps, s.offsets, s.slot_of, s.meta, s.queue_offsets,
        s.queues, s.head, s.tail, s.heads, s.filled, s.hits, s.probe, s.share, by_crf, s.remainder, s.cpu,
    )  # fmt: skip


def results(s: ClassLruState) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(hits [n_layer, 2, n_caps], distinct [n_layer, 2], probe hits [n_caps]) of everything fed so far."""
    return s.hits.copy(), s.distinct.copy(), s.probe.copy()


def cpu_counts(s: ClassLruState) -> np.ndarray:
    """Misses computed on the CPU (the share) per layer and pool size [n_layer, n_caps]."""
    return s.cpu.copy()


@njit(cache=True, nogil=True)
def _shared(
    rec_layer, rec_ntok, rec_off, rec_mode, rec_large, ids, k, n_expert, crf, last_use, clock, half_life, increment,
    n_classes, group_clock, ent_start, ent_key, ent_cls, ent_sorted, ent_crf, rec_now, distinct,
):  # fmt: skip
    """Per record: its distinct experts (first appearance), each key's CRF after this use and its class, the
    keys in expert-id order, and the clock; what every pool size of the pass shares."""
    seen = np.zeros(n_expert, dtype=np.int64)
    n = 0
    for r in range(len(rec_mode)):
        ent_start[r] = n
        mode = rec_mode[r]
        if mode == MODE_SKIP:
            continue
        layer = rec_layer[r]
        base = layer * n_expert
        nu = 0
        for i in range(rec_off[r], rec_off[r] + rec_ntok[r] * k):
            e = ids[i]
            if seen[e] != r + 1:
                seen[e] = r + 1
                ent_key[n + nu] = base + e
                nu += 1
        if mode == MODE_CACHE:
            for j in range(nu):  # the record's entries in expert-id order: insertion sort, a handful each
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
                crf[key], ent_crf[q] = value, value
                last_use[key] = now
                cls = int(np.floor(np.log2(value))) if value > 0 else 0
                ent_cls[q] = min(n_classes - 1, max(0, cls))
        n += nu
    ent_start[len(rec_mode)] = n


@njit(cache=True, nogil=True)
def _by_crf(rec_mode, ent_start, ent_sorted, ent_crf):
    """Each pool record's entries by CRF after this use, lowest first, ties by expert id (the CPU share's order)."""
    order = np.empty(len(ent_sorted), dtype=np.int32)
    for r in range(len(rec_mode)):
        if rec_mode[r] != MODE_CACHE:
            continue
        lo = ent_start[r]
        for j in range(lo, ent_start[r + 1]):  # insertion sort of the key-ordered entries: stable, a handful each
            q, entry = j, ent_sorted[j]
            while q > lo and ent_crf[order[q - 1]] > ent_crf[entry]:
                order[q] = order[q - 1]
                q -= 1
            order[q] = entry
    return order


_T, _P = 0, 1  # ClassLruState.meta: a slot's last use, and key << 38 | class << 32 | place in its class queue
_POS_MASK, _CLS_SHIFT, _KEY_SHIFT = (1 << 32) - 1, 32, 38


@njit(cache=True, nogil=True)
def _compact(c, meta, queues, seg, head, tail, heads):
    """Move class c's live entries to the front of its queue, in order (rare: not inlined in the hot loop)."""
    n = 0
    for i in range(head[c], tail[c]):
        q = queues[seg + i]
        if q >= 0:
            queues[seg + n] = q
            meta[q, _P] = (meta[q, _P] & ~_POS_MASK) | n
            n += 1
    head[c], tail[c] = 0, n
    heads[c, 0] = -1


@njit(cache=True, nogil=True, inline="always")
def _push(s, c, key, meta, queues, base, size, head, tail, heads):
    """Append slot s (now holding `key`) to class c's queue; its previous entry is marked dead (-1), so stale
    entries are skipped without reading their slot. A full queue is compacted first (positions change)."""
    old = meta[s, _P]
    if old >= 0:
        queues[base + ((old >> _CLS_SHIFT) & 63) * size + (old & _POS_MASK)] = -1
    seg = base + c * size
    if tail[c] == size:
        _compact(c, meta, queues, seg, head, tail, heads)
    queues[seg + tail[c]] = s
    meta[s, _P] = (np.int64(key) << _KEY_SHIFT) | (np.int64(c) << _CLS_SHIFT) | tail[c]
    tail[c] += 1


@njit(cache=True, nogil=True, inline="always")
def _head_score(c, meta, queues, base, size, head, tail, heads, layer, now, clock, n_expert, group_clock, inv):
    """age / 2^c of class c's least recently used slot, -1 when the list is empty or this plan() of `layer` used
    its head (then it holds only slots this plan used). `heads` keeps each list's head (position, slot, last use,
    clock index): a queue is append-only between compactions, so a live entry at the same place is the same use."""
    seg, h = base + c * size, head[c]
    while h < tail[c] and queues[seg + h] < 0:  # entries whose slot has moved on
        h += 1
    head[c] = h
    if h == tail[c]:
        return -1.0
    if heads[c, 0] != h:
        s = queues[seg + h]
        owner = 0 if group_clock else (meta[s, _P] >> _KEY_SHIFT) // n_expert
        heads[c, 0], heads[c, 1], heads[c, 2], heads[c, 3] = h, s, meta[s, _T], owner
    last, owner = heads[c, 2], heads[c, 3]
    if last == now and (group_clock or owner == layer):  # used by this plan(): its clock only moves forward
        return -1.0
    return (clock[owner] - last) * inv[c]


@njit(cache=True, nogil=True, inline="always")
def _best(scores, ties_high):
    """The class whose head scores highest (ties: the lowest class, or the highest with ties_high)."""
    best, best_score = -1, -1.0
    for c in range(len(scores)):
        if scores[c] >= 0 and (scores[c] > best_score or (ties_high and scores[c] == best_score)):
            best, best_score = c, scores[c]
    return best


@njit(cache=True, nogil=True)
def _budgets(
    rec_layer, rec_mode, rec_large, ent_start, ent_key, ent_cls, ent_sorted, rec_now, clock0, n_expert,
    group_clock, ties_high, inv, caps, offsets, slot_of_all, meta, queue_offsets, queues, head_all, tail_all,
    heads_all, filled, hits, probe, share, by_crf, remainder, cpu,
):  # fmt: skip
    """Every pool size of the pass replays the chunk on its own. With a CPU
    share, once a pool is full that share of each record's misses, the lowest CRF first, is computed on the CPU
    and not kept (b12191's --moe-cache-cpu-share on ClassLRU's lists)."""
    for b in prange(len(caps)):
        head, tail, heads, slot_of = head_all[b], tail_all[b], heads_all[b], slot_of_all[b]
        base, size = queue_offsets[b], 2 * caps[b] + 16
        scores = np.empty(len(inv), dtype=np.float64)
        clock = clock0.copy()
        found = np.zeros(2 * hits.shape[0], dtype=np.int64)  # this pool size's hits per (layer, class)
        on_cpu = np.zeros(len(slot_of) if share > 0 else 0, dtype=np.int64)  # record (+1) of a miss sent to the CPU
        for r in range(len(rec_mode)):
            lo, hi = ent_start[r], ent_start[r + 1]
            mode = rec_mode[r]
            if mode == MODE_SKIP or lo == hi:
                continue
            if mode == MODE_PROBE:  # an offloaded large batch reads the pool, changes nothing
                for q in range(lo, hi):
                    if slot_of[ent_key[q]] >= 0:
                        probe[b] += 1
                continue
            layer, now = rec_layer[r], rec_now[r]
            clock[0 if group_clock else layer] = now
            n_hit = 0
            for q in range(lo, hi):  # hits first, refreshed in first-appearance order into their new class
                s = slot_of[ent_key[q]]
                if s >= 0:
                    n_hit += 1
                    meta[s, _T] = now
                    _push(s, ent_cls[q], ent_key[q], meta, queues, base, size, head, tail, heads)
            found[layer * 2 + rec_large[r]] += n_hit
            if n_hit == hi - lo:
                continue
            if share > 0 and filled[b] == caps[b]:  # the share of the misses, the lowest CRF first, on the CPU
                misses = hi - lo - n_hit
                remainder[b] += share * misses
                n_cpu = min(misses, int(remainder[b]))
                remainder[b] -= n_cpu
                cpu[layer, b] += n_cpu
                for j in range(lo, hi):
                    if n_cpu == 0:
                        break
                    key = ent_key[by_crf[j]]
                    if slot_of[key] < 0:
                        on_cpu[key] = r + 1
                        n_cpu -= 1
            scored = False  # the heads' scores, computed at the first eviction, kept up to date within the record
            for j in range(lo, hi):  # then the misses in expert-id order
                q = ent_sorted[j]
                key = ent_key[q]
                if slot_of[key] >= 0 or (share > 0 and on_cpu[key] == r + 1):
                    continue
                if filled[b] < caps[b]:
                    s = offsets[b] + filled[b]
                    filled[b] += 1
                else:
                    if not scored:
                        for c in range(len(inv)):
                            scores[c] = _head_score(
                                c, meta, queues, base, size, head, tail, heads, layer, now, clock, n_expert,
                                group_clock, inv,
                            )  # fmt: skip
                        scored = True
                    c = _best(scores, ties_high)
                    s = heads[c, 1]
                    head[c] += 1  # the victim was its list's head: the next one takes its place
                    scores[c] = _head_score(
                        c, meta, queues, base, size, head, tail, heads, layer, now, clock, n_expert, group_clock, inv
                    )
                    slot_of[meta[s, _P] >> _KEY_SHIFT] = -1
                slot_of[key] = s
                meta[s, _T] = now
                _push(s, ent_cls[q], key, meta, queues, base, size, head, tail, heads)
                if scored:  # the list it joined may have been empty: its head is now this plan's
                    scores[ent_cls[q]] = _head_score(
                        ent_cls[q], meta, queues, base, size, head, tail, heads, layer, now, clock, n_expert,
                        group_clock, inv,
                    )  # fmt: skip
        for i in range(len(found)):
            hits[i // 2, i % 2, b] += found[i]
