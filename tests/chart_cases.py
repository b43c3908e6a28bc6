"""Every chart of moe_model.charts, drawn from data shaped like the app's worst cases for labels: a budget next to
the unfit region, no-cache lines a few tenths apart, long card and model names, a range of five sources."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from moe_model import charts, charts_range
from moe_model.fits.calibration import default_time_model
from moe_model.llama.simulate import simulate_budgets
from moe_model.llama.slot_plan import Placement
from moe_model.readers.model_spec import load_model
from moe_model.resources import data_path
from moe_model.routing.logged import LoggedHitRate, LogRouting, RunLength
from moe_model.routing.synthetic import MATCH_MODEL, Knobs, RoutingPreset
from moe_model.routing.toy import toy_model, toy_workload
from moe_model.speed.hardware import preset
from moe_model.speed.range_inputs import RangeInputs
from moe_model.speed.ranges import POLICY_NARROWED_BY, POLICY_SOURCE, RangeSource, combine
from moe_model.speed.scenario import Scenario
from moe_model.speed.time_model import predict

BUDGETS = [0, 1500, 3000, 4500, 6000, 7500, 8376, 9000, 10000, 11000, 12000]
FITS_MIB = 8500.0  # the budget mark (8376) sits just left of the unfit region: the labels that met there


def predictions() -> dict[str, object]:
    model, hw, params = load_model(data_path("models", "Qwen3-30B-A3B-Q4_K_M.gguf")), preset("3060"), None
    params = default_time_model().params
    ranges = RangeInputs(0.21, 5.3)

    def at(placement: Placement, budget: int, hit_rate: float):
        return predict(model, hw, params, Scenario(placement, budget), hit_rate=hit_rate, ranges=ranges)

    return {
        "--cpu-moe, no cache": at(Placement(cpu_moe=True), 0, 0.0),
        "--n-cpu-moe 30, no cache": at(Placement(cpu_moe=False, n_cpu_moe=30), 0, 0.0),
        "--cpu-moe + 9,470 MiB": at(Placement(cpu_moe=True), 9470, 0.958),
    }


def _every_source(pred):
    """The prediction with a source of every kind: a policy's readings and four undescribed host parts (235B on an
    HDD: the drive spans 0.1-1.6 t/s)."""
    tps = 1.1
    sources = (
        RangeSource("host: drive", 0.1, 1.6, "your drive, e.g. 'NVMe Gen4', or a measured --disk-gbs"),
        RangeSource("host: RAM kit", 0.7, 3.4, "your RAM kit, e.g. '2x32 GB DDR5-6000' (--ram-kit)"),
        RangeSource(POLICY_SOURCE, 0.8, 1.5, POLICY_NARROWED_BY),
        RangeSource("time model", 0.9, 1.4, "your machine's own logs calibrated", settled=True),
        RangeSource("routing (hit rate)", 1.1, 1.3, "your own llama-server -lv 4 logs"),
        RangeSource("host: CPU", 1.0, 1.2, "your CPU model, e.g. 'Ryzen 7 7700X' (--cpu)"),
    )
    return replace(pred, decode_tps=tps, range_sources=sources, decode_tps_range=combine(tps, sources))


def _routing() -> LogRouting:
    cpu_moe = Placement(cpu_moe=True)
    points = tuple(LoggedHitRate(f"run{i}.log", b, cpu_moe, 0.3 + 0.06 * i, 256, 1) for i, b in enumerate((40, 60, 80)))
    preset_ = RoutingPreset("test", Knobs(), 3.0, "a test", MATCH_MODEL)
    return LogRouting(Knobs(), 1.5, 1.0, {}, {p.name: p.hit_rate + 0.01 for p in points}, points, RunLength(256, 256),
                      preset_)  # fmt: skip


def chart_cases() -> dict[str, Callable[[], go.Figure]]:
    """Name -> a function drawing that chart (each public figure builder of charts.py at least once)."""
    toy = toy_model()
    sims = simulate_budgets(toy, toy_workload(concurrency=4), [24, 40, 60, 80, 120, 160])
    preds = predictions()
    cached = preds["--cpu-moe + 9,470 MiB"]
    speeds = [3 + 0.004 * b for b in BUDGETS]
    measured = pd.DataFrame({"id": ["t4-cpumoe-10000", "np4.log#1"], "moe_cache_mib": [8000, 10000],
                             "decode_tps": [30.1, 41.0], "request": ["steady state", "first request"]})  # fmt: skip
    shop = pd.DataFrame({
        "GPU": ["RTX 4080 16GB", "RTX 4090", "RTX 4090, PCIe 3.0 x4", "RTX 5090", "RTX 3060 12GB", "Tesla T4"],
        "decode t/s": [31.2, 82.8, 39.5, 112.6, 8.4, 2.1], "low t/s": [20.0, 60.0, 25.0, 80.0, 5.0, 0.9],
        "high t/s": [45.0, 110.0, 55.0, 150.0, 12.0, 3.5], "best setting": ["--cpu-moe --moe-cache-mib 9000"] * 6,
        "readings low t/s": [30.0, 80.0, 0, 0, 0, 0], "readings high t/s": [33.0, 85.0, 0, 0, 0, 0],
    })  # fmt: skip
    runs = pd.DataFrame({
        "model": ["Qwen3-235B-A22B-Q4_K_M"] * 3 + ["gpt-oss-20b-MXFP4"] * 3,
        "gpu": ["NVIDIA GeForce RTX 4090"] * 3 + ["Tesla T4"] * 3, "parallel": [1, 1, 1, 4, 4, 4],
        "moe_cache_mib": [0, 8000, 16000] * 2, "decode_tps": [5.0, 7.5, 9.1, 20.0, 31.0, 38.0],
        "source": [f"run{i}.log" for i in range(6)], "request": ["steady state"] * 6,
    })  # fmt: skip
    policies = {"lru": [0.2, 0.4, 0.6], "class-lru": [0.25, 0.45, 0.62], "belady": [0.4, 0.6, 0.8]}
    labels = {"lru": "exact", "class-lru": "modelled", "belady": "exact"}
    slots = np.array([5, 17, -1, 40, 3, 9, 12, -1, 30, 2, 8, 21])
    return {
        "hit_rate_curve": lambda: charts.shade_unfit(
            charts.overlay_logged_hits(charts.hit_rate_curve(sims, 110), _routing()), 120, 160
        ),
        "upload_curve": lambda: charts.shade_unfit(charts.upload_curve(sims, 110), 120, 160),
        "speed_curve": lambda: charts.shade_unfit(
            charts.speed_curve(
                BUDGETS,
                speeds,
                {"--cpu-moe, no cache": 5.1, "--fit, no cache": 5.3},
                measured,
                8376,
                [(0.7 * v, 1.4 * v) for v in speeds],
                concurrency=4,
            ),
            FITS_MIB,
            BUDGETS[-1],
        ),  # fmt: skip
        "layer_hit_rates": lambda: charts.layer_hit_rates(sims[2]),
        "time_breakdown": lambda: charts.time_breakdown(preds),
        "time_breakdown_with_basis": lambda: charts.with_basis(charts.time_breakdown(preds), "calibrated"),
        "layer_hit_rates_with_basis": lambda: charts.with_basis(
            charts.layer_hit_rates(sims[2]), "modelled", ("measured", "your logs' points")
        ),
        "vram_bar": lambda: charts.vram_bar(cached.vram),
        "plan_slots": lambda: charts.plan_slots(cached.layout.plan),
        "left_out_predictions": lambda: charts.left_out_predictions(
            {"t4-a": 20.0, "t4-b": 30.0, "3060-a": 12.0}, {"t4-a": 0.1, "t4-b": -0.2, "3060-a": 0.05}
        ),
        "pool_heatmap": lambda: charts.pool_heatmap(slots, 8, {1: "hit", 3: "fill"}, order=[4, 0, 9]),
        "measured_curves": lambda: charts.measured_curves(runs),
        "shopping_bars": lambda: charts.shopping_bars(shop, concurrency=1),
        "policy_curves": lambda: charts.policy_curves([1000, 5000, 9000], policies, labels, "lru", mark_budget=5000),
        "range_bar": lambda: charts_range.range_bar(cached, "modelled"),
        "range_bar_every_source": lambda: charts_range.range_bar(_every_source(cached), "calibrated"),
    }
