"""Decode and prompt speed from bytes, rates and per-event costs. A model, not a measurement.

Per decode ubatch (c streams x (d+1) verified tokens), in milliseconds:

    fixed       per ubatch + per layer (kernel launches)                   token_ms (or machine) + layer_us x layers
    sampling    every verified token's logits, sampled on the CPU          sample_ns x vocabulary x tokens
    dense       dense weights read on the GPU                              bytes / (GPU bandwidth x gpu_eff)
    experts_gpu distinct experts of GPU and cached layers                  bytes / (GPU bandwidth x gpu_eff)
                (several tokens: + one matmul launch per expert and tensor)  + experts x tensors x batch_expert_us
    upload      misses copied host-to-device                               bytes / upload rate + copies x copy_us
    sync        ids read-back and slot-map upload, per cached layer        sync_us (per backend, or the machine's)
    experts_cpu distinct experts of host layers the pool does not serve    bytes / CPU expert rate
    split       a graph split around each layer computed on the CPU        split_us x layers
    draft       the draft / MTP head, per drafted token                    draft_ms x d

Rates come from the machine (hardware.Hardware) and machine-independent parameters fitted across every
measured machine (TimeParams): pinned uploads run at the link's pinned rate (never above its line
rate); mmap'd (pageable) uploads go through a host staging copy, 1 / (1/pinned + 1/staging_gbs); the
CPU reads experts at min(host bandwidth x cpu_bw_eff, threads x GHz x thread_gbs_per_ghz), slower over pinned
CUDA_Host memory (no repacked layouts: pinned_cpu_factor). A machine's own measured rates replace
the derived ones. With CPU share F (b12191, modelled) a share F of a cached layer's misses runs on the
CPU beside the GPU's work on that layer (the two overlap).

A prompt ubatch of n >= GGML_OP_OFFLOAD_MIN_BATCH tokens uploads the host layers' used experts
(cached ones are copied device-to-device) and multiplies on the GPU; a smaller one stays on the CPU.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from moe_model.llama.pool_rule import copies_from_pool
from moe_model.policies import MODELLED, get_policy
from moe_model.readers.model_spec import ModelSpec
from moe_model.settings import prior, settings_of
from moe_model.speed.hardware import Hardware
from moe_model.speed.scenario import Layout, Scenario, resolve
from moe_model.speed.traffic import Traffic, from_hit_rate, independent_distinct
from moe_model.speed.vram import VramBreakdown

MS = 1e3
GB = 1e9
PINNED_COPY_US = 2.7  # latency of one pinned copy: groundtruth bw.json, 288 KiB in 8.1 us at 55 GB/s asymptotic


LOG2, LOG3 = float(np.log(2)), float(np.log(3))
LOG1_3, LOG1_5 = float(np.log(1.3)), float(np.log(1.5))


@dataclass(frozen=True)
class TimeParams:
    """Machine-independent parameters, fitted across machines (calibration.py). Each default is the prior the fit
    is pulled towards, a physically expected value with its reason; with it the prior's log-space width (a factor
    the data must argue for), the fit's bounds, and the fit that sets it (moe_model.settings.prior)."""

    gpu_eff: float = prior(
        0.7, "share of the datasheet bandwidth decode matmuls reach (typical for quantized matvec)", LOG1_3, 0.3, 1.0
    )
    token_ms: float = prior(0.5, "per ubatch: graph build and launch", LOG3, 0.05, 10.0)
    sample_ns: float = prior(
        8.0, "per sampled token and vocabulary entry: logits copied back and sampled on the CPU", LOG3, 0.5, 100.0
    )
    layer_us: float = prior(
        60.0, "per layer and ubatch: ~10-15 kernel launches (groundtruth run3 all-GPU: ~95 us)", LOG2, 1.0, 300.0
    )
    batch_expert_us: float = prior(
        3.0, "per expert and tensor when a GPU ubatch has several tokens (per-expert matmuls)", LOG3, 0.1, 50.0
    )
    staging_gbs: float = prior(
        6.5, "memcpy of mmap'd pages into the staging buffer (run3: 5.6 GB/s effective at 55 pinned)", LOG1_5, 1.0, 60.0
    )
    pageable_copy_us: float = prior(
        15.0, "a pageable copy is synchronous (groundtruth bw.json intercept: ~14 us)", LOG2, 1.0, 500.0
    )
    cpu_bw_eff: float = prior(0.6, "share of host bandwidth the CPU expert path reaches", LOG1_5, 0.05, 1.0)
    thread_gbs_per_ghz: float = prior(
        1.2, "expert bytes one thread multiplies per second and GHz (quantized dot products)", LOG1_5, 0.1, 10.0
    )
    pinned_cpu_factor: float = prior(
        0.7, "CPU path over CUDA_Host memory: no repacked weight layouts", LOG1_5, 0.2, 1.0
    )
    no_vnni_factor: float = prior(
        0.5, "a CPU without VNNI multiplies int8 dot products at about half the rate", LOG1_5, 0.2, 1.0
    )
    sync_us_cuda: float = prior(
        50.0, "per cached layer and ubatch on CUDA: ids read back, slot map uploaded", LOG3, 5.0, 3000.0
    )
    sync_us_other: float = prior(300.0, "the same on HIP and Vulkan, whose host syncs are slower", LOG3, 5.0, 3000.0)
    split_us_cuda: float = prior(
        60.0, "per layer computed on the CPU: a graph split and its two small copies", LOG3, 1.0, 3000.0
    )
    split_us_other: float = prior(300.0, "the same on HIP and Vulkan", LOG3, 1.0, 3000.0)
    draft_ms: float = prior(1.0, "per drafted token (draft model or MTP head)", LOG3, 0.05, 20.0)
    mm_eff: float = prior(0.3, "share of datasheet FP16 TFLOPS prompt matmuls reach", LOG3, 0.02, 1.0, "prefill")
    prompt_ubatch_ms: float = prior(20.0, "fixed cost per prompt ubatch", LOG3, 1.0, 2000.0, "prefill")

    def sync_us(self, hw: Hardware) -> float:
        if hw.sync_us is not None:
            return hw.sync_us
        return self.sync_us_cuda if hw.backend == "cuda" else self.sync_us_other

    def token_ms_of(self, hw: Hardware) -> float:
        return self.token_ms if hw.token_ms is None else hw.token_ms

    def split_us(self, hw: Hardware) -> float:
        return self.split_us_cuda if hw.backend == "cuda" else self.split_us_other


