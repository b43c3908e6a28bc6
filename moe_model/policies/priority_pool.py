"""One pool whose victim is the resident key of lowest priority, for policies whose priority of a key
depends only on its own lookups (Belady: the next use; CRF: the decayed use count), so it can be computed
per lookup beforehand. A binary heap with stale entries skipped keeps each eviction O(log n).

As in llama.cpp's plan(), keys of the current record are never evicted for another key of that record
(all of a record's experts are resident at once). With `bypass`, a miss whose priority is not above the
best victim's is served without being kept (computed on the CPU): the offline optimum may do that.
"""

from __future__ import annotations

import numpy as np
from numba import njit  # nogil=True: a run lets the app's other sessions (threads of one server) go on


@njit(cache=True, nogil=True)
def _less(prio, seq, a, b):
    return prio[a] < prio[b] or (prio[a] == prio[b] and seq[a] < seq[b])


@njit(cache=True, nogil=True)
def _push(prio, seq, key, size, p, s, k):
    i = size
    prio[i], seq[i], key[i] = p, s, k
    while i > 0:
        parent = (i - 1) // 2
        if not _less(prio, seq, i, parent):
            break
        prio[i], prio[parent] = prio[parent], prio[i]
        seq[i], seq[parent] = seq[parent], seq[i]
        key[i], key[parent] = key[parent], key[i]
        i = parent
    return size + 1


@njit(cache=True, nogil=True)
def _pop(prio, seq, key, size):
    """Remove the root; returns the new size."""
    size -= 1
    prio[0], seq[0], key[0] = prio[size], seq[size], key[size]
    i = 0
    while True:
        left, smallest = 2 * i + 1, i
        if left < size and _less(prio, seq, left, smallest):
            smallest = left
        if left + 1 < size and _less(prio, seq, left + 1, smallest):
            smallest = left + 1
        if smallest == i:
            return size
        prio[i], prio[smallest] = prio[smallest], prio[i]
        seq[i], seq[smallest] = seq[smallest], seq[i]
        key[i], key[smallest] = key[smallest], key[i]
        i = smallest


@njit(cache=True, nogil=True)
def priority_pass(bounds, ent_key, ent_prio, n_keys, n_layer, n_expert, n_slots, bypass):
    """Replay one group's entries (records bounds[i]:bounds[i+1]) through a pool of n_slots slots.

    Returns per layer: hits, misses uploaded into the pool, misses served without being kept.
    """
    hits = np.zeros(n_layer, dtype=np.int64)
    uploads = np.zeros(n_layer, dtype=np.int64)
    cpu = np.zeros(n_layer, dtype=np.int64)
    resident = np.zeros(n_keys, dtype=np.bool_)
    cur_seq = np.full(n_keys, -1, dtype=np.int64)
    cur_prio = np.zeros(n_keys, dtype=np.float64)
    in_record = np.full(n_keys, -1, dtype=np.int64)
    slot_keys = np.full(n_slots, -1, dtype=np.int64)
    slot_of = np.full(n_keys, -1, dtype=np.int64)
    cap = 2 * n_slots + 4 * n_expert + 16
    h_prio = np.empty(cap, dtype=np.float64)
    h_seq = np.empty(cap, dtype=np.int64)
    h_key = np.empty(cap, dtype=np.int64)
    stash = np.empty(n_expert, dtype=np.int64)
    held = np.empty(n_expert, dtype=np.int64)
    size, n_res, seq = 0, 0, 0
    for r in range(len(bounds) - 1):
        lo, hi = bounds[r], bounds[r + 1]
        if size + 2 * (hi - lo) + 2 >= cap:  # drop stale entries: rebuild from the residents
            size = 0
            for s in range(n_slots):
                if slot_keys[s] >= 0:
                    kk = slot_keys[s]
                    size = _push(h_prio, h_seq, h_key, size, cur_prio[kk], cur_seq[kk], kk)
        n_miss = 0
        for i in range(lo, hi):
            kk = ent_key[i]
            in_record[kk] = r
            if resident[kk]:
                hits[kk // n_expert] += 1
                cur_prio[kk], cur_seq[kk] = ent_prio[i], seq
                size = _push(h_prio, h_seq, h_key, size, ent_prio[i], seq, kk)
                seq += 1
            else:
                stash[n_miss] = i
                n_miss += 1
        order = np.argsort(-ent_prio[stash[:n_miss]], kind="mergesort")  # most valuable miss first
        for j in range(n_miss):
            i = stash[order[j]]
            kk, layer = ent_key[i], ent_key[i] // n_expert
            slot = -1
            if n_res < n_slots:
                slot = n_res
                n_res += 1
            else:
                size, victim, n_held = _best_victim(h_prio, h_seq, h_key, size, resident, cur_seq, in_record, r, held)
                for j2 in range(n_held):
                    kh = held[j2]
                    size = _push(h_prio, h_seq, h_key, size, cur_prio[kh], cur_seq[kh], kh)
                if victim < 0 or (bypass and cur_prio[victim] >= ent_prio[i]):
                    cpu[layer] += 1
                    continue
                resident[victim] = False  # its heap entry is now stale and is dropped when reached
                slot = slot_of[victim]
            resident[kk] = True
            slot_keys[slot], slot_of[kk] = kk, slot
            cur_prio[kk], cur_seq[kk] = ent_prio[i], seq
            size = _push(h_prio, h_seq, h_key, size, ent_prio[i], seq, kk)
            seq += 1
            uploads[layer] += 1
    return hits, uploads, cpu


@njit(cache=True, nogil=True)
def _best_victim(h_prio, h_seq, h_key, size, resident, cur_seq, in_record, r, held):
    """Leave the lowest-priority valid key outside record r at the root; returns (size, key or -1).
    Stale entries (key evicted or used again since) are dropped on the way."""
    n_held = 0
    victim = -1
    while size > 0:
        kk, s = h_key[0], h_seq[0]
        if resident[kk] and cur_seq[kk] == s and in_record[kk] != r:
            victim = kk
            break
        if resident[kk] and cur_seq[kk] == s:  # a key of the current record: set aside, put back below
            held[n_held] = kk
            n_held += 1
        size = _pop(h_prio, h_seq, h_key, size)
    return size, victim, n_held
