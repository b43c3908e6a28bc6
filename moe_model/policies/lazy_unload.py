"""The "lazy unload" fork (../shared/docs/seeds-digest.md section 4), modelled on llama.cpp's pool: an expert
not routed for N rounds (ubatches), and for at least its cooldown, is unloaded; routed experts load on demand."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from moe_model.llama.slot_plan import GroupPlan, Placement
from moe_model.policies.base import MODELLED, Policy, PolicyResult, per_budget
from moe_model.policies.lru_lists import lru_lists_pass
from moe_model.readers.model_spec import ModelSpec
from moe_model.workload import Workload


def idle_limit(idle_rounds: int, cooldown_ms: float, ms_per_round: float) -> int:
    """Rounds without routing after which an expert is unloaded: both N rounds and the cooldown must pass."""
    return max(int(idle_rounds), math.ceil(cooldown_ms / ms_per_round) if ms_per_round > 0 else 0)


def run(
    model: ModelSpec,
    work,
    budgets_mib: Sequence[int],
    placement: Placement | None = None,
    idle_rounds: int = 3,
    cooldown_ms: float = 500.0,
    ms_per_round: float = 50.0,
) -> list[PolicyResult]:
    """Unloading frees VRAM; on a fixed pool it can only lose hits against the LRU it starts from."""
    limit = idle_limit(idle_rounds, cooldown_ms, ms_per_round)

    def group(w: Workload, g: GroupPlan, use: np.ndarray):
        pool_of = np.full(w.n_layer, -1, dtype=np.int64)
        pool_of[list(g.layers)] = 0
        args = (w.rec_layer, w.rec_ntok, w.rec_off, w.rec_ubatch, use, w.ids, w.k, w.n_expert)
        return lru_lists_pass(*args, pool_of, np.array([g.n_slots], dtype=np.int64), max(limit, 1))

    return per_budget(model, work, budgets_mib, placement, group)


POLICY = Policy(
    "lazy-unload",
    MODELLED,
    "a personal fork's 'MoE unload optimization on Windows' blog; ../shared/docs/seeds-digest.md section 4",
    "b11549's LRU pool, but an expert idle for max(N rounds, cooldown / round time) ubatches is unloaded",
    run,
    {"idle_rounds": 3, "cooldown_ms": 500.0, "ms_per_round": 50.0},
)
