"""Replay a workload through llama.cpp's slot pools (b11549 semantics, plain LRU).

Per (cached layer, ubatch) llama.cpp either uses the pool (<= 32 tokens and at most as many
distinct experts as slots), copies already-cached experts for an offloaded large batch
(>= 32 tokens, reading the pool without touching the LRU), or computes on the CPU. Statistics
are split like llama.cpp's teardown lines: "ubatch <= 8" when ids <= 8 x n_expert_used.
`simulate_budgets` computes many budgets in one pass per group and equals running each alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from moe_model.lru_kernel import (
    MAX_POOLS_PER_PASS,
    MODE_CACHE,
    MODE_PROBE,
    MODE_SKIP,
    check_kernel_inputs,
    lru_pass,
)
from moe_model.model_spec import ModelSpec
from moe_model.pool_rule import NO_POOL, OFFLOAD_MIN_BATCH
from moe_model.pool_rule import pool_need as _pool_need
from moe_model.slot_plan import MIB, CachePlan, GroupPlan, Placement, plan_cache
from moe_model.workload import Workload

OFFLOAD_DEVICE = 0  # large batches are offloaded to the first GPU; only its groups can be copied from


@dataclass(frozen=True)
class ClassStats:
    """One of llama.cpp's teardown lines: distinct experts found / uploaded, and the bytes uploaded."""

    hits: int
    misses: int
    uploaded_bytes: int

    @property
    def lookups(self) -> int:
        return self.hits + self.misses

    @property
    def hit_rate(self) -> float | None:
        return self.hits / self.lookups if self.lookups else None

    @property
    def uploaded_mib(self) -> float:
        return self.uploaded_bytes / MIB

    def as_dict(self) -> dict:
        return {
            "hits": self.hits,
            "misses": self.misses,
            "hit_rate": self.hit_rate,
            "uploaded_bytes": self.uploaded_bytes,
        }


@dataclass(frozen=True, eq=False)
class SimResult:
    """What the cache did over a workload at one budget."""

    budget_mib: int
    plan: CachePlan
    small: ClassStats
    large: ClassStats
    copied_experts: int  # per expert-tensor slice, as llama.cpp counts them
    copied_bytes: int
    bypassed_ubatches: int  # ubatches in which some cached layer did not use the pool
    layer_hits: np.ndarray  # [n_layer], both classes
    layer_lookups: np.ndarray
    decode_tokens: int

    @property
    def starts(self) -> bool:
        return self.plan.starts

    @property
    def hit_rate(self) -> float | None:
        total = self.small.lookups + self.large.lookups
        return (self.small.hits + self.large.hits) / total if total else None

    @property
    def uploaded_bytes(self) -> int:
        return self.small.uploaded_bytes + self.large.uploaded_bytes

    def uploaded_bytes_per_token(self) -> float:
        return self.uploaded_bytes / self.decode_tokens if self.decode_tokens else 0.0

    def log_lines(self) -> list[str]:
        """The teardown lines llama.cpp would print for these counts."""
        lines = []
        for name, st in (("ubatch <= 8", self.small), ("ubatch  > 8", self.large)):
            if st.lookups:
                lines.append(
                    f"llama_moe_cache: {name}: hits = {st.hits}, misses = {st.misses}, "
                    f"hit rate = {100.0 * st.hits / st.lookups:.2f}%, uploaded = {st.uploaded_mib:.2f} MiB"
                )
        if self.copied_experts:
            lines.append(
                f"llama_moe_cache: large batches: {self.copied_experts} experts copied from the cache, "
                f"{self.copied_bytes / MIB:.2f} MiB"
            )
        return lines

    def as_dict(self) -> dict:
        return {
            "budget_mib": self.budget_mib,
            "starts": self.starts,
            "groups": [
                {
                    "type": g.type_name,
                    "n_layers": g.n_layers,
                    "n_slots": g.n_slots if self.starts else 0,
                    "percent": round(g.percent, 4) if self.starts else 0.0,
                }
                for g in self.plan.groups
            ],
            "n_slots": self.plan.n_slots_total,
            "small": self.small.as_dict(),
            "large": self.large.as_dict(),
            "hit_rate": self.hit_rate,
            "copied_experts": self.copied_experts,
            "copied_bytes": self.copied_bytes,
            "bypassed_ubatches": self.bypassed_ubatches,
            "decode_tokens": self.decode_tokens,
            "uploaded_bytes_per_token": self.uploaded_bytes_per_token(),
            "log_lines": self.log_lines(),
        }


@dataclass(frozen=True)
class _GroupCounts:
    hits: np.ndarray  # [n_layer, 2, n_budgets]
    distinct: np.ndarray  # [n_layer, 2, n_budgets]
    probe_hits: np.ndarray  # [n_budgets]


def pool_need(work: Workload) -> np.ndarray:
    """Per record, the slots its group needs for it to use the pool (moe_model.pool_rule)."""
    return _pool_need(work.rec_ntok, work.k, work.n_expert)


