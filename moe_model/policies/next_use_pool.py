"""Belady's pool without a heap: a resident key's priority is the record of its next use, so the keys are
kept in buckets by that record, and a multi-level bitmap over the records finds the farthest bucket.

MIN with bypass (the victim is the key used farthest ahead, the earliest refreshed among keys of one bucket;
a miss used no sooner than the victim is not kept), at O(1) per hit instead of a heap update: the keys whose
next use is the current record are exactly its hits, so that bucket is emptied at once, and each record's keys
join their next buckets when it ends. A bucket needs no list of its own: its keys are the resident keys of that
future record (at most its distinct experts) whose next use is it. Keys never used again wait in a first-in
first-out queue.
"""

from __future__ import annotations

import numpy as np

from moe_model.numba_cache import njit

NEVER = -1  # next_rec of a key not looked up again
HELD = -2  # next use of a key of the record being replayed: no bucket holds it until the record ends


@njit(cache=True, nogil=True, inline="always")
def _high_bit(word) -> int:
    """Index of the highest set bit of a nonzero 64-bit word."""
    n = 0
    for shift in (32, 16, 8, 4, 2, 1):
        if word >> np.uint64(shift):
            word >>= np.uint64(shift)
            n += shift
    return n


@njit(cache=True, nogil=True)
def _levels(n: int) -> np.ndarray:
    """Offsets of each level of a bitmap over n bits in one array (level 0 first), plus the end."""
    offsets = [0]
    size = n
    while True:
        words = max(1, (size + 63) // 64)
        offsets.append(offsets[-1] + words)
        if words == 1:
            return np.array(offsets, dtype=np.int64)
        size = words


@njit(cache=True, nogil=True, inline="always")
def _set(bits, levels, q):
    for lv in range(len(levels) - 1):
        w = levels[lv] + (q >> 6)
        was = bits[w]
        bits[w] = was | (np.uint64(1) << np.uint64(q & 63))
        if was:
            return
        q >>= 6


@njit(cache=True, nogil=True, inline="always")
def _clear(bits, levels, q):
    for lv in range(len(levels) - 1):
        w = levels[lv] + (q >> 6)
        bits[w] &= ~(np.uint64(1) << np.uint64(q & 63))
        if bits[w]:
            return
        q >>= 6


@njit(cache=True, nogil=True, inline="always")
def _highest(bits, levels) -> int:
    """The highest set bit of level 0, or -1."""
    top = len(levels) - 2
    if not bits[levels[top]]:
        return -1
    q = 0
    for lv in range(top, -1, -1):
        q = q * 64 + _high_bit(bits[levels[lv] + q])
    return q


@njit(cache=True, nogil=True)
def next_use_pass(bounds, ent_key, ent_layer, next_rec, n_keys, n_layer, n_expert, n_slots):
    """Replay one group's records (entries bounds[q]:bounds[q+1], q counted within the group) through a pool
    of n_slots slots, Belady with bypass; next_rec: per entry, the group record of its key's next lookup, or
    NEVER. Returns per layer: hits, misses uploaded into the pool, misses served without being kept."""
    hits = np.zeros(n_layer, dtype=np.int64)
    uploads = np.zeros(n_layer, dtype=np.int64)
    cpu = np.zeros(n_layer, dtype=np.int64)
    n_rec = len(bounds) - 1
    levels = _levels(max(n_rec, 1))
    bits = np.zeros(levels[-1], dtype=np.uint64)
    resident = np.zeros(n_keys, dtype=np.bool_)
    nxt = np.zeros(n_keys, dtype=np.int64)  # next use of each resident key
    seq = np.zeros(n_keys, dtype=np.int64)  # when it was last refreshed or placed
    never = np.empty(max(n_slots, 1), dtype=np.int64)  # ring of resident keys never used again, oldest first
    never_head, never_len = 0, 0
    stash = np.empty(n_expert, dtype=np.int64)
    held = np.empty(n_expert, dtype=np.int64)
    held_next = np.empty(n_expert, dtype=np.int64)
    n_res, tick = 0, 0
    for r in range(n_rec):
        _clear(bits, levels, r)  # its keys are this record's hits
        n_miss, n_held = 0, 0
        for i in range(bounds[r], bounds[r + 1]):
            kk = ent_key[i]
            if resident[kk]:
                hits[ent_layer[i]] += 1
                nxt[kk], seq[kk] = HELD, tick
                tick += 1
                held[n_held], held_next[n_held] = kk, next_rec[i]
                n_held += 1
            else:
                stash[n_miss] = i
                n_miss += 1
        _by_next_use(stash, n_miss, next_rec)  # the miss used soonest is placed first
        for j in range(n_miss):
            i = stash[j]
            kk, need = ent_key[i], next_rec[i]
            if n_res < n_slots:
                n_res += 1
            else:
                if never_len:
                    victim, victim_next = never[never_head], NEVER
                else:
                    q = _highest(bits, levels)
                    victim, victim_next = _oldest_in(bounds, ent_key, resident, nxt, seq, q), q
                if victim < 0 or _not_sooner(need, victim_next):  # every other key is this record's, or farther
                    cpu[ent_layer[i]] += 1
                    continue
                resident[victim] = False
                if never_len:
                    never_head, never_len = (never_head + 1) % len(never), never_len - 1
                elif _oldest_in(bounds, ent_key, resident, nxt, seq, victim_next) < 0:
                    _clear(bits, levels, victim_next)
            resident[kk] = True
            nxt[kk], seq[kk] = HELD, tick
            tick += 1
            held[n_held], held_next[n_held] = kk, need
            n_held += 1
            uploads[ent_layer[i]] += 1
        for j in range(n_held):  # the record is done: its keys join the buckets of their next use
            kk = held[j]
            nxt[kk] = held_next[j]
            if nxt[kk] == NEVER:
                never[(never_head + never_len) % len(never)] = kk
                never_len += 1
            else:
                _set(bits, levels, nxt[kk])
    return hits, uploads, cpu


@njit(cache=True, nogil=True, inline="always")
def _not_sooner(need, victim_next) -> bool:
    """A miss whose next use is not before the victim's is not kept (Belady with bypass)."""
    if victim_next == NEVER:
        return need == NEVER
    return need == NEVER or need >= victim_next


@njit(cache=True, nogil=True, inline="always")
def _oldest_in(bounds, ent_key, resident, nxt, seq, q) -> int:
    """The earliest refreshed resident key whose next use is record q (they are among q's keys), or -1."""
    best = -1
    if q < 0:
        return best
    for i in range(bounds[q], bounds[q + 1]):
        kk = ent_key[i]
        if resident[kk] and nxt[kk] == q and (best < 0 or seq[kk] < seq[best]):
            best = kk
    return best


@njit(cache=True, nogil=True, inline="always")
def _by_next_use(stash, n, next_rec):
    """stash[:n] (entry indices) by next use, soonest first and NEVER last, ties in their order."""
    for a in range(1, n):
        i = stash[a]
        b = a
        while b > 0 and _later(next_rec[stash[b - 1]], next_rec[i]):
            stash[b] = stash[b - 1]
            b -= 1
        stash[b] = i


@njit(cache=True, nogil=True, inline="always")
def _later(a, b) -> bool:
    return a != b and (a == NEVER or (b != NEVER and a > b))


@njit(cache=True, nogil=True)
def next_records(bounds, ent_key, n_keys):
    """Per entry, the group record (index into bounds) of its key's next lookup, or NEVER: one backward scan."""
    out = np.empty(len(ent_key), dtype=np.int64)
    seen_at = np.full(n_keys, NEVER, dtype=np.int64)
    for q in range(len(bounds) - 2, -1, -1):
        for i in range(bounds[q], bounds[q + 1]):
            out[i] = seen_at[ent_key[i]]
            seen_at[ent_key[i]] = q
    return out
