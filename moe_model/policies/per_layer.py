"""Per-layer pools: a group's slots split evenly over its layers, one LRU each (the design of llama.cpp
PR #27861 and of vLLM-style expert caches), against which the shared LRU's cross-layer sharing shows."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from moe_model.llama.slot_plan import GroupPlan, Placement
from moe_model.policies.base import MODELLED, Policy, PolicyResult, per_budget
from moe_model.policies.lru_lists import lru_lists_pass
from moe_model.readers.model_spec import ModelSpec
from moe_model.workload import Workload


def layer_pools(group: GroupPlan, n_layer: int) -> tuple[np.ndarray, np.ndarray]:
    """(pool of each layer, -1 outside the group; slots of each pool): n_slots // n_layers each, the
    remainder to the first layers, so the group keeps its total."""
    pool_of = np.full(n_layer, -1, dtype=np.int64)
    pool_of[list(group.layers)] = np.arange(group.n_layers)
    slots = np.full(group.n_layers, group.n_slots // group.n_layers, dtype=np.int64)
    slots[: group.n_slots % group.n_layers] += 1
    return pool_of, slots


def _group(work: Workload, group: GroupPlan, use: np.ndarray):
    pool_of, slots = layer_pools(group, work.n_layer)
    args = (work.rec_layer, work.rec_ntok, work.rec_off, work.rec_ubatch, use, work.ids, work.k, work.n_expert)
    return lru_lists_pass(*args, pool_of, slots, 0)


def run(model: ModelSpec, work, budgets_mib: Sequence[int], placement: Placement | None = None) -> list[PolicyResult]:
    return per_budget(model, work, budgets_mib, placement, _group)


POLICY = Policy(
    "per-layer-lru",
    MODELLED,
    "llama.cpp PR #27861 (fixed slots per layer), vLLM-style per-layer expert caches",
    "the group's slots split evenly over its layers, one LRU per layer; a record with more distinct experts "
    "than its layer's slots computes the rest on the CPU",
    run,
)
