"""The "lazy unload" fork (docs/llamacpp-cache.md section 12), modelled on llama.cpp's pool: an expert
not routed for N rounds (ubatches), and for at least its cooldown, is unloaded; routed experts load on demand."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from moe_model.limits import MAX_COOLDOWN_MS, MAX_IDLE_ROUNDS
from moe_model.llama.slot_plan import Placement
from moe_model.policies.base import MODELLED, Policy, PolicyResult, per_class
from moe_model.policies.knobs import Knob
from moe_model.policies.lru import lru_sizes
from moe_model.readers.model_spec import ModelSpec
from moe_model.workload import Workload


def idle_limit(idle_rounds: int, cooldown_ms: float, ms_per_round: float) -> int:
    """Rounds without routing after which an expert is unloaded: both N rounds and the cooldown must pass; at most
    MAX_IDLE_ROUNDS (never reached in a replay: a tiny round time made it overflow the kernel's integer)."""
    cooldown = min(cooldown_ms / ms_per_round, MAX_IDLE_ROUNDS) if ms_per_round > 0 else 0
    return min(max(int(idle_rounds), math.ceil(cooldown)), MAX_IDLE_ROUNDS)


def run(
    model: ModelSpec,
    work,
    budgets_mib: Sequence[int],
    placement: Placement | None = None,
    idle_rounds: int = 3,
    cooldown_ms: float = 500.0,
    ms_per_round: float = 50.0,
) -> list[PolicyResult]:
    """Unloading frees VRAM; on a fixed pool it can only lose hits against the LRU it starts from. The pool
    then holds the LRU's keys minus the idle ones (they lead its list), so every budget of a class is one pass
    of the exact kernel with idle keys counted as misses (lru_kernel.feed)."""
    limit = max(idle_limit(idle_rounds, cooldown_ms, ms_per_round), 1)

    def sizes(w: Workload, layers: tuple[int, ...], use: np.ndarray, slots: np.ndarray) -> np.ndarray:
        hits, lookups = lru_sizes(w, use, slots, limit)
        return np.stack([hits, lookups - hits, np.zeros_like(hits)], axis=1)

    return per_class(model, work, budgets_mib, placement, sizes)


POLICY = Policy(
    "lazy-unload",
    MODELLED,
    "a personal fork's 'MoE unload optimization on Windows' blog; docs/llamacpp-cache.md section 12",
    "b11549's LRU pool, but an expert idle for max(N rounds, cooldown / round time) ubatches is unloaded",
    run,
    (
        Knob("idle_rounds", 3, "ubatches without routing before an expert is unloaded", 0, MAX_IDLE_ROUNDS),
        Knob("cooldown_ms", 500.0, "the least time an unloaded expert has been idle", 0.0, MAX_COOLDOWN_MS),
        Knob("ms_per_round", 50.0, "a ubatch's time, to turn the cooldown into rounds", 0.0),
    ),
)
