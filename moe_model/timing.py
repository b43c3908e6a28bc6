"""A time model for decode and prompt speed, calibrated against measurements. A model, not a measurement.

Per decode ubatch (c streams x (d+1) verified tokens), in milliseconds:

    base        fixed cost per ubatch (sampling, launches, attention)             base_ms
    dense       dense weights read on the GPU                                     bytes / GPU bandwidth
    experts_gpu distinct experts of GPU and cached layers read on the GPU         bytes / GPU bandwidth
    upload      cache misses copied over the link                                 bytes / (link rate x link_eff)
    sync        one ids read-back and slot-map upload per cached layer            sync_ms x layers
    experts_cpu experts of host layers not served by the cache, on the CPU        bytes / (host bandwidth x cpu_eff)
    split       graph splits around layers computed on the CPU                    split_ms x layers
    draft       the draft model (no cache) per drafted token                      draft_ms x d

With CPU share F (b12191) a share F of a cached layer's misses runs on the CPU while the GPU
computes the hits and uploads the rest; the two overlap (max of the two per layer).
At budget 0 this is the familiar (dense / GPU bandwidth + experts / host bandwidth) per token,
and with every expert cached (dense + experts) / GPU bandwidth, plus the per-layer sync.

Prompt ubatches (> 32 tokens) of cached layers copy cached experts device-to-device and upload
the other used ones; without a cache the host layers' experts are computed on the CPU.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

import numpy as np

from moe_model.cpu_share import simulate_share
from moe_model.errors import MoeModelError
from moe_model.fitting import coordinate_search
from moe_model.hardware import Hardware
from moe_model.limits import (
    MAX_BUDGET_MIB,
    MAX_CONCURRENCY,
    MAX_CTX,
    MAX_DRAFT_TOKENS,
    MAX_PROMPT_TOKENS,
    MAX_UBATCH,
    check_at_most,
)
from moe_model.model_spec import ModelSpec
from moe_model.simulate import simulate, simulate_budgets
from moe_model.slot_plan import CachePlan, Placement, plan_cache
from moe_model.vram import VramBreakdown, breakdown, fit_host_layers
from moe_model.workload import PHASE_DECODE, Workload

MS = 1e3
GB = 1e9


@dataclass(frozen=True)
class TimeParams:
    """The model's free parameters for one machine; calibrate them, do not trust the defaults."""

    base_ms: float = 2.0
    sync_ms: float = 0.1
    copy_us: float = 10.0  # latency of one host-to-device copy (one per missed expert and tensor)
    link_eff: float = 1.0
    cpu_eff: float = 0.5
    split_ms: float = 0.05
    draft_ms: float = 1.0
    cpu_gflops: float = 150.0  # CPU matmul throughput on large batches (prompt)
    gpu_tflops: float = 20.0  # GPU matmul throughput on large batches (prompt)
    prompt_link_eff: float = 1.0
    prompt_base_ms: float = 20.0  # fixed cost per prompt ubatch


@dataclass(frozen=True)
class Scenario:
    """A llama-server configuration: placement, budget, concurrency, speculation, CPU share, context."""

    placement: str = "cpu-moe"  # cpu-moe | fit | n-cpu-moe:K | gpu
    budget_mib: int = 0
    concurrency: int = 1
    draft_tokens: int = 0
    accept_rate: float = 0.7
    cpu_share: float = 0.0
    n_ctx: int = 4096
    prompt_tokens: int = 512
    n_ubatch: int = 512

    def __post_init__(self) -> None:
        if not 0.0 <= self.cpu_share <= 1.0:
            raise MoeModelError(f"--moe-cache-cpu-share must be in [0, 1], got {self.cpu_share}")
        if self.budget_mib < 0 or self.concurrency < 1 or self.draft_tokens < 0 or self.n_ctx < 1:
            raise MoeModelError("budget >= 0, concurrency >= 1, draft tokens >= 0 and context >= 1 are needed")
        for value, limit, what in (
            (self.budget_mib, MAX_BUDGET_MIB, "the budget (MiB)"),
            (self.concurrency, MAX_CONCURRENCY, "concurrency"),
            (self.draft_tokens, MAX_DRAFT_TOKENS, "draft tokens"),
            (self.prompt_tokens, MAX_PROMPT_TOKENS, "prompt tokens"),
            (self.n_ubatch, MAX_UBATCH, "the ubatch size"),
            (self.n_ctx, MAX_CTX, "the context"),
        ):
            check_at_most(value, limit, what)
        if not 0.0 <= self.accept_rate <= 1.0:
            raise MoeModelError(f"the draft acceptance rate must be in [0, 1], got {self.accept_rate}")
        if not (self.placement in ("cpu-moe", "fit", "gpu") or self.placement.startswith("n-cpu-moe:")):
            raise MoeModelError(f"placement must be cpu-moe, fit, gpu or n-cpu-moe:K, got {self.placement!r}")

    @property
    def prompt_ubatch(self) -> int:
        return max(1, min(self.n_ubatch, self.prompt_tokens))

    @property
    def tokens_per_ubatch(self) -> int:
        return self.concurrency * (self.draft_tokens + 1)

    @property
    def decoded_per_ubatch(self) -> float:
        """Generated tokens per verification step: 1 + the expected leading run of accepted drafts."""
        p, d = self.accept_rate, self.draft_tokens
        return self.concurrency * (1 + sum(p**i for i in range(1, d + 1)))


