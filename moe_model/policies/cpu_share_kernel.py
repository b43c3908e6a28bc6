"""`--moe-cache-cpu-share F` (b12191) as a *modelled* policy: its exact formulas were not available.

What is known (../shared/docs: doc-b12191, the CPU-share article): hits run on the GPU; once a
group's slots are all filled, a share F of the distinct misses of each (layer, ubatch) is computed
on the CPU from host memory and not inserted; the count is kept on target with an accumulated
remainder; the misses sent to the CPU are those with the lowest combined recency-frequency (CRF)
score. Before the pool is full every miss is uploaded, as in b11549.

Modelled here: the CRF score is a per-(layer, expert) use count that halves every `half_life`
records of the group (default: one pass over the group's layers for 8 tokens), ties broken by
expert id. Everything else follows b11549's plan() (hits first, then sorted misses take the LRU slot):
lru_lists' list engine, with the CPU share deciding which misses are not kept.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from moe_model.llama.lru_kernel import check_kernel_inputs, record_experts
from moe_model.llama.pool_rule import uses_pool
from moe_model.llama.slot_plan import Placement, plan_cache
from moe_model.policies.lru_lists import fill_misses, new_lists, refresh_hits
from moe_model.readers.model_spec import ModelSpec
from moe_model.workload import Workload


@njit(cache=True, nogil=True)
def _share_pass(rec_layer, rec_ntok, rec_off, use, ids, k, n_expert, n_layer, n_slots, share, half_life):
    """One group at one pool size, with llama.cpp's linked-list LRU (lru_lists), over the records that use the
    pool (`use`). Returns per layer: hits, uploaded misses, misses computed on the CPU."""
    hits = np.zeros(n_layer, dtype=np.int64)
    uploads = np.zeros(n_layer, dtype=np.int64)
    cpu = np.zeros(n_layer, dtype=np.int64)
    lists = new_lists(np.array([n_slots], dtype=np.int64), n_layer * n_expert)
    score = np.zeros(n_layer * n_expert, dtype=np.float64)
    scored_at = np.zeros(n_layer * n_expert, dtype=np.int64)
    seen = np.zeros(n_expert, dtype=np.int64)
    uniq = np.empty(n_expert, dtype=np.int64)
    hit_ids = np.empty(n_expert, dtype=np.int64)
    misses = np.empty(n_expert, dtype=np.int64)
    miss_score = np.empty(n_expert, dtype=np.float64)
    slots = np.empty(n_expert, dtype=np.int64)
    evicted = np.empty(n_expert, dtype=np.int64)
    clock, filled, remainder = 0, 0, 0.0
    for r in range(len(rec_layer)):
        if not use[r]:
            continue
        clock += 1
        nu = record_experts(ids, rec_off[r], rec_off[r] + rec_ntok[r] * k, seen, r + 1, uniq)
        layer = rec_layer[r]
        base = layer * n_expert
        for u in range(nu):  # every looked-up expert's CRF score: decayed, plus this use
            key = base + uniq[u]
            score[key] = score[key] * 0.5 ** ((clock - scored_at[key]) / half_life) + 1.0
            scored_at[key] = clock
        nh, nm = refresh_hits(lists, 0, base, uniq, nu, clock, hit_ids, misses)
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
        kept = fill_misses(lists, 0, base, misses, nm, to_cpu, n_slots - nh, clock, slots, evicted)
        for j in range(nm):
            filled += slots[j] >= 0 and evicted[j] < 0
        hits[layer] += nh
        uploads[layer] += kept
        cpu[layer] += nm - kept
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
