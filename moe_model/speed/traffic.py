"""What each decode ubatch asks of each layer: distinct experts and cache hits, from a simulation or a rate.

The time model prices bytes, so it needs per layer and decode ubatch the distinct experts a batch
touches (a speculative verify batch or c streams share experts: the distinct count, not k x tokens)
and how many the pool served. This module gets them from a simulated workload (exact for the
workload given) or from a hit rate, and runs the simulations a budget curve needs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from moe_model.errors import WorkloadError
from moe_model.llama.simulate import simulate_budgets
from moe_model.llama.slot_plan import Placement
from moe_model.policies import REFERENCE, get_policy, run_policy
from moe_model.readers.model_spec import ModelSpec
from moe_model.speed.hardware import Hardware
from moe_model.speed.scenario import Layout, Scenario, resolve
from moe_model.workload import PHASE_DECODE, Workload, WorkloadStream


@dataclass(frozen=True, eq=False)
class Traffic:
    """Per decode ubatch and layer: distinct experts looked up and hits (from a simulation or a hit rate)."""

    distinct: np.ndarray  # [n_layer]
    hits: np.ndarray  # [n_layer], cached layers only
    cached: np.ndarray  # [n_layer] bool: layers whose decode ubatches use the pool
    source: str
    cpu: np.ndarray | None = None  # [n_layer]: misses the policy computes on the CPU instead of uploading
    fills: float | None = None  # a first request's uploads into empty slots, when a log counted them

    @property
    def cpu_misses(self) -> np.ndarray:
        return np.zeros_like(self.distinct) if self.cpu is None else np.where(self.cached, self.cpu, 0.0)

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
        return replace(self, hits=np.where(self.cached, hits, 0.0), cpu=share * new_misses)


def independent_distinct(n_expert: int, k: int, tokens: int) -> float:
    """Expected distinct experts of `tokens` independent tokens with k of n_expert each."""
    return n_expert * (1 - (1 - k / n_expert) ** max(tokens, 1))


def _estimated_distinct(model: ModelSpec, tokens: int) -> np.ndarray:
    per_layer = independent_distinct(model.n_expert, model.n_expert_used, tokens)
    return np.array([per_layer if layer.has_experts else 0.0 for layer in model.layers])


def _distinct_sums(work: Workload) -> tuple[np.ndarray, np.ndarray]:
    """Per layer: distinct experts summed over the decode records, and how many records."""
    decode = np.flatnonzero((work.rec_phase == PHASE_DECODE) & (work.rec_ntok > 0))
    if not len(decode):
        return np.zeros(work.n_layer), np.zeros(work.n_layer)
    lengths = work.rec_ntok[decode] * work.k
    starts = work.rec_off[decode]
    owner = np.repeat(np.arange(len(decode)), lengths)
    within = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    ids = work.ids[np.repeat(starts, lengths) + within].astype(np.int64)
    keys = np.sort(owner * work.n_expert + ids)  # a sort, not np.unique: its hash path is ~20x slower here
    first = np.concatenate(([True], keys[1:] != keys[:-1]))
    per_record = np.bincount(keys[first] // work.n_expert, minlength=len(decode))
    layers = work.rec_layer[decode]
    sums = np.bincount(layers, weights=per_record, minlength=work.n_layer)
    return sums, np.bincount(layers, minlength=work.n_layer).astype(float)


def _chunks(work: Workload | WorkloadStream):
    return work.chunks() if isinstance(work, WorkloadStream) else (work,)


def decode_counts(work: Workload | WorkloadStream) -> tuple[int, np.ndarray]:
    """Decode ubatches, and mean distinct experts per decode ubatch per layer, in one pass over the workload
    (a stream chunk by chunk: its chunks hold whole ubatches)."""
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
    on_cpu = get_policy(sc.policy_name).cpu_fraction(**sc.policy_knobs) * (distinct - hits)
    return Traffic(distinct, hits, cached, f"hit rate {hit_rate:.3f} given", np.where(cached, on_cpu, 0.0))


def from_counts(
    model: ModelSpec,
    layout: Layout,
    sc: Scenario,
    layer_hits: np.ndarray,
    layer_lookups: np.ndarray,
    n_ubatches: int,
    source: str,
    distinct: np.ndarray | None = None,
    layer_cpu: np.ndarray | None = None,
) -> Traffic:
    """Per-ubatch traffic from a simulation's per-layer counts; uncached layers take `distinct` (the
    workload's own count) or the independent-token estimate."""
    cached = layout.cached_mask(model, sc.tokens_per_ubatch)
    other = distinct if distinct is not None else _estimated_distinct(model, sc.tokens_per_ubatch)
    per_ub = max(n_ubatches, 1)
    looked = cached & (layer_lookups > 0)
    cpu = None if layer_cpu is None else np.where(cached, layer_cpu / per_ub, 0.0)
    return Traffic(
        np.where(looked, layer_lookups / per_ub, other), np.where(cached, layer_hits / per_ub, 0.0), cached, source, cpu
    )


def decode_ubatches(work: Workload | WorkloadStream) -> int:
    """Number of decode ubatches in a workload (each layer sees each once)."""
    return sum(_decode_ubatches(chunk) for chunk in _chunks(work))


def _decode_ubatches(work: Workload) -> int:
    return int(((work.rec_phase == PHASE_DECODE) & (work.rec_layer == 0)).sum())


def from_workload(model: ModelSpec, layout: Layout, sc: Scenario, work: Workload | WorkloadStream) -> Traffic:
    """Replay the workload at the scenario's budget with the scenario's policy (the exact LRU by default, which
    also takes a stream: never held whole; the other policies replay a whole Workload)."""
    n_ub, distinct = decode_counts(work)
    name = sc.policy_name
    if name == REFERENCE:
        result = simulate_budgets(model, work, [sc.budget_mib], layout.placement)[0]
        label = f"simulated: {work.label or 'trace'}"
        return from_counts(model, layout, sc, result.layer_hits, result.layer_lookups, n_ub, label, distinct)
    if isinstance(work, WorkloadStream):
        raise WorkloadError(f"{name} replays a whole workload, not a stream: give a shorter trace")
    policy = get_policy(name)
    res = run_policy(name, model, work, [sc.budget_mib], layout.placement, **sc.policy_knobs)[0]
    knobs = ", ".join(f"{k} {v:g}" for k, v in sc.policy_knobs.items())
    label = f"simulated with {name}{f' ({knobs})' if knobs else ''}, a {policy.label} policy"
    return from_counts(model, layout, sc, res.hits, res.lookups, n_ub, label, distinct, res.cpu)


def simulate_curve(model: ModelSpec, hw: Hardware, work: Workload, base: Scenario, budgets: list[int]) -> list:
    """Simulated results at every budget for the scenario's placement; with --fit the placement itself
    depends on the budget, so budgets are grouped by how many layers --fit leaves in host memory."""
    by_placement: dict[Placement, list[int]] = {}
    for budget in budgets:
        by_placement.setdefault(resolve(model, hw, base.with_budget(budget)).placement, []).append(budget)
    results = {}
    for placement, group in by_placement.items():
        results |= dict(zip(group, simulate_budgets(model, work, group, placement), strict=True))
    return [results[b] for b in budgets]