@dataclass(frozen=True)
class Layout:
    """How a scenario places the model: host layers, the cache plan, VRAM."""

    placement: Placement
    plan: CachePlan
    vram: VramBreakdown
    host_layers: tuple[int, ...]


def resolve(model: ModelSpec, hw: Hardware, sc: Scenario) -> Layout:
    """Turn a scenario into llama.cpp's placement (fit included), its cache plan and VRAM use."""
    if sc.placement == "gpu":
        placement = Placement(cpu_moe=False, n_cpu_moe=0)
    elif sc.placement == "cpu-moe":
        placement = Placement(cpu_moe=True)
    elif sc.placement == "fit":
        placement = Placement(cpu_moe=False, n_cpu_moe=fit_host_layers(model, hw, sc.budget_mib, sc.n_ctx))
    else:
        placement = Placement(cpu_moe=False, n_cpu_moe=int(sc.placement.split(":", 1)[1]))
    host = tuple(layer.index for layer in model.layers if layer.has_experts and placement.experts_on_host(layer.index))
    plan = plan_cache(model, sc.budget_mib, placement)
    return Layout(placement, plan, breakdown(model, hw, placement, sc.budget_mib, sc.n_ctx, sc.n_ubatch), host)


@dataclass(frozen=True)
class Traffic:
    """Per decode ubatch and layer: distinct experts looked up and hits (from a simulation or a hit rate)."""

    distinct: np.ndarray  # [n_layer]
    hits: np.ndarray  # [n_layer], cached layers only
    cached: np.ndarray  # [n_layer] bool: layers whose decode ubatches use the pool
    source: str

    @property
    def hit_rate(self) -> float | None:
        total = self.distinct[self.cached].sum()
        return float(self.hits[self.cached].sum() / total) if total else None


def distinct_per_ubatch(n_expert: int, k: int, tokens: int) -> float:
    """Expected distinct experts of `tokens` independent tokens with k of n_expert each."""
    return n_expert * (1 - (1 - k / n_expert) ** max(tokens, 1))


def _distinct_per_layer(model: ModelSpec, sc: Scenario) -> np.ndarray:
    """The independent-token estimate of distinct experts per decode ubatch, per layer (0 for dense layers)."""
    per_layer = distinct_per_ubatch(model.n_expert, model.n_expert_used, sc.tokens_per_ubatch)
    return np.array([per_layer if layer.has_experts else 0.0 for layer in model.layers])


def traffic_from_hit_rate(model: ModelSpec, layout: Layout, sc: Scenario, hit_rate: float) -> Traffic:
    distinct = _distinct_per_layer(model, sc)
    cached = _cached_mask(model, layout, sc)
    return Traffic(distinct, np.where(cached, distinct * hit_rate, 0.0), cached, f"hit rate {hit_rate:.3f} given")


def _cached_mask(model: ModelSpec, layout: Layout, sc: Scenario) -> np.ndarray:
    """Layers whose decode ubatches use the pool (cached group with enough slots for the ubatch)."""
    mask = np.zeros(model.n_layer, dtype=bool)
    if not layout.plan.starts:
        return mask
    demand = min(sc.tokens_per_ubatch * model.n_expert_used, model.n_expert)
    for g in layout.plan.groups:
        if g.n_slots >= demand and sc.tokens_per_ubatch <= 32:
            mask[list(g.layers)] = True
    return mask


