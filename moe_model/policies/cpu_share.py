"""llama.cpp b12191 `--moe-cache-cpu-share F` (modelled: moe_model.cpu_share), per budget."""

from __future__ import annotations

from collections.abc import Sequence

from moe_model.llama.slot_plan import Placement, plan_cache
from moe_model.policies.base import MODELLED, Policy, PolicyResult
from moe_model.policies.cpu_share_kernel import simulate_share
from moe_model.readers.model_spec import ModelSpec
from moe_model.threads import on_threads


def run(
    model: ModelSpec, work, budgets_mib: Sequence[int], placement: Placement | None = None, share: float = 0.5
) -> list[PolicyResult]:
    """Once a group's pool is full, a share of its misses is computed on the CPU and not inserted. One pass per
    budget, the budgets on threads (the pass runs without the GIL)."""

    def one(budget: int) -> PolicyResult:
        res = simulate_share(model, work, budget, share, placement)
        return PolicyResult(budget, plan_cache(model, budget, placement).starts, res.hits, res.uploads, res.cpu)

    return on_threads(one, [(int(b),) for b in budgets_mib])


POLICY = Policy(
    "cpu-share-b12191",
    MODELLED,
    "llama.cpp b12191 docs/moe-cache.md (PR #30966); ../shared/docs/llamacpp-moe-cache.md section 10",
    "b11549's LRU, but once the pool is full a share of the misses runs on the CPU instead of being uploaded",
    run,
    {"share": 0.5},
    lambda share=0.5: share,  # once the pool is full (always, at a hit rate below 100 %)
)
