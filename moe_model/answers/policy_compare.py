"""Replacement policies side by side on one workload at the same budgets: their counts and, on a machine, their
decode speed, priced by the curve pipeline `predict --policy NAME` uses (pricing/curve.py): one price per count."""

from __future__ import annotations

import contextvars
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from moe_model.answers.basis import hit_rate_basis
from moe_model.limits import MAX_POLICY_UBATCHES
from moe_model.llama.simulate import SimResult, simulate_budgets
from moe_model.llama.slot_plan import Placement
from moe_model.policies import NUMBA_PARALLEL, POLICIES, PolicyResult, run_policy
from moe_model.policies.entries import shared_builds
from moe_model.policies.lru import from_simulation
from moe_model.pricing.curve import ReplayMemo, curve
from moe_model.progress import checkpoint
from moe_model.readers.model_spec import ModelSpec
from moe_model.speed.hardware import Hardware
from moe_model.speed.rates import TimeParams
from moe_model.speed.scenario import Scenario
from moe_model.threads import on_threads
from moe_model.workload import Workload


@dataclass(frozen=True, eq=False)
class Comparison:
    """Per policy: one result per budget (None where nothing was replayed), the seconds its run took and, when
    priced, the predicted decode t/s (a model; None where the server would not start or fit the GPU)."""

    budgets: tuple[int, ...]
    results: dict[str, list[PolicyResult | None]]
    seconds: dict[str, float]
    decode_tps: dict[str, list[float | None]] = field(default_factory=dict)
    n_ubatches: int = 0  # of the workload replayed
    simulation: tuple[SimResult, ...] = ()  # the build's policy as `simulate` replays it (compare's build_policy)

    def hit_rates(self) -> dict[str, list[float | None]]:
        return {name: [None if r is None else r.hit_rate for r in runs] for name, runs in self.results.items()}

    def labels(self) -> dict[str, str]:
        return {name: POLICIES[name].label for name in self.results}

    def at(self, budget_mib: int, base: Scenario, routing: str) -> list[PolicyAt]:
        """Each policy at one of the budgets, with how its hit rate is known (the policy replaying `routing`,
        basis.ROUTINGS) for the comparison's first answer."""
        i = self.budgets.index(budget_mib)
        return [
            PolicyAt(
                name,
                None if runs[i] is None else runs[i].hit_rate,
                hit_rate_basis(routing, policy_scenario(base, name))[0],
                self.decode_tps[name][i] if self.decode_tps else None,
            )
            for name, runs in self.results.items()
        ]


@dataclass(frozen=True)
class PolicyAt:
    """One policy at one budget: its hit rate (None where nothing was replayed), the hit rate's basis word
    (answers.basis), and its predicted decode t/s (None where the server would not start or fit the GPU)."""

    policy: str
    hit_rate: float | None
    hit_basis: str
    decode_tps: float | None


def hit_rate_bases(names: Sequence[str], base: Scenario, routing: str) -> dict[str, list[str]]:
    """The policies by their hit rates' basis word (answers.basis) when they replay `routing`: the comparison's
    captions name each word once."""
    out: dict[str, list[str]] = {}
    for name in names:
        out.setdefault(hit_rate_basis(routing, policy_scenario(base, name))[0], []).append(name)
    return out