# the calibration's tables, generated from the declarations above
PARAMS = settings_of(TimeParams)
DECODE_PARAMS = tuple(name for name, p in PARAMS.items() if p.fit == "decode")
PREFILL_PARAMS = tuple(name for name, p in PARAMS.items() if p.fit == "prefill")
PARAM_BOUNDS = {name: (p.lo, p.hi) for name, p in PARAMS.items()}
PRIOR_WIDTH = {name: p.width for name, p in PARAMS.items()}


def upload_gbs(hw: Hardware, params: TimeParams, pinned: bool) -> float:
    """Host-to-device rate of the host experts: pinned at the link's rate, pageable through a staging copy."""
    if pinned:
        return hw.pinned_rate_gbs
    return hw.pageable_gbs or 1 / (1 / hw.pinned_rate_gbs + 1 / params.staging_gbs)


def cpu_expert_gbs(hw: Hardware, params: TimeParams, pinned: bool) -> float:
    """Rate the CPU path reads expert weights at: bandwidth- or thread-bound, slower over pinned memory."""
    per_thread = params.thread_gbs_per_ghz * hw.cpu_ghz * (1.0 if hw.cpu_vnni else params.no_vnni_factor)
    rate = hw.cpu_expert_gbs or min(hw.cpu_bw_gbs * params.cpu_bw_eff, hw.cpu_threads * per_thread)
    return rate * (params.pinned_cpu_factor if pinned else 1.0)


