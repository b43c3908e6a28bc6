"""The lookups of a workload as (record, key) entries: each pool record's distinct experts, deduplicated
once per run, then filtered per group and pool size (llama.cpp plan() step 1)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from moe_model.llama.lru_kernel import check_kernel_inputs
from moe_model.llama.pool_rule import NO_POOL, pool_need
from moe_model.numba_cache import njit
from moe_model.workload import Workload

_INSERTION_MAX = 32  # a record's keys sorted in place up to this many, else by numba's sort
_NEED_CAP = np.iinfo(np.int32).max  # a need stored as int32: NO_POOL and every need above any pool's slots


@dataclass(frozen=True, eq=False)
class PoolEntries:
    """Distinct (record, layer * n_expert + expert) pairs of the records that can use a pool, sorted by record
    then key, with the slots each record needs (get_slot_map's min(tokens * k, n_expert)). Stored as int32
    (records and keys are bounded by limits.py far below 2^31): 12 bytes per lookup."""

    rec: np.ndarray
    key: np.ndarray
    need: np.ndarray  # per entry: the slots its record needs
    n_expert: int
    n_layer: int

    @classmethod
    def build(cls, work: Workload) -> PoolEntries:
        """The entries of `work`; inside `shared_builds()`, built once per workload (its arrays) and shared."""
        with _SCOPE.lock:
            slot = _SCOPE.slot(work)
        if slot is None:
            return cls._build(work)
        with slot.lock:  # a second policy asking meanwhile waits for the first one's build
            if slot.entries is None:
                slot.entries = cls._build(work)
            return slot.entries

    @classmethod
    def _build(cls, work: Workload) -> PoolEntries:
        check_kernel_inputs(work.rec_layer, work.rec_ntok, work.rec_off, work.ids, work.k, work.n_expert, work.n_layer)
        need = pool_need(work.rec_ntok, work.k, work.n_expert)
        ntok = np.where(need < NO_POOL, work.rec_ntok, 0).astype(np.int64)
        rec, key = _dedupe(ntok, work.rec_off, work.rec_layer, work.ids, work.k, work.n_expert)
        return cls(rec, key, np.minimum(need, _NEED_CAP).astype(np.int32)[rec], work.n_expert, work.n_layer)

    def select(self, layers: tuple[int, ...], n_slots: int) -> PoolEntries:
        """The entries of `layers` whose record uses a pool of n_slots slots."""
        wanted = np.zeros(self.n_layer, dtype=bool)
        wanted[list(layers)] = True
        keep = wanted[self.layer] & (self.need <= n_slots)
        return PoolEntries(self.rec[keep], self.key[keep], self.need[keep], self.n_expert, self.n_layer)

    @property
    def layer(self) -> np.ndarray:
        return self.key // self.n_expert

    def record_bounds(self) -> np.ndarray:
        """Start of each record's entries, plus the end: entries bounds[i]:bounds[i+1] share a record."""
        starts = np.flatnonzero(np.diff(self.rec, prepend=-1))
        return np.append(starts, len(self.rec))


@dataclass
class _Slot:
    work: Workload  # held: the ids of its arrays stay unique while the slot lives
    lock: threading.Lock = field(default_factory=threading.Lock)
    entries: PoolEntries | None = None


@dataclass
class _Scope:
    """The builds shared while `shared_builds()` scopes are open (any thread's), by the workload's arrays."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    depth: int = 0
    slots: dict[tuple, _Slot] = field(default_factory=dict)

    def slot(self, work: Workload) -> _Slot | None:
        if not self.depth:
            return None
        arrays = (work.rec_layer, work.rec_ntok, work.rec_off, work.ids)
        key = (*map(id, arrays), work.k, work.n_expert, work.n_layer)
        return self.slots.setdefault(key, _Slot(work))


_SCOPE = _Scope()


@contextmanager
def shared_builds() -> Iterator[None]:
    """Within this scope PoolEntries.build of one workload runs once (the policies replaying the same workload
    share it); the shared entries are dropped when the last open scope closes."""
    with _SCOPE.lock:
        _SCOPE.depth += 1
    try:
        yield
    finally:
        with _SCOPE.lock:
            _SCOPE.depth -= 1
            if not _SCOPE.depth:
                _SCOPE.slots.clear()


@njit(cache=True, nogil=True)
def _dedupe(rec_ntok, rec_off, rec_layer, ids, k, n_expert):
    """(record, key) of each record's distinct experts, keys ascending within a record."""
    total = 0
    for r in range(len(rec_ntok)):
        total += min(rec_ntok[r] * k, n_expert)
    rec = np.empty(total, dtype=np.int32)
    key = np.empty(total, dtype=np.int32)
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
        if n - start > _INSERTION_MAX:
            key[start:n].sort()
        else:  # a decode record's few keys: numba's sort call cost 4x this
            for i in range(start + 1, n):
                v, j = key[i], i - 1
                while j >= start and key[j] > v:
                    key[j + 1] = key[j]
                    j -= 1
                key[j + 1] = v
    return rec[:n], key[:n]
