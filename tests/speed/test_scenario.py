"""The scenario's context (the -c that holds every stream at the depth decoding reads, one refusal otherwise) and its
layout: where each layer's weights and KV live, and the VRAM and RAM accounts summed over it."""

from __future__ import annotations

from dataclasses import asdict, fields, replace

import pytest

from moe_model.errors import MoeModelError
from moe_model.limits import MAX_CTX
from moe_model.llama.offload import CPU
from moe_model.llama.slot_plan import Placement
from moe_model.settings import settings_of
from moe_model.speed.hardware import preset
from moe_model.speed.scenario import Request, Scenario, context_for_depth, resolve
from moe_model.speed.vram import kv_cache_mib
from moe_model.workload import Batching


def test_the_context_is_raised_to_hold_every_stream_at_the_depth_and_kept_where_it_does():
    assert context_for_depth(4096, 512, 1) == 4096  # llama.cpp allocates -c cells: a shallower depth keeps it
    assert context_for_depth(4096, 8192, 1) == 8192 and context_for_depth(4096, 8192, 2) == 16384
    assert context_for_depth(4096, MAX_CTX, 4) == MAX_CTX  # never beyond what the library accepts


def test_streams_that_do_not_fit_the_context_at_the_depth_are_refused_in_one_line():
    assert Scenario(n_ctx=8192, concurrency=4, depth=2048).context_depth == 2048  # 4 x 2,048 cells: exactly -c
    with pytest.raises(MoeModelError, match=r"x 4 stream\(s\)\) does not fit the context .* raise --ctx to 16,000"):
        Scenario(n_ctx=8192, concurrency=4, depth=4000)  # each stream's KV is its own: 16,000 cells, not 8,192
    raised = context_for_depth(8192, 4000, 4)
    assert Scenario(n_ctx=raised, concurrency=4, depth=4000).n_ctx == raised == 16000


def _layer_sums(model, layout, n_ctx: int, on_gpu: bool) -> tuple[float, float, float]:
    """Dense, expert and KV MiB of the layers the layout puts on the GPU (or in host memory), summed by hand."""
    here = list(zip(model.layers, layout.layers.layers, strict=True))
    side = (lambda device: device not in (CPU, None)) if on_gpu else (lambda device: device == CPU)
    head = model.other_bytes - model.input_bytes if side(layout.layers.output) else 0
    dense = sum(layer.dense_bytes for layer, p in here if side(p.dense)) + head
    experts = sum(layer.expert_bytes_total for layer, p in here if side(p.experts))
    kv = sum(kv_cache_mib(model, n_ctx) / model.kv_layers for _, p in here if side(p.kv))
    return dense / 2**20, experts / 2**20, kv


@pytest.mark.parametrize("ngl", [0, 24, -1])
@pytest.mark.parametrize("placement", ["cpu-moe", "gpu"])
@pytest.mark.parametrize("no_kv_offload", [False, True])
def test_vram_and_ram_are_the_layer_by_layer_sums_of_the_layout(qwen30b, ngl, placement, no_kv_offload):
    """Issue 37: -ngl decides where each layer's dense weights, experts and KV live, for VRAM and RAM alike."""
    sc = Scenario(Placement.parse(placement, n_gpu_layers=ngl), no_kv_offload=no_kv_offload)
    layout = resolve(qwen30b, preset("3060").with_changes(ram_gib=64.0), sc)
    vram, ram = layout.vram, layout.ram
    on_gpu = _layer_sums(qwen30b, layout, sc.n_ctx, on_gpu=True)
    assert (vram.dense_mib, vram.experts_mib, vram.kv_mib) == pytest.approx(on_gpu)
    dense, experts, kv = _layer_sums(qwen30b, layout, sc.n_ctx, on_gpu=False)
    input_mib = qwen30b.input_bytes / 2**20  # token_embd: always in host memory
    assert (ram.other_mib, ram.experts_mib, ram.kv_mib) == pytest.approx((dense + input_mib, experts, kv))
    # nothing lost or counted twice: every byte is on one side
    assert vram.experts_mib + ram.experts_mib == pytest.approx(qwen30b.expert_bytes_total / 2**20)
    assert vram.dense_mib + ram.other_mib == pytest.approx(qwen30b.dense_bytes_total / 2**20)
    assert vram.kv_mib + ram.kv_mib == pytest.approx(kv_cache_mib(qwen30b, sc.n_ctx))


def test_ngl_0_keeps_every_weight_in_ram_and_the_gpu_holds_only_its_buffers(qwen30b):
    """The issue's case: `predict --hardware 3060 --placement gpu --n-gpu-layers 0` said 6,249 MiB over the GPU's
    memory and counted no expert in RAM."""
    layout = resolve(qwen30b, preset("3060"), Scenario(Placement.parse("gpu", n_gpu_layers=0)))
    assert layout.vram.fits and layout.vram.dense_mib == layout.vram.experts_mib == layout.vram.kv_mib == 0
    assert layout.ram.experts_mib == qwen30b.expert_bytes_total / 2**20
    assert layout.cpu_layers == layout.host_layers == tuple(range(qwen30b.n_layer)) and not layout.plan.groups
    half = resolve(qwen30b, preset("3060"), Scenario(Placement.parse("gpu", n_gpu_layers=24)))
    assert half.cpu_layers == tuple(range(25)) and half.vram.kv_mib == 23 * kv_cache_mib(qwen30b, 4096) / 48


def test_the_request_is_the_scenarios_declared_request_fields_as_one_record_under_their_own_names():
    declared = settings_of(Scenario)
    assert all(declared[f.name].flags for f in fields(Request))  # each a Scenario setting with its CLI flag
    sc = Scenario(concurrency=3, draft_tokens=2, accept_rate=0.5, prompt_tokens=900, depth=1000, n_predict=64)
    assert sc.request == Request(3, 2, 0.5, 900, 1000, 64)
    assert replace(Scenario(), **asdict(sc.request)).request == sc.request  # set back under the same names
    batching = Batching(**sc.request.batching_fields)
    assert (batching.concurrency, batching.draft_tokens, batching.accept_rate) == (3, 2, 0.5)
