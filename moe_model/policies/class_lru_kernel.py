"""ClassLRU's compiled passes (policies.class_lru): a chunk's entries, the CRF and classes every pool size shares,
and each pool size's class lists replayed on its own."""

from __future__ import annotations

import numpy as np
from numba import prange

from moe_model.llama.lru_kernel import MODE_CACHE, MODE_PROBE, MODE_SKIP
from moe_model.numba_cache import njit


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
            for j in range(nu):  # the record's entries in expert-id order: insertion sort, a handful each
                q, key = j, ent_key[n + j]
                while q > 0 and ent_key[ent_sorted[n + q - 1]] > key:
                    ent_sorted[n + q] = ent_sorted[n + q - 1]
                    q -= 1
                ent_sorted[n + q] = n + j
        n += nu
    ent_start[len(rec_mode)] = n


@njit(cache=True, nogil=True)
def _shared(
    rec_layer, rec_ntok, rec_mode, rec_large, crf, last_use, clock, half_life, increment, n_classes,
    group_clock, per_token, ent_start, ent_key, ent_sel, ent_cls, ent_crf, rec_now, distinct,
):  # fmt: skip
    """Per pool record: each key's CRF after this use and its class, and the clock; what every pool size of the
    pass shares."""
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
            value = add if last_use[key] < 0 else crf[key] * 2.0 ** (-(now - last_use[key]) / half_life) + add
            crf[key], ent_crf[q] = value, value
            last_use[key] = now
            cls = int(np.floor(np.log2(value))) if value > 0 else 0
            ent_cls[q] = min(n_classes - 1, max(0, cls))


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


_PREV, _NEXT, _KEY, _CLS = 0, 1, 2, 3  # ClassLruState.links: a slot's neighbours in its class list, key, class
_OWNER_SHIFT, _CLS_MASK = 8, 255  # links[s, _CLS]: the key's clock index << 8 | class (no division per score)


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
def _head_score(c, links, used, first, me, now, clock, inv, age_planning=False):
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
def _best(scores, ties_high):
    """The class whose head scores highest (ties: the lowest class, or the highest with ties_high)."""
    best, best_score = -1, -1.0
    if ties_high:
        for c in range(len(scores)):
            if scores[c] >= best_score and scores[c] >= 0:
                best, best_score = c, scores[c]
    else:  # a strict comparison keeps the first (lowest) class of equal scores and never takes a -1
        for c in range(len(scores)):
            if scores[c] > best_score:
                best, best_score = c, scores[c]
    return best


@njit(cache=True, nogil=True, inline="always")
def _share_split(lo, hi, slot_of, ent_key, by_crf, ent_sel, share, rem, layer, r, on_cpu, counts):
    """policies.cpu_share.split_selections's rule in the kernel: the share of the record's missed selections (a
    remainder carried in rem[0]) goes to the CPU, the lowest CRF first; experts all of whose selections go are
    marked. counts: the pool's [_CPU, _SPLIT, _SELECTIONS] rows per layer."""
    missed = 0
    for j in range(lo, hi):
        if slot_of[ent_key[j]] < 0:
            missed += ent_sel[j]
    rem[0] += share * missed
    left = min(missed, int(rem[0]))
    rem[0] -= left
    counts[_SELECTIONS, layer] += left
    for j in range(lo, hi):
        if left == 0:
            break
        q = by_crf[j]
        if slot_of[ent_key[q]] >= 0:
            continue
        if ent_sel[q] <= left:
            on_cpu[ent_key[q]] = r + 1
            counts[_CPU, layer] += 1
        else:
            counts[_SPLIT, layer] += 1
        left -= min(left, ent_sel[q])


_SMALL, _LARGE, _CPU, _SPLIT, _SELECTIONS = 0, 1, 2, 3, 4  # rows of a pool's counts per layer (hits: small, large)