@dataclass(frozen=True)
class Prediction:
    """Predicted speeds, with each term's time and a range, so nothing is hidden."""

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
    decode_tps_range: tuple[float, float] = (0.0, 0.0)
    notes: tuple[str, ...] = field(default=())

    @property
    def usable(self) -> bool:
        """Starts and fits the GPU's memory (or is too close to call): only then is a speed shown."""
        return self.starts and (self.vram.fits or self.vram.tight)

    def as_dict(self) -> dict:
        sc = asdict(self.scenario)
        sc["placement"] = self.scenario.placement.text  # the --placement string the JSON has always carried
        return {
            "starts": self.starts,
            "error": self.error,
            "decode_tps": self.decode_tps,
            "decode_tps_range": list(self.decode_tps_range),
            "prefill_tps": self.prefill_tps,
            "hit_rate": self.hit_rate,
            "breakdown_ms": self.breakdown_ms,
            "prefill_breakdown_ms": self.prefill_breakdown_ms,
            "vram": self.vram.as_dict(),
            "fits_vram": self.vram.fits,
            "scenario": sc,
            "flags": self.layout.placement.flags(),
            "host_layers": len(self.layout.host_layers),
            "cached_slots": self.layout.plan.n_slots_total,
            "notes": list(self.notes),
        }


def _layer_arrays(model: ModelSpec, layout: Layout) -> tuple[np.ndarray, ...]:
    host = np.zeros(model.n_layer, dtype=bool)
    host[list(layout.host_layers)] = True
    on_cpu = np.zeros(model.n_layer, dtype=bool)
    on_cpu[list(layout.cpu_layers)] = True
    slot = np.array([layer.slot_bytes for layer in model.layers], dtype=float)
    n_tensors = np.array([len(layer.experts) for layer in model.layers], dtype=float)
    dense = np.array([layer.dense_bytes for layer in model.layers], dtype=float)
    return host | on_cpu, on_cpu, slot, n_tensors, dense


def decode_terms(
    model: ModelSpec, hw: Hardware, params: TimeParams, sc: Scenario, layout: Layout, traffic: Traffic
) -> dict[str, float]:
    """Milliseconds per decode ubatch, term by term."""
    gpu = hw.gpu_bw_gbs * GB * params.gpu_eff
    link = upload_gbs(hw, params, sc.pinned) * GB
    cpu = cpu_expert_gbs(hw, params, sc.pinned) * GB
    host, on_cpu, slot, n_tensors, dense = _layer_arrays(model, layout)
    cached = traffic.cached & ~on_cpu
    distinct_bytes = traffic.distinct * slot
    on_host = np.where(cached, traffic.cpu_misses, 0.0)  # misses the policy computes on the CPU, beside the GPU
    uploaded = np.where(cached, traffic.distinct - traffic.hits, 0.0) - on_host
    gpu_reads = np.where(~host, distinct_bytes, np.where(cached, distinct_bytes - on_host * slot, 0.0)) / gpu
    copy_us = PINNED_COPY_US if sc.pinned else params.pageable_copy_us
    uploads = uploaded * slot / link + uploaded * n_tensors * copy_us / 1e6
    cpu_work = np.where(cached, on_host * slot, np.where(host, distinct_bytes, 0.0)) / cpu
    on_gpu = np.where(~host | cached, traffic.distinct * n_tensors, 0.0)
    launches = on_gpu.sum() * params.batch_expert_us / 1e3 if sc.tokens_per_ubatch > 1 else 0.0
    hidden = np.where(cached, np.minimum(gpu_reads + uploads, cpu_work), 0.0)  # CPU misses overlap the GPU
    head = model.other_bytes - model.input_bytes  # output head and norms; the input embedding stays on the host
    cpu_path = get_policy(sc.policy_name).cpu_fraction(**sc.policy_knobs) > 0  # a CPU path in every cached layer
    split_layers = (host & ~cached & (traffic.distinct > 0)) | (cached & cpu_path)
    return {
        "fixed": params.token_ms_of(hw) + params.layer_us * model.n_layer / 1e3,
        "sampling": params.sample_ns * model.n_vocab * sc.tokens_per_ubatch / 1e6,
        "dense": (dense[~on_cpu].sum() + head) / gpu * MS + dense[on_cpu].sum() / cpu * MS,
        "experts_gpu": float(gpu_reads.sum() * MS) + launches,
        "upload": float(uploads.sum() * MS),
        "sync": params.sync_us(hw) * int(cached.sum()) / 1e3,
        "experts_cpu": float((cpu_work.sum() - hidden.sum()) * MS),
        "split": params.split_us(hw) * int(split_layers.sum()) / 1e3,
        "draft": params.draft_ms * sc.draft_tokens,
    }


