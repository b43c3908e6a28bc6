"""Per-layer pools: a group's slots split evenly over its layers, one LRU each (the design of llama.cpp
PR #27861 and of vLLM-style expert caches), against which the shared LRU's cross-layer sharing shows."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from moe_model.llama.pool_rule import pool_need
from moe_model.llama.slot_plan import Placement
from moe_model.policies.base import MODELLED, Policy, PolicyResult, per_class
from moe_model.policies.lru import lru_sizes
from moe_model.policies.lru_lists import lru_lists_pass
from moe_model.readers.model_spec import ModelSpec
from moe_model.threads import run_all, worker_pool
from moe_model.workload import Workload


def layer_pools(layers: tuple[int, ...], n_slots: int, n_layer: int) -> tuple[np.ndarray, np.ndarray]:
    """(pool of each layer, -1 outside the group; slots of each pool): n_slots // n_layers each, the
    remainder to the first layers, so the group keeps its total."""
    pool_of = np.full(n_layer, -1, dtype=np.int64)
    pool_of[list(layers)] = np.arange(len(layers))
    slots = np.full(len(layers), n_slots // len(layers), dtype=np.int64)
    slots[: n_slots % len(layers)] += 1
    return pool_of, slots


def _sizes(work: Workload, layers: tuple[int, ...], use: np.ndarray, slots: np.ndarray) -> np.ndarray:
    """Each layer's pool is its own: where it holds the layer's largest record, one exact-kernel pass serves
    every such budget at once (nothing runs on the CPU); a budget's smaller pools replay their lists in one pass
    over the records (lru_lists: the pools are independent, so one pass counts as one per layer)."""
    pools = np.array([layer_pools(layers, int(s), work.n_layer)[1] for s in slots])
    need = np.where(use, pool_need(work.rec_ntok, work.k, work.n_expert), 0)
    largest = np.zeros(work.n_layer, dtype=np.int64)
    np.maximum.at(largest, work.rec_layer, need)
    fits = pools >= largest[list(layers)]  # [budget, layer of the group]
    kernel = [
        (np.flatnonzero(fits[:, i]), (work, use & (work.rec_layer == layer), pools[fits[:, i], i]))
        for i, layer in enumerate(layers)
        if fits[:, i].any()
    ]
    lists = []
    for b in np.flatnonzero(~fits.all(axis=1)):
        small = np.flatnonzero(~fits[b])
        pool_of = np.full(work.n_layer, -1, dtype=np.int64)
        pool_of[np.array(layers)[small]] = np.arange(len(small))
        args = (work.rec_layer, work.rec_ntok, work.rec_off, work.rec_ubatch, use & (pool_of[work.rec_layer] >= 0))
        lists.append((b, (*args, work.ids, work.k, work.n_expert, pool_of, pools[b, small], 0)))
    out = np.zeros((len(slots), 3, work.n_layer), dtype=np.int64)
    with worker_pool(len(kernel) + len(lists)) as pool:
        for (rows, _), (hits, lookups) in zip(
            kernel, run_all(pool, lru_sizes, [job for _, job in kernel]), strict=True
        ):
            out[rows, 0] += hits
            out[rows, 1] += lookups - hits
        for (b, _), counts in zip(lists, run_all(pool, lru_lists_pass, [job for _, job in lists]), strict=True):
            out[b] += np.array(counts)
    return out


def run(model: ModelSpec, work, budgets_mib: Sequence[int], placement: Placement | None = None) -> list[PolicyResult]:
    return per_class(model, work, budgets_mib, placement, _sizes)


POLICY = Policy(
    "per-layer-lru",
    MODELLED,
    "llama.cpp PR #27861 (fixed slots per layer), vLLM-style per-layer expert caches",
    "the group's slots split evenly over its layers, one LRU per layer; a record with more distinct experts "
    "than its layer's slots computes the rest on the CPU",
    run,
)
