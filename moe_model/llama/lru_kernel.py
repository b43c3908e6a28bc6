"""The sequential heart of the simulator: one pass over a group's records for many pool sizes.

llama.cpp's plan() (src/llama-moe-cache.cpp) refreshes a record's hits first, in first-appearance
order, then gives its misses the least recently used slots in expert-id order. So an LRU key's
rank is its last-use record, then its rank inside that record — and that inner order depends on
which of the record's keys were hits, i.e. on the pool size. A plain stack distance is therefore
not enough. This pass keeps, per key, the record of its last use (a Fenwick tree counts the keys
used since) and, per entry, a bitmask of the pool sizes for which it was a hit. A key is cached
in a pool of C slots iff fewer than C keys are more recent: D keys used in later records, plus
those mates of its last record that the C-specific inner order put after it. Only the few pool
sizes whose cut falls inside that record (D < C <= D + mates) need the inner order.

Compiled with numba: the pass is inherently sequential (see README for the measured gain).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moe_model.errors import WorkloadError
from moe_model.numba_cache import njit

MODE_SKIP, MODE_CACHE, MODE_PROBE = 0, 1, 2


@njit(cache=True, nogil=True)
def record_experts(ids, start, stop, seen, stamp, out) -> int:
    """A record's distinct experts into `out`, in first-appearance order (llama.cpp's per-ubatch unique ids);
    `seen[e] == stamp` marks the ones taken. Returns how many."""
    n = 0
    for i in range(start, stop):
        e = ids[i]
        if seen[e] != stamp:
            seen[e] = stamp
            out[n] = e
            n += 1
    return n


@njit(cache=True, nogil=True)
def distinct_sums(rec_layer, rec_ntok, rec_off, wanted, ids, k, n_expert, n_layer):
    """Per layer: distinct experts (record_experts) summed over the records with wanted[r], and how many such
    records (float64, as the time model averages them); inputs that passed check_kernel_inputs."""
    sums, counts = np.zeros(n_layer), np.zeros(n_layer)
    seen, out = np.zeros(n_expert, dtype=np.int64), np.empty(n_expert, dtype=np.int64)
    for r in range(len(rec_layer)):
        if wanted[r] and rec_ntok[r] > 0:
            sums[rec_layer[r]] += record_experts(ids, rec_off[r], rec_off[r] + rec_ntok[r] * k, seen, r + 1, out)
            counts[rec_layer[r]] += 1
    return sums, counts


def check_kernel_inputs(
    rec_layer: np.ndarray,
    rec_ntok: np.ndarray,
    rec_off: np.ndarray,
    ids: np.ndarray,
    k: int,
    n_expert: int,
    n_layer: int,
) -> None:
    """The compiled passes index arrays without bounds checks: refuse records they would read or write outside of."""
    n_rec = len(rec_layer)
    if len(rec_ntok) != n_rec or len(rec_off) != n_rec or ids.ndim != 1 or k < 1 or n_expert < 1:
        raise WorkloadError("workload arrays of inconsistent lengths (or no experts): not passed to the simulator")
    if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= n_expert):
        raise WorkloadError(f"expert ids {int(ids.min())}..{int(ids.max())} outside 0..{n_expert - 1}")
    if n_rec and (int(rec_layer.min()) < 0 or int(rec_layer.max()) >= n_layer):
        raise WorkloadError(f"layer indices outside 0..{n_layer - 1}")
    ntok, off = rec_ntok.astype(np.int64), rec_off.astype(np.int64)
    if n_rec and (int(ntok.min()) < 0 or int(off.min()) < 0 or int((off + k * ntok).max()) > len(ids)):
        raise WorkloadError("records that reach outside the workload's expert ids")


@njit(cache=True, nogil=True)
def _first_above(lut: np.ndarray, x: np.int64) -> np.int64:
    """Index of the first pool size greater than x (pool sizes sorted ascending)."""
    if x >= len(lut):
        return lut[len(lut) - 1]
    return lut[x]


@njit(cache=True, nogil=True)
def _prefix(fen: np.ndarray, i: np.int64) -> np.int64:
    s = 0
    i += 1
    while i > 0:
        s += fen[i]
        i -= i & -i
    return s


@njit(cache=True, nogil=True)
def _add(fen: np.ndarray, i: np.int64, v: np.int64) -> None:
    i += 1
    n = len(fen)
    while i < n:
        fen[i] += v
        i += i & -i


@njit(cache=True, nogil=True)
def _bit(words, j):
    """Pool size j's bit in a row of 64-bit words."""
    return (words[j >> 6] >> np.uint64(j & 63)) & np.uint64(1)


