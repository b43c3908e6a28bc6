"""ClassLRU's small pool sizes, each replayed on its own over its own class lists (doubly linked lists of slots).

A small pool misses most lookups, and its lists are short: an eviction there costs a few reads of its own rows,
where the shared class queues (policies.class_lru_lanes) would look through other pools' uses; a large pool hits
most lookups, which the lanes test for 64 pool sizes at once. class_lru.LIST_POOLS draws the line."""

from __future__ import annotations

import numpy as np

from moe_model.llama.lru_kernel import MODE_PROBE, MODE_SKIP
from moe_model.numba_cache import njit

_PREV, _NEXT, _KEY, _CLS = 0, 1, 2, 3  # links: a slot's neighbours in its class list, key, class
_OWNER_SHIFT, _CLS_MASK = 8, 255  # links[s, _CLS]: the key's clock index << 8 | class (no division per score)
_CPU, _SPLIT, _SELECTIONS = 0, 1, 2  # rows of a pool's CPU share counts per layer


@njit(cache=True, nogil=True, inline="always")
def _unlink(s, links, first, last):
    """Take slot s out of its class list (a slot not yet in a list has class -1)."""
    if links[s, _CLS] < 0:
        return
    c = links[s, _CLS] & _CLS_MASK
    p, n = links[s, _PREV], links[s, _NEXT]
    if p >= 0:
        links[p, _NEXT] = n
    else:
        first[c] = n
    if n >= 0:
        links[n, _PREV] = p
    else:
        last[c] = p


@njit(cache=True, nogil=True, inline="always")
def _append(s, c, owner, links, first, last):
    """Make slot s (its key's clock index `owner`) the most recently used of class c's list."""
    t = last[c]
    links[s, _PREV], links[s, _NEXT], links[s, _CLS] = t, -1, (owner << _OWNER_SHIFT) | c
    if t >= 0:
        links[t, _NEXT] = s
    else:
        first[c] = s
    last[c] = s


@njit(cache=True, nogil=True, inline="always")
def _head_score(c, links, used, first, me, now, clock, inv, age_planning):
    """age / 2^c of class c's least recently used slot, -1 when the list is empty or this plan() (at clock index
    `me`) used its head (then it holds only slots this plan used); the age in the slot's own layer clock, or with
    age_planning in this plan()'s (never below 0: another layer's clock can be ahead)."""
    h = first[c]
    if h < 0:
        return -1.0
    owner = links[h, _CLS] >> _OWNER_SHIFT
    if used[h] == now and owner == me:  # used by this plan(): its clock only moves forward
        return -1.0
    if age_planning:
        return max(now - used[h], 0) * inv[c]
    return (clock[owner] - used[h]) * inv[c]


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


@njit(cache=True, nogil=True, _nrt=False)  # no reference counts in the loops: it allocates nothing
def list_pool(chunk, knobs, work, cap, base, slot_of, links, used, first, last, state, misses, share_counts,
              remainder):  # fmt: skip
    """One small pool size replays the chunk: its hits refreshed in first-appearance order into their new class,
    then its misses in expert-id order, each into an empty slot or in place of the head with the largest
    age / 2^class among the lists this plan() did not use. state: [fill, probe hits]; misses [2, n_layer]."""
    rec_layer, rec_mode, rec_large, rec_now, ent_start, ent_key, ent_sorted, by_crf, ent_sel, ent_cls = chunk
    group_clock, age_planning, ties_high, share, inv = knobs
    clock, scores, mark, rem, held = work
    fill, stamp = state[0], 0
    rem[0] = remainder[0]
    for r in range(len(rec_mode)):
        lo, hi, mode = ent_start[r], ent_start[r + 1], rec_mode[r]
        if mode == MODE_SKIP or lo == hi:
            continue
        if mode == MODE_PROBE:  # an offloaded large batch reads the pool, changes nothing
            for e in range(lo, hi):
                if slot_of[ent_key[e]] >= 0:
                    state[1] += 1
            continue
        layer, now = rec_layer[r], rec_now[r]
        me = 0 if group_clock else layer
        clock[me] = now
        n_hit = 0
        for e in range(lo, hi):
            s = slot_of[ent_key[e]]
            held[e - lo] = s >= 0
            if s >= 0:
                n_hit += 1
                used[s] = now
                c = ent_cls[e]
                if last[c] != s:  # already its class's most recent: the list is unchanged
                    _unlink(s, links, first, last)
                    _append(s, c, me, links, first, last)
        misses[rec_large[r], layer] += hi - lo - n_hit
        if n_hit == hi - lo:
            continue
        split = share > 0 and fill == cap
        if split:
            stamp += 1
            share_split(lo, hi, held, by_crf, ent_sel, share, rem, layer, mark, stamp, share_counts)
        scored = False  # the heads' scores, computed at the first eviction, kept up to date within the record
        for j in range(lo, hi):
            e = ent_sorted[j]
            if held[e - lo] or (split and mark[e - lo] == stamp):
                continue
            if fill < cap:
                s = base + fill
                fill += 1
            else:
                if not scored:
                    for c in range(len(inv)):
                        scores[c] = _head_score(c, links, used, first, me, now, clock, inv, age_planning)
                    scored = True
                c = best(scores, ties_high)
                s = first[c]
                _unlink(s, links, first, last)  # the victim was its list's head: the next one takes its place
                scores[c] = _head_score(c, links, used, first, me, now, clock, inv, age_planning)
                slot_of[links[s, _KEY]] = -1
            slot_of[ent_key[e]] = s
            used[s] = now
            links[s, _KEY] = ent_key[e]
            _append(s, ent_cls[e], me, links, first, last)
            if scored and first[ent_cls[e]] == s:  # it joined an empty list: its head is now this plan's
                scores[ent_cls[e]] = -1.0
    state[0], remainder[0] = fill, rem[0]


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
    return clock0.copy(), np.empty(n_classes, np.float64), mark, np.zeros(1), held
