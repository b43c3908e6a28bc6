"""llama.cpp's MoE cache plan, exactly as build b11549 computes it (src/llama-moe-cache.cpp, impl ctor).

Which layers are cached, how they group, how the budget splits across GPUs and groups, how many
slots each group gets, what llama-server prints, and the smallest budgets that start and that
cache everything.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from moe_model.errors import MoeModelError
from moe_model.limits import MAX_LAYERS, MAX_SPLIT_SHARE
from moe_model.llama.offload import CPU, LayerMap, LayerPlace, offloaded_devices
from moe_model.readers.model_spec import LayerSpec, ModelSpec
from moe_model.settings import check_declared, setting

MIB = 1024 * 1024
CUDA_ALIGNMENT = 128  # ggml_backend_cuda_buffer_type_get_alignment
MATRIX_ROW_PADDING = 512  # ggml-cuda: get_alloc_size pads quantized rows to a multiple of this

ERR_TOO_SMALL = "MoE cache is too small to hold the experts of one token"
WARN_NOT_CACHED = "MoE cache budget is too small for {n} layers, they are not cached"
WARN_NO_HOST_LAYER = "no layer has all of its experts in host memory, MoE cache is disabled"


@dataclass(frozen=True)
class Placement:
    """Where llama.cpp puts the layers and their experts (the flags that decide eligibility).

    cpu_moe: `--cpu-moe`, every layer's experts in host memory.
    n_cpu_moe: `--n-cpu-moe K`, the experts of the first K layers in host memory.
    n_gpu_layers: `-ngl`; -1 offloads everything. llama.cpp offloads the *last* N layers.
    tensor_split: `-ts A,B,...`; empty splits layers and budget by free memory.
    free_mib: each GPU's free memory at context creation; empty means equal.
    layer_devices: an explicit GPU index per layer (CPU = -1), overriding -ngl/-ts.
    fit: `--fit on` chose n_cpu_moe from free VRAM (vram.fit_host_layers resolves it; common/fit.cpp).
    """

    cpu_moe: bool = True
    n_cpu_moe: int = 0
    n_gpu_layers: int = setting(
        -1,
        help="layers offloaded to the GPU(s) (default -1: all)",
        flags=("--n-gpu-layers", "-ngl"),
        lo=-1,
        hi=MAX_LAYERS,
        metavar="N",
        llama_flags=("-ngl", "--gpu-layers", "--n-gpu-layers"),
        llama_default=-1,  # b11549 common.h: -1 auto (--fit decides), what flags() leaves out
    )
    n_gpus: int = 1
    tensor_split: tuple[float, ...] = setting(
        (),
        help="split of layers and budget across GPUs (one share per GPU)",
        flags=("--tensor-split", "-ts"),
        lo=0,
        hi=MAX_SPLIT_SHARE,
        metavar="A,B,...",
        llama_flags=("-ts", "--tensor-split"),
        llama_default=(),
    )
    free_mib: tuple[float, ...] = ()
    layer_devices: tuple[int, ...] | None = None
    fit: bool = False

    def __post_init__(self) -> None:
        if self.n_gpus < 1:
            raise MoeModelError("the MoE cache requires a GPU backend (n_gpus >= 1)")
        if self.n_cpu_moe < 0:
            raise MoeModelError(f"--n-cpu-moe must be >= 0, got {self.n_cpu_moe}")
        for name, values in (("tensor split", self.tensor_split), ("free memory", self.free_mib)):
            if values and (len(values) != self.n_gpus or not all(0 <= v < math.inf for v in values)):
                raise MoeModelError(f"{name} needs {self.n_gpus} finite non-negative values, got {list(values)}")
        check_declared(self)  # -ngl and each -ts share within their settings' ranges

    def split_weights(self) -> tuple[float, ...]:
        """Per GPU weight of the layer and budget split: -ts, else free memory, else equal."""
        if self.tensor_split and any(self.tensor_split):
            return self.tensor_split
        if self.free_mib and any(self.free_mib):
            return self.free_mib
        return (1.0,) * self.n_gpus

    def layer_device(self, n_layer: int) -> list[int]:
        """The GPU of each repeating layer, or CPU (offload.offloaded_devices: llama.cpp's -ngl / -ts rule)."""
        return list(self._devices(n_layer)[:n_layer])

    def output_device(self, n_layer: int) -> int:
        """The output layer's GPU, or CPU: with explicit layer devices, the last layer's."""
        return self._devices(n_layer)[-1]

    def _devices(self, n_layer: int) -> tuple[int, ...]:
        if self.layer_devices is None:
            return offloaded_devices(n_layer, self.n_gpu_layers, self.split_weights())
        if len(self.layer_devices) != n_layer:
            raise MoeModelError(f"layer_devices has {len(self.layer_devices)} entries for {n_layer} layers")
        return (*self.layer_devices, self.layer_devices[-1] if n_layer else CPU)

    def experts_on_host(self, il: int) -> bool:
        return self.cpu_moe or il < self.n_cpu_moe

    @property
    def fit_runs(self) -> bool:
        """Whether --fit moves anything: common/fit.cpp (b11549, common_params_fit_impl) aborts the fit when -ngl is
        given ("n_gpu_layers already set by user to N, abort"; run9's README) and the layers load as -ngl says."""
        return self.fit and self.n_gpu_layers < 0

    @classmethod
    def parse(cls, text: str, **multi_gpu) -> Placement:
        """`cpu-moe`, `fit`, `gpu` or `n-cpu-moe:K` (the CLI's --placement), with -ngl / -ts fields."""
        text = text.strip().lower()
        if text == "cpu-moe":
            return cls(cpu_moe=True, **multi_gpu)
        if text in ("fit", "gpu"):
            return cls(cpu_moe=False, fit=text == "fit", **multi_gpu)
        if text.startswith("n-cpu-moe:") and text.split(":", 1)[1].isdigit():
            return cls(cpu_moe=False, n_cpu_moe=int(text.split(":", 1)[1]), **multi_gpu)
        raise MoeModelError(f"placement must be cpu-moe, fit, gpu or n-cpu-moe:K, got {text!r}")

    def flags(self) -> list[str]:
        """The llama-server flags of this placement."""
        if self.fit:
            out = ["--fit", "on"]
        elif self.cpu_moe:
            out = ["--cpu-moe"]
        else:
            out = ["--n-cpu-moe", str(self.n_cpu_moe)] if self.n_cpu_moe else []
        if self.n_gpu_layers >= 0:
            out += ["-ngl", str(self.n_gpu_layers)]
        if self.tensor_split:
            out += ["-ts", ",".join(f"{x:g}" for x in self.tensor_split)]
        return out

    @property
    def text(self) -> str:
        """The CLI's --placement form of the flags (what `parse` reads back): cpu-moe, fit, gpu or n-cpu-moe:K."""
        if self.fit or self.cpu_moe:
            return "fit" if self.fit else "cpu-moe"
        return f"n-cpu-moe:{self.n_cpu_moe}" if self.n_cpu_moe else "gpu"

    @property
    def label(self) -> str:
        if self.fit:
            return f"--fit ({self.n_cpu_moe} layers' experts in RAM)"
        return " ".join(self.flags()) or "all on the GPU"


@dataclass(frozen=True)
class GroupPlan:
    """Layers of one GPU whose expert tensors share type, shape and stride: one slot pool, one LRU."""

    device: int
    layers: tuple[int, ...]
    type_name: str  # of the last expert tensor (ffn_down), as llama-server prints it
    tensor_bytes: tuple[int, ...]  # nb[2] of each expert tensor, in llama.cpp's order
    tensor_row_pad: tuple[int, ...]  # CUDA row padding each bank adds to its allocation
    n_expert: int
    host_bytes: int
    budget_bytes: int
    n_slots: int

    @property
    def slot_bytes(self) -> int:
        return sum(self.tensor_bytes)

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    @property
    def max_slots(self) -> int:
        return self.n_layers * self.n_expert

    @property
    def percent(self) -> float:
        return 100.0 * self.n_slots / self.max_slots

    @property
    def cached(self) -> bool:
        return self.n_slots > 0

    def alloc_bytes(self, n_slots: int, alignment: int = CUDA_ALIGNMENT) -> int:
        """alloc_size(g, n): one bank per tensor with a guard slot, each padded to the alignment."""
        return sum(_pad(nb2 * (n_slots + 1), alignment) for nb2 in self.tensor_bytes)

    def buffer_bytes(self, alignment: int = CUDA_ALIGNMENT) -> int:
        """The real CUDA allocation of the banks: get_alloc_size adds the row padding per bank."""
        if not self.cached:
            return 0
        return sum(
            _pad(nb2 * (self.n_slots + 1) + pad, alignment)
            for nb2, pad in zip(self.tensor_bytes, self.tensor_row_pad, strict=True)
        )


@dataclass(frozen=True)
class DevicePlan:
    """One GPU with host experts: its share of the budget and its cache buffer."""

    device: int
    host_bytes: int
    split: float
    buffer_bytes: int

    @property
    def name(self) -> str:
        return f"CUDA{self.device}"


@dataclass(frozen=True)
class CachePlan:
    """What `--moe-cache-mib N` gives: per GPU and per group, and whether the server starts."""

    budget_mib: int
    n_expert_used: int
    devices: tuple[DevicePlan, ...]
    groups: tuple[GroupPlan, ...]
    starts: bool
    error: str | None
    warnings: tuple[str, ...] = field(default=())

    @property
    def enabled(self) -> bool:
        return self.starts and any(g.cached for g in self.groups)

    @property
    def device_cache_bytes(self) -> int:
        return sum(d.buffer_bytes for d in self.devices) if self.starts else 0

    @property
    def device_cache_mib(self) -> float:
        return self.device_cache_bytes / MIB

    @property
    def host_experts_mib(self) -> float:
        return sum(d.host_bytes for d in self.devices) / MIB

    @property
    def n_slots_total(self) -> int:
        return sum(g.n_slots for g in self.groups) if self.starts else 0

    def log_lines(self) -> list[str]:
        """The lines llama-server prints at -lv 4 for this plan (impl ctor), warnings first."""
        lines = [f"W impl: {w}" for w in self.warnings]
        if not self.starts:
            lines.append(f"E llama_init_from_model: failed to initialize the context: {self.error}")
            return lines
        for d in self.devices:
            lines.append(
                f"I impl: {d.name:>10} MoE cache size = {d.buffer_bytes / MIB:8.2f} MiB "
                f"for {d.host_bytes / MIB:.2f} MiB of host experts"
            )
            for g in self.groups:
                if g.device == d.device:
                    lines.append(
                        f"I impl: {g.n_layers:2d} layers, {g.type_name}: {g.n_slots:5d} slots ({g.percent:.1f}%)"
                    )
        return lines


def _pad(x: int, n: int) -> int:
    return (x + n - 1) // n * n


def _row_pad(ggml_type: int, ne0: int) -> int:
    """ggml_backend_cuda_buffer_type_get_alloc_size: quantized rows padded to MATRIX_ROW_PADDING."""
    qtype = GGMLQuantizationType(ggml_type)
    block, type_bytes = GGML_QUANT_SIZES[qtype]
    if block == 1 or ne0 % MATRIX_ROW_PADDING == 0:
        return 0
    return (MATRIX_ROW_PADDING - ne0 % MATRIX_ROW_PADDING) // block * type_bytes


def _slots_for_budget(group: GroupPlan, budget_bytes: int) -> int:
    """The ctor's `while (n < max && alloc(n+1) <= budget) n++`, by bisection (alloc is increasing)."""
    lo, hi = 0, group.max_slots
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if group.alloc_bytes(mid) <= budget_bytes:
            lo = mid
        else:
            hi = mid - 1
    return lo


@lru_cache(maxsize=256)  # every account of one placement reads the same map
def layer_map(model: ModelSpec, placement: Placement, kv_offload: bool = True) -> LayerMap:
    """Where each layer's dense weights, routed experts and KV cache live: -ngl / -ts place the layer
    (offload.offloaded_devices), --cpu-moe / --n-cpu-moe K (--fit resolved into K) move its experts to host memory,
    and --no-kv-offload its K and V (b11549 src/llama-kv-cache.cpp: a layer's cells go to its device when
    offloading, else to the CPU)."""
    devices = placement.layer_device(model.n_layer)
    places = []
    for layer, device in zip(model.layers, devices, strict=True):
        experts = CPU if placement.experts_on_host(layer.index) else device
        kv = device if kv_offload else CPU
        places.append(
            LayerPlace(layer.index, device, experts if layer.has_experts else None, kv if layer.has_kv else None)
        )
    return LayerMap(tuple(places), placement.output_device(model.n_layer))


@lru_cache(maxsize=256)  # a curve or a recommendation plans many budgets of few placements
def _eligible_groups(model: ModelSpec, placement: Placement) -> tuple[GroupPlan, ...]:
    """Cacheable layers grouped by (device, identical expert layout), in increasing layer order: layers with
    experts in host memory on a GPU layer (layers -ngl leaves on the CPU are not cached)."""
    keys: list[tuple[int, tuple]] = []
    members: list[list[LayerSpec]] = []
    for layer, place in zip(model.layers, layer_map(model, placement).layers, strict=True):
        if place.dense == CPU or place.experts != CPU:
            continue
        key = (place.dense, layer.layout_key)
        if key not in keys:
            keys.append(key)
            members.append([])
        members[keys.index(key)].append(layer)
    return tuple(_new_group(device, layers) for (device, _), layers in zip(keys, members, strict=True))


def _new_group(device: int, layers: list[LayerSpec]) -> GroupPlan:
    ref = layers[0].experts
    return GroupPlan(
        device=device,
        layers=tuple(layer.index for layer in layers),
        type_name=ref[-1].type_name,
        tensor_bytes=tuple(t.expert_bytes for t in ref),
        tensor_row_pad=tuple(_row_pad(t.ggml_type, t.shape[0]) for t in ref),
        n_expert=ref[0].shape[2],
        host_bytes=sum(layer.expert_bytes_total for layer in layers),
        budget_bytes=0,
        n_slots=0,
    )


def _device_splits(groups: Sequence[GroupPlan], placement: Placement) -> dict[int, tuple[int, float]]:
    """Per device with host experts: (host bytes, split weight), as the ctor computes them."""
    host: dict[int, int] = {}
    for g in groups:
        host[g.device] = host.get(g.device, 0) + g.host_bytes
    weights = placement.split_weights()
    split = {d: float(weights[d]) for d in host}
    if sum(split.values()) == 0.0:  # devices that report no free memory get equal shares
        split = {d: 1.0 for d in host}
    return {d: (host[d], split[d]) for d in host}


def plan_cache(model: ModelSpec, budget_mib: int, placement: Placement | None = None) -> CachePlan:
    """The cache llama.cpp b11549 builds for `--moe-cache-mib budget_mib` with this placement."""
    placement = placement or Placement()
    if budget_mib < 0:
        raise MoeModelError(f"--moe-cache-mib must be >= 0, got {budget_mib}")
    groups = _eligible_groups(model, placement)
    if budget_mib == 0:
        return CachePlan(0, model.n_expert_used, (), tuple(groups), True, None)
    if not groups:
        return CachePlan(budget_mib, model.n_expert_used, (), (), True, None, (WARN_NO_HOST_LAYER,))
    size = budget_mib * MIB
    splits = _device_splits(groups, placement)
    split_sum = sum(s for _, s in splits.values())
    planned, warnings = [], []
    for g in groups:
        d_host, d_split = splits[g.device]
        budget = int(float(size) * d_split / split_sum * float(g.host_bytes) / float(d_host))  # same op order as C++
        n_slots = _slots_for_budget(g, budget)
        if n_slots < model.n_expert_used:
            warnings.append(WARN_NOT_CACHED.format(n=g.n_layers))
            n_slots = 0
        planned.append(replace(g, budget_bytes=budget, n_slots=n_slots))
    starts = any(g.cached for g in planned)
    devices = tuple(
        DevicePlan(d, host, split, sum(g.buffer_bytes() for g in planned if g.device == d))
        for d, (host, split) in sorted(splits.items())
    )
    error = None if starts else ERR_TOO_SMALL
    return CachePlan(budget_mib, model.n_expert_used, devices, tuple(planned), starts, error, tuple(warnings))


def smallest_budget(model: ModelSpec, placement: Placement, ok) -> int | None:
    """Smallest integer MiB for which ok(plan) holds; ok must be monotone in the budget."""
    hi = max(1, (model.expert_bytes_total * 2) // MIB + 64)
    if not ok(plan_cache(model, hi, placement)):
        return None
    lo = 1
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(plan_cache(model, mid, placement)):
            hi = mid
        else:
            lo = mid + 1
    return lo


@lru_cache(maxsize=256)  # a bisection of ~20 plans, asked for again by every card and page of one placement
def min_budget_mib(model: ModelSpec, placement: Placement | None = None) -> int | None:
    """The smallest `--moe-cache-mib` with which the server starts (None: no layer is cacheable)."""
    placement = placement or Placement()
    if not _eligible_groups(model, placement):
        return None
    return smallest_budget(model, placement, lambda p: p.starts)


@lru_cache(maxsize=256)  # as min_budget_mib
def full_budget_mib(model: ModelSpec, placement: Placement | None = None) -> int | None:
    """The smallest `--moe-cache-mib` that caches every expert of every eligible layer."""
    placement = placement or Placement()
    if not _eligible_groups(model, placement):
        return None
    return smallest_budget(model, placement, lambda p: p.starts and all(g.n_slots == g.max_slots for g in p.groups))


def useful_budget_mib(model: ModelSpec, budget_mib: int, placement: Placement | None = None) -> int:
    """`budget_mib`, or full_budget_mib where it is larger: from there every group holds all its experts (the
    ctor's slot loop stops at max), so the same slots, buffers and VRAM: a larger budget changes nothing."""
    full = full_budget_mib(model, placement or Placement())
    return budget_mib if full is None else min(budget_mib, full)


def plan_report(model: ModelSpec, budget_mib: int, placement: Placement | None = None) -> dict:
    """The plan as plain data (the `plan --json` contract): what starts, slots per group, key budgets."""
    placement = placement or Placement()
    plan = plan_cache(model, budget_mib, placement)
    return {
        "model": {
            "name": model.name,
            "architecture": model.architecture,
            "file_type": model.file_type_name,
            "n_layer": model.n_layer,
            "n_expert": model.n_expert,
            "n_expert_used": model.n_expert_used,
            "expert_mib": model.expert_bytes_total / MIB,
            "total_mib": model.total_bytes / MIB,
        },
        "budget_mib": budget_mib,
        "starts": plan.starts,
        "error": plan.error,
        "warnings": list(plan.warnings),
        "device_cache_mib": round(plan.device_cache_mib, 4),
        "host_experts_mib": round(plan.host_experts_mib, 4),
        "min_budget_mib": min_budget_mib(model, placement),
        "full_budget_mib": full_budget_mib(model, placement),
        "devices": [
            {"name": d.name, "cache_mib": d.buffer_bytes / MIB, "host_experts_mib": d.host_bytes / MIB}
            for d in plan.devices
        ],
        "groups": [
            {
                "device": g.device,
                "layers": list(g.layers),
                "n_layers": g.n_layers,
                "type": g.type_name,
                "slot_bytes": g.slot_bytes,
                "n_slots": g.n_slots,
                "max_slots": g.max_slots,
                "percent": round(g.percent, 4),
            }
            for g in plan.groups
        ],
        "log_lines": plan.log_lines(),
    }
