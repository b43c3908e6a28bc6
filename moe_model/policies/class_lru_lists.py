"""ClassLRU's small pool sizes, each replayed on its own over its own class lists (doubly linked lists of slots).

A small pool misses most lookups, and its lists are short: an eviction there costs a few reads of its own rows,
where the shared class queues (policies.class_lru_lanes) would look through other pools' uses; a large pool hits
most lookups, which the lanes test for 64 pool sizes at once. limits.CLASS_LRU_LIST_SHARE_OF_KEYS draws the line
(and CLASS_LRU_LANE_MIN_POOLS: a few large pool sizes replay on lists too).
The replay works on a copy of a pool's lists made circular, a sentinel node per class (no branch at a list's ends),
written back after each chunk."""

from __future__ import annotations

import numpy as np
from numba.core import types
from numba.extending import intrinsic
from numba.np.arrayobj import load_item, store_item

from moe_model.llama.lru_kernel import MODE_PROBE, MODE_SKIP
from moe_model.numba_cache import njit

_PREV, _NEXT, _KEY, _CLS = 0, 1, 2, 3  # links: a slot's neighbours in its class list, key, class
_OWNER_SHIFT = 8  # links[s, _CLS]: the key's clock index << 8 | class (no division per score)
_CPU, _SPLIT, _SELECTIONS = 0, 1, 2  # rows of a pool's CPU share counts per layer


@njit(cache=True, nogil=True, inline="always")
def best(scores, ties_high):
    """The class whose head scores highest (ties: the lowest class, or the highest with ties_high)."""
    choice, best_score = -1, -1.0
    if ties_high:
        for c in range(len(scores)):
            if scores[c] >= best_score and scores[c] >= 0:
                choice, best_score = c, scores[c]
    else:  # a strict comparison keeps the first (lowest) class of equal scores and never takes a -1
        for c in range(len(scores)):
            if scores[c] > best_score:
                choice, best_score = c, scores[c]
    return choice


@njit(cache=True, nogil=True, inline="always")
def share_split(lo, hi, held, by_crf, ent_sel, share, rem, layer, mark, stamp, counts):
    """policies.cpu_share.split_selections's rule: the share of the record's missed selections (held[entry - lo]:
    whether the pool holds it; a remainder carried in rem[0]) goes to the CPU, the lowest CRF first; experts all
    of whose selections go are marked (mark[entry - lo] = stamp). counts: the pool's share rows per layer."""
    missed = 0
    for j in range(lo, hi):
        if not held[j - lo]:
            missed += ent_sel[j]
    rem[0] += share * missed
    left = min(missed, int(rem[0]))
    rem[0] -= left
    counts[_SELECTIONS, layer] += left
    for j in range(lo, hi):
        if left == 0:
            break
        e = by_crf[j]
        if held[e - lo]:
            continue
        if ent_sel[e] <= left:
            mark[e - lo] = stamp
            counts[_CPU, layer] += 1
        else:
            counts[_SPLIT, layer] += 1
        left -= min(left, ent_sel[e])


@intrinsic
def _get(typingctx, a, i):
    """a[i] for an index known not to be negative: one load, without numba's wraparound of negative indices (a
    contiguous array only: the index is its offset)."""
    if not (isinstance(a, types.Array) and a.layout == "C"):
        return None

    def codegen(context, builder, sig, args):
        data = context.make_array(sig.args[0])(context, builder, args[0]).data
        ptr = builder.gep(data, [context.cast(builder, args[1], sig.args[1], types.intp)])
        return load_item(context, builder, sig.args[0], ptr)

    return a.dtype(a, i), codegen


@intrinsic
def _put(typingctx, a, i, v):
    """a[i] = v for an index known not to be negative (as _get)."""
    if not (isinstance(a, types.Array) and a.layout == "C"):
        return None

    def codegen(context, builder, sig, args):
        data = context.make_array(sig.args[0])(context, builder, args[0]).data
        value = context.cast(builder, args[2], sig.args[2], sig.args[0].dtype)
        ptr = builder.gep(data, [context.cast(builder, args[1], sig.args[1], types.intp)])
        store_item(context, builder, sig.args[0], value, ptr)

    return types.void(a, i, v), codegen


_P, _N, _K, _O = 0, 1, 2, 3  # a node's row of `link`: previous and next node of its list, key, clock index


_NONE = -1e300  # a score below -1 at every class (times 2^-63 still is): `best` never takes it, as it never takes -1


