"""The measured points the time model is calibrated on, and the stored calibrations.

- Tesla T4 + Qwen3-30B-A3B Q4_K_M: the seed article's rows in sample_data/reference-measurements.csv.
  Rows without a measured hit rate take it from a simulation with the Qwen3-30B-A3B synthetic preset.
- H200 + the small synthetic qwen3moe: the real llama-server runs of sample_data/groundtruth
  (decode speed from the client's timings, hit rates from the same runs' logs).

`scripts/calibrate.py` fits both and writes sample_data/calibration.json, which predictions read.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from moe_model.hardware import Hardware, preset
from moe_model.logs import parse_log
from moe_model.measurements import load_reference
from moe_model.model_spec import ModelSpec
from moe_model.synthetic import Shape, generate, preset_for
from moe_model.timing import Point, Scenario, TimeParams, Traffic, predict, resolve, traffic_from_workload
from moe_model.workload import Batching, Workload, build_workload

SAMPLE = Path(__file__).resolve().parent.parent / "sample_data"
CALIBRATION_JSON = SAMPLE / "calibration.json"
GROUNDTRUTH = SAMPLE / "groundtruth"
SYNTHETIC_TOKENS = 8000
# the H200 runs' scenarios: budget, concurrency (groundtruth/README.md)
H200_RUNS = {
    "off": (0, 1),
    "minany": (15, 1),
    "minall": (19, 1),
    "b10": (161, 1),
    "b25": (403, 1),
    "b50": (806, 1),
    "full": (1614, 1),
    "np4_b25": (403, 4),
    "np4_full": (1614, 4),
}


def synthetic_workload(
    model: ModelSpec, sc: Scenario, seed: int = 0, n_tokens: int = SYNTHETIC_TOKENS, prompts: bool = False
) -> Workload:
    """The model's synthetic preset routing, batched as the scenario's server would (a model); with
    `prompts`, each sequence first processes sc.prompt_tokens of prompt in ubatches of sc.n_ubatch."""
    name, knobs = preset_for(model)
    trace = generate(
        Shape(model.n_layer, model.n_expert, model.n_expert_used),
        knobs,
        n_tokens,
        seed=seed,
        label=f"synthetic ({name} preset)",
    )
    batching = Batching(
        sc.concurrency, sc.draft_tokens, sc.accept_rate, sc.prompt_tokens if prompts else 0, sc.n_ubatch
    )
    return build_workload(trace, batching, model.n_expert)


def simulated_traffic(model: ModelSpec, hw: Hardware, sc: Scenario, seed: int = 0) -> Traffic:
    """Per-layer traffic of a scenario from a simulation of the model's synthetic preset (a model)."""
    return traffic_from_workload(model, resolve(model, hw, sc), sc, synthetic_workload(model, sc, seed))


# What --fit did on the T4, as the article states it (reference notes): with the 1,671 MiB cache ~20
# layers' experts stayed in RAM, and it gave up 1,670 MiB (~5 layers of 348.75 MiB) for the cache.
T4_FIT_HOST_LAYERS = {"t4-fit": 15, "t4-fit-cache10": 20}


def _scenario(row: pd.Series) -> Scenario:
    placement = "cpu-moe"
    if str(row["placement"]).startswith("--fit"):
        placement = f"n-cpu-moe:{T4_FIT_HOST_LAYERS[row['id']]}" if row["id"] in T4_FIT_HOST_LAYERS else "fit"
    return Scenario(
        placement=placement,
        budget_mib=int(row["moe_cache_mib"]),
        concurrency=int(row["parallel"]),
        cpu_share=float(row["cpu_share"]),
    )


def t4_points(model: ModelSpec) -> list[Point]:
    """The T4 rows that started, as calibration points (hit rate measured where the row has one)."""
    hw = preset("Tesla T4")
    table = load_reference()
    rows = table[(table["gpu"] == "Tesla T4") & (table["starts"]) & table["decode_tps"].notna()]
    points = []
    for _, row in rows.iterrows():
        sc = _scenario(row)
        measured = row["hit_rate_small_pct"] if pd.notna(row["hit_rate_small_pct"]) else row["hit_rate_pct"]
        hit = float(measured) / 100 if pd.notna(measured) else None
        traffic = None if hit is not None or sc.budget_mib == 0 else simulated_traffic(model, hw, sc)
        prefill = float(row["prefill_tps"]) if pd.notna(row["prefill_tps"]) else None
        tolerance = 0.15 if sc.concurrency > 1 else 0.10  # the bands: 15 % for the 4-concurrent row
        points.append(
            Point(
                row["id"],
                sc,
                float(row["decode_tps"]),
                traffic,
                hit if hit is not None else 0.0,
                prefill,
                resolve(model, hw, sc),
                tolerance,
            )
        )
    return points


