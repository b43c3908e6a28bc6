"""One pool whose victim is the resident key of lowest priority, for policies whose priority of a key
depends only on its own lookups (Belady: the next use; CRF: the decayed use count), so it can be computed
per lookup beforehand. An indexed binary heap holds the resident keys, ordered by (priority, sequence of
their last use), each key's priority inline: a lookup costs O(log n_slots), with no stale entries.

As in llama.cpp's plan(), keys of the current record are never evicted for another key of that record
(all of a record's experts are resident at once): its hits met at the root are set aside until it ends, its
misses enter the heap when it ends. With `bypass`, a miss whose priority is not above the best victim's is
served without being kept (computed on the CPU): the offline optimum may do that.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True, inline="always")
def _before(hp, hs, a, b):
    """Heap slot a's key is evicted before heap slot b's."""
    return hp[a] < hp[b] or (hp[a] == hp[b] and hs[a] < hs[b])


@njit(cache=True, nogil=True, inline="always")
def _sift_up(heap, hp, hs, pos, i):
    key, p, s = heap[i], hp[i], hs[i]
    while i > 0:
        parent = (i - 1) // 2
        if not (p < hp[parent] or (p == hp[parent] and s < hs[parent])):
            break
        heap[i], hp[i], hs[i] = heap[parent], hp[parent], hs[parent]
        pos[heap[i]] = i
        i = parent
    heap[i], hp[i], hs[i] = key, p, s
    pos[key] = i


@njit(cache=True, nogil=True, inline="always")
def _sift_down(heap, hp, hs, pos, i, size):
    key, p, s = heap[i], hp[i], hs[i]
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        if child + 1 < size and _before(hp, hs, child + 1, child):
            child += 1
        if not (hp[child] < p or (hp[child] == p and hs[child] < s)):
            break
        heap[i], hp[i], hs[i] = heap[child], hp[child], hs[child]
        pos[heap[i]] = i
        i = child
    heap[i], hp[i], hs[i] = key, p, s
    pos[key] = i


@njit(cache=True, nogil=True, inline="always")
def _remove(heap, hp, hs, pos, key, size):
    """Take `key` out of the heap of `size` keys; returns the new size."""
    i = pos[key]
    pos[key] = -1
    size -= 1
    if i == size:
        return size
    heap[i], hp[i], hs[i] = heap[size], hp[size], hs[size]
    pos[heap[i]] = i
    if i > 0 and _before(hp, hs, i, (i - 1) // 2):
        _sift_up(heap, hp, hs, pos, i)
    else:
        _sift_down(heap, hp, hs, pos, i, size)
    return size


@njit(cache=True, nogil=True, inline="always")
def _update(heap, hp, hs, pos, key, p, s, size):
    """Give `key` the priority (p, s) and restore the heap order around it."""
    i = pos[key]
    hp[i], hs[i] = p, s
    if i > 0 and _before(hp, hs, i, (i - 1) // 2):
        _sift_up(heap, hp, hs, pos, i)
    else:
        _sift_down(heap, hp, hs, pos, i, size)


@njit(cache=True, nogil=True, inline="always")
def _push(heap, hp, hs, pos, key, p, s, size):
    heap[size], hp[size], hs[size] = key, p, s
    pos[key] = size
    _sift_up(heap, hp, hs, pos, size)
    return size + 1


@njit(cache=True, nogil=True, inline="always")
def _sorted_by_priority(stash, n, ent_prio):
    """stash[:n] (entry indices) by priority, highest first, ties in their order (a stable insertion sort)."""
    for a in range(1, n):
        i = stash[a]
        b = a
        while b > 0 and ent_prio[stash[b - 1]] < ent_prio[i]:
            stash[b] = stash[b - 1]
            b -= 1
        stash[b] = i


@njit(cache=True, nogil=True)
def priority_pass(bounds, ent_key, ent_layer, ent_prio, n_keys, n_layer, n_expert, n_slots, bypass):
    """Replay one group's entries (records bounds[i]:bounds[i+1]) through a pool of n_slots slots.

    Returns per layer: hits, misses uploaded into the pool, misses served without being kept.
    """
    hits = np.zeros(n_layer, dtype=np.int64)
    uploads = np.zeros(n_layer, dtype=np.int64)
    cpu = np.zeros(n_layer, dtype=np.int64)
    resident = np.zeros(n_keys, dtype=np.bool_)
    in_record = np.full(n_keys, -1, dtype=np.int64)
    prio = np.zeros(n_keys, dtype=np.float64)  # of each resident key's last use
    seq = np.zeros(n_keys, dtype=np.int64)
    pos = np.full(n_keys, -1, dtype=np.int64)
    cap = max(n_slots, 1)
    heap, hp, hs = np.empty(cap, dtype=np.int64), np.empty(cap, dtype=np.float64), np.empty(cap, dtype=np.int64)
    stash = np.empty(n_expert, dtype=np.int64)
    held = np.empty(n_expert, dtype=np.int64)
    size, n_res, tick = 0, 0, 0
    for r in range(len(bounds) - 1):
        n_miss, n_held = 0, 0
        for i in range(bounds[r], bounds[r + 1]):
            kk = ent_key[i]
            in_record[kk] = r
            if resident[kk]:
                hits[ent_layer[i]] += 1
                prio[kk], seq[kk] = ent_prio[i], tick
                _update(heap, hp, hs, pos, kk, ent_prio[i], tick, size)
                tick += 1
            else:
                stash[n_miss] = i
                n_miss += 1
        if n_miss > 1:
            _sorted_by_priority(stash, n_miss, ent_prio)  # most valuable miss first
        for j in range(n_miss):
            i = stash[j]
            kk, layer = ent_key[i], ent_layer[i]
            if n_res < n_slots:
                n_res += 1
            else:
                while size > 0 and in_record[heap[0]] == r:  # a key of this record: set aside, put back below
                    held[n_held] = heap[0]
                    n_held += 1
                    size = _remove(heap, hp, hs, pos, heap[0], size)
                if size == 0 or (bypass and hp[0] >= ent_prio[i]):  # no victim outside this record, or none worse
                    cpu[layer] += 1
                    continue
                victim = heap[0]
                size = _remove(heap, hp, hs, pos, victim, size)
                resident[victim] = False
            resident[kk] = True
            prio[kk], seq[kk] = ent_prio[i], tick
            tick += 1
            held[n_held] = kk
            n_held += 1
            uploads[layer] += 1
        for j in range(n_held):  # the record is done: its keys may be evicted again
            kk = held[j]
            size = _push(heap, hp, hs, pos, kk, prio[kk], seq[kk], size)
    return hits, uploads, cpu