def _record_modes(work: Workload, need: np.ndarray, in_group: np.ndarray, n_slots: int, copies: bool) -> np.ndarray:
    """Per record: use the pool, probe it (offloaded large batch), or nothing (get_slot_map rules)."""
    cache = in_group & (need <= n_slots)
    probe = in_group & (work.rec_ntok >= OFFLOAD_MIN_BATCH) & ~cache & copies
    return np.where(cache, MODE_CACHE, np.where(probe, MODE_PROBE, MODE_SKIP)).astype(np.int8)


def _pool_classes(need: np.ndarray, in_group: np.ndarray, caps: np.ndarray) -> list[np.ndarray]:
    """Budget indices that see the same records in the pool (the bypass threshold depends on slots)."""
    thresholds = np.unique(need[in_group & (need < NO_POOL)])
    cls = np.searchsorted(thresholds, caps, side="right")
    return [np.flatnonzero((cls == c) & (caps > 0)) for c in np.unique(cls[caps > 0])]


def _simulate_group(work: Workload, need: np.ndarray, group: GroupPlan, caps: np.ndarray, k_max: int) -> _GroupCounts:
    """Counts of one group for every budget (caps[b] slots; 0 = not cached at that budget)."""
    n_budgets = len(caps)
    hits = np.zeros((work.n_layer, 2, n_budgets), dtype=np.int64)
    distinct = np.zeros((work.n_layer, 2, n_budgets), dtype=np.int64)
    probe = np.zeros(n_budgets, dtype=np.int64)
    in_group = np.isin(work.rec_layer, np.array(group.layers))
    large = (work.rec_ntok.astype(np.int64) * work.k > 8 * k_max).astype(np.int8)
    for members in _pool_classes(need, in_group, caps):
        modes = _record_modes(work, need, in_group, int(caps[members[0]]), group.device == OFFLOAD_DEVICE)
        keep = modes != MODE_SKIP
        args = (work.rec_layer[keep], work.rec_ntok[keep], work.rec_off[keep], modes[keep], large[keep], work.ids)
        order = members[np.argsort(caps[members], kind="stable")]
        for start in range(0, len(order), MAX_POOLS_PER_PASS):
            chunk = order[start : start + MAX_POOLS_PER_PASS]
            h, d, p = lru_pass(*args, work.k, work.n_expert, work.n_layer, caps[chunk].astype(np.int64))
            hits[:, :, chunk] = h
            distinct[:, :, chunk] = d[:, :, None]
            probe[chunk] = p
    return _GroupCounts(hits, distinct, probe)


def _bypassed_ubatches(work: Workload, need: np.ndarray, plan: CachePlan) -> int:
    """Ubatches in which at least one cached layer took the large-batch or CPU path."""
    if not plan.starts:
        return 0
    slots = np.zeros(work.n_layer, dtype=np.int64)
    for g in plan.groups:
        slots[list(g.layers)] = g.n_slots
    layer_slots = slots[work.rec_layer]
    bypass = (layer_slots > 0) & (work.rec_ntok > 0) & (need > layer_slots)
    return len(np.unique(work.rec_ubatch[bypass]))


def simulate_budgets(
    model: ModelSpec, work: Workload, budgets_mib: Sequence[int], placement: Placement | None = None
) -> list[SimResult]:
    """Replay `work` at every budget; each result equals a separate run at that budget."""
    work.check_fits(model.n_layer, model.n_expert, model.n_expert_used)
    work = work.for_model(model.n_expert)
    check_kernel_inputs(work.rec_layer, work.rec_ntok, work.rec_off, work.ids, work.k, work.n_expert, work.n_layer)
    need = pool_need(work)
    plans = [plan_cache(model, int(b), placement) for b in budgets_mib]
    n = len(plans)
    hits = np.zeros((work.n_layer, 2, n), dtype=np.int64)
    lookups = np.zeros((work.n_layer, 2, n), dtype=np.int64)
    upload = np.zeros((2, n), dtype=np.int64)
    copied = np.zeros(n, dtype=np.int64)
    copied_bytes = np.zeros(n, dtype=np.int64)
    for gi, group in enumerate(plans[0].groups):
        caps = np.array([p.groups[gi].n_slots if p.starts else 0 for p in plans], dtype=np.int64)
        if not caps.any():
            continue
        counts = _simulate_group(work, need, group, caps, model.n_expert_used)
        hits += counts.hits
        lookups += counts.distinct
        upload += (counts.distinct - counts.hits).sum(axis=0) * group.slot_bytes
        copied += counts.probe_hits * len(group.tensor_bytes)
        copied_bytes += counts.probe_hits * group.slot_bytes
    results = []
    for b, plan in enumerate(plans):
        small, large = (
            ClassStats(int(hits[:, c, b].sum()), int((lookups - hits)[:, c, b].sum()), int(upload[c, b]))
            for c in (0, 1)
        )
        results.append(
            SimResult(
                plan.budget_mib,
                plan,
                small,
                large,
                int(copied[b]),
                int(copied_bytes[b]),
                _bypassed_ubatches(work, need, plan),
                hits[:, :, b].sum(axis=1),
                lookups[:, :, b].sum(axis=1),
                work.decode_tokens,
            )
        )
    return results


def simulate(model: ModelSpec, work: Workload, budget_mib: int, placement: Placement | None = None) -> SimResult:
    """Replay `work` at one budget."""
    return simulate_budgets(model, work, [budget_mib], placement)[0]
