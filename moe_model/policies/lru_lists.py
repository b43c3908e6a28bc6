"""llama.cpp's linked-list LRU (b11549 plan()): the one list engine every list policy and the stepper use.

Each layer maps to one pool (one list of slots, head = least recently used). Per pool record: dedupe,
refresh the hits in first-appearance order (`refresh_hits`), then sorted misses take the head slot
(`fill_misses`). The hooks between the two steps are what the policies change: which misses are not kept
(the CPU share, a pool smaller than a record's distinct experts) and, before a ubatch, which idle keys are
unloaded (`unload_idle`, lazy unload). `lru_lists_pass` is the plain LRU, generalised to several pools per
group and to idle unloading; the CPU-share kernel and the stepper drive the same steps.
"""

from __future__ import annotations

import numpy as np

from moe_model.llama.lru_kernel import record_experts
from moe_model.numba_cache import njit  # nogil=True: a run lets the app's other sessions (threads of one server) go on

# the arrays of a list state, in the tuple new_lists returns
PREV, NEXT, HEADS, TAILS, KEY_OF, SLOT_OF, LAST_ROUND = range(7)


@njit(cache=True, nogil=True)
def new_lists(pool_slots, n_keys):
    """Every pool's list in slot order, all empty, as llama.cpp builds it: (prev, next, heads, tails, key of each
    slot, slot of each key, round of each slot's last use). Pool p owns the slots after those of pools < p."""
    n_pools = len(pool_slots)
    total = pool_slots.sum()
    prev = np.full(total, -1, dtype=np.int64)
    nxt = np.full(total, -1, dtype=np.int64)
    heads = np.full(n_pools, -1, dtype=np.int64)
    tails = np.full(n_pools, -1, dtype=np.int64)
    start = 0
    for p in range(n_pools):
        for s in range(start, start + pool_slots[p]):
            prev[s] = s - 1 if s > start else -1
            nxt[s] = s + 1 if s + 1 < start + pool_slots[p] else -1
        if pool_slots[p] > 0:
            heads[p], tails[p] = start, start + pool_slots[p] - 1
        start += pool_slots[p]
    key_of = np.full(total, -1, dtype=np.int64)
    slot_of = np.full(n_keys, -1, dtype=np.int64)
    return prev, nxt, heads, tails, key_of, slot_of, np.zeros(total, dtype=np.int64)


@njit(cache=True, nogil=True)
def _touch(lists, s, p, round_):
    """Move slot s to the tail (most recently used) of pool p's list."""
    prev, nxt, heads, tails = lists[PREV], lists[NEXT], lists[HEADS], lists[TAILS]
    lists[LAST_ROUND][s] = round_
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
def refresh_hits(lists, p, base, uniq, nu, round_, hits, misses):
    """plan() step 2: the record's cached experts (keys base + e) go to the tail in first-appearance order, into
    `hits`; its other experts into `misses`, sorted (the order they are filled in). Returns (n hits, n misses)."""
    slot_of = lists[SLOT_OF]
    nh, nm = 0, 0
    for u in range(nu):
        s = slot_of[base + uniq[u]]
        if s >= 0:
            _touch(lists, s, p, round_)
            hits[nh] = uniq[u]
            nh += 1
        else:
            misses[nm] = uniq[u]
            nm += 1
    misses[:nm].sort()
    return nh, nm


@njit(cache=True, nogil=True)
def fill_misses(lists, p, base, misses, nm, not_kept, room, round_, slots, evicted):
    """plan() step 3: each sorted miss, unless `not_kept[j]` or the pool has no `room` left for this record, takes
    the head slot. Writes per miss its slot (-1: not kept, computed on the CPU) and the key it evicted (-1: none).
    Returns how many were kept (uploaded)."""
    key_of, slot_of, heads = lists[KEY_OF], lists[SLOT_OF], lists[HEADS]
    kept = 0
    for j in range(nm):
        slots[j], evicted[j] = -1, -1
        if not_kept[j] or kept >= room:
            continue
        s = heads[p]
        if key_of[s] >= 0:
            evicted[j] = key_of[s]
            slot_of[key_of[s]] = -1
        key_of[s] = base + misses[j]
        slot_of[base + misses[j]] = s
        _touch(lists, s, p, round_)
        slots[j] = s
        kept += 1
    return kept


@njit(cache=True, nogil=True)
def unload_idle(lists, p, before, gone):
    """Clear the slots of pool p last used before round `before` (they lead the list, after the empty ones);
    their keys into `gone`, in list order. Returns how many."""
    key_of, slot_of, nxt, last = lists[KEY_OF], lists[SLOT_OF], lists[NEXT], lists[LAST_ROUND]
    n = 0
    s = lists[HEADS][p]
    while s >= 0:
        if key_of[s] >= 0:
            if last[s] >= before:
                return n
            gone[n] = key_of[s]
            n += 1
            slot_of[key_of[s]] = -1
            key_of[s] = -1
        s = nxt[s]
    return n


@njit(cache=True, nogil=True)
def lru_lists_pass(rec_layer, rec_ntok, rec_off, rec_ubatch, use, ids, k, n_expert, pool_of_layer, pool_slots, idle):
    """Replay the records with use[r] through the pools; returns per layer (hits, uploads, not kept).

    A pool smaller than a record's distinct experts cannot hold them all at once: the misses it has no free slot
    for (every slot already used by this record) are served without being kept. With idle > 0, before each
    ubatch the keys not looked up in the last `idle` ubatches are unloaded."""
    n_layer = len(pool_of_layer)
    hits = np.zeros(n_layer, dtype=np.int64)
    uploads = np.zeros(n_layer, dtype=np.int64)
    cpu = np.zeros(n_layer, dtype=np.int64)
    lists = new_lists(pool_slots, n_layer * n_expert)
    seen = np.zeros(n_expert, dtype=np.int64)
    uniq = np.empty(n_expert, dtype=np.int64)
    hit_ids = np.empty(n_expert, dtype=np.int64)
    misses = np.empty(n_expert, dtype=np.int64)
    refuse_none = np.zeros(n_expert, dtype=np.bool_)  # the plain LRU keeps every miss it has room for
    slots = np.empty(n_expert, dtype=np.int64)
    evicted = np.empty(n_expert, dtype=np.int64)
    gone = np.empty(max(pool_slots.max(), 1) if len(pool_slots) else 1, dtype=np.int64)
    cur_round = -1
    for r in range(len(rec_layer)):
        if not use[r]:
            continue
        if idle > 0 and rec_ubatch[r] != cur_round:
            cur_round = rec_ubatch[r]
            for p in range(len(pool_slots)):
                unload_idle(lists, p, cur_round - idle, gone)
        nu = record_experts(ids, rec_off[r], rec_off[r] + rec_ntok[r] * k, seen, r + 1, uniq)
        layer = rec_layer[r]
        p = pool_of_layer[layer]
        nh, nm = refresh_hits(lists, p, layer * n_expert, uniq, nu, rec_ubatch[r], hit_ids, misses)
        kept = fill_misses(
            lists, p, layer * n_expert, misses, nm, refuse_none, pool_slots[p] - nh, rec_ubatch[r], slots, evicted
        )
        hits[layer] += nh
        uploads[layer] += kept
        cpu[layer] += nm - kept
    return hits, uploads, cpu