def prefill_terms(model: ModelSpec, hw: Hardware, params: TimeParams, sc: Scenario, layout: Layout) -> dict[str, float]:
    """Milliseconds per prompt ubatch: n_ubatch tokens, or the whole prompt when it is shorter."""
    n = sc.prompt_ubatch
    used = independent_distinct(model.n_expert, model.n_expert_used, n)
    link = upload_gbs(hw, params, sc.pinned) * GB
    cpu = cpu_expert_gbs(hw, params, sc.pinned) * GB
    groups = {il: g for g in layout.plan.groups if g.cached and layout.plan.starts for il in g.layers}
    copied = uploaded = on_cpu = 0.0
    for il in layout.host_layers:
        layer_bytes = used * model.layers[il].slot_bytes
        if not copies_from_pool(n, sc.offload_min_batch):  # a small prompt ubatch stays on the CPU
            on_cpu += layer_bytes
            continue
        share = groups[il].n_slots / groups[il].max_slots if il in groups else 0.0
        copied += layer_bytes * share
        uploaded += layer_bytes * (1 - share)
    return {
        "gpu_compute": n * model.active_params * 2 / (hw.gpu_tflops * 1e12 * params.mm_eff) * MS,
        "copy_from_cache": copied / (hw.gpu_bw_gbs * GB) * MS,
        "upload": uploaded / link * MS,
        "experts_cpu": on_cpu / cpu * MS,
        "fixed": params.prompt_ubatch_ms,
    }


def _notes(sc: Scenario, layout: Layout) -> list[str]:
    notes = []
    if not layout.vram.fits:
        notes.append(layout.vram.verdict)
    policy = get_policy(sc.policy_name)
    if policy.label == MODELLED:
        notes.append(f"{policy.name} is a modelled policy (our reading of {policy.source}): {policy.summary}")
    return notes


def _decode_tps(model, hw, params, sc, layout, traffic) -> tuple[float, dict[str, float]]:
    terms = decode_terms(model, hw, params, sc, layout, traffic)
    return sc.decoded_per_ubatch / (sum(terms.values()) / MS), terms


def predict(
    model: ModelSpec,
    hw: Hardware,
    params: TimeParams,
    sc: Scenario,
    traffic: Traffic | None = None,
    hit_rate: float | None = None,
    layout: Layout | None = None,
    rel_error: float = 0.0,
    spread_points: float = 0.0,
) -> Prediction:
    """Decode and prompt speed of a scenario; traffic from a simulation, or a given hit rate.

    The range spans the routing's hit-rate spread (± spread_points) and the calibration's relative error.
    """
    layout = layout or resolve(model, hw, sc)
    if not layout.plan.starts:
        err = layout.plan.error
        return Prediction(False, err, 0.0, 0.0, None, {}, {}, layout.vram, sc, layout, (0.0, 0.0), (err,))
    if traffic is None:
        traffic = from_hit_rate(model, layout, sc, 0.0 if hit_rate is None else hit_rate)
    decode_tps, decode = _decode_tps(model, hw, params, sc, layout, traffic)
    spread = [
        _decode_tps(model, hw, params, sc, layout, traffic.shifted(s))[0] for s in (-spread_points, spread_points)
    ]
    low, high = min(spread) * (1 - rel_error), max(spread) * (1 + rel_error)
    prefill = prefill_terms(model, hw, params, sc, layout)
    prefill_tps = sc.prompt_ubatch / (sum(prefill.values()) / MS)
    notes = tuple(_notes(sc, layout))
    return Prediction(
        True,
        None,
        decode_tps,
        prefill_tps,
        traffic.hit_rate,
        decode,
        prefill,
        layout.vram,
        sc,
        layout,
        (low, high),
        notes,
    )


def verdict(with_cache: Prediction, without: Prediction) -> str:
    """'helps', 'hurts' or 'too close to call': whether the two predictions' ranges are apart."""
    if not with_cache.usable or not without.usable:
        return "does not fit" if not with_cache.usable else "helps"
    (lo, hi), (base_lo, base_hi) = with_cache.decode_tps_range, without.decode_tps_range
    if lo > base_hi:
        return "helps"
    if hi < base_lo:
        return "hurts"
    return "too close to call"