@dataclass(frozen=True)
class Prediction:
    """Predicted speeds, with the time of each term so nothing is hidden."""

    starts: bool
    error: str | None
    decode_tps: float
    prefill_tps: float
    hit_rate: float | None
    breakdown_ms: dict[str, float]
    prefill_breakdown_ms: dict[str, float]
    vram: VramBreakdown
    scenario: Scenario
    layout: Layout
    notes: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict:
        return {
            "starts": self.starts,
            "error": self.error,
            "decode_tps": self.decode_tps,
            "prefill_tps": self.prefill_tps,
            "hit_rate": self.hit_rate,
            "breakdown_ms": self.breakdown_ms,
            "prefill_breakdown_ms": self.prefill_breakdown_ms,
            "vram": self.vram.as_dict(),
            "fits_vram": self.vram.fits,
            "scenario": asdict(self.scenario),
            "host_layers": len(self.layout.host_layers),
            "cached_slots": self.layout.plan.n_slots_total,
            "notes": list(self.notes),
        }


def decode_terms(
    model: ModelSpec, hw: Hardware, params: TimeParams, sc: Scenario, layout: Layout, traffic: Traffic
) -> dict[str, float]:
    """Milliseconds per decode ubatch, term by term."""
    gpu_bw, cpu_bw = hw.gpu_bw_gbs * GB, hw.cpu_bw_gbs * GB * params.cpu_eff
    link = hw.upload_gbs * GB * params.link_eff
    cached = _cached_mask(model, layout, sc)
    host = np.zeros(model.n_layer, dtype=bool)
    host[list(layout.host_layers)] = True
    slot = np.array([layer.slot_bytes for layer in model.layers], dtype=float)
    distinct_bytes = traffic.distinct * slot
    miss_bytes = np.where(cached, (traffic.distinct - traffic.hits) * slot, 0.0)
    f = sc.cpu_share  # a share f of the misses runs on the CPU, beside the GPU's work on that layer
    gpu_reads = np.where(~host, distinct_bytes, np.where(cached, distinct_bytes - f * miss_bytes, 0.0)) / gpu_bw
    n_tensors = np.array([len(layer.experts) for layer in model.layers])
    copies = np.where(cached, (traffic.distinct - traffic.hits) * (1 - f) * n_tensors, 0.0)  # merging not modelled
    uploads = miss_bytes * (1 - f) / link + copies * params.copy_us / 1e6
    cpu_work = np.where(cached, f * miss_bytes, np.where(host, distinct_bytes, 0.0)) / cpu_bw
    hidden = np.where(cached, np.minimum(gpu_reads + uploads, cpu_work), 0.0)  # CPU share overlaps the GPU
    dense_bytes = sum(layer.dense_bytes for layer in model.layers) + model.other_bytes - model.input_bytes
    return {
        "base": params.base_ms,
        "dense": dense_bytes / gpu_bw * MS,
        "experts_gpu": float(gpu_reads.sum() * MS),
        "upload": float(uploads.sum() * MS),
        "sync": params.sync_ms * int(cached.sum()),
        "experts_cpu": float((cpu_work.sum() - hidden.sum()) * MS),
        "split": params.split_ms * int((host & ~cached).sum() + (cached.sum() if f > 0 else 0)),
        "draft": params.draft_ms * sc.draft_tokens,
    }


def prefill_terms(model: ModelSpec, hw: Hardware, params: TimeParams, sc: Scenario, layout: Layout) -> dict[str, float]:
    """Milliseconds per prompt ubatch: n_ubatch tokens, or the whole prompt when it is shorter."""
    n = sc.prompt_ubatch
    k, n_expert = model.n_expert_used, model.n_expert
    used = distinct_per_ubatch(n_expert, k, n)
    link = hw.upload_gbs * GB * params.prompt_link_eff
    copied = uploaded = cpu = 0.0
    group_of = {il: g for g in layout.plan.groups if g.cached and layout.plan.starts for il in g.layers}
    for il in layout.host_layers:
        layer = model.layers[il]
        group = group_of.get(il)
        if group is None:  # no cache: the host experts of a large batch run on the CPU
            cpu += n * k * layer.expert_params * 2 / (params.cpu_gflops * GB)  # 2 FLOP per weight and token
            continue
        cached_share = group.n_slots / group.max_slots
        copied += used * cached_share * layer.slot_bytes
        uploaded += used * (1 - cached_share) * layer.slot_bytes
    return {
        "gpu_compute": n * model.active_params * 2 / (params.gpu_tflops * 1e12) * MS,
        "copy_from_cache": copied / (hw.gpu_bw_gbs * GB) * MS,
        "upload": uploaded / link * MS,
        "experts_cpu": cpu * MS,
        "base": params.prompt_base_ms,
    }


