"""ClassLRU's compiled passes (policies.class_lru): a chunk's entries, the CRF and classes every pool size shares,
and each pool size's class lists replayed on its own."""

from __future__ import annotations

import numpy as np

from moe_model.llama.lru_kernel import MODE_CACHE, MODE_SKIP
from moe_model.numba_cache import njit

RANKED_ENTRIES = 16  # a record of at most this many distinct experts sorts them by rank (a decode token's k)
DECAY_TABLE_TOKENS = 4096  # ages below this decay by table (2^(-age / half-life), computed once a chunk)


@njit(cache=True, nogil=True)
def _entries(rec_layer, rec_ntok, rec_off, rec_mode, ids, k, n_expert, ent_start, ent_key, ent_sorted, ent_sel):
    """Per record: its distinct experts (first appearance) with the tokens that chose each, and a pool record's
    keys in expert-id order."""
    seen = np.zeros(n_expert, dtype=np.int64)
    chose = np.zeros(n_expert, dtype=np.int32)  # tokens of this record that chose the expert
    n = 0
    for r in range(len(rec_mode)):
        ent_start[r] = n
        if rec_mode[r] == MODE_SKIP:
            continue
        base = rec_layer[r] * n_expert
        nu = 0
        for i in range(rec_off[r], rec_off[r] + rec_ntok[r] * k):
            e = ids[i]
            if seen[e] != r + 1:
                seen[e] = r + 1
                chose[e] = 0
                ent_key[n + nu] = base + e
                nu += 1
            chose[e] += 1
        for q in range(n, n + nu):
            ent_sel[q] = chose[ent_key[q] - base]
        if rec_mode[r] == MODE_CACHE:
            _by_key(ent_key, ent_sorted, n, nu)
        n += nu
    ent_start[len(rec_mode)] = n


@njit(cache=True, nogil=True, inline="always")
def _by_key(ent_key, ent_sorted, n, nu):
    """A record's entries (n .. n + nu, distinct keys) in key order: a few, each placed at its rank (how many
    keys are smaller: no branch to mispredict); more, by insertion sort."""
    if nu <= RANKED_ENTRIES:
        for j in range(nu):
            key, rank = ent_key[n + j], 0
            for i in range(nu):
                rank += ent_key[n + i] < key
            ent_sorted[n + rank] = n + j
        return
    for j in range(nu):
        q, key = j, ent_key[n + j]
        while q > 0 and ent_key[ent_sorted[n + q - 1]] > key:
            ent_sorted[n + q] = ent_sorted[n + q - 1]
            q -= 1
        ent_sorted[n + q] = n + j


@njit(cache=True, nogil=True)
def _shared(
    rec_layer, rec_ntok, rec_mode, rec_large, crf, last_use, clock, half_life, increment, n_classes,
    group_clock, per_token, ent_start, ent_key, ent_sel, ent_cls, ent_crf, rec_now, distinct,
):  # fmt: skip
    """Per pool record: each key's CRF after this use and its class, and the clock; what every pool size of the
    pass shares. Short ages decay by a table of the same expression; a class counts the bounds its CRF reaches
    (no log2 per use, no branch to mispredict)."""
    decay = np.empty(DECAY_TABLE_TOKENS, dtype=np.float64)
    for age in range(DECAY_TABLE_TOKENS):
        decay[age] = 2.0 ** (-age / half_life)
    bounds = class_bounds(n_classes)
    for r in range(len(rec_mode)):
        if rec_mode[r] != MODE_CACHE:
            continue
        layer = rec_layer[r]
        c = 0 if group_clock else layer
        clock[c] += rec_ntok[r]
        now = clock[c]
        rec_now[r] = now
        distinct[layer, rec_large[r]] += ent_start[r + 1] - ent_start[r]
        for q in range(ent_start[r], ent_start[r + 1]):
            key = ent_key[q]
            add = increment * ent_sel[q] if per_token else increment
            age = now - last_use[key]
            if last_use[key] < 0:
                value = add
            elif age < DECAY_TABLE_TOKENS:
                value = crf[key] * decay[age] + add
            else:
                value = crf[key] * 2.0 ** (-age / half_life) + add
            crf[key], ent_crf[q] = value, value
            last_use[key] = now
            cls = 0
            for j in range(1, n_classes):
                cls += value >= bounds[j]
            ent_cls[q] = cls


@njit(cache=True, nogil=True)
def class_bounds(n_classes):
    """bounds[j]: the least CRF whose floor(log2(CRF)) is j or more (j >= 1): the bounds a CRF reaches count to
    min(n_classes - 1, max(0, floor(log2(CRF)))), log2's rounding up just below 2^j included."""
    bounds = np.zeros(n_classes, dtype=np.float64)
    for j in range(1, n_classes):
        v = 2.0**j
        while np.floor(np.log2(np.nextafter(v, 0.0))) >= j:
            v = np.nextafter(v, 0.0)
        bounds[j] = v
    return bounds


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


