"""The lookups of a workload as (record, key) entries: each pool record's distinct experts, deduplicated
once per run, then filtered per group and pool size (llama.cpp plan() step 1)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit  # nogil=True: a run lets the app's other sessions (threads of one server) go on

from moe_model.llama.pool_rule import NO_POOL, pool_need
from moe_model.workload import Workload

NEVER = np.iinfo(np.int64).max  # next use of a key that is not looked up again


@dataclass(frozen=True, eq=False)
class PoolEntries:
    """Distinct (record, layer * n_expert + expert) pairs of the records that can use a pool, sorted by record
    then key, with the slots each record needs (get_slot_map's min(tokens * k, n_expert))."""

    rec: np.ndarray
    key: np.ndarray
    need: np.ndarray  # per entry: the slots its record needs
    n_expert: int

    @classmethod
    def build(cls, work: Workload) -> PoolEntries:
        need = pool_need(work.rec_ntok, work.k, work.n_expert)
        ntok = np.where(need < NO_POOL, work.rec_ntok, 0).astype(np.int64)
        rec, key = _dedupe(ntok, work.rec_off, work.rec_layer, work.ids, work.k, work.n_expert)
        return cls(rec, key, need[rec], work.n_expert)

    def select(self, layers: tuple[int, ...], n_slots: int) -> PoolEntries:
        """The entries of `layers` whose record uses a pool of n_slots slots."""
        keep = np.isin(self.key // self.n_expert, np.array(layers)) & (self.need <= n_slots)
        return PoolEntries(self.rec[keep], self.key[keep], self.need[keep], self.n_expert)

    @property
    def layer(self) -> np.ndarray:
        return self.key // self.n_expert

    def next_use(self) -> np.ndarray:
        """Per entry, the record of the same key's next lookup (NEVER if none): Belady's priority."""
        order = np.lexsort((self.rec, self.key))
        nxt = np.full(len(order), NEVER, dtype=np.int64)
        same = self.key[order[1:]] == self.key[order[:-1]]
        nxt[order[:-1][same]] = self.rec[order[1:]][same]
        return nxt

    def record_bounds(self) -> np.ndarray:
        """Start of each record's entries, plus the end: entries bounds[i]:bounds[i+1] share a record."""
        starts = np.flatnonzero(np.diff(self.rec, prepend=-1))
        return np.append(starts, len(self.rec))


@njit(cache=True, nogil=True)
def _dedupe(rec_ntok, rec_off, rec_layer, ids, k, n_expert):
    """(record, key) of each record's distinct experts, keys ascending within a record."""
    total = 0
    for r in range(len(rec_ntok)):
        total += min(rec_ntok[r] * k, n_expert)
    rec = np.empty(total, dtype=np.int64)
    key = np.empty(total, dtype=np.int64)
    seen = np.zeros(n_expert, dtype=np.int64)
    n = 0
    for r in range(len(rec_ntok)):
        start = n
        for i in range(rec_off[r], rec_off[r] + rec_ntok[r] * k):
            e = ids[i]
            if seen[e] != r + 1:
                seen[e] = r + 1
                rec[n], key[n] = r, rec_layer[r] * n_expert + e
                n += 1
        key[start:n].sort()
    return rec[:n], key[:n]
