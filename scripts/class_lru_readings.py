"""How far ClassLRU's open readings move its hit rate, and which readings give the extremes: every reading
(policies.class_lru.all_readings) replayed on the real GPT-OSS-20B routing (sample_data/traces/gpt-oss-20b) and on
a synthetic trace of the same shape, with 1-token and 4-token ubatches (-np 4), at pools of 12.5-75 % of the
experts. Writes moe_model/data/class_lru_readings.json (what the band's choice of readings rests on). A few minutes.
With --interpolation: also how far the band's interpolation between replayed pool sizes is off (each band reading
replayed at all 64 budgets of benchmarks/bench.py's trace and of the GPT-OSS routing with -np 4, against its offset
interpolated from every 4th, 6th and 8th), into the same file.

    python scripts/class_lru_readings.py [--interpolation]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from moe_model.llama.batching import build_workload, workload_from
from moe_model.llama.simulate import simulate_budgets
from moe_model.llama.slot_plan import full_budget_mib, min_budget_mib, plan_cache
from moe_model.policies import class_lru
from moe_model.readers.model_spec import load_model
from moe_model.readers.traces import load_trace
from moe_model.resources import data_path
from moe_model.routing.synthetic import Knobs, Shape, generate, preset_for
from moe_model.workload import Batching

MODEL = data_path("models", "gpt-oss-20b-MXFP4.gguf")
TRACE = data_path("traces", "gpt-oss-20b", "routing.npz")
OUT = Path(__file__).resolve().parent.parent / "moe_model" / "data" / "class_lru_readings.json"
POOL_SHARES = (0.125, 0.25, 0.5, 0.75)  # of the (layer, expert) pairs
SYNTHETIC_TOKENS = 20_000


def pool_budget(model, share: float) -> int:
    """The smallest budget whose pools hold `share` of the model's experts."""
    lo, hi = 0, 1 << 20
    want = share * model.n_layer * model.n_expert
    while lo < hi:
        mid = (lo + hi) // 2
        plan = plan_cache(model, mid)
        lo, hi = (lo, mid) if plan.starts and plan.n_slots_total >= want else (mid + 1, hi)
    return lo


def measure(model, trace, concurrency: int, budgets: list[int]) -> list[dict]:
    work = workload_from(trace, Batching(concurrency=concurrency, warmup=False), model.n_expert)
    rates = {}
    for r in class_lru.all_readings():
        results = simulate_budgets(model, work, budgets, None, class_lru.kernel(**r))
        rates[class_lru.reading_name(r)] = [x.hit_rate for x in results]
    default = class_lru.reading_name(class_lru.all_readings()[0])
    out = []
    for i, (share, budget) in enumerate(zip(POOL_SHARES, budgets, strict=True)):
        at = {name: 100 * r[i] for name, r in rates.items()}
        lo, hi = min(at, key=at.get), max(at, key=at.get)
        out.append(
            {
                "pool_share": share,
                "budget_mib": budget,
                "default_points": round(at[default], 2),
                "min_points": round(at[lo], 2),
                "min_reading": lo,
                "max_points": round(at[hi], 2),
                "max_reading": hi,
                "width_points": round(at[hi] - at[lo], 2),
                "readings_points": {name: round(v, 2) for name, v in at.items()},
            }
        )
    return out


def _hits(results) -> np.ndarray:
    return np.array([r.small.hits + r.large.hits for r in results], dtype=float)


def interpolation_errors(model, work, strides=(4, 6, 8)) -> dict:
    """Per band reading and stride: the largest and mean error (points) of its interpolated offset at 64 budgets."""
    budgets = np.linspace(min_budget_mib(model), full_budget_mib(model), 64).astype(int).tolist()
    default = simulate_budgets(model, work, budgets, None, class_lru.kernel())
    hits, caps = _hits(default), np.array([r.plan.n_slots_total for r in default], dtype=float)
    lookups = np.array([r.small.lookups + r.large.lookups for r in default], dtype=float)
    out = {}
    for reading in class_lru.BAND_READINGS:
        exact = _hits(simulate_budgets(model, work, budgets, None, class_lru.kernel(**reading)))
        for stride in strides:
            idx = np.unique(np.append(np.arange(0, 64, stride), 63))
            error = 100 * np.abs(hits + np.interp(caps, caps[idx], (exact - hits)[idx]) - exact) / lookups
            key = f"{class_lru.reading_name(reading)}, every {stride}th"
            out[key] = {"max_points": round(float(error.max()), 2), "mean_points": round(float(error.mean()), 2)}
    return out


def main() -> int:
    model = load_model(MODEL)
    budgets = [pool_budget(model, s) for s in POOL_SHARES]
    real = load_trace(TRACE)
    name, knobs = preset_for(model)
    synthetic = generate(Shape(model.n_layer, model.n_expert, model.n_expert_used), knobs, SYNTHETIC_TOKENS, seed=0)
    result = {
        "model": model.name,
        "readings": [class_lru.reading_name(r) for r in class_lru.all_readings()],
        "traces": {
            f"{label}, -np {c}": measure(model, trace, c, budgets)
            for label, trace in (("gpt-oss-20b routing.npz", real), (f"synthetic ({name} preset)", synthetic))
            for c in (1, 4)
        },
    }
    if "--interpolation" in sys.argv[1:]:
        qwen = load_model(data_path("models", "Qwen3-30B-A3B-Q4_K_M.gguf"))
        bench = build_workload(generate(Shape(48, 128, 8), Knobs(), 20_000, seed=0), Batching(warmup=False), 128)
        np4 = workload_from(real, Batching(concurrency=4, warmup=False), model.n_expert)
        result["interpolation"] = {
            "benchmarks/bench.py trace, -np 1": interpolation_errors(qwen, bench),
            "gpt-oss-20b routing.npz, -np 4": interpolation_errors(model, np4),
        }
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    for label, rows in result["traces"].items():
        for r in rows:
            print(label, r["pool_share"], r["default_points"], r["min_reading"], r["min_points"], r["max_reading"],
                  r["max_points"], r["width_points"])  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
