"""Rates and the machine-independent parameters of the time model (moe_model.speed.time_model).

TimeParams are fitted across every measured machine (calibration.py), each pulled towards a physically expected
prior; the rate functions turn a machine's figures (hardware.Hardware, its host.Host) into the bytes per second each
path of the time model runs at. A machine's own measured rates replace the derived ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moe_model.readers.model_spec import ModelSpec
from moe_model.settings import prior, settings_of
from moe_model.speed.cpu_quant import expert_quant_factor
from moe_model.speed.hardware import Hardware
from moe_model.speed.host_memory import fault_read_gbs

MS = 1e3
GB = 1e9
PINNED_COPY_US = 2.7  # latency of one pinned copy: groundtruth bw.json, 288 KiB in 8.1 us at 55 GB/s asymptotic
SCORE_PASSES = 3  # flash attention off: the scores are written (KQ), read and written (softmax), read (KQV)


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
    copy_gbs_client: float = prior(
        16.0, "one desktop core copying pageable memory into the driver's staging buffer", LOG1_5, 2.0, 60.0
    )
    copy_gbs_server: float = prior(
        10.0, "one server core (groundtruth bw.json: 8-13 GB/s for expert-sized copies)", LOG1_5, 2.0, 60.0
    )
    vm_copy_factor: float = prior(
        0.7, "pageable copies in a VM (nested page tables; run3: 5.6 GB/s effective, mmap'd)", LOG1_3, 0.2, 1.0
    )
    copy_bw_share: float = prior(
        0.25, "one core copies at most ~a quarter of a dual-channel host's bandwidth (assumption)", LOG1_3, 0.05, 1.0
    )
    vm_sync_factor: float = prior(
        1.5, "launches and host-device syncs in a VM (interrupts and doorbells go through the VMM)", LOG2, 0.5, 5.0
    )
    pageable_copy_us: float = prior(
        15.0, "a pageable copy is synchronous (groundtruth bw.json intercept: ~14 us)", LOG2, 1.0, 500.0
    )
    pageable_copy_us_hip: float = prior(30.0, "the same through HIP: an assumption", LOG3, 1.0, 2000.0)
    pageable_copy_us_vulkan: float = prior(
        100.0, "ggml-vulkan: a staging copy, a submission and a fence per copy", LOG3, 1.0, 2000.0
    )
    cpu_bw_eff_client: float = prior(
        0.7, "CPU decode reaches 80-90 % of a measured bandwidth, itself ~85 % of the rated", LOG1_3, 0.1, 1.0
    )
    cpu_bw_eff_server: float = prior(
        0.6, "servers: more channels than a llama.cpp thread pool keeps busy", LOG1_3, 0.05, 1.0
    )
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
    fill_factor: float = prior(
        1.0, "an upload into an empty slot against a steady miss's (H200 first requests: ~0.9, unexplained)", LOG2,
        0.1, 2.0,
    )  # fmt: skip
    nofa_attn_eff: float = prior(
        0.15, "share of the bandwidth decode attention reaches without flash attention (separate KQ, softmax and KQV "
        "over the whole context; run8 all-GPU at 32k: 2.6 ms more a token for 1.9 GB of K, V and scores)", LOG1_5,
        0.02, 1.0,
    )  # fmt: skip
    mm_eff: float = prior(0.3, "share of datasheet FP16 TFLOPS prompt matmuls reach", LOG3, 0.02, 1.0, "prefill")
    prompt_ubatch_ms: float = prior(
        10.0, "fixed cost per prompt ubatch (graph build, launches, output)", LOG3, 0.5, 2000.0, "prefill"
    )
    d2d_copy_us: float = prior(
        8.0, "one device-to-device copy of a cached expert's tensor in a large ubatch (a launch)", LOG2, 0.5, 100.0,
        "prefill",
    )  # fmt: skip
    first_prompt_ms: float = prior(
        100.0, "a server's first prompt loads the kernels it uses (run5 all-GPU: 130 vs 24 ms)", LOG3, 1.0, 3000.0,
        "prefill",
    )  # fmt: skip

    def sync_us(self, hw: Hardware) -> float:
        if hw.sync_us is not None:
            return hw.sync_us
        return (self.sync_us_cuda if hw.backend == "cuda" else self.sync_us_other) * self.vm_factor(hw)

    def vm_factor(self, hw: Hardware) -> float:
        """Launches and host-device syncs cost more in a VM."""
        return self.vm_sync_factor if hw.host.vm else 1.0

    def token_ms_of(self, hw: Hardware) -> float:
        return self.token_ms if hw.token_ms is None else hw.token_ms

    def split_us(self, hw: Hardware) -> float:
        return (self.split_us_cuda if hw.backend == "cuda" else self.split_us_other) * self.vm_factor(hw)

    def copy_us(self, hw: Hardware, pinned: bool) -> float:
        """Latency of one host-to-device copy of the host experts: pinned, or pageable through the backend."""
        if pinned:
            return PINNED_COPY_US
        return self.pageable_copy_us if hw.backend == "cuda" else getattr(self, f"pageable_copy_us_{hw.backend}")

    def family(self, name: str, hw: Hardware) -> float:
        """A per-CPU-family parameter (copy_gbs, cpu_bw_eff) for the machine's host."""
        return getattr(self, f"{name}_{hw.host.cpu_family}")


