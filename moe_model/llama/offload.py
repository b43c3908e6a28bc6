"""Which device holds each layer: llama.cpp's `-ngl` / `-ts` rule, and where each layer's dense weights, routed
experts and KV cache land once the expert overrides (`--cpu-moe`, `--n-cpu-moe K`, `--fit`) and `--no-kv-offload`
are applied. Every account of memory and time reads this map (speed/scenario.Layout); none decides it again.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from functools import lru_cache

CPU = -1  # device index of what stays in host memory


@lru_cache(maxsize=64)  # --fit's search asks for the same map once per layer count it tries
def offloaded_devices(n_layer: int, n_gpu_layers: int, split_weights: tuple[float, ...]) -> tuple[int, ...]:
    """The device (GPU index or CPU) of each of the `n_layer` repeating layers and, last, of the output layer.

    llama.cpp b11549 `src/llama-model.cpp`: `llama_model::n_gpu_layers()` turns a negative -ngl into n_layer + 1
    ("plus 1 for the output layer"); `llama_model_base::load_tensors` keeps layers below
    `i_gpu_start = max(n_layer + 1 - n_gpu_layers, 0)` on the CPU, counts `act_gpu_layers = min(n_gpu_layers,
    n_layer + 1)` and gives layer `il` the GPU `upper_bound(cumulative split, (il - i_gpu_start) / act_gpu_layers)`;
    the output layer is `get_layer_buft_list(n_layer)` and the input embedding always stays on the CPU. So -ngl N
    offloads the output layer first, then the last N - 1 repeating layers; -ngl 0 keeps everything on the CPU.
    """
    total = float(sum(split_weights))
    cumulative, running = [], 0.0
    for w in split_weights:
        running += w
        cumulative.append(running / total)
    n_gpus = len(split_weights)
    ngl = n_layer + 1 if n_gpu_layers < 0 else n_gpu_layers
    i_gpu_start = max(n_layer + 1 - ngl, 0)
    act_gpu_layers = min(ngl, n_layer + 1)
    devices = []
    for il in range(n_layer + 1):
        if il < i_gpu_start or il - i_gpu_start >= act_gpu_layers:
            devices.append(CPU)
        else:
            devices.append(min(bisect.bisect_right(cumulative, (il - i_gpu_start) / act_gpu_layers), n_gpus - 1))
    return tuple(devices)


@dataclass(frozen=True)
class LayerPlace:
    """Where one repeating layer's tensors live (a GPU index, or CPU)."""

    index: int
    dense: int  # attention, norms, router, shared experts: the layer's device (-ngl, -ts)
    experts: int | None  # routed experts (None: it has none): CPU where an override or -ngl puts them in host memory
    kv: int | None  # K and V cells (None: it keeps none): the layer's device, CPU with --no-kv-offload


@dataclass(frozen=True)
class LayerMap:
    """Every repeating layer's place, and the output layer's device (output norm and head)."""

    layers: tuple[LayerPlace, ...]
    output: int

    def on(self, device: int, what: str) -> tuple[int, ...]:
        """Indices of the layers whose `what` ("dense", "experts" or "kv") is on `device` (a GPU, or CPU)."""
        return tuple(p.index for p in self.layers if getattr(p, what) == device)

    def on_gpu(self, what: str) -> tuple[int, ...]:
        """Indices of the layers whose `what` ("dense", "experts" or "kv") is on a GPU."""
        return tuple(p.index for p in self.layers if getattr(p, what) not in (CPU, None))

    def on_host(self, what: str) -> tuple[int, ...]:
        """Indices of the layers whose `what` ("dense", "experts" or "kv") is in host memory."""
        return tuple(p.index for p in self.layers if getattr(p, what) == CPU)