@njit(cache=True, nogil=True)
def _cached_in(q, j, ent_lo, ent_hi, ent_mask) -> bool:
    """Whether entry q's key was a hit in pool j: every pool from ent_hi on, the window's bits below."""
    return j >= ent_hi[q] or (j >= ent_lo[q] and _bit(ent_mask[q], j) != 0)


@njit(cache=True, nogil=True)
def _resolve(key, p, d, j_lo, j_hi, last_rec, last_ent, ent_start, ent_nu, ent_key, ent_fa, ent_lo, ent_hi, ent_mask,
             caps, n_expert, out, mates):  # fmt: skip
    """The rare pools whose cut falls inside `key`'s last record p (d keys used since): its rank there depends
    on which of the record's keys were hits in that pool. Writes bits j_lo..j_hi-1 of `out`."""
    me = last_ent[key]
    fa_e = ent_fa[me]
    expert = key % n_expert
    n = 0
    for q in range(ent_start[p], ent_start[p] + ent_nu[p]):  # the record's other keys not used since
        f = ent_key[q]
        if f != key and last_rec[f] == p:
            mates[n] = q
            n += 1
    for j in range(j_lo, j_hi):
        hit_e = _cached_in(me, j, ent_lo, ent_hi, ent_mask)
        newer = 0
        for m in range(n):
            q = mates[m]
            hit_f = _cached_in(q, j, ent_lo, ent_hi, ent_mask)
            if hit_e and hit_f:
                newer += ent_fa[q] > fa_e  # hits are refreshed in first-appearance order
            elif hit_e:
                newer += 1  # misses are filled after every hit
            elif not hit_f:
                newer += ent_key[q] % n_expert > expert  # misses are filled in expert-id order
        bit = np.uint64(1) << np.uint64(j & 63)
        if d + newer < caps[j]:
            out[j >> 6] |= bit
        else:
            out[j >> 6] &= ~bit


# slots of LruState.scalars
_N_SEEN, _N_REC, _N_ENT, _STAMP = 0, 1, 2, 3


@dataclass(frozen=True, eq=False)
class LruState:
    """One pass's state between chunks of records, sized by the model (keys), never by the trace.

    Only a key's last use matters, so the records and entries no key still points at are dropped
    whenever the arrays fill (`_compact`): at most n_layer x n_expert of each survive. An entry's hits are
    every pool from ent_hi on, plus, between ent_lo and ent_hi, the bits of its mask words.
    """

    caps: np.ndarray
    lut: np.ndarray
    scalars: np.ndarray  # n_seen, records kept, entries kept, stamp counter
    last_rec: np.ndarray
    last_ent: np.ndarray
    fen: np.ndarray
    cnt: np.ndarray
    ent_start: np.ndarray
    ent_nu: np.ndarray
    ent_key: np.ndarray
    ent_fa: np.ndarray
    ent_lo: np.ndarray
    ent_hi: np.ndarray
    ent_mask: np.ndarray
    last_round: np.ndarray  # per key, the round (ubatch) of its last use, kept only when unloading idle keys
    stamp: np.ndarray
    hist: np.ndarray
    direct: np.ndarray
    distinct: np.ndarray
    probe_hist: np.ndarray
    probe_direct: np.ndarray


