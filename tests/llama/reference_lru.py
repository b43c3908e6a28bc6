"""A plain reference of llama.cpp's MoE cache (src/llama-moe-cache.cpp, b11549), one access at a time.

A literal transcription (linked list of slots, slot maps, plan()), kept readable and slow on
purpose: the fast simulator must agree with it on every count.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_BATCH = 32
OFFLOAD_MIN_BATCH = 32


@dataclass
class ReferenceLRU:
    n_expert: int
    n_slots: int
    slot_map: dict = field(default_factory=dict)  # (layer, expert) -> slot
    order: list = field(default_factory=list)  # slots, head (LRU) first
    key_of: list = field(default_factory=list)

    def __post_init__(self):
        self.order = list(range(self.n_slots))
        self.key_of = [None] * self.n_slots

    def touch(self, slot):
        self.order.remove(slot)
        self.order.append(slot)

    def plan(self, layer, ids):
        """Returns (hits, fills) like plan(): hits refreshed first, sorted misses take the head."""
        uniq = list(dict.fromkeys(ids))
        assert len(uniq) <= self.n_slots
        hits = 0
        for e in uniq:
            if (layer, e) in self.slot_map:
                self.touch(self.slot_map[(layer, e)])
                hits += 1
        fills = []
        for e in sorted(uniq):
            if (layer, e) in self.slot_map:
                continue
            slot = self.order[0]
            if self.key_of[slot] is not None:
                del self.slot_map[self.key_of[slot]]
            self.key_of[slot] = (layer, e)
            self.slot_map[(layer, e)] = slot
            self.touch(slot)
            fills.append((e, slot))
        return hits, fills

    def cached(self, layer, e):
        return (layer, e) in self.slot_map


def reference_counts(records, k, k_max, n_expert, groups, copies_device0=True):
    """records: (layer, ntok, ids) in order; groups: list of (layers, n_slots, n_tensors).

    Returns dict with small/large hits and misses, per group misses, copied slices.
    """
    pools = [ReferenceLRU(n_expert, n) if n > 0 else None for _, n, _ in groups]
    group_of = {il: gi for gi, (layers, n, _) in enumerate(groups) if n > 0 for il in layers}
    out = {
        "small": [0, 0],
        "large": [0, 0],
        "misses_by_group": [0] * len(groups),
        "copied": 0,
        "copied_by_group": [0] * len(groups),
    }
    for layer, ntok, ids in records:
        gi = group_of.get(layer)
        if gi is None or ntok == 0:
            continue
        pool = pools[gi]
        if ntok <= MAX_BATCH and min(ntok * k, n_expert) <= pool.n_slots:
            hits, fills = pool.plan(layer, ids)
            cls = "small" if len(ids) <= 8 * k_max else "large"
            out[cls][0] += hits
            out[cls][1] += len(fills)
            out["misses_by_group"][gi] += len(fills)
        elif ntok >= OFFLOAD_MIN_BATCH and copies_device0:
            n = sum(pool.cached(layer, e) for e in set(ids))
            out["copied"] += n * groups[gi][2]
            out["copied_by_group"][gi] += n
    return out
