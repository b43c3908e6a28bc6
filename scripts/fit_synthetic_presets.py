"""Fit the synthetic routing presets and write moe_model/data/synthetic_presets.json.

- gpt-oss-20b: fitted to the bundled real trace (shared-pool LRU hit rates at 25/50/75 % of all
  (layer, expert) pairs, top-quarter popularity share, next-token overlap).
- Qwen3-30B-A3B: fitted to the measured T4 hit rates in moe_model/data/reference-measurements.csv
  (--cpu-moe --moe-cache-mib 10000, one stream and 4 concurrent streams), starting from the
  gpt-oss-20b knobs; t4-fit-cache10 (--fit, ~20 layers in RAM, 1,671 MiB) is held out.
- Qwen3.8-Flash-Next (512 experts, 10 used): fitted to the published ubatch <= 8 hit rates of the R9700
  field rows (--n-cpu-moe 41, 2-14 GiB) and the seed's CPU-share rows flash-6464-s0 / flash-19392-s0
  (--cpu-moe), starting from the Qwen3-30B-A3B knobs; the V620 rows (--n-cpu-moe 34/40/48) are held out.
  Each row is simulated at its own placement and budget with its own header (moe_model/data/models).

Every preset stores spread_points: the larger of its rms error on the rows it was fitted to and on the
rows held out (hit-rate points), for prediction ranges.

    python scripts/fit_synthetic_presets.py                          (all; several minutes on 2 cores)
    python scripts/fit_synthetic_presets.py --only Qwen3.8-Flash-Next (refit one, keep the others' knobs)
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from moe_model.llama.batching import build_workload
from moe_model.llama.simulate import simulate, simulate_budgets
from moe_model.llama.slot_plan import Placement
from moe_model.readers.model_spec import load_model
from moe_model.readers.traces import load_token_trace
from moe_model.routing.synthetic import PRESETS_PATH, Knobs, Shape, TraceStats, coordinate_fit, fit_knobs, generate
from moe_model.workload import Batching

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "moe_model" / "data"
QWEN_TOKENS = 8000
FLASH_TOKENS = 3000
FLASH_SHAPE = Shape(48, 512, 10)
# Rows from ../shared/reference/field-measurements.csv and the seed table.
# (id, header in moe_model/data/models, --n-cpu-moe K or None for --cpu-moe, --moe-cache-mib, published ubatch <= 8
# hit rate %, role). Field rows as field-measurements.csv gives them; the seed rows' values come from
# moe_model/data/reference-measurements.csv (None here).
FLASH_ROWS = (
    ("r9700-ncmoe41-2048", "Qwen3.8-Flash-Next-R9700.gguf", 41, 2048, 45.4, "fit"),
    ("r9700-ncmoe41-4096", "Qwen3.8-Flash-Next-R9700.gguf", 41, 4096, 61.0, "fit"),
    ("r9700-ncmoe41-8192", "Qwen3.8-Flash-Next-R9700.gguf", 41, 8192, 79.0, "fit"),
    ("r9700-ncmoe41-12288", "Qwen3.8-Flash-Next-R9700.gguf", 41, 12288, 87.9, "fit"),
    ("r9700-ncmoe41-14336", "Qwen3.8-Flash-Next-R9700.gguf", 41, 14336, 90.2, "fit"),
    ("flash-6464-s0", "Qwen3-Next-80B-A3B-IQ4_NL.gguf", None, 6464, None, "fit"),
    ("flash-19392-s0", "Qwen3-Next-80B-A3B-IQ4_NL.gguf", None, 19392, None, "fit"),
    ("v620-ncmoe34-1009", "Qwen3.8-Flash-Next-UD-Q4_K_XL.gguf", 34, 1009, 34.9, "held out"),
    ("v620-ncmoe40-10052", "Qwen3.8-Flash-Next-UD-Q4_K_XL.gguf", 40, 10052, 78.8, "held out"),
    # RADV's 4 GiB max allocation capped this sweep (11,302 MiB loads, 13,000 fails); the cell itself loaded at
    # 11,297 MiB, so it is kept as a held-out row, and its error is also reported on its own
    ("v620-ncmoe48-11297", "Qwen3.8-Flash-Next-UD-Q4_K_XL.gguf", 48, 11297, 78.8, "held out (RADV-capped sweep)"),
)


def _progress(label: str):
    return lambda f: print(f"\r{label}: {100 * f:5.1f} %", end="", file=sys.stderr, flush=True)


def fit_gpt_oss() -> dict:
    trace = load_token_trace(SAMPLE / "traces" / "gpt-oss-20b" / "routing.npz")
    knobs, rms = fit_knobs(trace, 32, progress=_progress("gpt-oss-20b"))
    target = TraceStats.of(trace, 32)
    achieved = TraceStats.of(generate(Shape(24, 32, 4), knobs, 40_000, seed=1), 32)
    return {
        "knobs": asdict(knobs),
        "fitted_to": "moe_model/data/traces/gpt-oss-20b (real routing): shared-pool LRU hit rates at 25/50/75 % "
        "of all (layer, expert) pairs, top-quarter popularity share, next-token overlap",
        "target": asdict(target),
        "achieved_40k_tokens_new_seed": asdict(achieved),
        "rms_points": round(rms, 3),
    }


def qwen_hit_rates(model, knobs: Knobs, seed: int = 0) -> list[float]:
    trace = generate(Shape(48, 128, 8), knobs, QWEN_TOKENS, seed=seed)
    return [
        100 * simulate(model, build_workload(trace, Batching(concurrency=c), 128), 10000).small.hit_rate for c in (1, 4)
    ]


def fit_qwen(start: Knobs) -> dict:
    table = pd.read_csv(SAMPLE / "reference-measurements.csv").set_index("id")
    target = [
        float(table.loc["t4-cpumoe-10000", "hit_rate_small_pct"]),
        float(table.loc["t4-cpumoe-10000-np4", "hit_rate_pct"]),
    ]
    model = load_model(SAMPLE / "models" / "Qwen3-30B-A3B-Q4_K_M.gguf")
    cache: dict[Knobs, float] = {}

    def loss(knobs: Knobs) -> float:
        if knobs not in cache:
            cache[knobs] = float(np.sqrt(np.mean((np.array(qwen_hit_rates(model, knobs)) - target) ** 2)))
        return cache[knobs]

    knobs = coordinate_fit(loss, start, progress=_progress("Qwen3-30B-A3B"))
    return {
        "knobs": asdict(knobs),
        "fitted_to": "T4 measurements t4-cpumoe-10000 (ubatch <= 8 hit rate) and t4-cpumoe-10000-np4 (4 concurrent) "
        "in moe_model/data/reference-measurements.csv, simulated at --cpu-moe --moe-cache-mib 10000",
        "target_pct": {"concurrency_1": target[0], "concurrency_4": target[1]},
        "achieved_pct_new_seed": dict(
            zip(("concurrency_1", "concurrency_4"), qwen_hit_rates(model, knobs, seed=1), strict=True)
        ),
        "rms_points": round(loss(knobs), 3),
    }


def _rms(errors) -> float:
    return float(np.sqrt(np.mean(np.square(list(errors))))) if len(errors) else 0.0


def gpt_oss_spread(entry: dict) -> dict:
    """The fit's rms, or the rms of the same statistics from a new seed if larger (no rows to hold out)."""
    a, b = entry["target"], entry["achieved_40k_tokens_new_seed"]
    vec = lambda s: [s["top_quarter_share"], s["previous_token_overlap"], *s["hit_rates"]]  # noqa: E731
    new_seed = _rms(100 * (np.array(vec(b)) - vec(a)))
    return entry | {"spread_points": round(max(entry["rms_points"], new_seed), 2)}


