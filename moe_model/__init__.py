"""MoE Cache Explorer: what llama.cpp's MoE expert cache (--moe-cache-mib) does for a model and a GPU.

Pure Python (numpy, pandas, gguf); no Streamlit here. Modules, in the order data flows:
gguf_header -> model_spec -> slot_plan -> workload -> simulate (policies) -> scenario -> traffic -> time_model
-> calibration (measured points); recommend; logs; charts; cli.
"""

from moe_model import numba_cache  # noqa: F401 - first: sets NUMBA_CACHE_DIR before any kernel module loads numba
from moe_model.errors import GGUFError, LogError, MoeModelError, TruncatedHeaderError, WorkloadError
from moe_model.model_spec import ModelSpec, load_model
from moe_model.slot_plan import CachePlan, Placement, full_budget_mib, min_budget_mib, plan_cache

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
