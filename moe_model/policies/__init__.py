"""Replacement policies for llama.cpp's expert pools, all run on the same lookups (moe_model.pool_rule).

Adding a policy: one module with a `POLICY = Policy(...)` and one line in POLICIES below.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from moe_model.errors import MoeModelError
from moe_model.llama.builds import MAINLINE_BUILD, check_cache_flags, uses_class_lru
from moe_model.llama.simulate import SimResult, simulate_budgets
from moe_model.llama.slot_plan import Placement
from moe_model.policies import belady, class_lru, class_lru_band, cpu_share, lazy_unload, lru, per_layer, static_set
from moe_model.policies.base import EXACT, MODELLED, Policy, PolicyResult
from moe_model.policies.knobs import KnobPairs, knob_pairs
from moe_model.readers.model_spec import ModelSpec
from moe_model.workload import Workload

POLICIES: dict[str, Policy] = {
    p.name: p
    for p in (
        lru.POLICY,  # the reference: first, and the line every chart compares against
        class_lru_band.POLICY,  # ClassLRU with its open readings as a band
        cpu_share.POLICY,
        per_layer.POLICY,
        static_set.POLICY,
        lazy_unload.POLICY,
        belady.POLICY,
    )
}
REFERENCE = lru.POLICY.name
CLASS_LRU = class_lru.POLICY.name  # what mainline runs from b12170 on
CPU_SHARE = cpu_share.POLICY.name  # what llama.cpp's --moe-cache-cpu-share F > 0 selects (b12191)
# passes on numba's threads (prange): run one after another, since numba's workqueue layer (where neither TBB
# nor OpenMP loads) aborts when two threads launch parallel kernels at once
NUMBA_PARALLEL = frozenset({CLASS_LRU, CPU_SHARE})

__all__ = [
    "CLASS_LRU",
    "CPU_SHARE",
    "EXACT",
    "MODELLED",
    "NUMBA_PARALLEL",
    "POLICIES",
    "REFERENCE",
    "Policy",
    "PolicyResult",
    "get_policy",
    "policy_for_build",
    "run_policy",
    "scenario_knobs",
]


def policy_for_build(build: int, cpu_share: float = 0.0) -> str:
    """The policy a llama.cpp build runs: b11480-b12169 the plain LRU (exact), b12170+ ClassLRU (modelled), and
    with --moe-cache-cpu-share F > 0 (b12191+) the CPU-share path (modelled, on ClassLRU's lists)."""
    check_cache_flags(build, 0, cpu_share)
    if cpu_share > 0:
        return CPU_SHARE
    return CLASS_LRU if uses_class_lru(build) else REFERENCE


def get_policy(name: str) -> Policy:
    """The registered policy called `name`, or an error listing the names."""
    if name not in POLICIES:
        raise MoeModelError(f"unknown policy {name!r}; choose one of {', '.join(POLICIES)}")
    return POLICIES[name]


def _spelling(knob_name: str) -> str:
    return next((k.spelling for p in POLICIES.values() for k in p.declared if k.name == knob_name), knob_name)


def scenario_knobs(name: str, knobs: KnobPairs, named: bool) -> KnobPairs:
    """A scenario's knobs checked against the declaration of policy `name`: each one a knob of it, in its range; a
    policy `named` (--policy) without one of its llama.cpp flag knobs runs at that knob's default, as its server
    would be started."""
    policy = get_policy(name)
    for knob_name, _ in knobs:
        if knob_name not in policy.knobs:
            owners = ", ".join(p.name for p in POLICIES.values() if knob_name in p.knobs) or "no policy"
            raise MoeModelError(f"{_spelling(knob_name)} is a knob of {owners}, not of {name}")
    given = policy.own_knobs(knobs)
    flags = {k.name: k.default for k in policy.declared if k.setting} if named else {}
    return knob_pairs((flags | given).items(), keep_off=named)


def available_at(build: int) -> list[str]:
    """The registered policies a comparison at `build` can run: those whose llama.cpp flag knobs the build has."""
    return [name for name, p in POLICIES.items() if all(build >= k.since_build for k in p.declared)]


def run_policy(
    name: str,
    model: ModelSpec,
    work: Workload,
    budgets_mib: Sequence[int],
    placement: Placement | None = None,
    **knobs,
) -> list[PolicyResult]:
    """Replay `work` at each budget with the named policy; knobs override its defaults."""
    policy = get_policy(name)
    unknown = set(knobs) - set(policy.knobs)
    if unknown:
        raise MoeModelError(f"policy {name} has no knob {sorted(unknown)}; its knobs: {sorted(policy.knobs)}")
    return policy.run(model, work, budgets_mib, placement, **knobs)


def simulate_build(
    model: ModelSpec,
    work: Workload,
    budgets_mib: Sequence[int],
    build: int = MAINLINE_BUILD,
    placement: Placement | None = None,
) -> list[SimResult]:
    """simulate_budgets with the policy llama.cpp `build` runs (the default build's unless told: mainline's ClassLRU,
    a modelled policy, with its open readings' band), each result naming that policy and build (a notebook's chart
    titles itself with them)."""
    policy = get_policy(policy_for_build(build))
    kernel = policy.band_kernel() if policy.band_kernel else policy.kernel()
    return [replace(r, build=build) for r in simulate_budgets(model, work, budgets_mib, placement, kernel)]