def qwen_held_out(knobs: Knobs) -> dict:
    """t4-fit-cache10: --fit left ~20 layers' experts in RAM for a 1,671 MiB cache (moe_model/calibration.py)."""
    table = pd.read_csv(SAMPLE / "reference-measurements.csv").set_index("id")
    model = load_model(SAMPLE / "models" / "Qwen3-30B-A3B-Q4_K_M.gguf")
    trace = generate(Shape(48, 128, 8), knobs, QWEN_TOKENS, seed=1)
    hit = simulate(model, build_workload(trace, Batching(), 128), 1671, Placement(cpu_moe=False, n_cpu_moe=20))
    target = float(table.loc["t4-fit-cache10", "hit_rate_pct"])
    return {"t4-fit-cache10 (--n-cpu-moe 20, 1671 MiB)": {"target_pct": target, "pct": 100 * hit.small.hit_rate}}


def qwen_spread(entry: dict) -> dict:
    held = qwen_held_out(Knobs(**entry["knobs"]))
    errors = [r["pct"] - r["target_pct"] for r in held.values()]
    return entry | {"held_out": held, "spread_points": round(max(entry["rms_points"], _rms(errors)), 2)}


def flash_rows() -> list[dict]:
    table = pd.read_csv(SAMPLE / "reference-measurements.csv").set_index("id")
    rows = []
    for rid, file, k, budget, pct, role in FLASH_ROWS:
        target = float(table.loc[rid, "hit_rate_pct"]) if pct is None else pct
        rows.append({"id": rid, "model": file, "n_cpu_moe": k, "budget": budget, "target_pct": target, "role": role})
    return rows


