"""What each decode ubatch asks of each layer: distinct experts and cache hits, from a simulation or a rate.

The time model prices bytes, so it needs per layer and decode ubatch the distinct experts a batch
touches (a speculative verify batch or c streams share experts: the distinct count, not k x tokens)
and how many the pool served. This module gets them from a simulated workload (exact for the
workload given, replayed by the scenario's policy) or from a hit rate; pricing/curve.py replays whole curves.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from moe_model.errors import WorkloadError
from moe_model.llama.lru_kernel import check_kernel_inputs, distinct_sums
from moe_model.llama.output_rows import last_layer_prunes
from moe_model.llama.server_warm_up import start_up_rows
from moe_model.llama.simulate import SimResult, simulate_plans
from moe_model.llama.slot_plan import CachePlan, Placement
from moe_model.policies import REFERENCE, PolicyResult, get_policy, run_policy
from moe_model.policies.cpu_share import share_applies
from moe_model.policies.lru import from_simulation
from moe_model.readers.model_spec import ModelSpec
from moe_model.speed.scenario import Layout, Scenario
from moe_model.workload import PHASE_DECODE, Workload, WorkloadStream, first_layer


@dataclass(frozen=True, eq=False)
class Traffic:
    """Per decode ubatch and layer: distinct experts looked up and hits (from a simulation or a hit rate)."""

    distinct: np.ndarray  # [n_layer]
    hits: np.ndarray  # [n_layer], cached layers only
    cached: np.ndarray  # [n_layer] bool: layers whose decode ubatches use the pool
    source: str
    cpu: np.ndarray | None = None  # [n_layer]: misses the policy computes on the CPU instead of uploading
    fills: float | None = None  # a first request's uploads into empty slots, when a log counted them
    cpu_cut: np.ndarray | None = None  # [n_layer]: uploaded misses the CPU also computes for some selections

    @property
    def cpu_misses(self) -> np.ndarray:
        return np.zeros_like(self.distinct) if self.cpu is None else np.where(self.cached, self.cpu, 0.0)

    @property
    def cpu_reads(self) -> np.ndarray:
        """Distinct experts the CPU path reads: its own misses and the uploads a per-selection split cut through."""
        cut = 0.0 if self.cpu_cut is None else np.where(self.cached, self.cpu_cut, 0.0)
        return self.cpu_misses + cut

    @property
    def hit_rate(self) -> float | None:
        total = self.distinct[self.cached].sum()
        return float(self.hits[self.cached].sum() / total) if total else None

    def shifted(self, points: float) -> Traffic:
        """The same traffic with the hit rate moved by `points` percentage points (clamped to 0..100 %); misses
        keep the share the policy serves on the CPU."""
        hits = np.clip(self.hits + points / 100 * self.distinct, 0, self.distinct)
        if self.cpu is None:
            return replace(self, hits=np.where(self.cached, hits, 0.0))
        misses, new_misses = self.distinct - self.hits, self.distinct - hits
        share = np.divide(self.cpu, misses, out=np.zeros_like(misses, dtype=float), where=misses > 0)
        cut = (
            None
            if self.cpu_cut is None
            else self.cpu_cut * np.divide(new_misses, misses, out=np.zeros_like(share), where=misses > 0)
        )
        return replace(self, hits=np.where(self.cached, hits, 0.0), cpu=share * new_misses, cpu_cut=cut)


def independent_distinct(n_expert: int, k: int, tokens: int) -> float:
    """Expected distinct experts of `tokens` independent tokens with k of n_expert each."""
    return n_expert * (1 - (1 - k / n_expert) ** max(tokens, 1))


def start_up_fills(model: ModelSpec, layers: Sequence[int], build: int) -> float:
    """Experts llama-server `build`'s start-up (the warm-up and the seq_rm probe: server_warm_up.start_up_rows)
    puts into the empty slots of `layers`, tokens taken as independent, before any request."""
    k, n, prunes = model.n_expert_used, model.n_expert, last_layer_prunes(model.architecture, build)
    return sum(independent_distinct(n, k, start_up_rows(il, model.n_layer, build, prunes)) for il in layers)


def _estimated_distinct(model: ModelSpec, tokens: int) -> np.ndarray:
    per_layer = independent_distinct(model.n_expert, model.n_expert_used, tokens)
    return np.array([per_layer if layer.has_experts else 0.0 for layer in model.layers])


def _distinct_sums(work: Workload) -> tuple[np.ndarray, np.ndarray]:
    """Per layer: distinct experts summed over the decode records, and how many records."""
    arrays = (work.rec_layer, work.rec_ntok, work.rec_off)
    check_kernel_inputs(*arrays, work.ids, work.k, work.n_expert, work.n_layer)  # the count indexes without checks
    return distinct_sums(*arrays, work.rec_phase == PHASE_DECODE, work.ids, work.k, work.n_expert, work.n_layer)


def _chunks(work: Workload | WorkloadStream):
    return work.chunks() if isinstance(work, WorkloadStream) else (work,)


_DECODE_COUNTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # per Workload object, gone with it
_DECODE_COUNTS_LOCK = threading.Lock()


def decode_counts(work: Workload | WorkloadStream) -> tuple[int, np.ndarray]:
    """Decode ubatches, and mean distinct experts per decode ubatch per layer, in one pass over the workload
    (a stream chunk by chunk: its chunks hold whole ubatches). A held Workload (frozen) is counted once: the
    recommender prices several candidate groups on the same one."""
    if isinstance(work, WorkloadStream):
        return _decode_counts(work)
    with _DECODE_COUNTS_LOCK:
        known = _DECODE_COUNTS.get(work)
    if known is None:
        known = _decode_counts(work)
        known[1].setflags(write=False)  # shared by every caller
        with _DECODE_COUNTS_LOCK:
            _DECODE_COUNTS[work] = known
    return known


def _decode_counts(work: Workload | WorkloadStream) -> tuple[int, np.ndarray]:
    n_ubatches, sums, counts = 0, np.zeros(work.n_layer), np.zeros(work.n_layer)
    for chunk in _chunks(work):
        n_ubatches += _decode_ubatches(chunk)
        s, c = _distinct_sums(chunk)
        sums, counts = sums + s, counts + c
    return n_ubatches, sums / np.maximum(counts, 1)


def decode_distinct(work: Workload | WorkloadStream) -> np.ndarray:
    """Mean distinct experts per decode ubatch, per layer, counted in the workload itself."""
    return decode_counts(work)[1]


def from_hit_rate(model: ModelSpec, layout: Layout, sc: Scenario, hit_rate: float) -> Traffic:
    """Traffic of independent tokens at a given hit rate (a measured rate, or an assumption); the scenario's
    policy says which share of the misses it computes on the CPU."""
    distinct = _estimated_distinct(model, sc.tokens_per_ubatch)
    cached = layout.cached_mask(model, sc.tokens_per_ubatch)
    hits = np.where(cached, distinct * hit_rate, 0.0)
    share = get_policy(sc.policy_name).cpu_fraction(**sc.policy_knobs) if share_applies(model) else 0.0
    on_cpu = share * (distinct - hits)
    return Traffic(distinct, hits, cached, f"hit rate {hit_rate:.3f} given", np.where(cached, on_cpu, 0.0))


def from_counts(
    model: ModelSpec,
    layout: Layout,
    sc: Scenario,
    counts: PolicyResult,
    n_ubatches: int,
    distinct: np.ndarray,
    source: str,
) -> Traffic:
    """Per-ubatch traffic from a replay's per-layer counts (the only way counts become traffic): layers
    without lookups take `distinct`, the workload's own count."""
    cached = layout.cached_mask(model, sc.tokens_per_ubatch)
    per_ub = max(n_ubatches, 1)
    looked = cached & (counts.lookups > 0)
    return Traffic(
        np.where(looked, counts.lookups / per_ub, distinct),
        np.where(cached, steady_hits(model, layout, counts, sc.build) / per_ub, 0.0),
        cached,
        source,
        np.where(cached, counts.cpu / per_ub, 0.0),
        cpu_cut=None if counts.cpu_cut is None else np.where(cached, counts.cpu_cut / per_ub, 0.0),
    )