def predict(
    model: ModelSpec,
    hw: Hardware,
    params: TimeParams,
    sc: Scenario,
    traffic: Traffic | None = None,
    hit_rate: float | None = None,
    layout: Layout | None = None,
) -> Prediction:
    """Decode and prompt speed of a scenario; traffic from a simulation, or a given hit rate."""
    layout = layout or resolve(model, hw, sc)
    notes = []
    if not layout.plan.starts:
        return Prediction(
            False, layout.plan.error, 0.0, 0.0, None, {}, {}, layout.vram, sc, layout, (layout.plan.error,)
        )
    if traffic is None:
        traffic = traffic_from_hit_rate(model, layout, sc, 0.0 if hit_rate is None else hit_rate)
    if not layout.vram.fits:
        notes.append(f"does not fit: {-layout.vram.free_mib:.0f} MiB over the GPU's memory")
    if sc.cpu_share > 0:
        notes.append(
            "CPU share (b12191) is a modelled policy: misses split by an accumulated remainder, "
            "lowest decayed-use score to the CPU, overlapping the GPU; exact formulas not seen"
        )
    decode = decode_terms(model, hw, params, sc, layout, traffic)
    prefill = prefill_terms(model, hw, params, sc, layout)
    decode_tps = sc.decoded_per_ubatch / (sum(decode.values()) / MS)
    prefill_tps = sc.prompt_ubatch / (sum(prefill.values()) / MS)
    return Prediction(
        True, None, decode_tps, prefill_tps, traffic.hit_rate, decode, prefill, layout.vram, sc, layout, tuple(notes)
    )


# --- calibration ---


@dataclass(frozen=True)
class Point:
    """A measured decode (and optionally prompt) speed of a scenario, with its traffic."""

    name: str
    scenario: Scenario
    decode_tps: float
    traffic: Traffic | None = None
    hit_rate: float | None = None
    prefill_tps: float | None = None
    layout: Layout | None = None
    tolerance: float = 0.10  # the relative decode error this point is held to


@dataclass(frozen=True)
class Calibration:
    params: TimeParams
    residuals: dict[str, float]  # relative error of predicted decode t/s per point
    prefill_residuals: dict[str, float]
    accepted: bool
    max_error: float

    def as_dict(self) -> dict:
        return {
            "params": asdict(self.params),
            "residuals": self.residuals,
            "prefill_residuals": self.prefill_residuals,
            "accepted": self.accepted,
            "max_error": self.max_error,
        }


def residuals(model: ModelSpec, hw: Hardware, params: TimeParams, points: list[Point]) -> tuple[dict, dict]:
    decode, prefill = {}, {}
    for p in points:
        pred = predict(model, hw, params, p.scenario, p.traffic, p.hit_rate, p.layout)
        decode[p.name] = pred.decode_tps / p.decode_tps - 1
        if p.prefill_tps:
            prefill[p.name] = pred.prefill_tps / p.prefill_tps - 1
    return decode, prefill


PARAM_BOUNDS = {
    "base_ms": (0.05, 30.0),
    "sync_ms": (0.005, 2.0),
    "link_eff": (0.2, 3.0),
    "cpu_eff": (0.05, 1.5),
    "copy_us": (0.5, 200.0),
    "prompt_base_ms": (1.0, 2000.0),
    "split_ms": (0.0, 1.0),
    "cpu_gflops": (10.0, 5000.0),
    "gpu_tflops": (1.0, 500.0),
    "prompt_link_eff": (0.1, 3.0),
}


