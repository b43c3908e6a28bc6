"""ClassLRU's pool sizes replayed over shared class queues (class_lru_kernel.queues), up to 64 pool sizes a lane.

A slot's class list and its place in it follow from its key's latest use alone (the class after that use, the
order of the uses), which every pool size shares, except within one record: there a pool's hits are appended
first, in first-appearance order, then its misses in expert-id order. So a pool size keeps only which keys it
holds (one bit a key in its lane's word), whether each key's latest use was a hit there, and per class a head:
a place in the shared queue before which no use is in its list. Hits cost one word read for the lane's 64 pool
sizes; only misses are worked per pool size."""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import prange
from numba.core import types
from numba.extending import intrinsic

from moe_model.llama.lru_kernel import MODE_PROBE, MODE_SKIP
from moe_model.numba_cache import njit
from moe_model.policies.class_lru_lists import best, largest_record, list_pool, list_work, share_split

LANE_BITS = 64  # pool sizes a lane: one uint64 word a key
# a pool's list head per class, as last found: its queue place (-1: none), the record before which the find holds
# (a dead head, an eviction or a later record's use make it stale), its use's clock and clock index, its key
_POS, _UNTIL, _TIME, _OWNER, _KEY = 0, 1, 2, 3, 4


@intrinsic
def _low_bit(typingctx, x):
    """Index of x's lowest set bit (x != 0): LLVM's cttz."""

    def codegen(context, builder, signature, args):
        return builder.zext(builder.cttz(args[0], ir.Constant(ir.IntType(1), 1)), ir.IntType(64))

    return types.int64(types.uint64), codegen


@njit(cache=True, nogil=True, inline="always")
def _u(i):
    """i (never negative) as an unsigned index: numba wraps a signed one around, a shift and an add per read."""
    return np.uint64(i)


@njit(cache=True, nogil=True, inline="always")
def _alive(p, places):
    """The first queue place from p whose use is still its key's latest (places' nxt: the lane's union-find of
    ended uses, halved as it is walked)."""
    u = _u(p)
    while places[u].nxt != u:
        places[u].nxt = places[_u(places[u].nxt)].nxt
        u = _u(places[u].nxt)
    return np.int64(u)


@njit(cache=True, nogil=True, inline="always")
def _find_head(b, c, bit, now_rec, start, places, ghit, res, hitf, heads, cached):
    """Find and cache the least recently used slot of class c's list in this pool (its queue place; -1 when the
    list is empty or holds only this record's uses: then until the record of the next use in the queue); moves
    the pool's head past uses out of its list."""
    p = _alive(start[c] + heads[b, c], places)
    while places[_u(p)].rec < now_rec and not res[_u(places[_u(p)].key)] & bit:  # a latest use of a key evicted
        p = _alive(p + 1, places)
    heads[b, c] = p - start[c]
    at = places[_u(p)].rec
    if at >= now_rec:  # empty, or every use left is this plan()'s or later (the sentinel's record is NEVER)
        cached[b, c, _POS], cached[b, c, _UNTIL] = -1, at + 1
        return
    head = p  # within the record: its first hit in first-appearance order, else its lowest expert id (p)
    if ghit[_u(p)] & bit:  # the record hit in this pool (in this class)
        i, first = _u(p), -1  # the rank of the held hit found first in first-appearance order (-1: none yet)
        while places[i].rec == at:
            u = places[i]
            k = _u(u.key)
            if u.dies > now_rec and res[k] & bit and hitf[k] & bit and (first < 0 or u.rank < first):
                head, first = np.int64(i), u.rank
            i += np.uint64(1)
    u = places[_u(head)]
    cached[b, c, _POS], cached[b, c, _UNTIL], cached[b, c, _KEY] = head, u.dies, u.key
    cached[b, c, _TIME], cached[b, c, _OWNER] = u.time, u.owner


