"""Where the GPU memory goes: dense weights, experts kept on the GPU, KV cache, compute buffers, the cache.

KV size is exact for f16 caches (checked against the logs: 56.00 MiB and 384.00 MiB). Compute
buffers are an estimate (logits of a ubatch, plus attention scores without flash attention),
labelled as such. `fit_host_layers` mirrors what `--fit` does with a MoE model: keep the dense
weights on the GPU and move the experts of the first layers to host memory until it fits with
`FIT_MARGIN_MIB` free; the cache it creates counts as context memory (common/fit.cpp).

The verdict keeps the same margin: llama.cpp's `--fit` is on by default and aims to leave its target
(-fitt, 1,024 MiB) free on each device; with the user's own -cmoe/-ncmoe it only shrinks the context
towards it (docs/llamacpp-cache.md section 8), and its own accounting sees memory ours estimates.
A configuration with less free than the target is "too close to call": one field run with 204-924 MiB
predicted free (the context was not stated) ran out of memory at load, others ran with 554-696.
"""

from __future__ import annotations

from dataclasses import dataclass

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from moe_model.errors import MoeModelError
from moe_model.llama.offload import LayerMap
from moe_model.llama.pool_rule import copies_from_pool
from moe_model.llama.slot_plan import MIB, CachePlan, Placement, layer_map, plan_cache
from moe_model.readers.model_spec import ModelSpec
from moe_model.speed.hardware import Hardware

FIT_MARGIN_MIB = 1024  # --fit's default free-memory target per device (common/fit.cpp, -fitt; groundtruth/fit-trials:
# "will leave 120963 >= 1024 MiB of free device memory")
CUDA_RESERVE_MIB = 300  # driver/context memory CUDA keeps: an assumption


@dataclass(frozen=True)
class VramBreakdown:
    """MiB of GPU memory per item for one configuration: the totals over its GPUs, and each GPU's own use (the
    layers -ts gives it, its cache share, a compute buffer and a reserve each), which must fit its own card."""

    dense_mib: float
    experts_mib: float
    kv_mib: float
    compute_mib: float
    cache_mib: float
    reserve_mib: float
    vram_mib: float
    margin_mib: float = FIT_MARGIN_MIB  # what llama.cpp keeps free (--fit's target): less is too close to call
    gpu_used_mib: tuple[float, ...] = ()  # each GPU's share of used_mib (empty: one account for all)

    @property
    def used_mib(self) -> float:
        return self.dense_mib + self.experts_mib + self.kv_mib + self.compute_mib + self.cache_mib + self.reserve_mib

    @property
    def free_mib(self) -> float:
        return self.vram_mib - self.used_mib

    @property
    def gpu_free_mib(self) -> tuple[float, ...]:
        """MiB each GPU has left (the cards are alike: each has its share of vram_mib)."""
        if not self.gpu_used_mib:
            return (self.free_mib,)
        return tuple(self.vram_mib / len(self.gpu_used_mib) - used for used in self.gpu_used_mib)

    @property
    def over_mib(self) -> float:
        """MiB the fullest GPU lacks (negative: what it has left)."""
        return -min(self.gpu_free_mib)

    @property
    def fits(self) -> bool:
        """Every GPU fits with llama.cpp's margin left free."""
        return -self.over_mib >= self.margin_mib / len(self.gpu_free_mib)

    @property
    def tight(self) -> bool:
        """Fits by this estimate, but with less free than llama.cpp's margin on some GPU: too close to call."""
        return not self.fits and self.over_mib <= 0

    @property
    def verdict(self) -> str:
        """One line a page leads with: fits or not, and what would free the memory."""
        if self.fits:
            return f"fits in VRAM: {self.used_mib:,.0f} of {self.vram_mib:,.0f} MiB used, {self.free_mib:,.0f} MiB free"
        if self.tight:
            return (
                f"too close to call for VRAM: {self.free_mib:,.0f} MiB free, less than the {self.margin_mib:,.0f} MiB "
                "llama.cpp's --fit keeps free (-fitt): it shrinks the context, or the load may run out of memory. "
                "A smaller context (-c) or --moe-cache-mib leaves room"
            )
        n_gpus = len(self.gpu_free_mib)
        where = f"the GPU's {self.vram_mib:,.0f} MiB"
        if n_gpus > 1:
            where = f"the fullest GPU's {self.vram_mib / n_gpus:,.0f} MiB (-ts decides each GPU's layers)"
        return (
            f"does not fit in VRAM: {self.over_mib:,.0f} MiB over {where}. Free it with a "
            "smaller context (-c), more layers in host memory (--n-cpu-moe K) or a smaller "
            "--moe-cache-mib (fewer slots)"
        )

    def as_dict(self) -> dict:
        return {
            "dense": self.dense_mib,
            "experts_on_gpu": self.experts_mib,
            "kv_cache": self.kv_mib,
            "compute_buffers_estimate": self.compute_mib,
            "moe_cache": self.cache_mib,
            "cuda_reserve_assumed": self.reserve_mib,
            "free": self.free_mib,
            "total": self.vram_mib,
            "margin": self.margin_mib,
        }