@njit(cache=True, nogil=True, inline="always")
def _score(c, h, link, used, me, now, clock, inv, n_cls, age_planning):
    """age / 2^c of class c's least recently used slot (node h, the one after sentinel c), below -1 when the list
    is empty or this plan() (at clock index `me`) used its head (then it holds only slots this plan used); the age
    in the slot's own layer clock, or with age_planning in this plan()'s (never below 0: another layer's clock can
    be ahead). Without a branch: an empty list's head is its sentinel, whose reads are harmless."""
    u, o = _get(used, h), _get(link, 4 * h + _O)
    age = max(now - u, 0) if age_planning else _get(clock, o) - u
    out = (h < n_cls) | ((u == now) & (o == me))  # used by this plan(): its clock only moves forward
    return (_NONE if out else age) * _get(inv, c)


@njit(cache=True, nogil=True, inline="always")
def _unlink(s, link):
    """Take node s out of its list."""
    p, n = _get(link, 4 * s + _P), _get(link, 4 * s + _N)
    _put(link, 4 * p + _N, n)
    _put(link, 4 * n + _P, p)


@njit(cache=True, nogil=True, inline="always")
def _append(s, c, link):
    """Make node s the tail (most recently used) of class c's list."""
    t = _get(link, 4 * c + _P)
    _put(link, 4 * t + _N, s)
    _put(link, 4 * s + _P, t)
    _put(link, 4 * s + _N, c)
    _put(link, 4 * c + _P, s)


@njit(cache=True, nogil=True, _nrt=False)  # no reference counts in the loops: it allocates nothing
def _replay(chunk, knobs, work, cap, base, slot_of, link, used, state, misses, share_counts):
    """list_pool's loop over the chunk on its nodes (list_pool); returns the pool's fill."""
    rec_layer, rec_mode, rec_large, rec_now, ent_start, ent_key, ent_sorted, by_crf, ent_sel, ent_cls = chunk
    group_clock, age_planning, ties_high, share, inv = knobs
    clock, scores, mark, rem, held, hit_node, hit_cls, miss_ent = work
    n_cls = len(inv)
    off = n_cls - base  # a slot's node
    fill, stamp = state[0], 0
    for r in range(len(rec_mode)):
        lo, hi, mode = _get(ent_start, r), _get(ent_start, r + 1), _get(rec_mode, r)
        if mode == MODE_SKIP or lo == hi:
            continue
        if mode == MODE_PROBE:  # an offloaded large batch reads the pool, changes nothing
            for e in range(lo, hi):
                if slot_of[ent_key[e]] >= 0:
                    state[1] += 1
            continue
        layer, now = _get(rec_layer, r), _get(rec_now, r)
        me = 0 if group_clock else layer
        _put(clock, me, now)
        n_hit = 0
        for e in range(lo, hi):  # the hits gathered without a branch, then refreshed in first-appearance order
            s = _get(slot_of, _get(ent_key, e))
            _put(held, e - lo, s >= 0)
            _put(hit_node, n_hit, s + off)
            _put(hit_cls, n_hit, _get(ent_cls, e))
            n_hit += s >= 0
        for i in range(n_hit):
            s = _get(hit_node, i)
            _put(used, s, now)
            _unlink(s, link)
            _append(s, _get(hit_cls, i), link)
        misses[rec_large[r], layer] += hi - lo - n_hit
        if n_hit == hi - lo:
            continue
        split = share > 0 and fill == cap
        if split:
            stamp += 1
            share_split(lo, hi, held, by_crf, ent_sel, share, rem, layer, mark, stamp, share_counts)
        n_miss = 0
        for j in range(lo, hi):  # the misses in expert-id order, gathered without a branch
            e = _get(ent_sorted, j)
            _put(miss_ent, n_miss, e)
            n_miss += not (_get(held, e - lo) | (split & (_get(mark, e - lo) == stamp)))
        filled = 0
        while filled < n_miss and fill < cap:  # empty slots first, in order
            s = fill + n_cls
            fill += 1
            _place(s, _get(miss_ent, filled), ent_key, ent_cls, slot_of, used, link, now, me, off)
            filled += 1
        if filled == n_miss:
            continue
        for c in range(n_cls):  # the heads' scores, kept up to date within the record
            _put(scores, c, _score(c, _get(link, 4 * c + _N), link, used, me, now, clock, inv, n_cls, age_planning))
        for i in range(filled, n_miss):
            c = best(scores, ties_high)
            s = _get(link, 4 * c + _N)  # the victim is its list's head: the next one takes its place
            n = _get(link, 4 * s + _N)
            _put(link, 4 * c + _N, n)
            _put(link, 4 * n + _P, c)
            _put(scores, c, _score(c, n, link, used, me, now, clock, inv, n_cls, age_planning))
            _put(slot_of, _get(link, 4 * s + _K), -1)
            # a list it joins empty scores _NONE already, and its head is now this plan()'s: still _NONE
            _place(s, _get(miss_ent, i), ent_key, ent_cls, slot_of, used, link, now, me, off)
    return fill