def steady_hits(model: ModelSpec, layout: Layout, counts: PolicyResult, build: int) -> np.ndarray:
    """A warm pool's hits: a replay's uploads into slots never used before (each group's first ones after the
    start-up's, start_up_fills: llama.cpp hands out never-used slots first and never empties one) are a first request's
    cold start, which `first_request` prices on top; each group keeps its hit rate without them over all its
    lookups, as points.steady_hit_rate does to a log's counts."""
    hits = counts.hits.astype(float)
    if not layout.plan.starts:
        return hits
    for group in (g for g in layout.plan.groups if g.cached):
        layers = list(group.layers)
        lookups, uploads = counts.lookups[layers].sum(), counts.uploads[layers].sum()
        free = group.n_slots - min(group.n_slots, start_up_fills(model, layers, build))
        fills = min(free, uploads)
        if fills > 0 and lookups > fills:
            scaled = counts.hits[layers] * lookups / (lookups - fills)
            hits[layers] = np.minimum(scaled, counts.hits[layers] + counts.uploads[layers])
    return hits


def decode_ubatches(work: Workload | WorkloadStream) -> int:
    """Number of decode ubatches in a workload (each layer sees each once)."""
    return sum(_decode_ubatches(chunk) for chunk in _chunks(work))


def _decode_ubatches(work: Workload) -> int:
    return int(((work.rec_phase == PHASE_DECODE) & first_layer(work.rec_layer)).sum())