# the calibration's tables, generated from the declarations above
PARAMS = settings_of(TimeParams)
DECODE_PARAMS = tuple(name for name, p in PARAMS.items() if p.fit == "decode")
PREFILL_PARAMS = tuple(name for name, p in PARAMS.items() if p.fit == "prefill")
PARAM_BOUNDS = {name: (p.lo, p.hi) for name, p in PARAMS.items()}
PRIOR_WIDTH = {name: p.width for name, p in PARAMS.items()}


def host_copy_gbs(hw: Hardware, params: TimeParams) -> float:
    """Rate the host copies pageable memory into the driver's staging buffer: measured, else one core of its
    CPU family (slower in a VM), never above a share of its memory bandwidth."""
    host = hw.host
    if host.copy_gbs:
        return host.copy_gbs
    rate = params.family("copy_gbs", hw) * (params.vm_copy_factor if host.vm else 1.0)
    return min(rate, host.bandwidth_gbs * params.copy_bw_share)


def upload_gbs(hw: Hardware, params: TimeParams, pinned: bool) -> float:
    """Host-to-device rate of the host experts: pinned at the link's rate; pageable at a measured pageable rate, or
    as one core's measured copy into the driver's staging buffer followed by the DMA at the pinned rate (in series:
    run12 timed CUDA's pageable upload of mmap'd 0.95 MB slices at 149 and 98-102 us on two hosts against 100 + 22 and
    73 + 21 us of memcpy + pinned DMA, the rest the per-copy latency), else at the CPU family's fitted staging rate
    capped by the link (fitted to whole uploads, so it already holds the DMA)."""
    if pinned:
        return hw.pinned_rate_gbs
    if hw.pageable_gbs:
        return hw.pageable_gbs
    if hw.host.copy_gbs:
        return 1.0 / (1.0 / hw.pinned_rate_gbs + 1.0 / hw.host.copy_gbs)
    return min(hw.pinned_rate_gbs, host_copy_gbs(hw, params))


def derived_cpu_gbs(hw: Hardware, params: TimeParams, threads: int) -> float:
    """The host's CPU path rate from its figures at `threads`: bandwidth- or thread-bound (q4_K-equivalent bytes)."""
    host = hw.host
    per_thread = params.thread_gbs_per_ghz * host.ghz * (1.0 if host.vnni else params.no_vnni_factor)
    return min(host.bandwidth_gbs * params.family("cpu_bw_eff", hw), threads * per_thread)


def cpu_expert_gbs(hw: Hardware, params: TimeParams, pinned: bool, model: ModelSpec | None = None) -> float:
    """Rate the CPU path reads expert weights at: measured (at the threads it was measured at, scaled to the host's
    threads as the thread term scales), else bandwidth- or thread-bound; times the model's expert types' factor
    (cpu_quant: a byte of IQ3_XXS costs more than one of q4_K), slower over pinned memory. Without a model (K and V,
    dense weights): the q4_K-equivalent rate."""
    threads = hw.host.threads
    rate = derived_cpu_gbs(hw, params, threads)
    if hw.cpu_expert_gbs:
        measured_at = hw.cpu_expert_threads or threads
        rate = hw.cpu_expert_gbs * rate / derived_cpu_gbs(hw, params, measured_at)
    quant = expert_quant_factor(model, threads) if model is not None else 1.0
    return rate * quant * (params.pinned_cpu_factor if pinned else 1.0)


def disk_gbs(hw: Hardware) -> float:
    """Rate mmap'd experts that left the page cache are read back at (host_memory.fault_read_gbs)."""
    return fault_read_gbs(hw)