def flash_hit_rates(knobs: Knobs, rows: list[dict], models: dict, seed: int = 0) -> list[float]:
    """Each row's ubatch <= 8 hit rate (%), simulated with its own header, placement and budget."""
    work = build_workload(generate(FLASH_SHAPE, knobs, FLASH_TOKENS, seed=seed), Batching(), FLASH_SHAPE.n_expert)
    out = {}
    for (file, k), group in pd.DataFrame(rows).groupby(["model", "n_cpu_moe"], dropna=False, sort=False):
        placement = None if pd.isna(k) else Placement(cpu_moe=False, n_cpu_moe=int(k))
        results = simulate_budgets(models[file], work, list(group["budget"]), placement)
        out |= {rid: 100 * r.small.hit_rate for rid, r in zip(group["id"], results, strict=True)}
    return [out[r["id"]] for r in rows]


def fit_flash_next(start: Knobs, rounds: int = 2) -> dict:
    rows = flash_rows()
    models = {r["model"]: load_model(SAMPLE / "models" / r["model"]) for r in rows}
    fit = [r for r in rows if r["role"] == "fit"]
    target = np.array([r["target_pct"] for r in fit])
    cache: dict[Knobs, float] = {}

    def loss(knobs: Knobs) -> float:
        if knobs not in cache:
            cache[knobs] = _rms(np.array(flash_hit_rates(knobs, fit, models)) - target)
        return cache[knobs]

    knobs = coordinate_fit(loss, start, rounds=rounds, steps=6, progress=_progress("Qwen3.8-Flash-Next"))
    for row, pct in zip(rows, flash_hit_rates(knobs, rows, models, seed=1), strict=True):
        row["pct_new_seed"] = round(pct, 2)
        row["error_points"] = round(pct - row["target_pct"], 2)
    in_fit = _rms([r["error_points"] for r in rows if r["role"] == "fit"])
    held = _rms([r["error_points"] for r in rows if r["role"] != "fit"])
    held_uncapped = _rms([r["error_points"] for r in rows if r["role"] == "held out"])
    return {
        "knobs": asdict(knobs),
        "shape": asdict(FLASH_SHAPE),
        "models": ["Qwen3.8-Flash-Next"],
        "fitted_to": "published ubatch <= 8 hit rates of Qwen3.8-Flash-Next (512 experts, 10 used): R9700 field rows "
        "(--n-cpu-moe 41, 2048-14336 MiB) and the seed's CPU-share rows flash-6464-s0 / flash-19392-s0 (--cpu-moe, "
        "Qwen3-Next-80B-A3B stand-in layout), each simulated with its own header, placement and budget; V620 rows "
        "(--n-cpu-moe 34/40/48) held out. Headers made from the architecture to match logged host-expert MiB",
        "rows": rows,
        "rms_points": round(loss(knobs), 3),
        "rms_points_new_seed": {
            "fit": round(in_fit, 3),
            "held_out": round(held, 3),
            "held_out_without_radv_capped_row": round(held_uncapped, 3),
        },
        "spread_points": round(max(loss(knobs), in_fit, held), 2),
    }


SHAPES = {"gpt-oss-20b": Shape(24, 32, 4), "Qwen3-30B-A3B": Shape(48, 128, 8)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=("gpt-oss-20b", "Qwen3-30B-A3B", "Qwen3.8-Flash-Next"))
    only = set(parser.parse_args().only or ("gpt-oss-20b", "Qwen3-30B-A3B", "Qwen3.8-Flash-Next"))
    presets = json.loads(PRESETS_PATH.read_text()) if PRESETS_PATH.exists() else {}
    if "gpt-oss-20b" in only:
        presets["gpt-oss-20b"] = fit_gpt_oss()
    if "Qwen3-30B-A3B" in only:
        presets["Qwen3-30B-A3B"] = fit_qwen(Knobs(**presets["gpt-oss-20b"]["knobs"]))
    presets["gpt-oss-20b"] = gpt_oss_spread(presets["gpt-oss-20b"])
    presets["Qwen3-30B-A3B"] = qwen_spread(presets["Qwen3-30B-A3B"])
    for name, shape in SHAPES.items():
        presets[name] |= {"shape": asdict(shape), "models": [name]}
    if "Qwen3.8-Flash-Next" in only:
        presets["Qwen3.8-Flash-Next"] = fit_flash_next(Knobs(**presets["Qwen3-30B-A3B"]["knobs"]))
    PRESETS_PATH.write_text(json.dumps(presets, indent=1) + "\n")
    print(json.dumps(presets, indent=1))


if __name__ == "__main__":
    main()
