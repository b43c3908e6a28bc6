"""llama.cpp b11480-b12169: one LRU per group shared by its layers, the exact simulator's numbers."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from moe_model.llama.simulate import LRU_KERNEL, SimResult, simulate_budgets
from moe_model.llama.slot_plan import Placement
from moe_model.policies.base import EXACT, Policy, PolicyResult
from moe_model.readers.model_spec import ModelSpec


def from_simulation(r: SimResult) -> PolicyResult:
    """The exact simulator's result as a policy result (every miss is uploaded)."""
    return PolicyResult(
        r.budget_mib, r.starts, r.layer_hits, r.layer_lookups - r.layer_hits, np.zeros_like(r.layer_hits)
    )


def run(model: ModelSpec, work, budgets_mib: Sequence[int], placement: Placement | None = None) -> list[PolicyResult]:
    """Every budget in one pass per group (simulate_budgets)."""
    return [from_simulation(r) for r in simulate_budgets(model, work, budgets_mib, placement)]


POLICY = Policy(
    "lru-b11549",
    EXACT,
    "llama.cpp b11549 src/llama-moe-cache.cpp plan(); ../shared/docs/llamacpp-moe-cache.md section 5",
    "one LRU per group of layers: hits refreshed first, sorted misses take the least recently used slot",
    run,
    kernel=lambda: LRU_KERNEL,
)