@njit(cache=True, nogil=True, inline="always")
def _score(b, c, bit, now, now_rec, clock, pool, inv, age_planning):
    """age / 2^c of class c's head, -1 when it has none outside this plan() (class_lru_lists._head_score's rule);
    pool: (the queues' class starts, the lane's copy of their places, ghit, res, hitf, heads, cached)."""
    start, places, ghit, res, hitf, heads, cached = pool
    if cached[b, c, _UNTIL] <= now_rec:
        _find_head(b, c, bit, now_rec, start, places, ghit, res, hitf, heads, cached)
    if cached[b, c, _POS] < 0:
        return -1.0
    if age_planning:
        return max(now - cached[b, c, _TIME], 0) * inv[c]
    return (clock[_u(cached[b, c, _OWNER])] - cached[b, c, _TIME]) * inv[c]


@njit(cache=True, nogil=True, _nrt=False)  # no reference counts in the loops: it allocates nothing
def _lane(chunk, q, knobs, work, caps, mask, res, hitf, fill, heads, cached, misses, share_counts, remainder,
          probe):  # fmt: skip
    """One lane's pool sizes replay the chunk: each record's hits in one word read per key, then, per pool size
    that missed, its misses in expert-id order (class_lru_lists.list_pool's rule in this layout)."""
    rec_layer, rec_mode, rec_now, ent_start = chunk[0], chunk[1], chunk[3], chunk[4]
    ent_key, ent_sorted, ent_cls = chunk[5], chunk[6], chunk[9]
    start, death, place, group_clock = q[0], q[2], q[3], knobs[0]
    clock, places, sk, sh, se, ghit, gacc = work[0], work[4], work[5], work[6], work[7], work[8], work[9]
    missed_at, n_missed = work[11], work[12]
    stamp, one = 0, np.uint64(1)
    pool = (start, places, ghit, res, hitf, heads, cached)  # what a head's score reads
    for r in range(len(rec_mode)):
        lo, hi, mode = ent_start[r], ent_start[r + 1], rec_mode[r]
        if mode == MODE_SKIP or lo == hi:
            continue
        if mode == MODE_PROBE:  # an offloaded large batch reads the pool, changes nothing
            for e in range(lo, hi):
                held = res[ent_key[e]] & mask
                while held:
                    probe[_low_bit(held)] += 1
                    held &= held - one
            continue
        layer, now = rec_layer[r], rec_now[r]
        clock[0 if group_clock else layer] = now
        missed = np.uint64(0)
        for j in range(hi - lo):  # every pool's hits (its latest use becomes this one, a hit where the key is held)
            e = ent_sorted[lo + j]
            k = _u(ent_key[e])
            held = res[k]
            hitf[k], missed = held, missed | ~held
            sk[j], sh[j], se[j] = k, held, e - lo  # the record in expert-id order, held as it came
            if death[e] >= 0:  # the use this one ends leaves every list
                places[_u(death[e])].nxt = death[e] + 1
            gacc[ent_cls[e]] |= held
        for e in range(lo, hi):  # per class, the pools where the record hit (its head needs the hits' order)
            ghit[_u(place[e])] = gacc[ent_cls[e]]
        for e in range(lo, hi):
            gacc[ent_cls[e]] = 0
        missed &= mask
        if not missed:
            continue
        for j in range(hi - lo):  # each pool's misses, in expert-id order
            m = ~sh[j] & mask
            while m:
                b = _low_bit(m)
                m &= m - one
                missed_at[b, n_missed[b]] = j
                n_missed[b] += 1
        while missed:  # then each pool size with a miss, on its own
            b = _low_bit(missed)
            missed &= missed - one
            stamp += 1
            _pool_misses(b, one << np.uint64(b), r, lo, hi, now, layer, chunk, knobs, work, pool, caps, fill,
                         misses, share_counts, remainder, stamp, missed_at[b, : n_missed[b]])  # fmt: skip
            n_missed[b] = 0


