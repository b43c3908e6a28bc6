"""One budget curve: the one pricing route every predicted speed goes through (Explore, the recommender, `predict`,
the calibration).

Per budget: llama.cpp's layout (the placement with --fit resolved, the cache plan, VRAM), resolved once;
the counts of the scenario's replacement policy on the workload (the exact LRU for every budget of a
placement in one pass, another policy per budget); the traffic they make; and its price in the time model
(a model, not a measurement). It also chooses the budgets a curve is drawn at (`budget_axis`).
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace

import numpy as np

from moe_model.limits import CURVE_SLIDER_STOPS, CURVE_SPREAD_BUDGETS, POLICY_BUDGETS, REPLAY_MEMO_ENTRIES
from moe_model.llama.simulate import PolicyBand, SimResult, simulate_plans
from moe_model.llama.slot_plan import CachePlan, Placement, full_budget_mib, min_budget_mib
from moe_model.policies import PolicyResult
from moe_model.progress import watched_steps
from moe_model.readers.model_spec import ModelSpec
from moe_model.settings import settings_of
from moe_model.speed.hardware import Hardware
from moe_model.speed.host_memory import host_memory
from moe_model.speed.range_inputs import NO_RANGE, RangeInputs
from moe_model.speed.rates import TimeParams
from moe_model.speed.scenario import Layout, Scenario, cache_room_mib, resolve
from moe_model.speed.time_model import Prediction, predict
from moe_model.speed.traffic import Traffic, build_kernel, decode_counts, from_counts, replay_counts, replay_label
from moe_model.workload import Workload, WorkloadStream

WorkloadFor = Callable[[Scenario], Workload | WorkloadStream]  # the routing a scenario's server would see


class ReplayMemo:
    """One workload and the counts already replayed on it, shared by every curve that differs only in the card,
    the load mode or the budgets it asks for: a budget's counts depend on the workload, the policy, the resolved
    placement and the budget, never on the GPU. Pass it where a WorkloadFor goes (it returns its workload).
    Bounded in entries (limits.REPLAY_MEMO_ENTRIES, each a few per-layer arrays); safe to share between threads:
    the lock guards the dictionary only, never a replay, and a budget another thread is replaying is waited for,
    not replayed twice (a thread waits only while it claims nothing: no two wait on each other)."""

    def __init__(self, work: Workload, max_entries: int = REPLAY_MEMO_ENTRIES) -> None:
        self.work = work
        self.max_entries = max_entries
        self._entries: OrderedDict[tuple, tuple[PolicyResult, SimResult | None]] = OrderedDict()
        self._decode: tuple[int, np.ndarray] | None = None
        self._lock = threading.Lock()
        self._replaying: set[tuple] = set()  # keys some thread has claimed and is replaying
        self._replayed = threading.Condition(self._lock)
        self._replays = [0]  # budgets this memo had to replay (the rest were reused), shared with without_waiting's
        self.waits = True  # a key another thread is replaying is waited for (without_waiting: replayed again)

    def __call__(self, sc: Scenario) -> Workload:
        return self.work

    @staticmethod
    def key(sc: Scenario, placement: Placement, plan: CachePlan) -> tuple:
        """What a budget's counts depend on: the policy, the placement and the pools its plan gives (two budgets
        with the same slots in every group, such as any two above the one that caches every expert, count alike)."""
        return sc.policy_name, tuple(sorted(sc.policy_knobs.items())), replace(placement, fit=False), pools(plan)

    @contextmanager
    def claim(self, keys: set[tuple]) -> Iterator[tuple[dict[tuple, tuple], set[tuple]]]:
        """(the entries the memo has for `keys`, the keys this thread must replay and put), once no other thread
        is replaying any of them (without_waiting: at once); the claim ends with the block (put or not)."""
        with self._replayed:
            if self.waits:
                self._replayed.wait_for(lambda: not keys & self._replaying)
            known = {k: self._entries[k] for k in keys if k in self._entries}
            for k in known:
                self._entries.move_to_end(k)
            mine = keys - known.keys()
            claimed = mine if self.waits else set()
            self._replaying |= claimed
        try:
            yield known, mine
        finally:
            with self._replayed:
                self._replaying -= claimed
                self._replayed.notify_all()

    @property
    def replayed_budgets(self) -> int:
        return self._replays[0]

    def without_waiting(self) -> ReplayMemo:
        """The same entries, used without waiting for another thread's replay of a key (replayed here too, and
        claimed from nobody): one budget's answer does not wait for a whole curve being replayed."""
        self.decode_counts()  # counted once, shared with the copy
        other = copy.copy(self)
        other.waits = False
        return other

    def put(self, key: tuple, counts: PolicyResult, simulated: SimResult | None) -> None:
        with self._lock:
            self._entries[key] = (counts, simulated)
            self._replays[0] += 1
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def decode_counts(self) -> tuple[int, np.ndarray]:
        """The workload's decode ubatches and distinct experts per layer (traffic.decode_counts), counted once."""
        if self._decode is None:
            self._decode = decode_counts(self.work)
        return self._decode


