"""All chosen policies on one workload at the same budgets, timed, and their predicted decode speed."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from moe_model.llama.slot_plan import Placement
from moe_model.policies import POLICIES, PolicyResult, run_policy
from moe_model.readers.model_spec import ModelSpec
from moe_model.speed.hardware import Hardware
from moe_model.speed.scenario import Scenario, resolve
from moe_model.speed.time_model import TimeParams, predict
from moe_model.speed.traffic import from_counts
from moe_model.workload import Workload


@dataclass(frozen=True, eq=False)
class Comparison:
    """Per policy: one result per budget, and the seconds the run took."""

    budgets: tuple[int, ...]
    results: dict[str, list[PolicyResult]]
    seconds: dict[str, float]

    def hit_rates(self) -> dict[str, list[float | None]]:
        return {name: [r.hit_rate for r in runs] for name, runs in self.results.items()}

    def labels(self) -> dict[str, str]:
        return {name: POLICIES[name].label for name in self.results}


def compare(
    model: ModelSpec,
    work: Workload,
    budgets_mib: Sequence[int],
    placement: Placement | None = None,
    names: Sequence[str] | None = None,
    knobs: Mapping[str, Mapping[str, object]] | None = None,
) -> Comparison:
    """Run each named policy (default: all registered) at every budget; knobs[name] overrides its defaults."""
    results, seconds = {}, {}
    for name in names or list(POLICIES):
        start = time.perf_counter()
        results[name] = run_policy(name, model, work, budgets_mib, placement, **dict((knobs or {}).get(name, {})))
        seconds[name] = time.perf_counter() - start
    return Comparison(tuple(int(b) for b in budgets_mib), results, seconds)


def predicted_tps(
    model: ModelSpec, hw: Hardware, params: TimeParams, base: Scenario, result: PolicyResult, n_ubatches: int
) -> float | None:
    """Decode t/s of the time model (a model, not a measurement) for a policy's per-layer counts; the misses
    it serves without keeping are given to the model as a CPU share of the misses."""
    if not result.starts:
        return None
    misses = int(result.uploads.sum() + result.cpu.sum())
    sc = replace(base, budget_mib=result.budget_mib, cpu_share=int(result.cpu.sum()) / misses if misses else 0.0)
    layout = resolve(model, hw, sc)
    traffic = from_counts(model, layout, sc, result.hits, result.lookups, n_ubatches, "policy")
    pred = predict(model, hw, params, sc, traffic, layout=layout)
    return pred.decode_tps if pred.usable else None
