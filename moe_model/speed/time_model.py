"""Decode and prompt speed from bytes, rates and per-event costs. A model, not a measurement.

Per decode ubatch (c streams x (d+1) verified tokens), in milliseconds:

    fixed       per ubatch + per layer (kernel launches)                   token_ms + layer_us x layers x VM
    sampling    every verified token's logits, sampled on the CPU          sample_ns x vocabulary x tokens
    dense       dense weights read on the GPU                              bytes / (GPU bandwidth x gpu_eff)
    attention   each stream's K and V up to the depth, per KV layer        bytes / (GPU bandwidth x gpu_eff), or the
                (flash attention off: + the scores, written and read)        CPU rate for KV kept on the host
    experts_gpu distinct experts of GPU and cached layers                  bytes / (GPU bandwidth x gpu_eff)
                (several tokens: + one matmul launch per expert and tensor)  + experts x tensors x batch_expert_us
    upload      misses copied host-to-device                               bytes / upload rate + copies x copy_us
    sync        ids read-back and slot-map upload, per cached layer        sync_us (per backend, x VM, or the machine's)
    experts_cpu distinct experts of host layers the pool does not serve    bytes / CPU expert rate
    split       a graph split around each layer computed on the CPU        split_us x layers (x VM)
    draft       the draft / MTP head, per drafted token                    draft_ms x d
    disk        mmap'd host experts beyond the page cache, read again      bytes missing the page cache / (drive
                (host_memory: an LRU page cache under the routing)           read rate x fault_read_share)

This is the steady state: the requests after a server's first. The first request starts with an empty
pool, so every slot it fills is a miss on top (`first_request`).

Rates come from the machine (hardware.Hardware and its host.Host) and machine-independent parameters
fitted across every measured machine (speed/rates.py: TimeParams and the rate functions): pinned uploads run at the
link's pinned rate (never above its line rate); mmap'd (pageable) uploads as one core's measured copy into the
staging buffer and then the DMA, in series (`Host.copy_gbs`, a host record's: run12), else at a fitted staging rate
per CPU family (slower in a VM, never above a share of the host's memory bandwidth), capped by the link; the CPU
reads experts at min(host bandwidth x an efficiency per CPU family, threads x GHz x rate per GHz) in q4_K-equivalent
bytes, times the model's expert types' factor (speed/cpu_quant.py: a byte of a codebook quant costs more), slower
over pinned CUDA_Host memory (no repacked layouts: pinned_cpu_factor). A machine's own measured rates (its logs, or
a host record: fits/host_fit.py) replace the derived ones. With CPU
share F (b12191, modelled) a share F of a cached layer's misses runs on the CPU beside the GPU's work on
that layer (the two overlap).

The split is per (token, chosen expert) selection (policies.cpu_share): an expert all of whose selections run on the
CPU is read there and never uploaded; one the split cuts through is uploaded and read by both paths.

A prompt is processed in ubatches of n_ubatch tokens. One of n >= GGML_OP_OFFLOAD_MIN_BATCH tokens
multiplies every layer on the GPU; a host layer's used experts are copied to it first (cached ones
device-to-device from the pool, one copy per expert and tensor; the others uploaded, one copy per run of
consecutive ids). A smaller one leaves host layers on the CPU (or the pool). Attention grows with the
position in the prompt.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from moe_model.llama.output_rows import last_layer_prunes
from moe_model.llama.pool_rule import copies_from_pool, uses_pool
from moe_model.llama.server_warm_up import start_up_rows
from moe_model.policies import MODELLED, get_policy
from moe_model.policies.cpu_share import share_applies, share_note
from moe_model.readers.model_spec import ModelSpec
from moe_model.routing.synthetic import prompt_knobs, window_distinct
from moe_model.speed.hardware import Hardware
from moe_model.speed.host_memory import page_miss_share
from moe_model.speed.range_inputs import NO_RANGE, RangeInputs
from moe_model.speed.ranges import RangeSource, combine, decode_sources, largest_step, routing_shifts
from moe_model.speed.rates import (
    GB,
    MS,
    SCORE_PASSES,
    TimeParams,
    cpu_expert_gbs,
    disk_gbs,
    upload_gbs,
)
from moe_model.speed.scenario import Layout, Scenario, resolve
from moe_model.speed.streams import per_stream_tps
from moe_model.speed.traffic import Traffic, from_hit_rate, independent_distinct
from moe_model.speed.vram import VramBreakdown, kv_bytes_per_elem

if TYPE_CHECKING:
    from moe_model.llama.simulate import PolicyBand


def kv_bytes_per_token(model: ModelSpec, sc: Scenario) -> float:
    """K and V bytes one context token keeps in one KV layer (-ctk/-ctv)."""
    per_head = model.head_dim_k * kv_bytes_per_elem(sc.cache_type_k) + model.head_dim_v * kv_bytes_per_elem(
        sc.cache_type_v
    )
    return model.n_head_kv * per_head


def _attention_bytes(model: ModelSpec, sc: Scenario, depth: float, tokens: int) -> float:
    """Bytes one KV layer's attention moves for `tokens` queries at `depth`: the K and V read once per stream,
    and without flash attention the f32 scores written and read (SCORE_PASSES)."""
    kv = kv_bytes_per_token(model, sc) * depth * sc.concurrency
    scores = 0.0 if sc.flash_attn_on else SCORE_PASSES * model.n_head * depth * tokens * 4
    return kv + scores


FIRST_REQUEST_EXCLUDES = (
    "the server's load (llama.cpp reads the mmap'd experts into the page cache at start: first touches after it "
    "cost run5 and run8's servers without a cache 2-4 %, inside the range)"
)


@dataclass(frozen=True)
class FirstRequest:
    """A server's first request of n_predict tokens: the pool starts empty (every slot it fills is uploaded on top
    of the steady traffic) and its prompt finds no expert cached. A model of the cold start, not a measurement;
    its range: the steady range, the fills' count (locality's lower bound to independent tokens' upper bound,
    exact where a log or replay counted them) and their cost (fill_factor to a steady miss's)."""

    decode_tps: float
    prefill_tps: float
    ttft_s: float
    cold_fills: float  # experts uploaded into empty slots while it decodes (a warm pool would hit most of them)
    n_predict: int = 0  # the tokens it is priced for: the speed falls the shorter it is, the fills being the same
    decode_tps_range: tuple[float, float] = (0.0, 0.0)
    excludes: str = FIRST_REQUEST_EXCLUDES

    def as_dict(self) -> dict:
        return asdict(self) | {"decode_tps_range": list(self.decode_tps_range)}

    def decode_words(self) -> str:
        """Its decode speed in words: the tokens it is priced for, the range and what it leaves out."""
        low, high = self.decode_tps_range
        return (
            f"A first request of {self.n_predict:,} tokens after start decodes at {self.decode_tps:.1f} t/s (range "
            f"{low:.1f}-{high:.1f}; {self.cold_fills:,.0f} experts uploaded into empty slots, a model; shorter "
            f"requests are slower, the fills being the same); not counted: {self.excludes}"
        )


@dataclass(frozen=True)
class Prediction:
    """Predicted speeds, with each term's time and a range, so nothing is hidden. Decode and prompt speeds are
    the steady state (requests after the first); `first_request` is the cold start."""

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
    ttft_s: float = 0.0
    first_request: FirstRequest | None = None
    range_sources: tuple[RangeSource, ...] = ()  # the range's sources, largest first (ranges.decode_sources)
    policy_band: PolicyBand | None = None  # a modelled policy's open readings at this budget (simulate.PolicyBand)

    @property
    def usable(self) -> bool:
        """Starts and fits the GPU's memory (or is too close to call): only then is a speed shown."""
        return self.starts and (self.vram.fits or self.vram.tight)

    def as_dict(self) -> dict:
        sc = self.scenario.as_dict()
        return {
            "starts": self.starts,
            "error": self.error,
            "decode_tps": self.decode_tps,
            "decode_tps_range": list(self.decode_tps_range),
            "decode_tps_per_stream": per_stream_tps(self.decode_tps, self.scenario.concurrency),  # decode_tps: total
            "range_sources": [r.as_dict() for r in self.range_sources],
            "range_step": largest_step(self.decode_tps, self.range_sources),
            "prefill_tps": self.prefill_tps,
            "ttft_s": self.ttft_s,
            "depth": self.scenario.context_depth,
            "first_request": self.first_request.as_dict() if self.first_request else None,
            "hit_rate": self.hit_rate,
            "breakdown_ms": self.breakdown_ms,
            "prefill_breakdown_ms": self.prefill_breakdown_ms,
            "vram": self.vram.as_dict(),
            "fits_vram": self.vram.fits,
            "ram": self.layout.ram.as_dict(),
            "fits_ram": self.layout.ram.fits,
            "ram_state": self.layout.ram.state,
            "scenario": sc,
            "flags": self.layout.placement.flags(),
            "host_layers": len(self.layout.host_layers),
            "cached_slots": self.layout.plan.n_slots_total,
            "notes": list(self.notes),
            "policy_band": self.policy_band.as_dict() if self.policy_band else None,  # None: an exact policy
        } | self.scenario.policy_fields()


@lru_cache(maxsize=256)  # read by every decode of every fit trial and curve budget: built once, read-only
def _layer_arrays(model: ModelSpec, layout: Layout) -> tuple[np.ndarray, ...]:
    host = np.zeros(model.n_layer, dtype=bool)
    host[list(layout.host_layers)] = True
    on_cpu = np.zeros(model.n_layer, dtype=bool)
    on_cpu[list(layout.cpu_layers)] = True
    slot = np.array([layer.slot_bytes for layer in model.layers], dtype=float)
    n_tensors = np.array([len(layer.experts) for layer in model.layers], dtype=float)
    dense = np.array([layer.dense_bytes for layer in model.layers], dtype=float)
    arrays = (host | on_cpu, on_cpu, slot, n_tensors, dense)
    for array in arrays:
        array.flags.writeable = False
    return arrays


@lru_cache(maxsize=256)  # read by every decode and prompt term of every fit trial
def _kv_layers_on(layout: Layout) -> tuple[int, int]:
    """KV layers attended on the GPU and on the host (--no-kv-offload, or layers -ngl leaves on the CPU)."""
    return len(layout.layers.on_gpu("kv")), len(layout.layers.on_host("kv"))


def attention_ms(model: ModelSpec, hw: Hardware, params: TimeParams, sc: Scenario, layout: Layout) -> float:
    """Milliseconds per decode ubatch spent reading each stream's K and V up to the depth (and the scores
    without flash attention, at its own share of the bandwidth): GPU bandwidth for KV on the GPU, the CPU rate for KV
    in host memory."""
    per_layer = _attention_bytes(model, sc, sc.context_depth, sc.tokens_per_ubatch)
    on_gpu, on_host = _kv_layers_on(layout)
    gpu = hw.gpu_bw_gbs * GB * (params.gpu_eff if sc.flash_attn_on else params.nofa_attn_eff)
    return per_layer * (on_gpu / gpu + on_host / (cpu_expert_gbs(hw, params, pinned=False) * GB)) * MS


def decode_terms(
    model: ModelSpec, hw: Hardware, params: TimeParams, sc: Scenario, layout: Layout, traffic: Traffic
) -> dict[str, float]:
    """Milliseconds per decode ubatch, term by term."""
    gpu = hw.gpu_bw_gbs * GB * params.gpu_eff
    link = upload_gbs(hw, params, sc.pinned) * GB
    cpu = cpu_expert_gbs(hw, params, sc.pinned, model) * GB
    cpu_dense = cpu_expert_gbs(hw, params, sc.pinned) * GB  # dense weights: not priced per type
    disk = disk_gbs(hw) * GB
    host, on_cpu, slot, n_tensors, dense = _layer_arrays(model, layout)
    cached = traffic.cached & ~on_cpu
    distinct_bytes = traffic.distinct * slot
    on_host = np.where(cached, traffic.cpu_misses, 0.0)  # misses the policy computes on the CPU, beside the GPU
    uploaded = np.where(cached, traffic.distinct - traffic.hits, 0.0) - on_host
    gpu_reads = np.where(~host, distinct_bytes, np.where(cached, distinct_bytes - on_host * slot, 0.0)) / gpu
    copy_us = params.copy_us(hw, sc.pinned)
    uploads = uploaded * slot / link + uploaded * n_tensors * copy_us / 1e6
    host_read = np.where(cached, traffic.cpu_reads * slot, np.where(host, distinct_bytes, 0.0))  # the CPU path's
    cpu_work = host_read / cpu
    on_gpu = np.where(~host | cached, traffic.distinct * n_tensors, 0.0)
    launches = on_gpu.sum() * params.batch_expert_us / 1e3 if sc.tokens_per_ubatch > 1 else 0.0
    hidden = np.where(cached, np.minimum(gpu_reads + uploads, cpu_work), 0.0)  # CPU misses overlap the GPU
    head = model.other_bytes - model.input_bytes  # output head and norms; the input embedding stays on the host
    cpu_path = _share_of(model, sc) > 0  # a CPU path in every cached layer
    split_layers = (host & ~cached & (traffic.distinct > 0)) | (cached & cpu_path)
    return {
        "fixed": params.token_ms_of(hw) + params.layer_us * model.n_layer / 1e3 * params.vm_factor(hw),
        "sampling": params.sample_ns * model.n_vocab * sc.tokens_per_ubatch / 1e6,
        "dense": (dense[~on_cpu].sum() + head) / gpu * MS + dense[on_cpu].sum() / cpu_dense * MS,
        "attention": attention_ms(model, hw, params, sc, layout),
        "experts_gpu": float(gpu_reads.sum() * MS) + launches,
        "upload": float(uploads.sum() * MS),
        "sync": params.sync_us(hw) * int(cached.sum()) / 1e3,
        "experts_cpu": float((cpu_work.sum() - hidden.sum()) * MS),
        "split": params.split_us(hw) * int(split_layers.sum()) / 1e3,
        "draft": params.draft_ms * sc.draft_tokens,
        "disk": float(((host_read + uploaded * slot) * _page_miss(model, layout)).sum() / disk) * MS,
    }


@lru_cache(maxsize=256)
def _page_miss(model: ModelSpec, layout: Layout) -> np.ndarray:
    """Per layer, the share of its host reads the page cache misses (0 where the mmap'd experts fit in RAM)."""
    miss = np.zeros(model.n_layer)
    memory = layout.ram
    if not memory.streams or not layout.host_layers:
        return miss
    cache_items = memory.page_cache_mib / memory.experts_mib * model.n_expert
    pool = _cached_share(layout, warm=True)
    for il in layout.host_layers:
        share, _ = pool.get(il, (0.0, 0))
        miss[il] = page_miss_share(model.n_expert, share * model.n_expert, cache_items)
    return miss


def _cached_share(layout: Layout, warm: bool) -> dict[int, tuple[float, int]]:
    """Per cached layer: the share of its experts the pool holds (none on a cold start) and its group's slots."""
    if not layout.plan.starts:
        return {}
    return {
        il: (g.n_slots / g.max_slots if warm else 0.0, g.n_slots)
        for g in layout.plan.groups
        if g.cached
        for il in g.layers
    }


@dataclass(frozen=True)
class _PromptUbatch:
    """What one prompt ubatch moves and multiplies, apart from the rates (a calibration re-prices it per trial)."""

    used: float  # distinct experts per layer among its tokens
    copied_bytes: float  # cached experts copied device-to-device (read and written)
    d2d_copies: float
    uploaded_bytes: float
    upload_copies: float  # one per run of consecutive uncached ids
    cpu_bytes: float  # host layers' experts multiplied on the CPU
    expert_bytes: float  # the used experts of every MoE layer, read once by the GPU's matmuls
    launch_tensors: int  # expert tensors multiplied on the GPU
    host_layers: int


@lru_cache(maxsize=256)  # a fit prices the same few scenarios thousands of times
def _prompt_ubatch(model: ModelSpec, sc: Scenario, layout: Layout, tokens: int, warm: bool) -> _PromptUbatch:
    """Large ubatches: the op is offloaded and a host layer's used experts are copied to the GPU, the cached
    ones device-to-device (one copy per expert and tensor: slots are rarely consecutive), the others
    uploaded (one copy per run of consecutive uncached ids). Small ones: the pool where it serves them
    (hits read on the GPU, misses uploaded), else the CPU."""
    k, n_expert = model.n_expert_used, model.n_expert
    used = window_distinct(n_expert, k, prompt_knobs(model), tokens)  # consecutive tokens share experts
    big = copies_from_pool(tokens, sc.offload_min_batch)  # offloaded: the used experts are copied to the GPU
    pool = _cached_share(layout, warm)
    copied = d2d = uploaded = runs = on_cpu = 0.0
    for il in layout.host_layers:
        layer = model.layers[il]
        share, n_slots = pool.get(il, (0.0, 0))
        n_tensors = len(layer.experts)
        uncached = used * (1 - share)
        if big or (il in pool and uses_pool(tokens, k, n_expert, n_slots)):
            copied += used * share * layer.slot_bytes
            d2d += used * share * n_tensors if big else 0.0
            uploaded += uncached * layer.slot_bytes
            run_starts = 1 - used / n_expert * (1 - share) if big else 1.0  # a run starts after a used cached id
            runs += max(min(uncached, 1.0), uncached * run_starts) * n_tensors
        else:
            on_cpu += used * layer.slot_bytes
    host = set(layout.host_layers) | set(layout.cpu_layers)
    moe = [layer for layer in model.layers if layer.has_experts]
    launched = sum(len(layer.experts) for layer in moe if big or layer.index not in host)
    expert_bytes = sum(used * layer.slot_bytes for layer in moe)
    return _PromptUbatch(used, copied, d2d, uploaded, runs, on_cpu, expert_bytes, launched, len(layout.host_layers))


def _prompt_ubatch_ms(
    model: ModelSpec, hw: Hardware, params: TimeParams, sc: Scenario, layout: Layout, tokens: int, warm: bool
) -> dict[str, float]:
    """Milliseconds of one prompt ubatch of `tokens`, apart from attention (which depends on its position)."""
    ub = _prompt_ubatch(model, sc, layout, tokens, warm)
    copy_us = params.copy_us(hw, sc.pinned)
    disk = disk_gbs(hw) * GB
    return {
        "gpu_compute": _prompt_matmul_ms(model, hw, params, tokens, ub.expert_bytes),
        "expert_matmuls": ub.used * ub.launch_tensors * params.batch_expert_us / 1e3,
        "copy_from_cache": (2 * ub.copied_bytes / (hw.gpu_bw_gbs * GB) + ub.d2d_copies * params.d2d_copy_us / 1e6) * MS,
        "upload": (ub.uploaded_bytes / (upload_gbs(hw, params, sc.pinned) * GB) + ub.upload_copies * copy_us / 1e6)
        * MS,
        "experts_cpu": ub.cpu_bytes / (cpu_expert_gbs(hw, params, sc.pinned, model) * GB) * MS,
        "sync": params.sync_us(hw) * ub.host_layers / 1e3,
        "fixed": params.prompt_ubatch_ms,
        "disk": (ub.uploaded_bytes + ub.cpu_bytes) * _mean_page_miss(model, layout) / disk * MS,
    }


def _mean_page_miss(model: ModelSpec, layout: Layout) -> float:
    miss = _page_miss(model, layout)
    return float(miss[list(layout.host_layers)].mean()) if layout.host_layers else 0.0


def _prompt_matmul_ms(model: ModelSpec, hw: Hardware, params: TimeParams, tokens: int, expert_bytes: float) -> float:
    """A prompt ubatch's matmuls on the GPU, from the card's datasheet: the slower of its tensor rate (2 FLOPs per
    active weight and token) and reading the weights it multiplies once (the dense ones and the used experts;
    expert launches, decode's batch_expert_us per used expert and tensor, are priced apart)."""
    compute = tokens * model.active_params * 2 / (hw.gpu_tflops * 1e12 * params.mm_eff)
    weights = model.dense_bytes_total - model.input_bytes + expert_bytes  # the input embedding stays on the host
    return max(compute, weights / (hw.gpu_bw_gbs * GB * params.gpu_eff)) * MS


def _prompt_attention_ms(
    model: ModelSpec, hw: Hardware, params: TimeParams, sc: Scenario, layout: Layout, tokens: int, context: float
) -> float:
    """Attention of prompt ubatches of `tokens` queries whose mean contexts add up to `context`: QK and AV
    multiply-adds on the GPU, the scores' traffic without flash attention, K and V read from the host when
    they live there."""
    on_gpu, on_host = _kv_layers_on(layout)
    flops = 4 * model.n_head * model.head_dim_k * tokens * context * model.kv_layers
    scores = 0.0 if sc.flash_attn_on else SCORE_PASSES * model.n_head * tokens * context * 4 * model.kv_layers
    host_kv = kv_bytes_per_token(model, sc) * context * on_host
    seconds = flops / (hw.gpu_tflops * 1e12 * params.mm_eff) + scores / (hw.gpu_bw_gbs * GB * params.gpu_eff)
    return (seconds + host_kv / (cpu_expert_gbs(hw, params, pinned=False) * GB)) * MS


def prefill_terms(
    model: ModelSpec, hw: Hardware, params: TimeParams, sc: Scenario, layout: Layout, warm: bool = True
) -> dict[str, float]:
    """Milliseconds to process a request's prompt, term by term: ubatches of n_ubatch tokens and a shorter last
    one; `warm`: the pool holds its steady share of every cached group (False: a first request's empty pool)."""
    full, rest = divmod(sc.prompt_tokens, sc.n_ubatch)
    n = sc.n_ubatch
    total: dict[str, float] = {}
    # the ubatch at position i*n attends to i*n + n/2 tokens on average: the full ones sum to n * full^2 / 2
    for tokens, count, context in ((n, full, n * full**2 / 2), (rest, 1 if rest else 0, full * n + rest / 2)):
        if not count:
            continue
        for name, ms in _prompt_ubatch_ms(model, hw, params, sc, layout, tokens, warm).items():
            total[name] = total.get(name, 0.0) + count * ms
        total["attention"] = total.get("attention", 0.0) + _prompt_attention_ms(
            model, hw, params, sc, layout, tokens, context
        )
    return total


def cold_fills(model: ModelSpec, sc: Scenario, layout: Layout, locality: bool = False) -> float:
    """Experts a first request's decode uploads into empty slots: per cached group, the slots it fills before the
    pool is full, after the start-up's (the warm-up and the seq_rm probe where the build makes it:
    llama.server_warm_up.start_up_rows). Tokens taken as independent: an upper bound for routing with locality;
    `locality`: one sequence's consecutive tokens under the model's routing preset (window_distinct), the lower
    bound."""
    tokens = int(sc.n_predict * sc.tokens_per_ubatch / sc.decoded_per_ubatch * sc.concurrency)
    k, n_expert, prunes = model.n_expert_used, model.n_expert, last_layer_prunes(model.architecture, sc.build)
    knobs = prompt_knobs(model) if locality else None

    def distinct(n: int) -> float:
        return window_distinct(n_expert, k, knobs, n) if knobs else independent_distinct(n_expert, k, n)

    fills = 0.0
    for group in layout.plan.groups if layout.plan.starts else ():
        if group.cached:
            rows = [start_up_rows(il, model.n_layer, sc.build, prunes) for il in group.layers]
            touched = sum(distinct(tokens + r) for r in rows)
            start_up = sum(distinct(r) for r in rows)  # traffic.start_up_fills where tokens are independent
            fills += max(0.0, min(group.n_slots, touched) - min(group.n_slots, start_up))
    return fills


def _fill_ms(model: ModelSpec, hw: Hardware, params: TimeParams, sc: Scenario, layout: Layout) -> float:
    """Milliseconds to upload one expert into an empty slot (mean over the cached layers)."""
    cached = [model.layers[il] for g in layout.plan.groups if g.cached for il in g.layers]
    if not cached:
        return 0.0
    copy_us = params.copy_us(hw, sc.pinned)
    link = upload_gbs(hw, params, sc.pinned) * GB
    return float(np.mean([layer.slot_bytes / link + len(layer.experts) * copy_us / 1e6 for layer in cached])) * MS


def first_request(
    model: ModelSpec,
    hw: Hardware,
    params: TimeParams,
    sc: Scenario,
    layout: Layout,
    traffic: Traffic,
    steady_ms: float,
    steady_range: tuple[float, float] = (1.0, 1.0),
) -> FirstRequest:
    """The first request after start: its n_predict tokens at the steady cost per ubatch plus the cold fills
    (counted by a log, else estimated) that a warm pool would have hit, and its prompt with nothing cached,
    which also loads the GPU kernels it uses. `steady_range`: the steady decode range over its speed (low, high);
    the fills are uploads priced with the same rates, so they move with it."""
    fills = cold_fills(model, sc, layout) if traffic.fills is None else traffic.fills
    fewest = cold_fills(model, sc, layout, locality=True) if traffic.fills is None else fills
    steps = sc.n_predict * sc.concurrency / sc.decoded_per_ubatch
    hit = traffic.hit_rate or 0.0  # misses a warm pool has too are in the steady cost already
    fill_ms = _fill_ms(model, hw, params, sc, layout)
    tokens = sc.n_predict * sc.concurrency * MS

    def decode_ms(count: float, factor: float, scale: float) -> float:
        return (steps * steady_ms + count * hit * factor * fill_ms) * scale

    decode_tps = tokens / decode_ms(fills, params.fill_factor, 1.0)
    low, high = steady_range
    slow = tokens / decode_ms(fills, max(params.fill_factor, 1.0), 1 / low if low else 1.0)
    fast = tokens / decode_ms(fewest, min(params.fill_factor, 1.0), 1 / high if high else 1.0)
    prefill_ms = sum(prefill_terms(model, hw, params, sc, layout, warm=False).values()) + params.first_prompt_ms
    return FirstRequest(
        decode_tps, sc.prompt_tokens / prefill_ms * MS, prefill_ms / MS, fills, sc.n_predict, (slow, fast)
    )


def _share_of(model: ModelSpec, sc: Scenario) -> float:
    """The share of misses the scenario's policy computes on the CPU, 0 where the model's layers take none."""
    return get_policy(sc.policy_name).cpu_fraction(**sc.policy_knobs) if share_applies(model) else 0.0


def _notes(model: ModelSpec, hw: Hardware, sc: Scenario, layout: Layout, disk_gib_per_token: float) -> list[str]:
    notes = []
    memory = layout.ram
    if not memory.ram_stated and memory.experts_mib:
        notes.append(memory.needs)
    if get_policy(sc.policy_name).cpu_fraction(**sc.policy_knobs) > 0:
        notes.append(share_note(model))
    if not layout.vram.fits:
        notes.append(layout.vram.verdict)
    if disk_gib_per_token > 0:
        notes.append(
            f"streams {disk_gib_per_token:,.2f} GiB per token from disk: the mmap'd host experts exceed the RAM left "
            "for the page cache (the disk term; a model). More RAM, fewer host layers or a smaller quant end it"
        )
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
    ranges: RangeInputs = NO_RANGE,
    policy_band: PolicyBand | None = None,
) -> Prediction:
    """Steady-state decode and prompt speed of a scenario, and its first request's; traffic from a simulation,
    or a given hit rate (`policy_band`: the simulation's band over a modelled policy's readings).

    The range combines its sources (ranges.decode_sources) from `ranges`: the routing's hit-rate spread (± points,
    or the misses x/÷ e^miss_spread where one log fitted the routing), the calibration's relative error, and the
    host's undescribed parts.
    """
    layout = layout or resolve(model, hw, sc)
    if not layout.plan.starts:
        err = layout.plan.error
        return Prediction(False, err, 0.0, 0.0, None, {}, {}, layout.vram, sc, layout, (0.0, 0.0), (err,))
    if traffic is None:
        traffic = from_hit_rate(model, layout, sc, 0.0 if hit_rate is None else hit_rate)
    decode_tps, decode = _decode_tps(model, hw, params, sc, layout, traffic)

    def decode_at(machine: Hardware, shift: float) -> float:
        return _decode_tps(model, machine, params, sc, layout, traffic.shifted(shift) if shift else traffic)[0]

    if policy_band and traffic.hit_rate is not None:  # the band around the warm pool's rate the prediction prices
        policy_band = policy_band.at_hit_rate(traffic.hit_rate)
    band_points = policy_band.shift_points if policy_band else (0.0, 0.0)
    shifts = routing_shifts(traffic.hit_rate, ranges.spread_points, ranges.miss_spread)
    sources = decode_sources(decode_tps, hw, decode_at, ranges.rel_error, shifts, band_points)
    low, high = combine(decode_tps, sources)
    prefill = prefill_terms(model, hw, params, sc, layout)
    prefill_ms = sum(prefill.values())
    ratios = (low / decode_tps, high / decode_tps) if decode_tps > 0 else (1.0, 1.0)
    first = first_request(model, hw, params, sc, layout, traffic, sum(decode.values()), ratios)
    return Prediction(
        True,
        None,
        decode_tps,
        sc.prompt_tokens / prefill_ms * MS,
        traffic.hit_rate,
        decode,
        prefill,
        layout.vram,
        sc,
        layout,
        (low, high),
        tuple(_notes(model, hw, sc, layout, decode["disk"] / MS * disk_gbs(hw) * GB / sc.decoded_per_ubatch / 2**30)),
        prefill_ms / MS,
        first,
        sources,
        policy_band,
    )


def verdict(with_cache: Prediction, without: Prediction) -> str:
    """'helps', 'hurts' or 'too close to call': whether the two predictions' ranges are apart."""
    if not with_cache.usable or not without.usable:
        return "does not fit" if not with_cache.usable else "helps"
    return range_verdict(with_cache.decode_tps_range, without.decode_tps_range)


def range_verdict(with_cache: tuple[float, float], without: tuple[float, float]) -> str:
    """'helps' or 'hurts' when the two (low, high) ranges are apart, else 'too close to call'."""
    if with_cache[0] > without[1]:
        return "helps"
    if with_cache[1] < without[0]:
        return "hurts"
    return "too close to call"