def compare(
    model: ModelSpec,
    work: Workload,
    budgets_mib: Sequence[int],
    placement: Placement | None = None,
    names: Sequence[str] | None = None,
    knobs: Mapping[str, Mapping[str, object]] | None = None,
    build_policy: str | None = None,
    threads: bool = True,
) -> Comparison:
    """Run each named policy (default: all registered) at every budget; knobs[name] overrides its defaults. With
    `build_policy`, also its exact simulation (kept as .simulation), which that policy, named without knobs, reuses.
    On one pool of threads (their passes release the GIL, so each core stays busy), or with threads=False one after
    another, each one's seconds its own. Counts only: compare_priced also prices them."""
    names = list(names or POLICIES)
    mine = {name: dict((knobs or {}).get(name, {})) for name in names}
    reused = build_policy if build_policy in names and not mine[build_policy] else None
    todo = [*([None] if build_policy else []), *(n for n in names if n != reused)]  # None: the simulation

    def job(name: str | None) -> tuple[list, float]:
        start = time.perf_counter()
        if name is None:
            runs = simulate_budgets(model, work, budgets_mib, placement, POLICIES[build_policy].kernel())
        else:
            runs = run_policy(name, model, work, budgets_mib, placement, **mine[name])
        return runs, time.perf_counter() - start

    done = _run_chains(job, _chains(todo, build_policy) if threads else [todo])
    if reused:
        done[reused] = [from_simulation(r) for r in done[None][0]], done[None][1]
    results, seconds = ({name: done[name][i] for name in names} for i in (0, 1))
    simulation = tuple(done[None][0]) if build_policy else ()
    return Comparison(tuple(int(b) for b in budgets_mib), results, seconds, {}, work.n_ubatches, simulation)


def _chains(todo: Sequence[str | None], build_policy: str | None) -> list[list[str | None]]:
    """The jobs on numba's threads in one chain, run one after another (NUMBA_PARALLEL says why), each other job a
    chain of its own: the longest first."""
    serial = [n for n in todo if (build_policy if n is None else n) in NUMBA_PARALLEL]
    return [chain for chain in (serial, *([n] for n in todo if n not in serial)) if chain]


def _run_chains(job, chains: list[list[str | None]]) -> dict[str | None, tuple[list, float]]:
    """job(name) for every name of every chain, the chains on threads: by name."""
    with shared_builds():  # Belady and the static set look the same entries up
        chained = on_threads(lambda chain: [job(n) for n in chain], [(chain,) for chain in chains])
    return {n: r for chain, rs in zip(chains, chained, strict=True) for n, r in zip(chain, rs, strict=True)}


def policy_scenario(base: Scenario, name: str) -> Scenario:
    """The scenario `predict --policy NAME` prices: `base` with that policy and the scenario's knobs it declares
    (the sidebar's CPU share on the CPU share's row, so the chart's row and the headline price one setting), a
    flag knob's default where none is set."""
    return replace(base, policy=name, knobs=tuple(POLICIES[name].own_knobs(base.knobs).items()))


def policy_workload(work: Workload, max_ubatches: int = MAX_POLICY_UBATCHES) -> Workload:
    """The first `max_ubatches` ubatches: a comparison replays every policy at every budget."""
    return work.prefix(int(np.searchsorted(work.rec_ubatch, max_ubatches)))


def compare_priced(
    model: ModelSpec,
    hw: Hardware,
    params: TimeParams,
    base: Scenario,
    work: Workload | ReplayMemo,
    budgets_mib: Sequence[int],
    names: Sequence[str] | None = None,
) -> Comparison:
    """Each named policy's curve on `work` (default: every registered policy): the counts `predict --policy NAME`
    replays at each budget, priced as it prices them, the policies on one pool of threads as compare runs them.
    A ReplayMemo keeps the counts for another card or host."""
    names = list(names or POLICIES)
    workload_for = work if isinstance(work, ReplayMemo) else lambda sc: work
    finished: list[str] = []  # appended by each job's thread (one atomic step: no count is lost)

    def job(name: str) -> tuple[list, float]:
        checkpoint("replaying each policy", len(finished), len(names))
        start = time.perf_counter()
        points = curve(model, hw, params, policy_scenario(base, name), budgets_mib, workload_for).points
        finished.append(name)
        return points, time.perf_counter() - start

    contexts = {name: contextvars.copy_context() for name in names}  # the caller's watch, seen on every thread
    priced = _run_chains(lambda name: contexts[name].run(job, name), _chains(names, None))
    results = {name: [p.counts for p in priced[name][0]] for name in names}
    tps = {name: [p.prediction.decode_tps if p.prediction.usable else None for p in priced[name][0]] for name in names}
    seconds = {name: priced[name][1] for name in names}
    n_ubatches = (work.work if isinstance(work, ReplayMemo) else work).n_ubatches
    return Comparison(tuple(int(b) for b in budgets_mib), results, seconds, tps, n_ubatches)
