"""Known problems of a configuration, from the llama.cpp build and the model: one line each, for the pages and
`predict`. Each names its source; none is a prediction (the time model does not price an abort)."""

from __future__ import annotations

from moe_model.llama.builds import GRAPH_RESERVE_BUILD
from moe_model.llama.slot_plan import min_budget_mib
from moe_model.readers.model_spec import ModelSpec
from moe_model.speed.scenario import Layout, Scenario

UNQUANTIZED_KV = ("f32", "f16", "bf16")


def known_problems(model: ModelSpec, sc: Scenario, layout: Layout) -> list[str]:
    """What is known to go wrong with this build, model and setting (empty when nothing does)."""
    lines = [_fit_with_ngl(sc)]
    if sc.budget_mib > 0:  # the cache's own problems
        lines += [_no_host_experts(model, layout), _below_one_token(model, layout), _abort_32584(model, sc, layout)]
    return [line for line in lines if line]


def _fit_with_ngl(sc: Scenario) -> str | None:
    """common/fit.cpp (b11549): --fit aborts when -ngl is given (Placement.fit_runs)."""
    if not sc.placement.fit or sc.placement.fit_runs:
        return None
    ngl = sc.placement.n_gpu_layers
    return (
        f'--fit does nothing with -ngl {ngl}: llama.cpp aborts the fit ("n_gpu_layers already set by user to {ngl}, '
        f'abort") and loads the layers -ngl {ngl} puts on the GPU, experts included: leave -ngl out for --fit'
    )


def _no_host_experts(model: ModelSpec, layout: Layout) -> str | None:
    """b11549 ctor: a cache needs layers whose experts all sit in host memory; else it is disabled (a warning)."""
    if min_budget_mib(model, layout.placement) is not None:
        return None
    return (
        'the cache cannot engage: every layer keeps its experts on the GPU, so llama.cpp disables it ("no layer has '
        'all of its experts in host memory"): --moe-cache-mib needs --cpu-moe or --n-cpu-moe K'
    )


def _below_one_token(model: ModelSpec, layout: Layout) -> str | None:
    """b11549 ctor: a group needs as many slots as experts per token; with no group left the server refuses."""
    plan = layout.plan
    lowest = min_budget_mib(model, layout.placement)
    if lowest is None or (plan.starts and all(g.cached for g in plan.groups)):
        return None
    k = model.n_expert_used
    if not plan.starts:
        return (
            f"--moe-cache-mib {plan.budget_mib} is below one token's experts ({k} slots per group): llama-server "
            f'refuses to start ("{plan.error}"); {lowest} MiB is the smallest budget that starts'
        )
    dropped = sum(g.n_layers for g in plan.groups if not g.cached)
    return (
        f"{dropped} layers get no cache: their group's share of {plan.budget_mib} MiB is below one token's experts "
        f"({k} slots), so llama.cpp leaves them uncached (a warning at start)"
    )


def _abort_32584(model: ModelSpec, sc: Scenario, layout: Layout) -> str | None:
    """#32584: before b12569 (#32636 reserves graph nodes for the cache's lookups) a model with few tensors per layer
    and a quantized KV cache aborted at start with the cache on."""
    quantized = [t for t in sc.kv_types if t not in UNQUANTIZED_KV]
    if sc.build >= GRAPH_RESERVE_BUILD or not quantized or not layout.plan.enabled:
        return None
    per_layer = model.n_tensors / model.n_layer if model.n_tensors else None
    count = f" (this model: {per_layer:.1f} tensors per layer)" if per_layer else ""
    return (
        f"llama.cpp b{sc.build} may abort at start: before b{GRAPH_RESERVE_BUILD} (#32636) the cache's extra graph "
        f"nodes were not reserved, and a model with few tensors per layer plus a quantized KV cache "
        f"(-ctk/-ctv {'/'.join(quantized)}) aborted (#32584){count}: use b{GRAPH_RESERVE_BUILD}+ or an f16 KV cache"
    )
