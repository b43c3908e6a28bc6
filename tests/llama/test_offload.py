"""llama.cpp's -ngl / -ts rule (b11549 load_tensors) and the layer map every memory account reads."""

from __future__ import annotations

import pytest

from moe_model.llama.offload import CPU, offloaded_devices
from moe_model.llama.slot_plan import Placement, layer_map


def test_ngl_offloads_the_output_layer_first_then_the_last_repeating_layers():
    """i_gpu_start = max(n_layer + 1 - ngl, 0): the output layer (index n_layer) is the first to go to the GPU."""
    assert offloaded_devices(4, 0, (1.0,)) == (CPU,) * 5
    assert offloaded_devices(4, 1, (1.0,)) == (CPU, CPU, CPU, CPU, 0)  # the output layer only
    assert offloaded_devices(4, 3, (1.0,)) == (CPU, CPU, 0, 0, 0)
    assert offloaded_devices(4, 4, (1.0,)) == (CPU, 0, 0, 0, 0)
    assert offloaded_devices(4, 5, (1.0,)) == offloaded_devices(4, -1, (1.0,)) == (0,) * 5
    assert offloaded_devices(4, 99, (1.0,)) == (0,) * 5


def test_a_tensor_split_counts_the_output_layer_among_the_offloaded():
    """(il - i_gpu_start) / act_gpu_layers against the cumulative split: 5 offloaded slots, the output on the last."""
    assert offloaded_devices(4, -1, (1.0, 1.0)) == (0, 0, 0, 1, 1)
    assert offloaded_devices(4, 3, (1.0, 1.0)) == (CPU, CPU, 0, 0, 1)


@pytest.mark.parametrize("ngl", [0, 24, -1])
@pytest.mark.parametrize("cpu_moe", [False, True])
def test_the_layer_map_puts_experts_with_their_layer_unless_overridden(qwen30b, ngl, cpu_moe):
    placement = Placement(cpu_moe=cpu_moe, n_gpu_layers=ngl)
    layers = layer_map(qwen30b, placement)
    devices = placement.layer_device(qwen30b.n_layer)
    assert [p.dense for p in layers.layers] == devices
    assert [p.kv for p in layers.layers] == devices  # KV offloaded: each layer's cells on its device
    assert [p.experts for p in layers.layers] == ([CPU] * qwen30b.n_layer if cpu_moe else devices)
    assert layers.output == (CPU if ngl == 0 else 0)
    assert all(p.kv == CPU for p in layer_map(qwen30b, placement, kv_offload=False).layers)
