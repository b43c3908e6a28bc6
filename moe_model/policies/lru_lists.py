"""llama.cpp's linked-list LRU (b11549 plan()), generalised to several pools per group and to idle unloading.

Each layer maps to one pool (one list of slots, head = least recently used). Per pool record: dedupe,
refresh the hits in first-appearance order, then sorted misses take the head slot. A pool smaller than a
record's distinct experts cannot hold them all at once: the misses it has no free slot for (every slot
already used by this record) are served without being kept. With idle_rounds > 0, before each ubatch the
keys not looked up in the last idle_rounds ubatches are unloaded (they sit at the head of the list).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from moe_model.llama.lru_kernel import record_experts


@njit(cache=True)
def _touch(s, p, prev, nxt, heads, tails):
    """Move slot s to the tail (most recently used) of pool p's list."""
    if s == tails[p]:
        return
    if prev[s] >= 0:
        nxt[prev[s]] = nxt[s]
    else:
        heads[p] = nxt[s]
    prev[nxt[s]] = prev[s]
    prev[s] = tails[p]
    nxt[s] = -1
    nxt[tails[p]] = s
    tails[p] = s


@njit(cache=True, nogil=True)
def lru_lists_pass(rec_layer, rec_ntok, rec_off, rec_ubatch, use, ids, k, n_expert, pool_of_layer, pool_slots, idle):
    """Replay the records with use[r] through the pools; returns per layer (hits, uploads, not kept)."""
    n_layer = len(pool_of_layer)
    hits = np.zeros(n_layer, dtype=np.int64)
    uploads = np.zeros(n_layer, dtype=np.int64)
    cpu = np.zeros(n_layer, dtype=np.int64)
    n_pools = len(pool_slots)
    total = pool_slots.sum()
    prev = np.full(total, -1, dtype=np.int64)
    nxt = np.full(total, -1, dtype=np.int64)
    heads = np.full(n_pools, -1, dtype=np.int64)
    tails = np.full(n_pools, -1, dtype=np.int64)
    start = 0
    for p in range(n_pools):  # initially slot order, as llama.cpp builds the list
        for s in range(start, start + pool_slots[p]):
            prev[s] = s - 1 if s > start else -1
            nxt[s] = s + 1 if s + 1 < start + pool_slots[p] else -1
        if pool_slots[p] > 0:
            heads[p], tails[p] = start, start + pool_slots[p] - 1
        start += pool_slots[p]
    key_of = np.full(total, -1, dtype=np.int64)
    slot_of = np.full(n_layer * n_expert, -1, dtype=np.int64)
    last_round = np.zeros(total, dtype=np.int64)
    seen = np.zeros(n_expert, dtype=np.int64)
    uniq = np.empty(n_expert, dtype=np.int64)
    misses = np.empty(n_expert, dtype=np.int64)
    cur_round = -1
    for r in range(len(rec_layer)):
        if not use[r]:
            continue
        if idle > 0 and rec_ubatch[r] != cur_round:
            cur_round = rec_ubatch[r]
            for p in range(n_pools):
                _unload_idle(p, heads, nxt, key_of, slot_of, last_round, cur_round - idle)
        nu = record_experts(ids, rec_off[r], rec_off[r] + rec_ntok[r] * k, seen, r + 1, uniq)
        layer = rec_layer[r]
        p = pool_of_layer[layer]
        base = layer * n_expert
        used, nm = 0, 0
        for u in range(nu):  # hits first, refreshed in first-appearance order
            s = slot_of[base + uniq[u]]
            if s >= 0:
                _touch(s, p, prev, nxt, heads, tails)
                last_round[s] = rec_ubatch[r]
                hits[layer] += 1
                used += 1
            else:
                misses[nm] = uniq[u]
                nm += 1
        misses[:nm].sort()
        for j in range(nm):  # then the sorted misses take the head slot
            if used >= pool_slots[p]:
                cpu[layer] += 1
                continue
            s = heads[p]
            if key_of[s] >= 0:
                slot_of[key_of[s]] = -1
            key_of[s] = base + misses[j]
            slot_of[base + misses[j]] = s
            _touch(s, p, prev, nxt, heads, tails)
            last_round[s] = rec_ubatch[r]
            uploads[layer] += 1
            used += 1
    return hits, uploads, cpu


@njit(cache=True)
def _unload_idle(p, heads, nxt, key_of, slot_of, last_round, before):
    """Clear the slots of pool p last used before round `before`: they lead the list, after the empty ones."""
    s = heads[p]
    while s >= 0:
        if key_of[s] >= 0:
            if last_round[s] >= before:
                return
            slot_of[key_of[s]] = -1
            key_of[s] = -1
        s = nxt[s]