KV_TYPES = ("f32", "f16", "bf16", "q8_0", "q5_1", "q5_0", "q4_1", "q4_0", "iq4_nl")  # -ctk / -ctv choices
DEFAULT_KV_TYPE = "f16"  # -ctk / -ctv default


def kv_bytes_per_elem(type_name: str) -> float:
    """Bytes per K or V element of a cache type (-ctk/-ctv), from gguf's block sizes."""
    if type_name.lower() not in KV_TYPES:
        raise MoeModelError(f"KV cache type must be one of {', '.join(KV_TYPES)}, got {type_name!r}")
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType[type_name.upper()]]
    return size / block


def kv_bytes_per_cell(model: ModelSpec, type_k: str = DEFAULT_KV_TYPE, type_v: str = DEFAULT_KV_TYPE) -> float:
    """K and V bytes one cell keeps in one layer that has a KV cache (-ctk/-ctv)."""
    return model.n_head_kv * (
        model.head_dim_k * kv_bytes_per_elem(type_k) + model.head_dim_v * kv_bytes_per_elem(type_v)
    )


def kv_cache_mib(model: ModelSpec, n_ctx: int, type_k: str = DEFAULT_KV_TYPE, type_v: str = DEFAULT_KV_TYPE) -> float:
    """K and V of every layer that keeps a KV cache, for every cell (llama_kv_cache)."""
    return n_ctx * model.kv_layers * kv_bytes_per_cell(model, type_k, type_v) / MIB


def compute_buffer_mib(model: ModelSpec, n_ubatch: int, n_ctx: int, flash_attn: bool) -> float:
    """Estimate: the logits of a ubatch, or the attention scores when flash attention is off."""
    logits = n_ubatch * model.n_vocab * 4
    scores = 0 if flash_attn else n_ctx * n_ubatch * model.n_head * 4
    activations = 8 * n_ubatch * max(model.n_embd, 1) * 4
    return (max(logits, scores) + activations) / MIB


def offload_copy_mib(model: ModelSpec, layers: LayerMap, n_ubatch: int, offload_min_batch: int) -> float:
    """Compute-buffer room for the host expert weights a large ubatch copies to the GPU (ggml-sched offloads
    the op): a layer's tensors before ffn_down are live together, down's copy reuses their memory. Checked on
    llama.cpp's own --fit trials of groundtruth run3's header: 214 MiB with host experts, 2 x 108 MiB of copies."""
    if not copies_from_pool(n_ubatch, offload_min_batch):
        return 0.0
    host = [model.layers[il] for il in layers.on_host("experts")]
    before_down = [sum(t.nbytes for t in layer.experts if "down" not in t.kind) for layer in host]
    return max(before_down, default=0) / MIB


def head_bytes(model: ModelSpec) -> int:
    """The output layer's tensors (output norm and head): what lies outside the blocks but the input embedding."""
    return model.other_bytes - model.input_bytes


@dataclass(frozen=True)
class Weights:
    """MiB of one side's (the GPUs' or host memory's) share of the layers: the layer-by-layer sums of a LayerMap."""

    dense_mib: float  # the dense weights of the layers there, and the output layer's where it is there
    experts_mib: float
    kv_mib: float