def pools(plan: CachePlan) -> tuple:
    """What of a plan a replay reads (whether it starts; each group's device, layers and slots), not its budget."""
    return plan.starts, tuple((g.device, g.layers, g.n_slots) for g in plan.groups)


def at_budget(known: tuple[PolicyResult, SimResult | None], plan: CachePlan) -> tuple[PolicyResult, SimResult | None]:
    """A memo entry replayed at another budget with the same pools, as counted at this plan's budget."""
    counts, sim = known
    if counts.budget_mib == plan.budget_mib:
        return counts, sim
    sim = None if sim is None else replace(sim, budget_mib=plan.budget_mib, plan=plan)
    return replace(counts, budget_mib=plan.budget_mib), sim


@dataclass(frozen=True, eq=False)
class Replayed:
    """One budget before pricing: its layout, the counts of the scenario's policy and the traffic they make."""

    scenario: Scenario
    layout: Layout
    simulated: SimResult | None = None  # the cache's own statistics (hit classes, uploads)
    counts: PolicyResult | None = None  # what the scenario's policy did; None where nothing was replayed
    traffic: Traffic | None = None
    simulated_by: str = ""  # the policy whose pass gave `simulated`: the scenario's where it has one, else the build's


@dataclass(frozen=True, eq=False)
class CurvePoint:
    """One budget of a curve: what was replayed there and its prediction."""

    replayed: Replayed
    prediction: Prediction

    @property
    def budget_mib(self) -> int:
        return self.prediction.scenario.budget_mib

    @property
    def layout(self) -> Layout:
        return self.replayed.layout

    @property
    def simulated(self) -> SimResult | None:
        return self.replayed.simulated

    @property
    def counts(self) -> PolicyResult | None:
        return self.replayed.counts

    @property
    def traffic(self) -> Traffic | None:
        return self.replayed.traffic


@dataclass(frozen=True, eq=False)
class Curve:
    points: tuple[CurvePoint, ...]

    @property
    def budgets(self) -> tuple[int, ...]:
        return tuple(p.budget_mib for p in self.points)

    @property
    def predictions(self) -> list[Prediction]:
        return [p.prediction for p in self.points]

    def at(self, budget_mib: int) -> CurvePoint | None:
        return next((p for p in self.points if p.budget_mib == budget_mib), None)


def needs_counts(sc: Scenario, layout: Layout) -> bool:
    """Whether a budget's price depends on the workload: a cache that starts, or ubatches of several tokens
    (their distinct experts are the workload's own); otherwise independent tokens and no hits price it."""
    return layout.plan.starts and sc.budget_mib > 0 or sc.tokens_per_ubatch > 1


def _by_placement(layouts: Sequence[Layout]) -> dict[Placement, list[int]]:
    """Budgets grouped by their resolved placement (with --fit it moves with the budget): one replay each."""
    groups: dict[Placement, list[int]] = {}
    for i, layout in enumerate(layouts):
        groups.setdefault(layout.placement, []).append(i)
    return groups


