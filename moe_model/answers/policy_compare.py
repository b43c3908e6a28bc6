"""Replacement policies side by side on one workload at the same budgets: their counts and, on a machine, their
decode speed, priced by the curve pipeline `predict --policy NAME` uses (answers/curve.py): one price per count."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from moe_model.answers.curve import curve
from moe_model.limits import MAX_POLICY_UBATCHES
from moe_model.llama.slot_plan import Placement
from moe_model.policies import POLICIES, PolicyResult, run_policy
from moe_model.readers.model_spec import ModelSpec
from moe_model.speed.hardware import Hardware
from moe_model.speed.rates import TimeParams
from moe_model.speed.scenario import Scenario
from moe_model.workload import Workload


@dataclass(frozen=True, eq=False)
class Comparison:
    """Per policy: one result per budget (None where nothing was replayed), the seconds the run took and, when
    priced, the predicted decode t/s (a model; None where the server would not start or fit the GPU)."""

    budgets: tuple[int, ...]
    results: dict[str, list[PolicyResult | None]]
    seconds: dict[str, float]
    decode_tps: dict[str, list[float | None]] = field(default_factory=dict)
    n_ubatches: int = 0  # of the workload replayed

    def hit_rates(self) -> dict[str, list[float | None]]:
        return {name: [None if r is None else r.hit_rate for r in runs] for name, runs in self.results.items()}

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
    """Run each named policy (default: all registered) at every budget; knobs[name] overrides its defaults.
    Counts only: compare_priced also prices them."""
    results, seconds = {}, {}
    for name in names or list(POLICIES):
        start = time.perf_counter()
        results[name] = run_policy(name, model, work, budgets_mib, placement, **dict((knobs or {}).get(name, {})))
        seconds[name] = time.perf_counter() - start
    return Comparison(tuple(int(b) for b in budgets_mib), results, seconds, n_ubatches=work.n_ubatches)


def policy_scenario(base: Scenario, name: str) -> Scenario:
    """The scenario `predict --policy NAME` prices: `base` with that policy and the scenario's knobs it declares
    (the sidebar's CPU share on the CPU share's row, so the chart's row and the headline price one setting), a
    flag knob's default where none is set."""
    declared = POLICIES[name].knobs
    return replace(base, policy=name, knobs=tuple((k, v) for k, v in base.knobs if k in declared))


def policy_workload(work: Workload, max_ubatches: int = MAX_POLICY_UBATCHES) -> Workload:
    """The first `max_ubatches` ubatches: a comparison replays every policy at every budget."""
    return work.prefix(int(np.searchsorted(work.rec_ubatch, max_ubatches)))


def compare_priced(
    model: ModelSpec,
    hw: Hardware,
    params: TimeParams,
    base: Scenario,
    work: Workload,
    budgets_mib: Sequence[int],
    names: Sequence[str] | None = None,
) -> Comparison:
    """Each named policy's curve on `work` (default: every registered policy): the counts `predict --policy NAME`
    replays at each budget, priced as it prices them."""
    results, seconds, tps = {}, {}, {}
    for name in names or list(POLICIES):
        start = time.perf_counter()
        points = curve(model, hw, params, policy_scenario(base, name), budgets_mib, lambda sc: work).points
        seconds[name] = time.perf_counter() - start
        results[name] = [p.counts for p in points]
        tps[name] = [p.prediction.decode_tps if p.prediction.usable else None for p in points]
    return Comparison(tuple(int(b) for b in budgets_mib), results, seconds, tps, work.n_ubatches)