def h200_points(model: ModelSpec) -> list[Point]:
    """The real llama-server runs on the H200 (decode per request; 4 requests summed)."""
    hw = preset("H200")
    points = []
    for case, (budget, concurrency) in H200_RUNS.items():
        client = json.loads((GROUNDTRUTH / "logs" / f"server_{case}.json").read_text())
        decode = sum(r["timings"]["predicted_per_second"] for r in client["requests"])
        prefill = float(np.mean([r["timings"]["prompt_per_second"] for r in client["requests"]]))
        (run,) = parse_log(GROUNDTRUTH / "logs" / f"server_{case}.log")
        prompt_len = client["requests"][0]["timings"]["prompt_n"]  # shorter than a ubatch: one ubatch
        sc = Scenario("cpu-moe", budget, concurrency, n_ctx=4096, prompt_tokens=prompt_len)
        hit = run.small.hit_rate if run.small else 0.0
        points.append(
            Point(
                f"h200-{case}",
                sc,
                decode,
                None,
                hit,
                prefill if concurrency == 1 else None,
                resolve(model, hw, sc),
                0.15,
            )
        )
    return points


def load_calibrations(path: Path = CALIBRATION_JSON) -> dict[str, dict]:
    return json.loads(path.read_text())


def params_for(hardware_name: str, calibrations: dict[str, dict] | None = None) -> tuple[TimeParams, str]:
    """Calibrated parameters for a preset, or the T4 calibration for machines never measured (stated)."""
    calibrations = calibrations or load_calibrations()
    if hardware_name in calibrations:
        return TimeParams(**calibrations[hardware_name]["params"]), f"calibrated on {hardware_name} measurements"
    return TimeParams(**calibrations["Tesla T4"]["params"]), "no measurements of this machine: T4-calibrated overheads"


def calibration_record(cal, points: list[Point], fitted_to: str) -> dict:
    return {
        "fitted_to": fitted_to,
        **cal.as_dict(),
        "measured": {p.name: p.decode_tps for p in points},
        "params": asdict(cal.params),
    }


# the CPU-share article's machine and model are not stated: a plausible stand-in, stated as such
CPU_SHARE_STANDIN = ("Qwen3-Next-80B-A3B-IQ4_NL.gguf", "RTX 4090")


def reference_predictions(qwen: ModelSpec, standin: ModelSpec) -> pd.DataFrame:
    """Every reference row with a prediction where the model and machine are known, and the residual."""
    table = load_reference()
    t4 = {p.name: p for p in t4_points(qwen)}
    params_t4, _ = params_for("Tesla T4")
    params_sub, _ = params_for(CPU_SHARE_STANDIN[1])
    rows = []
    for _, row in table.iterrows():
        predicted, basis = None, "no prediction: model or machine not known"
        if row["id"] in t4:
            p = t4[row["id"]]
            predicted = predict(
                qwen, preset("Tesla T4"), params_t4, p.scenario, p.traffic, p.hit_rate, p.layout
            ).decode_tps
            basis = "Tesla T4 preset, T4 calibration; hit rate " + ("measured" if p.traffic is None else "simulated")
        elif row["id"] == "t4-cpumoe-49":
            pred = predict(qwen, preset("Tesla T4"), params_t4, Scenario("cpu-moe", 49))
            basis = "refuses to start" if not pred.starts else "starts (mismatch!)"
        elif str(row["model"]).startswith("Qwen3.8-Flash-Next"):
            sc = Scenario("cpu-moe", int(row["moe_cache_mib"]), cpu_share=float(row["cpu_share"]))
            predicted = predict(
                standin, preset(CPU_SHARE_STANDIN[1]), params_sub, sc, hit_rate=float(row["hit_rate_pct"]) / 100
            ).decode_tps
            basis = (
                "stand-in: Qwen3-Next-80B-A3B layout on an RTX 4090 preset (plausible, not the article's); "
                "hit rate measured"
            )
        measured = row["decode_tps"]
        residual = predicted / measured - 1 if predicted and pd.notna(measured) else None
        rows.append(
            {
                "id": row["id"],
                "measured_tps": measured,
                "predicted_tps": predicted,
                "residual": residual,
                "basis": basis,
            }
        )
    return table.merge(pd.DataFrame(rows), on="id")


def log_points(runs: list, model: ModelSpec, hw: Hardware, source: str = "log") -> list[Point]:
    """Calibration points from parsed log runs that have a decode speed and, if cached, a hit rate."""
    from moe_model.measurements import decode_tps_of, infer_budget, infer_placement

    points = []
    for run in runs:
        decode = decode_tps_of(run)
        if not decode or not run.starts:
            continue
        placement = infer_placement(run, model)
        budget = infer_budget(run, model, placement) if run.devices else 0
        label = "cpu-moe" if placement.cpu_moe else f"n-cpu-moe:{placement.n_cpu_moe}"
        sc = Scenario(
            label, budget or 0, int(run.placement.get("n_seq_max", 1)), n_ctx=int(run.placement.get("n_ctx", 4096))
        )
        hit = run.small.hit_rate if run.small else 0.0
        points.append(Point(f"{source}#{run.index + 1}", sc, decode, None, hit, None, resolve(model, hw, sc), 0.15))
    return points