def replay(
    model: ModelSpec,
    hw: Hardware,
    base: Scenario,
    budgets_mib: Sequence[int],
    workload_for: WorkloadFor | None = None,
    *,
    with_lru: bool = False,
) -> tuple[Replayed, ...]:
    """Every budget resolved once, and replayed where its price depends on the workload (needs_counts; without
    a workload nothing is). with_lru: the cache's own statistics at every budget too (the build's policy: the exact
    LRU, or ClassLRU from b12170), whatever policy the scenario names (Explore's hit-rate and upload charts)."""
    scenarios = [base.with_budget(int(b)) for b in budgets_mib]
    layouts = [resolve(model, hw, sc) for sc in scenarios]
    need = [workload_for is not None and needs_counts(sc, lay) for sc, lay in zip(scenarios, layouts, strict=True)]
    counts: dict[int, PolicyResult] = {}
    simulated: dict[int, SimResult] = {}
    traffic: dict[int, Traffic] = {}
    by_build: set[int] = set()
    if workload_for is not None and (any(need) or with_lru):
        work = workload_for(base)
        memo = workload_for if isinstance(workload_for, ReplayMemo) else None
        counts, simulated, by_build = _replay_groups(model, work, base, layouts, need, with_lru, memo)
        if counts:
            n_ub, distinct = memo.decode_counts() if memo else decode_counts(work)
            label = replay_label(base, work)
            traffic = {
                i: from_counts(model, layouts[i], scenarios[i], c, n_ub, distinct, label) for i, c in counts.items()
            }
    own = {i: base.policy_name for i in simulated} | {i: build_policy(base) for i in by_build}
    return tuple(
        Replayed(sc, layout, simulated.get(i), counts.get(i), traffic.get(i), own.get(i, ""))
        for i, (sc, layout) in enumerate(zip(scenarios, layouts, strict=True))
    )


def _replay_groups(
    model: ModelSpec,
    work: Workload | WorkloadStream,
    base: Scenario,
    layouts: Sequence[Layout],
    need: Sequence[bool],
    with_lru: bool,
    memo: ReplayMemo | None = None,
) -> tuple[dict[int, PolicyResult], dict[int, SimResult], set[int]]:
    """Per resolved placement: the policy's counts where needed (from the memo where it has them), and the cache's
    statistics (with_lru: at every budget; a replay of a policy with a kernel brings them along), with the budgets
    whose statistics the build's own policy gave (the rest: the scenario's)."""
    counts: dict[int, PolicyResult] = {}
    simulated: dict[int, SimResult] = {}
    by_build: set[int] = set()
    for placement, members in _by_placement(layouts).items():
        counted = [i for i in members if need[i]]
        keys = {i: ReplayMemo.key(base, placement, layouts[i].plan) for i in counted}
        with memo.claim(set(keys.values())) if memo else nullcontext(({}, set(keys.values()))) as (known, mine):
            first: dict[tuple, int] = {}  # budgets with the same pools replayed once, the first asked
            for i in counted:
                if keys[i] in mine:
                    first.setdefault(keys[i], i)
            todo = list(first.values())
            if todo:
                results, sims = replay_counts(model, work, base, [layouts[i].plan for i in todo], placement)
                for i, result, sim in zip(todo, results, sims or [None] * len(todo), strict=True):
                    known[keys[i]] = (result, sim)
                    if memo:
                        memo.put(keys[i], result, sim)
        for i in counted:
            counts[i], sim = at_budget(known[keys[i]], layouts[i].plan)
            simulated |= {i: sim} if sim is not None else {}
        extra = [i for i in members if with_lru and i not in simulated]
        if extra:
            sims = simulate_plans(model, work, [layouts[i].plan for i in extra], build_kernel(base, band=True))
            simulated |= dict(zip(extra, sims, strict=True))
            by_build.update(extra)
    return counts, simulated, by_build


def build_policy(sc: Scenario) -> str:
    """The policy the scenario's build runs without a named policy or a CPU share (traffic.build_kernel's)."""
    return replace(sc, knobs=(), policy="").policy_name


def _policy_band(r: Replayed) -> PolicyBand | None:
    """The band of the replay that made the counts: the scenario's own policy's, when its kernel runs one."""
    kernel = r.scenario.band_kernel()
    if r.counts is None or r.simulated is None or kernel is None or kernel.band is None:
        return None
    return r.simulated.band


def _in_load_mode(model: ModelSpec, hw: Hardware, layout: Layout, sc: Scenario) -> Layout:
    """The layout with the RAM account of the scenario's load mode (a replay resolves it at mmap)."""
    return replace(layout, ram=host_memory(model, hw, layout.placement, sc.memory_flags, sc.load_mode))


def price(
    model: ModelSpec,
    hw: Hardware,
    params: TimeParams,
    replayed: Sequence[Replayed],
    ranges: RangeInputs = NO_RANGE,
    *,
    hit_rate: float | None = None,
    load_mode: str | None = None,
) -> Curve:
    """Each replayed budget priced by the time model (a model, not a measurement) with the range `ranges` gives;
    where nothing was replayed, at `hit_rate` (none given: no hits). `load_mode` prices the same counts for
    another -lm: the counts and the placement do not depend on it, the RAM account does (pinned memory cannot
    page)."""
    points = []
    for r in watched_steps("pricing each budget", list(replayed)):
        sc = r.scenario if load_mode is None else replace(r.scenario, load_mode=load_mode)
        layout = r.layout if load_mode is None else _in_load_mode(model, hw, r.layout, sc)
        pred = predict(model, hw, params, sc, r.traffic, hit_rate, layout, ranges, _policy_band(r))
        points.append(CurvePoint(r, pred))
    return Curve(tuple(points))