def calibrate(
    model: ModelSpec,
    hw: Hardware,
    points: list[Point],
    start: TimeParams | None = None,
    names: tuple[str, ...] = ("base_ms", "sync_ms", "copy_us", "link_eff", "cpu_eff"),
    prefill_names: tuple[str, ...] = ("cpu_gflops", "prompt_link_eff", "prompt_base_ms"),
    max_error: float = 0.25,
    rounds: int = 4,
) -> Calibration:
    """Fit the named parameters to the points (log-space coordinate search on relative errors).

    A fit whose worst decode error exceeds max_error is returned with accepted = False: callers must
    not present it as a prediction.
    """
    params = start or TimeParams()

    tolerance = {p.name: p.tolerance for p in points}

    def decode_loss(p: TimeParams) -> float:  # 4th power of error/tolerance: keeps every point inside its band
        return sum((r / tolerance[name]) ** 4 for name, r in residuals(model, hw, p, points)[0].items())

    def prefill_loss(p: TimeParams) -> float:
        return sum(r * r for r in residuals(model, hw, p, points)[1].values())

    params = coordinate_search(decode_loss, params, PARAM_BOUNDS, names, rounds, steps=24, log_space=True)
    if any(p.prefill_tps for p in points):
        params = coordinate_search(prefill_loss, params, PARAM_BOUNDS, prefill_names, rounds, steps=24, log_space=True)
    decode, prefill = residuals(model, hw, params, points)
    worst = max((abs(r) for r in decode.values()), default=0.0)
    return Calibration(params, decode, prefill, worst <= max_error, worst)


def traffic_from_simulation(
    model: ModelSpec,
    layout: Layout,
    sc: Scenario,
    layer_hits: np.ndarray,
    layer_lookups: np.ndarray,
    n_ubatches: int,
    source: str,
) -> Traffic:
    """Per-ubatch traffic from a simulation's per-layer counts (decode ubatches)."""
    cached = _cached_mask(model, layout, sc)
    distinct = np.where(
        cached & (layer_lookups > 0), layer_lookups / max(n_ubatches, 1), _distinct_per_layer(model, sc)
    )
    hits = np.where(cached, layer_hits / max(n_ubatches, 1), 0.0)
    return Traffic(distinct, hits, cached, source)


def traffic_from_workload(model: ModelSpec, layout: Layout, sc: Scenario, work: Workload) -> Traffic:
    """Simulate the workload at the scenario's budget (with the modelled CPU-share policy when F > 0)."""
    n_ubatches = decode_ubatches(work)
    if sc.cpu_share > 0:
        share = simulate_share(model, work, sc.budget_mib, sc.cpu_share, layout.placement)
        lookups = share.hits + share.uploads + share.cpu
        return traffic_from_simulation(
            model,
            layout,
            sc,
            share.hits,
            lookups,
            n_ubatches,
            f"simulated with CPU share {sc.cpu_share} (modelled policy)",
        )
    result = simulate(model, work, sc.budget_mib, layout.placement)
    return traffic_from_simulation(
        model, layout, sc, result.layer_hits, result.layer_lookups, n_ubatches, f"simulated: {work.label or 'trace'}"
    )


def predict_curve(
    model: ModelSpec,
    hw: Hardware,
    params: TimeParams,
    base: Scenario,
    results: list,
    n_ubatches: int,
    share_traffic=None,
) -> list[Prediction]:
    """Predictions along a simulated budget curve (`results` from simulate_budgets at base's placement).

    With a CPU share, `share_traffic(scenario)` supplies each budget's traffic (a per-budget simulation).
    """
    out = []
    for r in results:
        sc = replace(base, budget_mib=r.budget_mib)
        layout = resolve(model, hw, sc)
        if not layout.plan.starts:
            out.append(predict(model, hw, params, sc, layout=layout))
            continue
        if sc.cpu_share > 0 and share_traffic is not None:
            traffic = share_traffic(sc)
        else:
            traffic = traffic_from_simulation(model, layout, sc, r.layer_hits, r.layer_lookups, n_ubatches, "simulated")
        out.append(predict(model, hw, params, sc, traffic, layout=layout))
    return out


def decode_ubatches(work: Workload) -> int:
    """Number of decode ubatches in a workload (each layer sees each once)."""
    return int(((work.rec_phase == PHASE_DECODE) & (work.rec_layer == 0)).sum())


def simulate_curve(model: ModelSpec, hw: Hardware, work: Workload, base: Scenario, budgets: list[int]) -> list:
    """Simulated results at every budget for the scenario's placement; with --fit the placement itself
    depends on the budget, so budgets are grouped by how many layers --fit leaves in host memory."""
    by_placement: dict[Placement, list[int]] = {}
    for budget in budgets:
        by_placement.setdefault(resolve(model, hw, replace(base, budget_mib=budget)).placement, []).append(budget)
    results = {}
    for placement, group in by_placement.items():
        results |= dict(zip(group, simulate_budgets(model, work, group, placement), strict=True))
    return [results[b] for b in budgets]
