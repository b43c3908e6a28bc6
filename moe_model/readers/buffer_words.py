"""llama.cpp's buffer names in plain words: where a log says the weights, the KV cache and the compute buffers went.

The names are ggml's buffer types as llama.cpp logs them ("load_tensors: CPU_Mapped model buffer size = ..."):
CPU_Mapped is the model file mapped into RAM (mmap), CPU_REPACK weights repacked for the CPU, CUDA_Host pinned
RAM the GPU copies from, CUDA0 the first CUDA GPU (ggml-backend names each device's buffer type after it)."""

from __future__ import annotations

import re

HOST_NAMES = {
    "CPU_Mapped": "RAM (mapped from the file)",
    "CPU_REPACK": "RAM (repacked for the CPU)",
    "CPU": "RAM",
}
GPU_NAME = re.compile(r"(CUDA|ROCm|HIP|Vulkan|SYCL|Metal|MTL|CANN|OpenCL)(\d*)(_Host)?")


def buffer_place(name: str) -> str:
    """Where a named buffer lives, in words: 'RAM (mapped from the file)', 'GPU 0 (CUDA0)', 'pinned RAM (CUDA_Host)';
    a name this tool does not know is given as logged."""
    if name in HOST_NAMES:
        return HOST_NAMES[name]
    if m := GPU_NAME.fullmatch(name):
        if m.group(3):
            return f"pinned RAM ({name})"
        return f"GPU {m.group(2)} ({name})" if m.group(2) else f"GPU ({name})"
    return name


def buffer_words(buffers: dict[str, float]) -> str:
    """Buffers as logged ({name: MiB}) in words: 'RAM (mapped from the file) 17,032 MiB, GPU 0 (CUDA0) 322 MiB'."""
    return ", ".join(f"{buffer_place(name)} {mib:,.0f} MiB" for name, mib in buffers.items())