@njit(cache=True, nogil=True, parallel=True)
def budgets(
    rec_layer, rec_mode, rec_large, ent_start, ent_key, ent_cls, ent_sorted, rec_now, clock0, by_crf, ent_sel,
    caps, offsets, slot_of_all, links, used, first_all, last_all, filled, hits, probe, remainder, cpu, cpu_split,
    cpu_selections, group_clock, age_planning, ties_high, share, inv,
):  # fmt: skip
    """Every pool size of the pass replays the chunk on its own (on numba's threads). Each keeps its list heads, fill
    and counts in its own copies, written back at the end: neighbouring pool sizes' rows share cache lines, which
    threads replaying them at once would take from each other. With a CPU share, once a pool is full that share of
    each record's missed selections is computed on the CPU (policies.cpu_share: the lowest CRF first); a missed
    expert all of whose selections go there is not kept. The arguments: class_lru._prepare's chunk, the state's
    pools, its knobs."""
    for b in prange(len(caps)):
        first, last, slot_of, cap, base = first_all[b].copy(), last_all[b].copy(), slot_of_all[b], caps[b], offsets[b]
        fill, n_probe, rem = filled[b], 0, np.array([remainder[b]])
        counts = np.zeros((5, hits.shape[0]), dtype=np.int64)  # per layer: _SMALL, _LARGE hits, the share's counts
        scores = np.empty(len(inv), dtype=np.float64)
        clock = clock0.copy()
        on_cpu = np.zeros(len(slot_of) if share > 0 else 0, dtype=np.int64)  # record (+1) of a miss sent to the CPU
        for r in range(len(rec_mode)):
            lo, hi = ent_start[r], ent_start[r + 1]
            mode = rec_mode[r]
            if mode == MODE_SKIP or lo == hi:
                continue
            if mode == MODE_PROBE:  # an offloaded large batch reads the pool, changes nothing
                for q in range(lo, hi):
                    if slot_of[ent_key[q]] >= 0:
                        n_probe += 1
                continue
            layer, now = rec_layer[r], rec_now[r]
            owner = 0 if group_clock else layer
            clock[owner] = now
            n_hit = 0
            for q in range(lo, hi):  # hits first, refreshed in first-appearance order into their new class
                s = slot_of[ent_key[q]]
                if s >= 0:
                    n_hit += 1
                    used[s] = now
                    c = ent_cls[q]
                    if last[c] != s:  # already its class's most recent: the list is unchanged
                        _unlink(s, links, first, last)
                        _append(s, c, owner, links, first, last)
            counts[rec_large[r], layer] += n_hit
            if n_hit == hi - lo:
                continue
            if share > 0 and fill == cap:
                _share_split(lo, hi, slot_of, ent_key, by_crf, ent_sel, share, rem, layer, r, on_cpu, counts)
            scored = False  # the heads' scores, computed at the first eviction, kept up to date within the record
            for j in range(lo, hi):  # then the misses in expert-id order
                q = ent_sorted[j]
                key = ent_key[q]
                if slot_of[key] >= 0 or (share > 0 and on_cpu[key] == r + 1):
                    continue
                if fill < cap:
                    s = base + fill
                    fill += 1
                else:
                    if not scored:
                        for c in range(len(inv)):
                            scores[c] = _head_score(c, links, used, first, owner, now, clock, inv, age_planning)
                        scored = True
                    c = _best(scores, ties_high)
                    s = first[c]
                    _unlink(s, links, first, last)  # the victim was its list's head: the next one takes its place
                    scores[c] = _head_score(c, links, used, first, owner, now, clock, inv, age_planning)
                    slot_of[links[s, _KEY]] = -1
                slot_of[key] = s
                used[s] = now
                links[s, _KEY] = key
                _append(s, ent_cls[q], owner, links, first, last)
                if scored and first[ent_cls[q]] == s:  # it joined an empty list: its head is now this plan's
                    scores[ent_cls[q]] = -1.0
        first_all[b], last_all[b], filled[b], remainder[b], probe[b] = first, last, fill, rem[0], probe[b] + n_probe
        for layer in range(hits.shape[0]):
            hits[layer, 0, b] += counts[_SMALL, layer]
            hits[layer, 1, b] += counts[_LARGE, layer]
            cpu[layer, b] += counts[_CPU, layer]
            cpu_split[layer, b] += counts[_SPLIT, layer]
            cpu_selections[layer, b] += counts[_SELECTIONS, layer]