def state_bytes(n_layer: int, n_expert: int, n_pools: int) -> int:
    """Bytes of one LruState (the arrays `new_state` allocates)."""
    n_keys, n_words = n_layer * n_expert, -(-n_pools // 64)
    entries = (20 + 8 * n_words) * (2 * n_keys + n_expert)
    return 24 * n_keys + 32 * (2 * n_keys + 16) + entries + 24 * n_layer * 2 * (n_pools + 1)


def new_state(caps: np.ndarray, n_layer: int, n_expert: int) -> LruState:
    """A fresh pass for pool sizes `caps` (ascending): one bit each, in ceil(len(caps) / 64) words per entry."""
    n_pools = len(caps)
    lut = np.searchsorted(caps, np.arange(caps[-1] + 2), side="right").astype(np.int64)
    n_keys = n_layer * n_expert
    n_rec, n_ent = 2 * n_keys + 16, 2 * n_keys + n_expert  # room for n_keys more after each compaction
    return LruState(
        caps.astype(np.int64),
        lut,
        np.zeros(4, dtype=np.int64),
        np.full(n_keys, -1, dtype=np.int64),
        np.full(n_keys, -1, dtype=np.int64),
        np.zeros(n_rec + 1, dtype=np.int64),
        np.zeros(n_rec, dtype=np.int64),
        np.zeros(n_rec, dtype=np.int64),
        np.zeros(n_rec, dtype=np.int64),
        np.empty(n_ent, dtype=np.int64),
        np.empty(n_ent, dtype=np.int32),
        np.empty(n_ent, dtype=np.int32),
        np.empty(n_ent, dtype=np.int32),
        np.empty((n_ent, -(-n_pools // 64)), dtype=np.uint64),
        np.zeros(n_keys, dtype=np.int64),
        np.zeros(n_expert, dtype=np.int64),
        np.zeros((n_layer, 2, n_pools + 1), dtype=np.int64),
        np.zeros((n_layer, 2, n_pools), dtype=np.int64),
        np.zeros((n_layer, 2), dtype=np.int64),
        np.zeros(n_pools + 1, dtype=np.int64),
        np.zeros(n_pools, dtype=np.int64),
    )


def feed(
    state: LruState, rec_layer, rec_ntok, rec_off, rec_mode, rec_large, ids, k: int, n_expert: int,
    rec_round: np.ndarray | None = None, idle: int = 0,
) -> None:  # fmt: skip
    """Replay one chunk of a group's records (offsets into this chunk's `ids`), continuing `state`.
    Runs without the GIL: passes of different states may be fed from different threads at once.

    idle > 0 models lazy unloading (policies.lazy_unload): a key not looked up in the last `idle` rounds
    (rec_round: each record's ubatch) was unloaded, so it misses in every pool and is placed with the misses;
    the cache is then the LRU's minus its idle keys, which sit at the head of its list."""
    s = state
    rounds = np.zeros(0, dtype=np.int64) if rec_round is None else rec_round
    _feed(
        rec_layer, rec_ntok, rec_off, rec_mode, rec_large, ids, k, n_expert, s.caps, s.lut, s.scalars,
        s.last_rec, s.last_ent, s.fen, s.cnt, s.ent_start, s.ent_nu, s.ent_key, s.ent_fa, s.ent_lo, s.ent_hi,
        s.ent_mask, s.stamp, s.hist, s.direct, s.distinct, s.probe_hist, s.probe_direct, rounds, idle, s.last_round,
    )  # fmt: skip


def results(state: LruState) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(hits [n_layer, 2, n_caps], distinct [n_layer, 2], probe_hits [n_caps]) of everything fed so far.

    Index 1 of the middle axis is llama.cpp's "ubatch > 8" class; probe records only read the pool."""
    n_pools = len(state.caps)
    hits = np.cumsum(state.hist[:, :, :n_pools], axis=2) + state.direct
    probe = np.cumsum(state.probe_hist[:n_pools]) + state.probe_direct
    return hits, state.distinct.copy(), probe


@njit(cache=True, nogil=True)
def _compact(scalars, last_rec, last_ent, fen, cnt, ent_start, ent_nu, ent_key, ent_fa, ent_lo, ent_hi, ent_mask):
    """Drop records and entries no key points at, in order; the counts and the Fenwick tree are rebuilt."""
    n_rec = scalars[_N_REC]
    new_id = np.full(n_rec, -1, dtype=np.int64)
    kept, n_ent = 0, 0
    for p in range(n_rec):
        if cnt[p] == 0:
            continue
        start, end, live = ent_start[p], ent_start[p] + ent_nu[p], cnt[p]
        new_id[p] = kept
        ent_start[kept] = n_ent
        for q in range(start, end):  # entries only move down: nothing unread is overwritten
            f = ent_key[q]
            if last_rec[f] == p and last_ent[f] == q:
                ent_key[n_ent], ent_fa[n_ent] = f, ent_fa[q]
                ent_lo[n_ent], ent_hi[n_ent] = ent_lo[q], ent_hi[q]
                if ent_lo[q] < ent_hi[q]:
                    ent_mask[n_ent, :] = ent_mask[q, :]
                last_ent[f] = n_ent
                n_ent += 1
        ent_nu[kept] = n_ent - ent_start[kept]
        cnt[kept] = live
        kept += 1
    for key in range(len(last_rec)):
        if last_rec[key] >= 0:
            last_rec[key] = new_id[last_rec[key]]
    cnt[kept:] = 0
    fen[:] = 0
    fen[1 : kept + 1] = cnt[:kept]
    for i in range(1, len(fen)):  # the Fenwick tree of the counts, built in linear time
        parent = i + (i & -i)
        if parent < len(fen):
            fen[parent] += fen[i]
    scalars[_N_REC], scalars[_N_ENT] = kept, n_ent


@njit(cache=True, nogil=True)
def _feed(
    rec_layer, rec_ntok, rec_off, rec_mode, rec_large, ids, k, n_expert, caps, lut, scalars,
    last_rec, last_ent, fen, cnt, ent_start, ent_nu, ent_key, ent_fa, ent_lo, ent_hi, ent_mask, stamp,
    hist, direct, distinct, probe_hist, probe_direct, rec_round, idle, last_round,
):  # fmt: skip
    n_pools = len(caps)
    uniq = np.empty(n_expert, dtype=np.int64)
    window = np.empty((n_expert, ent_mask.shape[1]), dtype=np.uint64)
    dist = np.empty(n_expert, dtype=np.int64)
    lows = np.empty(n_expert, dtype=np.int64)
    highs = np.empty(n_expert, dtype=np.int64)
    mates = np.empty(n_expert, dtype=np.int64)
    n_seen, t, e_ptr, tick = scalars[_N_SEEN], scalars[_N_REC], scalars[_N_ENT], scalars[_STAMP]
    for r in range(len(rec_mode)):
        mode = rec_mode[r]
        if mode == MODE_SKIP:
            continue
        tick += 1
        nu = 0
        for i in range(rec_off[r], rec_off[r] + rec_ntok[r] * k):
            e = ids[i]
            if stamp[e] != tick:
                stamp[e] = tick
                uniq[nu] = e
                nu += 1
        base = rec_layer[r] * n_expert
        n_open = 0
        for u in range(nu):  # the fast pass: the pools below j_lo miss, from j_hi on they hit
            p = last_rec[base + uniq[u]]
            if p < 0 or (idle > 0 and rec_round[r] - last_round[base + uniq[u]] > idle):
                lows[u] = highs[u] = n_pools
                continue
            d = n_seen - _prefix(fen, p)  # keys whose last use came after record p
            dist[u] = d
            lows[u] = _first_above(lut, d)
            highs[u] = _first_above(lut, d + cnt[p] - 1)
            n_open += lows[u] < highs[u]
        for u in range(nu if n_open else 0):  # then the rare pools cut inside a last record
            if lows[u] < highs[u]:
                key = base + uniq[u]
                _resolve(
                    key, last_rec[key], dist[u], lows[u], highs[u], last_rec, last_ent, ent_start, ent_nu, ent_key,
                    ent_fa, ent_lo, ent_hi, ent_mask, caps, n_expert, window[u], mates,
                )  # fmt: skip
        if mode == MODE_PROBE:
            for u in range(nu):
                _count(window[u], lows[u], highs[u], probe_hist, probe_direct)
            continue
        layer, cls = rec_layer[r], rec_large[r]
        distinct[layer, cls] += nu
        for u in range(nu):
            _count(window[u], lows[u], highs[u], hist[layer, cls], direct[layer, cls])
        if t == len(cnt) or e_ptr + nu > len(ent_key):
            scalars[_N_REC], scalars[_N_ENT] = t, e_ptr
            _compact(
                scalars, last_rec, last_ent, fen, cnt, ent_start, ent_nu, ent_key, ent_fa, ent_lo, ent_hi, ent_mask
            )
            t, e_ptr = scalars[_N_REC], scalars[_N_ENT]
        ent_start[t] = e_ptr
        ent_nu[t] = nu
        for u in range(nu):
            key = base + uniq[u]
            p = last_rec[key]
            if p >= 0:
                _add(fen, p, -1)
                cnt[p] -= 1
            else:
                n_seen += 1
            last_rec[key] = t
            last_ent[key] = e_ptr
            if idle > 0:
                last_round[key] = rec_round[r]
            ent_key[e_ptr] = key
            ent_fa[e_ptr] = u
            ent_lo[e_ptr], ent_hi[e_ptr] = lows[u], highs[u]
            if lows[u] < highs[u]:
                ent_mask[e_ptr, :] = window[u, :]
            e_ptr += 1
        _add(fen, t, nu)  # the record's keys all have their last use here now
        cnt[t] = nu
        t += 1
    scalars[_N_SEEN], scalars[_N_REC], scalars[_N_ENT], scalars[_STAMP] = n_seen, t, e_ptr, tick


@njit(cache=True, nogil=True)
def _count(window, j_lo, j_hi, hist, direct):
    """Add one lookup: pools from j_hi on all hit (counted once, summed later), the window bit by bit."""
    hist[j_hi] += 1
    for j in range(j_lo, j_hi):
        if _bit(window, j):
            direct[j] += 1