def replay_counts(
    model: ModelSpec, work: Workload | WorkloadStream, sc: Scenario, plans: Sequence[CachePlan], placement: Placement
) -> tuple[list[PolicyResult], list[SimResult] | None]:
    """The scenario's policy over `work` at each plan (all of one placement): the build's own policy (the exact LRU,
    or ClassLRU from b12170) in one pass per class of plans (a stream too; its SimResults, the cache's statistics
    with the warm-up as llama.cpp counts it, come along), another policy per budget on a whole Workload. A workload
    that says so has its counts without the start-up warm-up's (without_warm_up)."""
    counts, sims = _policy_counts(model, work, sc, plans, placement)
    warm = None if isinstance(work, WorkloadStream) or work.warm_up_in_decode else work.warm_up()
    if warm is None:
        return counts, sims
    warm_counts = _policy_counts(model, warm, sc, plans, placement)[0]
    return [without_warm_up(c, w) for c, w in zip(counts, warm_counts, strict=True)], sims


def _policy_counts(
    model: ModelSpec, work: Workload | WorkloadStream, sc: Scenario, plans: Sequence[CachePlan], placement: Placement
) -> tuple[list[PolicyResult], list[SimResult] | None]:
    if (kernel := sc.band_kernel()) is not None:
        sims = simulate_plans(model, work, plans, kernel)
        return [from_simulation(r) for r in sims], sims
    if isinstance(work, WorkloadStream):
        raise WorkloadError(f"{sc.policy_name} replays a whole workload, not a stream: give a shorter trace")
    budgets = [p.budget_mib for p in plans]
    return run_policy(sc.policy_name, model, work, budgets, placement, **sc.policy_knobs), None


def without_warm_up(counts: PolicyResult, warm_up: PolicyResult) -> PolicyResult:
    """A replay's counts less its start-up warm-up's (replayed alone: it comes first, on an empty pool): the warm-up
    fills the pool before any request, but its lookups are not in the decode that traffic prices (nor in a log's
    decode timing)."""
    return replace(
        counts,
        hits=counts.hits - warm_up.hits,
        uploads=counts.uploads - warm_up.uploads,
        cpu=counts.cpu - warm_up.cpu,
        cpu_cut=None if counts.cpu_cut is None else counts.cpu_cut - warm_up.cpu_cut,
    )


def build_kernel(sc: Scenario, band: bool = False):
    """The kernel of the policy the scenario's build runs without a CPU share or a named policy (Explore's cache
    statistics: the exact LRU before b12170, ClassLRU from it; with `band` its readings band beside it)."""
    own = replace(sc, knobs=(), policy="")
    return own.band_kernel() if band else own.kernel()


def replay_label(sc: Scenario, work: Workload | WorkloadStream) -> str:
    """What a replay's traffic came from, as predictions report it."""
    if sc.policy_name == REFERENCE:
        return f"simulated: {work.label or 'trace'}"
    knobs = ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in sc.policy_knobs.items())
    name = sc.policy_name
    return f"simulated with {name}{f' ({knobs})' if knobs else ''}, a {get_policy(name).label} policy"


def from_workload(model: ModelSpec, layout: Layout, sc: Scenario, work: Workload | WorkloadStream) -> Traffic:
    """Replay the workload at the scenario's budget with the scenario's policy (the exact LRU by default, which
    also takes a stream: never held whole; the other policies replay a whole Workload)."""
    n_ub, distinct = decode_counts(work)
    counts = replay_counts(model, work, sc, [layout.plan], layout.placement)[0][0]
    return from_counts(model, layout, sc, counts, n_ub, distinct, replay_label(sc, work))
