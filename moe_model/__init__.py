"""MoE Cache Explorer: what llama.cpp's MoE expert cache (--moe-cache-mib) does for a model and a GPU.

Pure Python (numpy, numba, pandas, gguf); no Streamlit here. Folders, each importing only those above it:
readers (GGUF headers, URLs, sources, logs, traces) -> llama (b11549's exact rules: slot plan, pool rule,
batching, the LRU kernel, simulate) -> policies (replacement policies, the stepper) -> routing (synthetic
routing, the toy model) -> speed (hardware, VRAM, scenario, traffic, time model, curve, calibration,
recommend: the modelled part) -> charts -> cli. Shared types: errors, limits, workload; data in data/.
"""

from moe_model import numba_cache  # noqa: F401 - first: sets NUMBA_CACHE_DIR before any kernel module loads numba
from moe_model.errors import GGUFError, LogError, MoeModelError, TruncatedHeaderError, WorkloadError
from moe_model.llama.slot_plan import CachePlan, Placement, full_budget_mib, min_budget_mib, plan_cache
from moe_model.readers.model_spec import ModelSpec, load_model

__all__ = [
    # errors
    "GGUFError",
    "LogError",
    "MoeModelError",
    "TruncatedHeaderError",
    "WorkloadError",
    # model and plan
    "CachePlan",
    "ModelSpec",
    "Placement",
    "full_budget_mib",
    "load_model",
    "min_budget_mib",
    "plan_cache",
]