def price_traffic(
    model: ModelSpec, hw: Hardware, params: TimeParams, sc: Scenario, layout: Layout, traffic: Traffic, ranges=NO_RANGE
) -> Prediction:
    """One setting whose traffic is already known (a measured point's), priced as every curve is."""
    return price(model, hw, params, [Replayed(sc, layout, traffic=traffic)], ranges).points[0].prediction


def curve(
    model: ModelSpec,
    hw: Hardware,
    params: TimeParams,
    base: Scenario,
    budgets_mib: Sequence[int],
    workload_for: WorkloadFor | None = None,
    ranges: RangeInputs = NO_RANGE,
    *,
    hit_rate: float | None = None,
    with_lru: bool = False,
) -> Curve:
    """The scenario at every budget: replayed (a hit rate given replaces the workload), then priced."""
    replayed = replay(model, hw, base, budgets_mib, workload_for if hit_rate is None else None, with_lru=with_lru)
    return price(model, hw, params, replayed, ranges, hit_rate=hit_rate)


@dataclass(frozen=True)
class BudgetAxis:
    """The budgets a curve is drawn at: spread from the smallest that starts to the one that caches every
    expert, the same for every card with this placement (so another GPU or host reprices the curve's counts
    instead of replaying new budgets); and the budget slider, moving in `step_mib` up to `top_mib` (a stop off the
    curve is answered alone: answers.explore.explore_answer). `top_mib`: the largest that fits the GPU's memory,
    or `full_mib` when no cache fits."""

    lowest_mib: int
    full_mib: int
    fits_mib: int
    top_mib: int
    step_mib: int
    budgets: tuple[int, ...]

    @property
    def cache_fits(self) -> bool:
        return self.fits_mib >= self.lowest_mib

    def policy_budgets(self, n: int = POLICY_BUDGETS) -> tuple[int, ...]:
        """The fewer budgets a policy comparison replays, spread like the curve's."""
        return tuple(sorted({int(b) for b in np.linspace(self.lowest_mib, max(self.full_mib, self.lowest_mib), n)}))


def slider_top(lowest_mib: int, full_mib: int, fits_mib: int) -> int:
    """Where every page's budget slider ends: where the cache stops fitting beside everything else, at most where
    it caches every expert; where it would cache everything when no cache fits (to show what it would take)."""
    return max(min(full_mib, fits_mib), 1) if fits_mib >= lowest_mib else max(full_mib, 1)


BUDGET_START_MIB = settings_of(Scenario)["budget_mib"].widget.start  # the budget every page opens at


def slider_step(top_mib: int, n_stops: int, start_mib: int = BUDGET_START_MIB) -> int:
    """A budget slider's step: at most `n_stops` stops up to `top_mib`, on a divisor of the budget the app opens at
    (so that budget is a stop and the slider reads what the number box says: 10,000, not 10,048), else on a 1-2-5
    ladder (a round figure)."""
    least = max(1, -(-top_mib // n_stops))
    if least <= start_mib:
        return next(d for d in range(least, start_mib + 1) if start_mib % d == 0)
    return next(s for k in range(len(str(least)) + 1) for s in (10**k, 2 * 10**k, 5 * 10**k) if s >= least)


def budget_axis(
    model: ModelSpec,
    hw: Hardware,
    base: Scenario,
    n_spread: int = CURVE_SPREAD_BUDGETS,
    n_stops: int = CURVE_SLIDER_STOPS,
) -> BudgetAxis:
    """The curve's budgets for a scenario's placement (with --fit: the layers it leaves in RAM without a cache)."""
    placement = resolve(model, hw, base.with_budget(0)).placement
    lowest = min_budget_mib(model, placement) or 1
    full = full_budget_mib(model, placement) or 1
    fits = cache_room_mib(model, hw, base, placement)
    top = slider_top(lowest, full, fits)
    step = slider_step(top, n_stops)
    budgets = tuple(sorted(set(np.linspace(lowest, max(full, lowest), n_spread).astype(int).tolist())))
    return BudgetAxis(lowest, full, fits, top, step, budgets)