def weights_on(model: ModelSpec, layers: LayerMap, n_ctx: int, kv_types: tuple[str, str], device: int) -> Weights:
    """The dense weights, routed experts and KV cells of `n_ctx` the layer map puts on `device` (a GPU, or CPU: host
    memory); the input embedding, which is no layer's and stays on the host, is not counted."""
    dense = sum(model.layers[il].dense_bytes for il in layers.on(device, "dense"))
    dense += head_bytes(model) if layers.output == device else 0
    experts = sum(model.layers[il].expert_bytes_total for il in layers.on(device, "experts"))
    kv_cells = len(layers.on(device, "kv")) * n_ctx
    return Weights(dense / MIB, experts / MIB, kv_cells * kv_bytes_per_cell(model, *kv_types) / MIB)


@dataclass(frozen=True)
class MemoryFlags:
    """The llama.cpp flags that size GPU memory beside the weights and the cache: -c, -ub, -ctk/-ctv,
    GGML_OP_OFFLOAD_MIN_BATCH, -fitt, -fa and --no-kv-offload. No defaults: a Scenario builds it
    (`Scenario.memory_flags`), the one source of them."""

    n_ctx: int
    n_ubatch: int
    kv_types: tuple[str, str]
    offload_min_batch: int
    margin_mib: float  # what llama.cpp keeps free per GPU (--fit's target, -fitt)
    flash_attn: bool
    kv_offload: bool


def breakdown(
    model: ModelSpec,
    hw: Hardware,
    placement: Placement,
    budget_mib: int,
    flags: MemoryFlags,
    plan: CachePlan | None = None,
) -> VramBreakdown:
    """GPU memory of a configuration; with several GPUs of one kind, their totals (per-GPU balance not checked).
    The weights and KV cache are the sums over the layers the layer map (slot_plan.layer_map) puts on the GPUs.
    `plan`: the cache plan of this budget and placement when the caller has it (it is not planned twice).
    Without flash attention the compute buffer holds a ubatch's scores over the context."""
    plan = plan or plan_cache(model, budget_mib, placement)
    layers = layer_map(model, placement, flags.kv_offload)
    compute = max(
        compute_buffer_mib(model, flags.n_ubatch, flags.n_ctx, flags.flash_attn),
        offload_copy_mib(model, layers, flags.n_ubatch, flags.offload_min_batch),
    )
    gpus = [weights_on(model, layers, flags.n_ctx, flags.kv_types, d) for d in range(placement.n_gpus)]
    cache = {d.device: d.buffer_bytes / MIB for d in plan.devices} if plan.starts else {}
    return VramBreakdown(
        sum(g.dense_mib for g in gpus),
        sum(g.experts_mib for g in gpus),
        sum(g.kv_mib for g in gpus),
        compute * placement.n_gpus,
        plan.device_cache_mib,
        CUDA_RESERVE_MIB * placement.n_gpus,
        hw.vram_mib * placement.n_gpus,
        flags.margin_mib * placement.n_gpus,
        tuple(
            g.dense_mib + g.experts_mib + g.kv_mib + compute + cache.get(d, 0.0) + CUDA_RESERVE_MIB
            for d, g in enumerate(gpus)
        ),
    )


def max_budget_mib(model: ModelSpec, hw: Hardware, placement: Placement, flags: MemoryFlags) -> int:
    """The largest --moe-cache-mib whose cache still fits beside everything else (breakdown's items for these
    flags), with llama.cpp's margin free."""
    lo, hi = 0, int(hw.vram_mib * placement.n_gpus)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if breakdown(model, hw, placement, mid, flags).fits:
            lo = mid
        else:
            hi = mid - 1
    return lo


def fit_host_layers(
    model: ModelSpec, hw: Hardware, flags: MemoryFlags, budget_mib: int = 0, base: Placement | None = None
) -> int:
    """How many leading layers --fit moves to host memory (their experts) so the rest, with the compute buffer
    of these flags' ubatch, fits with their margin free: the fewest for which `breakdown(...).fits` holds (found
    by halving: moving more layers' experts out never needs more VRAM), all of them where none fits."""
    base = base or Placement(cpu_moe=False)
    lo, hi = 0, model.n_layer
    while lo < hi:
        k = (lo + hi) // 2
        placement = Placement(
            cpu_moe=False,
            n_cpu_moe=k,
            n_gpu_layers=base.n_gpu_layers,
            n_gpus=base.n_gpus,
            tensor_split=base.tensor_split,
        )
        if breakdown(model, hw, placement, budget_mib, flags).fits:
            hi = k
        else:
            lo = k + 1
    return lo