# a queue place: the lane's union-find link (policies.class_lru_lanes._alive), the use's record (this chunk's from
# 0, carried ones below, renumbered in order), key, the record of its key's next use, rank in its record's first
# appearances, clock index and clock; one 32-byte struct, so that a head's walk reads one cache line a place
PLACE = np.dtype(
    [("nxt", np.int32), ("rec", np.int32), ("key", np.int32), ("dies", np.int32), ("rank", np.int32),
     ("owner", np.int32), ("time", np.int64)],
    align=True,
)  # fmt: skip
NEVER = np.iinfo(np.int32).max  # the sentinel's record, and dies of a use not followed by another (yet)


@njit(cache=True, nogil=True)
def queues(
    rec_layer, rec_mode, rec_now, ent_start, ent_key, ent_sorted, ent_cls, group_clock, n_classes, n_keys,
    car_start, car_key, car_time, car_owner, car_rec, car_rank,
):  # fmt: skip
    """Every pool size's class lists as one queue per class of uses (PLACE), record by record: the latest uses
    carried from earlier chunks (car_*, class by class, their records renumbered below 0 in order), then this
    chunk's pool records' entries, each record's in expert-id order (its misses' order in every pool; `rank`:
    first-appearance order, its hits'), then a sentinel (record NEVER). A use stays in a pool's list while it is
    its key's latest (until `dies`, the record of the key's next use: `death[entry]` is the queue place that entry
    ends) and the key is in that pool. `place[entry]` is the entry's queue place."""
    count = car_start[1:] - car_start[:-1] + 1
    for r in range(len(rec_mode)):
        if rec_mode[r] == MODE_CACHE:
            for q in range(ent_start[r], ent_start[r + 1]):
                count[ent_cls[q]] += 1
    start = np.zeros(n_classes + 1, dtype=np.int64)
    start[1:] = np.cumsum(count)
    places = np.empty(start[-1], dtype=PLACE)
    place, death = np.empty(len(ent_key), np.int64), np.full(len(ent_key), -1, np.int64)
    latest = np.full(n_keys, -1, dtype=np.int64)  # each key's latest use's queue place
    at = start[:-1].copy()
    for c in range(n_classes):
        n_old, order = car_start[c + 1] - car_start[c], -1
        for i in range(car_start[c], car_start[c + 1]):
            if i == car_start[c] or car_rec[i] != car_rec[i - 1]:
                order += 1
            _put(places, at[c], car_key[i], order - n_old, car_rank[i], car_owner[i], car_time[i])
            latest[car_key[i]] = at[c]
            at[c] += 1
    for r in range(len(rec_mode)):
        if rec_mode[r] != MODE_CACHE:
            continue
        o = 0 if group_clock else rec_layer[r]
        for j in range(ent_start[r], ent_start[r + 1]):
            q = ent_sorted[j]
            p = at[ent_cls[q]]
            at[ent_cls[q]] += 1
            _put(places, p, ent_key[q], r, q - ent_start[r], o, rec_now[r])
            place[q] = p
            if latest[ent_key[q]] >= 0:
                death[q] = latest[ent_key[q]]
                places[death[q]].dies = r
            latest[ent_key[q]] = p
    for c in range(n_classes):
        _put(places, at[c], 0, NEVER, 0, 0, 0)
    return start, places, death, place


@njit(cache=True, nogil=True, inline="always")
def _put(places, p, key, rec, rank, owner, time):
    """A use at queue place p, alive (its own union-find root) and the latest of its key."""
    u = places[p]
    u.nxt, u.rec, u.key, u.dies, u.rank, u.owner, u.time = p, rec, key, NEVER, rank, owner, time


@njit(cache=True, nogil=True)
def carry(start, places, heads, car_start, car_key, car_time, car_owner, car_rec, car_rank):
    """Keep the latest uses (at most one a key) for the next chunk's queues, and move every pool's list heads
    (heads [.., n_classes]: places in their class's queue) onto them: a use before a head is out of that pool's
    list for good (dead, or its key evicted until its next use)."""
    n_classes = len(start) - 1
    before = np.zeros(len(places) + n_classes, dtype=np.int64)  # per class: its carried uses before each place
    n = 0
    for c in range(n_classes):
        car_start[c] = n
        for p in range(start[c], start[c + 1]):
            before[p + c] = n - car_start[c]
            u = places[p]
            if u.dies == NEVER and u.rec != NEVER:  # a latest use, not the sentinel
                car_key[n], car_time[n], car_owner[n], car_rec[n], car_rank[n] = u.key, u.time, u.owner, u.rec, u.rank
                n += 1
        before[start[c + 1] + c] = n - car_start[c]  # unreachable: a head stops at the sentinel
    car_start[n_classes] = n
    flat = heads.reshape(-1, n_classes)
    for i in range(flat.shape[0]):
        for c in range(n_classes):
            flat[i, c] = before[start[c] + flat[i, c] + c]