@njit(cache=True, nogil=True, inline="always")
def _pool_misses(b, bit, r, lo, hi, now, layer, chunk, knobs, work, pool, caps, fill, misses, share_counts,
                 remainder, stamp, missed_at):  # fmt: skip
    """Pool size b's misses of record r (missed_at: their places in the record's expert-id order), each into an
    empty slot or in place of the head with the largest age / 2^class among the lists this plan() did not use;
    with the CPU share, once the pool is full, the share's missed experts stay out (class_lru_lists.list_pool's
    rule)."""
    ent_key, by_crf, ent_sel, rec_large = chunk[5], chunk[7], chunk[8], chunk[2]
    age_planning, ties_high, share, inv = knobs[1], knobs[2], knobs[3], knobs[4]
    clock, scores, mark, rem, sk, se, held_e = work[0], work[1], work[2], work[3], work[5], work[7], work[10]
    start, res, heads, cached = pool[0], pool[3], pool[5], pool[6]
    f = fill[b]
    split = share > 0 and f == caps[b]
    if split:
        rem[0] = remainder[b]
        for e in range(lo, hi):
            held_e[e - lo] = res[ent_key[e]] & bit != 0
        share_split(lo, hi, held_e, by_crf, ent_sel, share, rem, layer, mark, stamp, share_counts[b])
        remainder[b] = rem[0]
    scored = False  # the heads' scores, computed at the first eviction, kept up to date within the record
    for j in missed_at:
        if split and mark[se[j]] == stamp:
            continue
        if f < caps[b]:
            f += 1
        else:
            if not scored:
                for c in range(len(inv)):
                    scores[c] = _score(b, c, bit, now, r, clock, pool, inv, age_planning)
                scored = True
            c = best(scores, ties_high)
            res[_u(cached[b, c, _KEY])] &= ~bit
            if cached[b, c, _POS] == start[c] + heads[b, c]:  # the victim was its list's first use: step past it
                heads[b, c] += 1
            cached[b, c, _UNTIL] = -1
            scores[c] = _score(b, c, bit, now, r, clock, pool, inv, age_planning)
        res[_u(sk[j])] |= bit
    fill[b] = f
    misses[b, rec_large[r], layer] += len(missed_at)


@njit(cache=True, nogil=True)
def _work(n_rec, ent_start, places, clock0, n_classes, share):
    """A lane's scratch arrays: its clocks, the heads' scores, the share's marks (one per entry of the largest
    record), its carried remainder, its copy of the queue places (its own union-find), a record's keys in
    expert-id order with the pools that held each and their entries, the pools where each use's record hit, and
    each pool's misses of a record."""
    most = largest_record(n_rec, ent_start)
    mark = np.zeros(most if share > 0 else 0, dtype=np.int64)
    sk, sh, se = np.empty(most, np.int64), np.empty(most, np.uint64), np.empty(most, np.int64)
    ghit = np.full(len(places), np.uint64(0xFFFFFFFFFFFFFFFF))  # carried uses: unknown, their records looked through
    scratch = (sk, sh, se, ghit, np.zeros(n_classes, np.uint64), np.zeros(most, np.bool_))
    missed = (np.empty((LANE_BITS, most), np.int64), np.zeros(LANE_BITS, np.int64))
    own = (clock0.copy(), np.empty(n_classes, np.float64), mark, np.zeros(1, np.float64), places.copy())
    return *own, *scratch, *missed


@njit(cache=True, nogil=True, parallel=True)
def replay(chunk, q, clock0, knobs, lanes, lists):
    """Every small pool size on its own lists and every lane of the others replay the chunk, each a job on numba's
    threads (the small pools first: they cost the most). The lanes share only the queues."""
    caps, masks, res, hitf, fill, heads, cached, misses, share_counts, remainder, probe = lanes
    l_caps, offsets, slot_of, links, used, first, last, state, l_misses, l_share, l_remainder = lists
    n_list, n_classes = len(l_caps), len(knobs[4])
    for job in prange(n_list + len(masks)):
        if job < n_list:  # its list heads in its own copies: neighbouring pools' rows share cache lines
            f, t = first[job].copy(), last[job].copy()
            work = list_work(len(chunk[1]), chunk[4], clock0, n_classes)
            list_pool(chunk, knobs, work, l_caps[job], offsets[job], slot_of[job], links, used, f, t, state[job],
                      l_misses[job], l_share[job], l_remainder[job])  # fmt: skip
            first[job, :], last[job, :] = f, t
        else:
            lane = job - n_list
            work = _work(len(chunk[1]), chunk[4], q[1], clock0, n_classes, knobs[3])
            _lane(chunk, q, knobs, work, caps[lane], masks[lane], res[lane], hitf[lane], fill[lane], heads[lane],
                  cached[lane], misses[lane], share_counts[lane], remainder[lane], probe[lane])  # fmt: skip
