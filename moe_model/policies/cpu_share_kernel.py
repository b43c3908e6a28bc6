"""`--moe-cache-cpu-share F` (b12191) as a *modelled* policy: its exact formulas were not available.

What is known (../shared/docs: doc-b12191, the CPU-share article): hits run on the GPU; once a
group's slots are all filled, a share F of the distinct misses of each (layer, ubatch) is computed
on the CPU from host memory and not inserted; the count is kept on target with an accumulated
remainder; the misses sent to the CPU are those with the lowest combined recency-frequency (CRF)
score. Before the pool is full every miss is uploaded, as in b11549.

Modelled here: the CRF score is a per-(layer, expert) use count that halves every `half_life`
records of the group (default: one pass over the group's layers for 8 tokens), ties broken by
expert id. Everything else follows b11549's plan() (hits first, then sorted misses take the LRU slot).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from moe_model.llama.lru_kernel import check_kernel_inputs, record_experts
from moe_model.llama.pool_rule import uses_pool
from moe_model.llama.slot_plan import Placement, plan_cache
from moe_model.readers.model_spec import ModelSpec
from moe_model.workload import Workload


@njit(cache=True)
def _touch(s, prev, nxt, ends):
    """Move slot s to the tail (most recently used) of the list; ends = [head, tail]."""
    if s == ends[1]:
        return
    if prev[s] >= 0:
        nxt[prev[s]] = nxt[s]
    else:
        ends[0] = nxt[s]
    prev[nxt[s]] = prev[s]
    prev[s] = ends[1]
    nxt[s] = -1
    nxt[ends[1]] = s
    ends[1] = s


@njit(cache=True, nogil=True)
def _share_pass(rec_layer, rec_ntok, rec_off, use, ids, k, n_expert, n_layer, n_slots, share, half_life):
    """One group at one pool size, with llama.cpp's linked-list LRU, over the records that use the pool
    (`use`). Returns per layer: hits, uploaded misses, misses computed on the CPU."""
    hits = np.zeros(n_layer, dtype=np.int64)
    uploads = np.zeros(n_layer, dtype=np.int64)
    cpu = np.zeros(n_layer, dtype=np.int64)
    slot_of = np.full(n_layer * n_expert, -1, dtype=np.int64)
    key_of = np.full(n_slots, -1, dtype=np.int64)
    prev = np.arange(-1, n_slots - 1, dtype=np.int64)
    nxt = np.arange(1, n_slots + 1, dtype=np.int64)
    nxt[n_slots - 1] = -1
    ends = np.array([0, n_slots - 1], dtype=np.int64)
    score = np.zeros(n_layer * n_expert, dtype=np.float64)
    scored_at = np.zeros(n_layer * n_expert, dtype=np.int64)
    seen = np.zeros(n_expert, dtype=np.int64)
    uniq = np.empty(n_expert, dtype=np.int64)
    misses = np.empty(n_expert, dtype=np.int64)
    miss_score = np.empty(n_expert, dtype=np.float64)
    clock, filled, remainder = 0, 0, 0.0
    for r in range(len(rec_layer)):
        ntok = rec_ntok[r]
        if not use[r]:
            continue
        clock += 1
        nu = record_experts(ids, rec_off[r], rec_off[r] + ntok * k, seen, r + 1, uniq)
        layer = rec_layer[r]
        base = layer * n_expert
        nm = 0
        for u in range(nu):  # hits first, refreshed in first-appearance order
            key = base + uniq[u]
            score[key] = score[key] * 0.5 ** ((clock - scored_at[key]) / half_life) + 1.0
            scored_at[key] = clock
            if slot_of[key] >= 0:
                _touch(slot_of[key], prev, nxt, ends)
                hits[layer] += 1
            else:
                misses[nm] = uniq[u]
                nm += 1
        misses[:nm].sort()
        n_cpu = 0
        if filled == n_slots and nm > 0:  # the share applies once the pool is full
            remainder += share * nm
            n_cpu = min(nm, int(remainder))
            remainder -= n_cpu
        for j in range(nm):
            miss_score[j] = score[base + misses[j]]
        to_cpu = np.zeros(nm, dtype=np.bool_)
        order = np.argsort(miss_score[:nm], kind="mergesort")  # lowest score first, ties by expert id
        for j in range(n_cpu):
            to_cpu[order[j]] = True
        for j in range(nm):  # the other misses, sorted, take the head (least recently used) slot
            if to_cpu[j]:
                cpu[layer] += 1
                continue
            s = ends[0]
            if key_of[s] >= 0:
                slot_of[key_of[s]] = -1
            else:
                filled += 1
            key_of[s] = base + misses[j]
            slot_of[base + misses[j]] = s
            _touch(s, prev, nxt, ends)
            uploads[layer] += 1
    return hits, uploads, cpu


@dataclass(frozen=True, eq=False)
class ShareResult:
    """Per-layer counts at one budget and share: hits, uploaded misses, misses computed on the CPU."""

    hits: np.ndarray
    uploads: np.ndarray
    cpu: np.ndarray

    @property
    def hit_rate(self) -> float | None:
        total = self.hits.sum() + self.uploads.sum() + self.cpu.sum()
        return float(self.hits.sum() / total) if total else None


def simulate_share(
    model: ModelSpec,
    work: Workload,
    budget_mib: int,
    share: float,
    placement: Placement | None = None,
    half_life: float | None = None,
) -> ShareResult:
    """Replay `work` with a CPU share (modelled policy; share 0 equals b11549's counts)."""
    work.check_fits(model.n_layer, model.n_expert, model.n_expert_used)
    check_kernel_inputs(work.rec_layer, work.rec_ntok, work.rec_off, work.ids, work.k, model.n_expert, model.n_layer)
    plan = plan_cache(model, budget_mib, placement)
    shape = (model.n_layer,)
    hits, uploads, cpu = np.zeros(shape, np.int64), np.zeros(shape, np.int64), np.zeros(shape, np.int64)
    if not plan.starts:
        return ShareResult(hits, uploads, cpu)
    for group in plan.groups:
        if not group.cached:
            continue
        use = np.isin(work.rec_layer, np.array(group.layers))
        use &= uses_pool(work.rec_ntok, work.k, model.n_expert, group.n_slots)
        life = half_life or 8.0 * group.n_layers
        h, u, c = _share_pass(
            work.rec_layer,
            work.rec_ntok,
            work.rec_off,
            use,
            work.ids,
            work.k,
            model.n_expert,
            model.n_layer,
            group.n_slots,
            share,
            life,
        )
        hits, uploads, cpu = hits + h, uploads + u, cpu + c
    return ShareResult(hits, uploads, cpu)