@njit(cache=True, nogil=True, inline="always")
def _place(s, e, ent_key, ent_cls, slot_of, used, link, now, me, off):
    """Entry e's key into slot node s, the most recently used of its class's list."""
    k = _get(ent_key, e)
    _put(slot_of, k, s - off)
    _put(used, s, now)
    _put(link, 4 * s + _K, k)
    _put(link, 4 * s + _O, me)
    _append(s, _get(ent_cls, e), link)


@njit(cache=True, nogil=True)
def _nodes(cap, base, n_cls, fill, links, used, first):
    """The pool's class lists as circular lists over nodes: n_cls sentinels (node c: class c's), then the slots
    (node n_cls + slot - base); each node's `link` row and last use."""
    n = n_cls + cap
    link, use = np.zeros(4 * n, np.int32), np.zeros(n, np.int64)
    for c in range(n):
        link[4 * c + _P], link[4 * c + _N] = c, c
    off = n_cls - base
    for s in range(base, base + fill):
        link[4 * (s + off) + _K], link[4 * (s + off) + _O] = links[s, _KEY], links[s, _CLS] >> _OWNER_SHIFT
        use[s + off] = used[s]
    for c in range(n_cls):
        s = first[c]
        while s >= 0:
            _append(s + off, c, link)
            s = links[s, _NEXT]
    return link, use


@njit(cache=True, nogil=True)
def _store(base, n_cls, link, use, links, used, first, last):
    """Write the nodes back as the pool's rows of links and used, and its lists' first and last slots."""
    off = n_cls - base
    for c in range(n_cls):
        h, t = link[4 * c + _N], link[4 * c + _P]
        first[c], last[c] = (h - off, t - off) if h != c else (-1, -1)
        s = h
        while s != c:
            p, n = link[4 * s + _P], link[4 * s + _N]
            g = s - off
            links[g, _PREV], links[g, _NEXT] = p - off if p >= n_cls else -1, n - off if n >= n_cls else -1
            links[g, _KEY], links[g, _CLS] = link[4 * s + _K], (link[4 * s + _O] << _OWNER_SHIFT) | c
            used[g] = use[s]
            s = n


@njit(cache=True, nogil=True)
def list_pool(chunk, knobs, work, cap, base, slot_of, links, used, first, last, state, misses, share_counts,
              remainder):  # fmt: skip
    """One small pool size replays the chunk: its hits refreshed in first-appearance order into their new class,
    then its misses in expert-id order, each into an empty slot or in place of the head with the largest
    age / 2^class among the lists this plan() did not use. state: [fill, probe hits]; misses [2, n_layer]. The
    loop runs on circular lists with a sentinel each (no branch at a list's ends), built from the pool's links and
    written back."""
    n_cls = len(knobs[4])
    link, use = _nodes(cap, base, n_cls, state[0], links, used, first)
    work[3][0] = remainder[0]
    state[0] = _replay(chunk, knobs, work, cap, base, slot_of, link, use, state, misses, share_counts)
    remainder[0] = work[3][0]
    _store(base, n_cls, link, use, links, used, first, last)


@njit(cache=True, nogil=True)
def largest_record(n_rec, ent_start):
    """The most entries one record of the chunk has (at least 1): what a per-record scratch array must hold."""
    most = 1
    for r in range(n_rec):
        most = max(most, ent_start[r + 1] - ent_start[r])
    return most


@njit(cache=True, nogil=True)
def list_work(n_rec, ent_start, clock0, n_classes):
    """A small pool's scratch arrays: its clocks, the heads' scores, the share's marks and carried remainder, and
    whether it held each entry of a record (one per entry of the largest record)."""
    most = largest_record(n_rec, ent_start)
    mark, held = np.zeros(most, np.int64), np.zeros(most, np.bool_)
    gathered = np.empty(most, np.int32), np.empty(most, np.int8), np.empty(most, np.int64)
    return clock0.copy(), np.empty(n_classes, np.float64), mark, np.zeros(1), held, *gathered
